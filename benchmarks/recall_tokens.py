"""What one exact string costs the model to get back: the tokens of a `search` for it, and
whether that one answer holds it exactly; beside the path the caption used to point at, a search
then a `recall` of the hit's page. Public API only (`Memory.search`, `Memory.recall`), so the
same script measures an older checkout (`PYTHONPATH=OLD_CHECKOUT python benchmarks/recall_tokens.py ...`).

    python benchmarks/recall_tokens.py SESSIONS/claude-code SESSIONS/swe-agent-ctf [--sessions 6] [--per 10]

Needles as in `benchmarks/recall.py`: strings one early turn alone holds (ids, hashes, paths),
asked at the session's end. Tokens counted with cl100k_base.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

from optictx import Memory
from optictx.eval.fidelity import jsonl_corpus
from optictx.tokens import get_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recall import needles


def run(corpus: Path, sessions: int, per: int) -> dict[str, object]:
    count = get_tokenizer().count
    rng = random.Random(7)
    one_call, one, two = 0, [], []
    total = 0
    for f in sorted(corpus.glob("*.jsonl"))[:sessions]:
        turns = jsonl_corpus(f)
        mem = Memory(vision="anthropic", budget=60_000, keep_recent=4)
        with mem.batch():
            for t in turns:
                mem.add(t.model_copy(update={"id": None}))
        for _, s in needles(turns, per, rng):
            total += 1
            found = mem.search(f'"{s}"', limit=10)
            one.append(count(found.text))
            one_call += s in found.text
            hit = found.hits[0] if found.hits else None
            page = mem.recall(hit.page).text if hit is not None and hit.page else ""
            two.append(one[-1] + count(page))
        mem.close()
    return {"needles": total, "exact in one search": f"{one_call}/{total}",
            "search tokens mean/max": (round(statistics.mean(one)), max(one)),
            "search + recall of the page, tokens mean/max": (round(statistics.mean(two)), max(two))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpora", nargs="+", type=Path)
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--per", type=int, default=10)
    args = ap.parse_args()
    for corpus in args.corpora:
        print(corpus.name, run(corpus, args.sessions, args.per))


if __name__ == "__main__":
    main()
