"""Instructions drawn on pages (`optictx serve --image-instructions`): what they save and what a
reader still reads of them, per consumer.

    python benchmarks/instructions.py BODY.json [BODY.json ...] [--visions anthropic openai:gpt-5]
        [--stand-in 13500] [--readers tesseract reflex]

BODY.json: a request body a client sent (Claude Code's Messages request, or Codex's Responses
request, captured from `claude -p` or `codex exec` against a local upstream that records what
arrives: it cannot be committed). `--stand-in N`:
also the stand-in `optictx bill` sends for a recorded session's system prompt (`filler`, about N
tokens). For each body and consumer: the text the pages replace (tokens), the pages and what
they cost, the tokens the request counts fewer, text tokens a page holds, bytes, and each
reader's character accuracy on the pages (every line read in its box, against the line drawn).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from optictx.cost import get_cost_model
from optictx.eval.requests import filler
from optictx.native import images_cost
from optictx.readers import TesseractReader, char_accuracy
from optictx.serve.instructions import Instructions
from optictx.tokens import get_tokenizer


def _readers(names: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        if name == "tesseract":
            out[name] = TesseractReader()
        else:
            from optictx.models import ReflexReader

            out[name] = ReflexReader()
    return out


def measure(name: str, body: dict[str, Any], vision: str, readers: dict[str, Any]) -> dict[str, Any]:
    front = Instructions("responses" if "input" in body else "anthropic", vision)
    front(body)
    drawn = front.drawn
    if drawn is None:
        return {"body": name, "vision": vision, "pages": 0}
    tok = get_tokenizer()
    lines = ["\n".join(line.text for line in page) for page in drawn.lines]
    row = {"body": name, "vision": vision, "pages": len(drawn.images), "moved": front.moved,
           "image_tokens": images_cost(drawn.sizes, get_cost_model(vision)),
           "text_tokens_a_page": round(sum(tok.count(t) for t in lines) / len(lines)),
           "bytes": sum(len(d) for d in drawn.images)}
    for rname, reader in readers.items():
        scores = [char_accuracy(truth, read) for truth, read in drawn.read(reader)]
        row[rname] = round(100 * sum(s * len(t) for s, t in zip(scores, lines)) / sum(map(len, lines)), 2)
        row[rname + "_worst"] = round(100 * min(scores), 2)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bodies", nargs="*")
    ap.add_argument("--visions", nargs="+", default=["anthropic", "openai:gpt-5"])
    ap.add_argument("--stand-in", type=int, help="also the bill's stand-in system prompt of about this many tokens")
    ap.add_argument("--readers", nargs="+", default=["tesseract", "reflex"], choices=["tesseract", "reflex"])
    args = ap.parse_args()
    bodies = {Path(b).stem: json.loads(Path(b).read_text()) for b in args.bodies}
    if args.stand_in:
        bodies["stand-in"] = {"model": "m", "system": filler(args.stand_in),
                              "messages": [{"role": "user", "content": "(the task)"}]}
    readers = _readers(args.readers)
    print("| body | consumer | pages | image tokens | tokens counted fewer | text tokens a page | bytes | "
          + " | ".join(f"{r} (worst page)" for r in readers) + " |")
    print("|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(readers))
    for name, body in bodies.items():
        for vision in args.visions:
            r = measure(name, body, vision, readers)
            if not r["pages"]:
                print(f"| {name} | {vision} | 0 (stays text) |")
                continue
            reads = " | ".join(f"{r[n]:.2f}% ({r[n + '_worst']:.2f}%)" for n in readers)
            print(f"| {name} | {vision} | {r['pages']} | {r['image_tokens']:,} | {r['moved']:,} | "
                  f"{r['text_tokens_a_page']:,} | {r['bytes']:,} | {reads} |", flush=True)


if __name__ == "__main__":
    main()
