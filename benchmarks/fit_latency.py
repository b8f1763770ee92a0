"""CPU time the proxy adds per request (`Proxy.fit` in process: parse, find the conversation, add
its new turns, plan, write the upstream body), replaying recorded sessions request by request as
Claude Code sends them. Two steps, so that any version of optictx can be measured on the same
bodies side by side:

    python benchmarks/fit_latency.py dump SESSIONS/*.jsonl --out BODIES   # needs this optictx
    python benchmarks/fit_latency.py replay BODIES/*.bodies.jsonl         # any optictx on the path
    PYTHONPATH=OLD_CHECKOUT python benchmarks/fit_latency.py replay BODIES/*.bodies.jsonl

One proxy per session, at its defaults, Anthropic's API (`--api openai`: Chat Completions, the
same sessions as an OpenAI client sends them; give it to both steps; `--image-instructions`:
the proxy's option, to `replay`); prints the median, p90, max and mean
CPU milliseconds of the request's own thread. What the proxy draws in the background while the
upstream answers (`serve/drawahead.py`) is let finish between requests, as the upstream's
seconds would, and is not the request's time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def dump(sessions: list[str], out: Path, api: str) -> None:
    from optictx.eval.requests import Requests
    from optictx.eval.sessions import load_session

    model = "claude-sonnet-4-5" if api == "anthropic" else "gpt-4o"

    out.mkdir(parents=True, exist_ok=True)
    for path in sessions:
        session = load_session(path)
        requests = Requests(session, api, model)
        with (out / f"{session.name}.bodies.jsonl").open("w") as f:
            for k in range(len(session.calls)):
                requests.to(k)
                f.write(json.dumps(requests.body()) + "\n")
        print(session.name, len(session.calls), "requests")


def replay(bodies: list[str], api: str, settings: dict[str, object]) -> dict[str, float]:
    from optictx.serve import ServeConfig
    from optictx.serve.anthropic_api import ANTHROPIC
    from optictx.serve.openai_api import OPENAI
    from optictx.serve.proxy import Proxy

    dialect = ANTHROPIC if api == "anthropic" else OPENAI

    times = []
    for path in bodies:
        proxy = Proxy(ServeConfig(upstream="http://127.0.0.1:9/v1", anthropic_upstream="http://127.0.0.1:9",
                                  **settings))
        for line in Path(path).read_text().splitlines():
            raw = line.encode()
            t0 = time.thread_time()
            proxy.fit(dialect, dialect.parse(json.loads(raw), raw), {"x-api-key": "key-a"})  # nothing is sent
            times.append(time.thread_time() - t0)
            if hasattr(proxy, "drawahead"):  # what it does while the upstream answers, not timed
                proxy.drawahead.wait()
        proxy.close()
    times.sort()

    def at(q: float) -> float:
        return round(1000 * times[int(q * (len(times) - 1))], 1)

    return {"requests": len(times), "median_ms": at(0.5), "p90_ms": at(0.9), "max_ms": at(1.0),
            "mean_ms": round(1000 * statistics.mean(times), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=["dump", "replay"])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", type=Path, default=Path("out/fit_latency"))
    ap.add_argument("--api", choices=["anthropic", "openai"], default="anthropic")
    ap.add_argument("--image-instructions", action="store_true", help="the proxy's option (replay)")
    args = ap.parse_args()
    if args.step == "dump":
        dump(args.files, args.out, args.api)
    else:
        settings = {"image_instructions": True} if args.image_instructions else {}  # an older optictx lacks it
        print(json.dumps(replay(args.files, args.api, settings)))


if __name__ == "__main__":
    main()
