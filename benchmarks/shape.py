"""Pages that keep a program's shape, side by side with the pages before it, in one run.

    python benchmarks/shape.py SESSIONS/claude-code SESSIONS/swe-agent-ctf [--sessions N] [--read N]
    python benchmarks/shape.py SESSIONS/claude-code --vision openai:gpt-4o   # OpenAI's pages

Three arms for Claude (the default), each on every session of each corpus, packed from scratch:

- `before`: the pages as they were (1280-px pages of four 22-character columns, code cut at a
  column's last character, 256 greys as 8-bit PNG at compress level 1), sent at TINY (512 px);
- `after`: the defaults for Claude (`cost.PIXEL_PRICED`: 2730-px pages of five 39-character
  columns, code laid out as a program, 16 greys as lossless WebP), sent at TINY (1092 px), packed
  without handles: a run of repeated lines is referred to only on its own page;
- `handles`: the same, packed as a memory packs (each page opens with its handle, and a run that
  repeats an earlier page's lines is one line naming that page).

Two for OpenAI's tile-priced models (`--vision openai:gpt-4o`, gpt-4.1 or gpt-5), both packed as
a memory packs: `square`, the 1280-px pages of four 22-character columns they got before, sent
at TINY (512 x 512, one tile); `tall`, `cost.TILE_PRICED` (1280 x 2560 in two 47-character
columns, sent at TINY: 512 x 1024, two tiles and one base charge).

Reported per corpus and arm: what the layout keeps of the code's shape (`eval/structure.py`:
identifiers, numbers and paths drawn whole, indented lines whose indentation is drawn on every
line they take, the lines of calls' multi-line arguments drawn as lines, lines wrapped); sealed
pages and the session's own tokens (cl100k, of the turns wholly on them) per page and per image
token under the vision's pricing (Anthropic's w*h/750 by default); bytes per page and per 1,000
own tokens (every `--every`th page encoded); and, with `--read N`, the character accuracy of
Tesseract and the reflex reader on N pages per corpus read by their line boxes (the same sessions'
pages in both arms, spread over each session).
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from optictx import handles
from optictx.cost import PIXEL_PRICED, TILE_PRICED, get_cost_model
from optictx.eval.fidelity import jsonl_corpus
from optictx.eval.structure import Structure, structure
from optictx.images import ENCODING, PageImages
from optictx.packer import Packer
from optictx.readers import char_accuracy
from optictx.renderers import Layout, RenderConfig
from optictx.tiers import Tier
from optictx.tokens import get_tokenizer
from optictx.turnindex import text_tokens

BEFORE = RenderConfig(code_layout="chars", compact_indent=False, greys=256)
ARMS = {"before": (BEFORE, {"format": "PNG", "compress_level": 1}, False), "after": (PIXEL_PRICED, ENCODING, False),
        "handles": (PIXEL_PRICED, ENCODING, True)}
TILE_ARMS = {"square": (RenderConfig(), ENCODING, True), "tall": (TILE_PRICED, ENCODING, True)}


def arm(sessions: Sequence[Sequence], config: RenderConfig, encoding: dict, handled: bool, every: int, read: int,
        readers: dict, vision: str = "anthropic") -> dict:
    tok, layout, model = get_tokenizer(), Layout(config), get_cost_model(vision)
    images = PageImages(layout)
    shape, pages, own, sizes, scores = Structure(), 0, 0, [], {name: [] for name in readers}
    per_session = max(1, read // max(1, len(sessions)))
    for turns in sessions:
        turns = [t.model_copy(update={"id": i}) for i, t in enumerate(turns)]
        shape.add(structure(turns, layout))
        packer = Packer(layout, tok, handle=partial(handles.handle, "00" * 16) if handled else None)
        for t in turns:
            packer.add(t)
        sealed = packer.sealed
        if not sealed:
            continue
        pages += len(sealed)
        own += sum(text_tokens(t, tok) for t in turns[: sealed[-1].entries[-1].turn_id])
        for page in sealed[::every]:
            buf = io.BytesIO()
            images.at(page, Tier.TINY).save(buf, **encoding)
            sizes.append(len(buf.getvalue()))
        step = max(1, len(sealed) // per_session)
        for page in sealed[step // 2 :: step][:per_session]:
            for name, reader in readers.items():
                got = images.read(reader, [page], Tier.TINY)[0]
                scores[name].append(char_accuracy(page.text, got))
    size = model.tier_size(Tier.TINY, config.master)
    cost = model.image_tokens(Tier.TINY, size)
    per_page = sizes and statistics.mean(sizes)
    return {**shape.report(), "pages": pages, "size": "x".join(map(str, size)), "own per page": own / max(1, pages),
            "own per image token": own / max(1, pages) / cost, "bytes per page": per_page,
            "bytes per 1k own tokens": per_page / (own / max(1, pages)) * 1000 if pages else 0,
            **{f"{name} accuracy": 100 * statistics.mean(v) for name, v in scores.items() if v},
            "read pages": len(next(iter(scores.values()), []))}


def show(session: Path, folder: Path, turn: int = 30) -> None:
    """The page holding `turn` in each arm, at TINY, as the model gets it: the old page whole,
    the new one cropped to the same pixels (its text is the same size) from the column and line
    where the turn starts (turn 30 as `page_before.png` and `page_handles.png`, another as
    `page_before_N.png` and `page_handles_N.png`)."""
    turns = [t.model_copy(update={"id": i}) for i, t in enumerate(jsonl_corpus(session))]
    folder.mkdir(parents=True, exist_ok=True)
    side = None
    for name in ("before", "handles"):
        config, _, handled = ARMS[name]
        layout = Layout(config)
        packer = Packer(layout, get_tokenizer(), handle=partial(handles.handle, "00" * 16) if handled else None)
        for t in turns:
            packer.add(t)
        page = next(p for p in packer.sealed if turn in p.turn_ids)
        images = PageImages(layout)
        img = images.at(page, Tier.TINY)
        if side is None:
            side, x, y = img.width, 0, 0
        else:
            first = next(i for i, e in enumerate(page.entries) if e.turn_id == turn)
            x0, y0 = images.boxes(page, Tier.TINY)[first][:2]
            x, y = max(0, min(x0 - 8, img.width - side)), max(0, min(y0 - 8, img.height - side))
        suffix = "" if turn == 30 else f"_{turn}"
        img.crop((x, y, x + side, y + side)).save(folder / f"page_{name}{suffix}.png", optimize=True)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpora", nargs="+", help="folders of .jsonl sessions")
    ap.add_argument("--sessions", type=int, help="the first N sessions of each corpus (default all)")
    ap.add_argument("--every", type=int, default=5, help="encode every Nth page for its bytes (default 5)")
    ap.add_argument("--read", type=int, default=0, help="pages per corpus to read back (default none)")
    ap.add_argument("--vision", default="anthropic", help="whose pages and prices: anthropic (default), or "
                    "openai:gpt-4o, openai:gpt-4.1, openai:gpt-5 (tile-priced: the square and tall arms)")
    ap.add_argument("--show", help="write the page that shows turn 30 (or --turn) of the first corpus's first "
                    "session, before and with handles, at TINY (the second cropped to the first's size) into this "
                    "folder")
    ap.add_argument("--turn", type=int, default=30, help="the turn --show shows (default 30)")
    args = ap.parse_args(argv)
    if args.show:
        show(next(iter(sorted(Path(args.corpora[0]).glob("*.jsonl")))), Path(args.show), args.turn)
        return
    readers = {}
    if args.read:
        from optictx.models import ReflexReader
        from optictx.readers import TesseractReader

        readers = {"tesseract": TesseractReader(), "reflex": ReflexReader()}
    rows = []
    for spec in args.corpora:
        files = sorted(Path(spec).glob("*.jsonl"))[: args.sessions]
        sessions = [jsonl_corpus(f) for f in files]
        for name, (config, encoding, handled) in (ARMS if args.vision == "anthropic" else TILE_ARMS).items():
            t0 = time.perf_counter()
            got = arm(sessions, config, encoding, handled, args.every, args.read, readers, args.vision)
            rows.append((Path(spec).name, len(sessions), name, got, time.perf_counter() - t0))
    keys = ["atoms_unbroken", "indent_kept", "call_lines_drawn", "wrapped", "pages", "size", "own per page",
            "own per image token", "bytes per page", "bytes per 1k own tokens", "tesseract accuracy", "reflex accuracy"]
    print("| corpus (sessions) | arm | " + " | ".join(keys) + " |")
    print("|---|---|" + "---:|" * len(keys))
    for corpus, n, name, got, secs in rows:
        cells = [f"{got[k]:,.2f}" if isinstance(got.get(k), float) else f"{got.get(k, '-'):,}" if
                 isinstance(got.get(k), int) else str(got.get(k, "-")) for k in keys]
        print(f"| {corpus} ({n}) | {name} | " + " | ".join(cells) + f" |  <!-- {secs:.0f} s -->")


if __name__ == "__main__":
    main()
