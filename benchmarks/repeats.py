"""How much of a session's page text repeats what the same session already showed.

    python benchmarks/repeats.py [--corpus SESSIONS/swe-agent-ctf ...]

Each session is packed onto pages with the default render config, and every drawn line that is
not a role header, a rule or blank (and has at least `--min-chars` characters, so `}` and
`else:` do not count) is checked against the lines drawn before it in the same session. A line
is *repeated* when the same text was drawn earlier; a *block* is a run of `--min-block` or more
repeated lines in a row, the part a short reference to the earlier copy could replace. Reported
per corpus: the share of line tokens (cl100k) that repeat, the share in blocks, and how far back
the earlier copy of a block's lines lies, in pages (a reference only stays correct while that page is still in the
context at a tier that reads, and the age ladder keeps only the newest 7 pages above TINY).
Built-in corpora: `sample` (the shipped sample conversation) and `prose` (the fidelity prose:
class docstrings, where subclasses repeat what they inherit).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from optictx.eval.fidelity import agent_turns, corpora, corpus_name, jsonl_corpus
from optictx.packer import Packer
from optictx.renderers import Layout, RenderConfig
from optictx.tokens import get_tokenizer
from optictx.turns import Turn


@dataclass
class Tally:
    tokens: int = 0  # of every counted line
    repeated: int = 0
    in_blocks: int = 0
    pages: int = 0
    back: list[int] = field(default_factory=list)  # pages between a block's line and its earlier copy

    def add(self, other: Tally) -> None:
        self.tokens += other.tokens
        self.repeated += other.repeated
        self.in_blocks += other.in_blocks
        self.pages += other.pages
        self.back += other.back


def session_tally(turns: Sequence[Turn], min_chars: int, min_block: int) -> Tally:
    tok = get_tokenizer()
    packer = Packer(Layout(RenderConfig()), tok)
    for t in turns:
        packer.add(t)
    pages = [*packer.sealed, *packer.preview()]
    seen: dict[str, int] = {}  # line text -> the last page that drew it
    tally = Tally(pages=len(pages))
    run: list[tuple[int, int]] = []  # (tokens, pages back) of the current run of repeated lines

    def close_run() -> None:
        if len(run) >= min_block:
            tally.in_blocks += sum(n for n, _ in run)
            tally.back.extend(b for _, b in run)
        run.clear()

    for page in pages:
        for line in page.lines:
            text = line.text.strip()
            if line.style in ("header", "rule") or len(text) < min_chars:
                continue
            n = tok.count(line.text)
            tally.tokens += n
            if text in seen:
                tally.repeated += n
                run.append((n, page.index - seen[text]))
            else:
                close_run()
            seen[text] = page.index
    close_run()
    return tally


def corpus_sessions(spec: str) -> list[list[Turn]]:
    """One list of turns per session: a folder's .jsonl files are separate sessions."""
    if spec == "sample":
        return [agent_turns()]
    path = Path(spec)
    if path.is_dir():
        return [jsonl_corpus(f) for f in sorted(path.glob("*.jsonl"))]
    return list(corpora([spec]).values())


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", nargs="+", default=["sample"], help="sample, prose, a .jsonl or a folder")
    ap.add_argument("--min-chars", type=int, default=8)
    ap.add_argument("--min-block", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"lines of >= {args.min_chars} characters; blocks of >= {args.min_block} repeated lines in a row\n")
    print("| corpus | sessions | pages | line tokens | repeated | in blocks | block copy on the same page "
          "| 1-7 pages back | further |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for spec in args.corpus:
        total = Tally()
        sessions = corpus_sessions(spec)
        for turns in sessions:
            total.add(session_tally(turns, args.min_chars, args.min_block))
        back = total.back or [0]
        same, near = sum(b == 0 for b in back) / len(back), sum(0 < b <= 7 for b in back) / len(back)
        print(f"| {corpus_name(spec)} | {len(sessions)} | {total.pages} | {total.tokens:,} | "
              f"{total.repeated / total.tokens:.1%} | {total.in_blocks / total.tokens:.1%} | "
              f"{same:.0%} | {near:.0%} | {1 - same - near:.0%} |")


if __name__ == "__main__":
    main()
