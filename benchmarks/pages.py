"""How many pages each corpus fills under one render config against another (no reader).

    python benchmarks/pages.py [--corpus sample tool SESSIONS/swe-agent-ctf ...] [--render a.json [b.json]]

Every session of a corpus is packed from scratch; reported per config: sealed pages, and the
mean cl100k tokens of the text those pages draw. A layout that drops whitespace draws fewer
tokens for the same turns, so fewer pages for the same conversation is the figure that counts.
`--render` takes one or two RenderConfig JSON files (fields not given keep their defaults); with
one, it is compared against the defaults.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from repeats import corpus_sessions

from optictx.eval.fidelity import corpus_name
from optictx.packer import Packer
from optictx.renderers import Layout, RenderConfig
from optictx.tokens import get_tokenizer


def pages_of(sessions: Sequence[Sequence], config: RenderConfig) -> tuple[int, float]:
    """Sealed pages over all sessions, and their mean drawn tokens."""
    tok, layout, counts = get_tokenizer(), Layout(config), []
    for turns in sessions:
        packer = Packer(layout, tok)
        for turn in turns:
            packer.add(turn)
        counts.extend(tok.count(p.text) for p in packer.sealed)
    return len(counts), statistics.mean(counts) if counts else 0.0


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", nargs="+", default=["sample", "tool", "code", "prose"])
    ap.add_argument("--render", nargs="+", default=[], metavar="JSON", help="one or two RenderConfig files")
    args = ap.parse_args(argv)
    configs = [RenderConfig.model_validate(json.loads(Path(p).read_text())) for p in args.render[:2]]
    names = [Path(p).stem for p in args.render[:2]]
    if len(configs) < 2:
        configs.insert(0, RenderConfig())
        names.insert(0, "defaults")
    print(f"| corpus | pages ({names[0]} -> {names[1]}) | drawn tokens per page |")
    print("|---|---:|---:|")
    for spec in args.corpus:
        sessions = corpus_sessions(spec)
        (a, ta), (b, tb) = (pages_of(sessions, c) for c in configs)
        print(f"| {corpus_name(spec)} | {a} -> {b} ({b / a - 1:+.0%}) | {ta:.0f} -> {tb:.0f} |")


if __name__ == "__main__":
    main()
