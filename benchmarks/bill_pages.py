"""What a reader can still read of what the bill-driven proxy sends: each recorded session is
replayed through the proxy's path at its defaults (as `optictx bill` does), and the page images
of its last request are read back by Tesseract and the reflex reader at the tier they were sent;
character accuracy is against the text each page draws. Also: turns dropped at the defaults,
whether the task statement (the first user message) went as text, and the proxy path's time per
request.

    python benchmarks/bill_pages.py CORPUS_DIR [...] [--sessions 6] [--pages 4] [--provider anthropic]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from optictx.eval.bill import MODELS
from optictx.eval.requests import client_body
from optictx.eval.sessions import load_session
from optictx.readers import TesseractReader, char_accuracy
from optictx.serve.anthropic_api import ANTHROPIC
from optictx.serve.config import ServeConfig
from optictx.serve.openai_api import OPENAI
from optictx.serve.proxy import Proxy


def last_context(path: Path, provider: str):
    """The session replayed through one proxy: its last request's context, the milliseconds each
    request's fit took, and whether the first user message went as it came in the last body."""
    session = load_session(path)
    anthropic = provider.startswith("anthropic")
    dialect = ANTHROPIC if anthropic else OPENAI
    proxy = Proxy(ServeConfig.make(upstream="http://127.0.0.1:9/v1", anthropic_upstream="http://127.0.0.1:9"))
    times, fitted, body = [], None, None
    try:
        for k in range(len(session.calls)):
            body = client_body(session, k, "anthropic" if anthropic else "openai", MODELS[provider])
            raw = json.dumps(body).encode()
            t0 = time.perf_counter()
            fitted = proxy.fit(dialect, dialect.parse(body, raw), {"x-api-key": "pages"})
            times.append(1000 * (time.perf_counter() - t0))
    finally:
        proxy.close()
    task = next((m for m in session.messages if m.get("role") == "user"), None)
    kept = task is not None and json.dumps(task.get("content"))[1:-1][:200] in fitted.body.decode()
    return fitted.context, times, task is not None, kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpora", nargs="+")
    ap.add_argument("--sessions", type=int, default=6, help="sessions per corpus (the longest)")
    ap.add_argument("--pages", type=int, default=4, help="image pages read per session")
    ap.add_argument("--provider", default="anthropic")
    args = ap.parse_args()
    from optictx.models import ReflexReader

    readers = {"Tesseract 5": TesseractReader(cache_size=1), "reflex": ReflexReader()}
    for corpus in args.corpora:
        files = sorted(Path(corpus).glob("*.jsonl"), key=lambda p: -p.stat().st_size)[: args.sessions]
        acc: dict[str, list[float]] = {name: [] for name in readers}
        tiers: dict[str, int] = {}
        dropped = tasks = kept = 0
        times: list[float] = []
        for path in files:
            ctx, t, has_task, task_kept = last_context(path, args.provider)
            times += t
            tasks += has_task
            kept += task_kept
            if ctx is None:
                continue
            dropped += sum(len(p.turn_ids) for p in ctx.gone)
            images = [p for p in ctx.pages if p.tier.is_image]
            for seg in images:
                tiers[seg.tier.value] = tiers.get(seg.tier.value, 0) + 1
            step = max(1, len(images) // args.pages)
            for seg in images[::step][: args.pages]:
                for name, reader in readers.items():
                    acc[name].append(char_accuracy(seg.text, reader.read(seg.image, seg.boxes)))
        print(f"\n{Path(corpus).name} ({len(files)} longest sessions, {args.provider}, last request of each):")
        print(f"- image pages sent, by tier: {tiers}; turns dropped from the context: {dropped}")
        for name, values in acc.items():
            if values:
                print(f"- {name}: {statistics.mean(values):.2%} of characters read on {len(values)} pages "
                      f"(worst page {min(values):.2%})")
        print(f"- task statement (first user message) as text in the last request: {kept} of {tasks} sessions")
        times.sort()
        print(f"- proxy path per request: median {statistics.median(times):.0f} ms, "
              f"p90 {times[int(0.9 * len(times))]:.0f} ms, max {times[-1]:.0f} ms over {len(times)} requests")


if __name__ == "__main__":
    main()
