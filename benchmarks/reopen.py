"""Another tenant's latency while a long conversation reopens: a proxy with a store and one
open conversation at most (`max_open` 1) holds a conversation of N turns, another tenant's
request closes it, then the first is continued (a reopen from the store) while a third tenant
sends small requests back to back. Prints the first request's time, the reopen's, and the third
tenant's latencies meanwhile.

    python benchmarks/reopen.py [N]      (default 10000; tests/serve_peers.py is the upstream)
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from optictx.serve import ServeConfig

from serve_peers import Proxy, start_upstream, stop_upstream


def main(n: int) -> None:
    upstream, server = start_upstream()
    proxy = Proxy(ServeConfig(upstream=upstream.openai_url, store=tempfile.mkdtemp(), max_open=1, budget=8000,
                              tenancy="per-key"))

    def chat(messages: list[dict], key: str) -> tuple[int, float]:
        t0 = time.monotonic()
        r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": messages},
                       headers={"authorization": f"Bearer {key}"}, timeout=600)
        return r.status_code, time.monotonic() - t0

    try:
        long = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}: " + "word " * 20}
                for i in range(n)]
        print(f"{n} turns, first request: {chat(long, 'a')[1]:.2f} s")
        chat([{"role": "user", "content": "b"}], "b")  # closes the first
        done: dict[str, tuple[int, float]] = {}
        more = [*long, {"role": "assistant", "content": "x"}, {"role": "user", "content": "more"}]
        reopen = threading.Thread(target=lambda: done.update(a=chat(more, "a")))
        reopen.start()
        latencies = []
        while reopen.is_alive():
            latencies.append(round(chat([{"role": "user", "content": f"c{len(latencies)}"}], "c")[1], 2))
            time.sleep(0.02)
        reopen.join()
        print(f"continued (reopened): {done['a'][1]:.2f} s; another tenant meanwhile: {latencies} s")
    finally:
        proxy.stop()
        stop_upstream(server)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
