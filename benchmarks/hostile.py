"""Hostile input at scale: random hostile turns and settings into a SQLite memory, then random
damage to its file. Counts what was exported, what was refused with an OptictxError, what crashed
(any other exception: must be 0), and acknowledged turns lost across a reopen (must be 0).

    python benchmarks/hostile.py [--turns 2000] [--files 500] [--seed 0]
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import tempfile
from pathlib import Path
from typing import Any

from optictx import Budget, Memory, OptictxError, Turn

_STRINGS = ["", " ", "\x00\x1b[31m", "\ud800", "a\u2028b", "👩‍👩‍👧", "<|im_start|>", "x" * 3000, "\n" * 50, "{", "[]"]
_PART_TYPES = ["text", "image_url", "input_image", "image", "input_audio", "file", "", "🙂"]


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 4 else 5)
    if kind == 0:
        return rng.choice(_STRINGS)
    if kind == 1:
        return rng.choice([None, True, 0, -1, 2**70, 1.5, float("inf")])
    if kind == 2:
        return rng.choice([b"bytes", object(), {1: "int key"}, (1, 2), set()])
    if kind == 3:  # deep nesting, within or past the limit
        out: Any = 1
        for _ in range(rng.choice([10, 63, 65, 1000, 20_000])):
            out = {"a": out} if rng.random() < 0.5 else [out]
        return out
    if kind == 4:
        return "y" * rng.choice([10, 10_000, 1_000_000])
    if kind in (5, 6):
        return {rng.choice(["a", "type", "url", ""]): _value(rng, depth + 1) for _ in range(rng.randrange(4))}
    return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]


def _part(rng: random.Random) -> Any:
    if rng.random() < 0.1:
        return _value(rng)
    part: dict[str, Any] = {"type": rng.choice(_PART_TYPES)}
    if rng.random() < 0.8:
        part[rng.choice(["text", "image_url", "source", "v"])] = rng.choice(
            [_value(rng), "https://h/i.png", {"url": "data:image/png;base64,iVBORw0KGgo="}, rng.choice(_STRINGS)])
    return part


def _turn(rng: random.Random, n: int) -> Any:
    msg: dict[str, Any] = {"role": rng.choice(["user", "assistant", "tool", "system", "bot", None, 3])}
    r = rng.random()
    msg["content"] = rng.choice(_STRINGS) if r < 0.4 else [_part(rng) for _ in range(rng.randrange(4))] \
        if r < 0.8 else _value(rng)
    for key in ("name", "tool_call_id", "metadata", "pinned", "unknown", "id"):
        if rng.random() < 0.15:
            msg[key] = _value(rng)
    if rng.random() < 0.3:
        msg["tool_calls"] = [{"id": rng.choice([f"c{n}", "", _value(rng)]), "type": "function",
                              "function": {"name": rng.choice(["f", "", _value(rng)]),
                                           "arguments": rng.choice([_value(rng), "{", "[" * 3000 + "]" * 3000])}}]
    if rng.random() < 0.05:  # a Turn object changed without validation
        return Turn(role="user", content="x").model_copy(update={k: v for k, v in msg.items() if k != "id"})
    return msg if rng.random() > 0.02 else rng.choice([None, 3, "text", [msg]])


def turns(count: int, seed: int, path: str | Path) -> dict[str, int]:
    """`count` hostile turns added to the memory at `path` (a SQLite file or a PostgreSQL URL)."""
    rng, out = random.Random(seed), collections.Counter()
    mem = Memory(store=path, budget=Budget(tokens=4000), keep_recent=3, tokens_per_page=300)
    acked = []
    fresh = Memory(budget=Budget(tokens=4000), keep_recent=3, tokens_per_page=300)  # contexts, reset often
    for n in range(count):
        try:
            acked.append(mem.add(_turn(rng, n)))
        except OptictxError:
            out["refused with an OptictxError"] += 1
            continue
        except Exception as exc:
            out[f"CRASH in add: {type(exc).__name__}"] += 1
            continue
        out["accepted"] += 1
        # A huge system turn makes every later context a BudgetError, by design: the contexts are
        # built on a memory that starts over every 20 turns, so later turns are exported too.
        if out["accepted"] % 20 == 0:
            fresh = Memory(budget=Budget(tokens=4000), keep_recent=3, tokens_per_page=300)
        fresh.add(acked[-1].model_copy(update={"id": None}))
        if n % 2 == 0:
            try:
                for vision in ("anthropic", "openai:gpt-4o", "deepseek-ocr"):
                    ctx = fresh.context(vision=vision)
                    json.dumps(ctx.to_openai()), json.dumps(ctx.to_anthropic())
                    out["contexts exported"] += 1
                    if ctx.tokens > ctx.budget.limit:
                        out["CRASH: over budget"] += 1
            except OptictxError as exc:  # e.g. BudgetError: the pinned and system text alone is over
                out[f"context refused with {type(exc).__name__}"] += 1
            except Exception as exc:
                out[f"CRASH in context/export: {type(exc).__name__}"] += 1
    mem.close()
    again = Memory.open(path)
    kept = {t.id: t for t in again.transcript()}
    out["acknowledged turns lost"] = sum(1 for t in acked if kept.get(t.id) != t)
    return dict(out)


def files(count: int, seed: int, folder: Path) -> dict[str, int]:
    from optictx import StoreError
    from optictx.sample import sample_conversation

    src = folder / "orig.db"
    mem = Memory(store=src, budget=Budget(tokens=3000))
    for m in sample_conversation()[:80]:
        mem.add(m)
    mem.context()
    mem.close()
    data, original = src.read_bytes(), [t.model_dump() for t in Memory.open(src).transcript()]
    rng, out = random.Random(seed), collections.Counter()
    for n in range(count):
        damaged = bytearray(data)
        if n % 3 == 0:
            damaged = damaged[: rng.randrange(len(damaged))]
        else:
            for _ in range(1 if n % 3 == 1 else rng.randint(2, 50)):
                i = rng.randrange(len(damaged))
                damaged[i] ^= 1 << rng.randrange(8)
        path = folder / f"damaged{n}.db"
        path.write_bytes(bytes(damaged))
        try:
            mem = Memory.open(path)
            same = [t.model_dump() for t in mem.transcript()] == original
            ctx = mem.context()
            ctx.to_openai(), ctx.to_anthropic()
            mem.close()
            out["opened, same turns" if same else "CRASH: opened with different turns"] += 1
        except StoreError as exc:
            out["StoreError naming the file" if path.name in str(exc) else "StoreError without the file"] += 1
        except Exception as exc:
            out[f"CRASH: {type(exc).__name__}"] += 1
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    return dict(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=2000)
    ap.add_argument("--files", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        added = turns(args.turns, args.seed, Path(tmp) / "hostile.db")
        print(f"{args.turns} hostile turns:", json.dumps(added, indent=1))
        print(f"{args.files} damaged files:", json.dumps(files(args.files, args.seed, Path(tmp)), indent=1))


if __name__ == "__main__":
    main()
