"""`optictx serve` replicas on one PostgreSQL database: requests per second with 1 and with 2
replicas, measured in one run on the same load.

    python benchmarks/replicas.py [--clients 8] [--seconds 30] [--turns 300]

Each client holds its own conversation of `--turns` turns (the sample, cut or repeated), sends it
once to open it, then sends follow-ups of two new turns each as fast as answers come. With two
replicas a client's requests alternate between them, as behind a round-robin load balancer, so
every follow-up is served by a replica that did not see the last one. The upstream is the tests'
loopback one (tests/serve_peers.py), answering at once without reading the body; the database is a throwaway cluster
with fsync on (tests/pgcluster.py). Replicas are processes (`python -m optictx serve`); clients,
upstream and database share the same machine, so on 2 cores every part competes for the CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the loopback upstream and the throwaway cluster the tests use

from pgcluster import Cluster  # noqa: E402

from optictx.sample import sample_conversation  # noqa: E402

from serve_peers import ServeProcess, start_upstream, stop_upstream  # noqa: E402


def history_of(turns: int, n: int) -> list[dict]:
    sample = sample_conversation()
    out = []
    while len(out) < turns:
        out += sample
    out = out[:turns]
    return [*out, {"role": "user", "content": f"client {n} opens its conversation"}]


def peak_rss(pid: int) -> int:
    """A process's peak resident memory (Linux: VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def load(urls: list[str], clients: int, seconds: float, turns: int) -> tuple[int, float]:
    """Requests answered and the seconds they took, for `clients` clients on `urls` in turn."""
    done = [0] * clients
    errors: list[BaseException] = []
    stop: list[float] = []  # set by the barrier before any client goes on
    ready = threading.Barrier(clients + 1, action=lambda: stop.append(time.perf_counter() + seconds))

    def client(n: int) -> None:
        history = history_of(turns, n)
        try:
            with httpx.Client(timeout=300) as http:
                def send(k: int) -> None:
                    url = urls[(n + k) % len(urls)] + "/v1/chat/completions"
                    http.post(url, json={"model": "deepseek-ocr", "messages": history},
                              headers={"authorization": f"Bearer bench-{n}"}).raise_for_status()

                send(0)  # opens the conversation (packs its pages): not counted
                ready.wait()
                k = 1
                while time.perf_counter() < stop[0]:
                    history.extend([{"role": "assistant", "content": f"{n} answer {k}"},
                                    {"role": "user", "content": f"client {n} follow-up {k}"}])
                    send(k)
                    done[n] += 1
                    k += 1
        except BaseException as exc:
            errors.append(exc)
            ready.abort()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    ready.wait()
    t0 = stop[0] - seconds
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(done), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--budget", type=int, default=8192)
    ap.add_argument("--out", default="out/replicas.json")
    args = ap.parse_args()
    state, server = start_upstream()
    state.keep = False  # answers without parsing or keeping the bodies: the upstream's CPU is the proxy's
    results: dict[int, list[float]] = {}
    peaks: list[int] = []
    try:
        with Cluster(fsync=True) as pg:
            for replicas in (1, 2, 1, 2):  # interleaved: a drift in the machine hits both alike
                store = pg.url(pg.database())
                procs = [ServeProcess(state.openai_url, store, budget=args.budget, keep_recent=4,
                                      vision="deepseek-ocr") for _ in range(replicas)]
                try:
                    n, t = load([p.url for p in procs], args.clients, args.seconds, args.turns)
                    peak = max(peak_rss(p.proc.pid) for p in procs)
                finally:
                    for p in procs:
                        p.stop()
                results.setdefault(replicas, []).append(n / t)
                peaks.append(peak)
                print(f"{replicas} replica(s): {n} requests in {t:.1f} s = {n / t:.1f}/s; peak RSS of a replica "
                      f"{peak / 2**20:.0f} MiB", flush=True)
    finally:
        stop_upstream(server)
    best = {r: max(v) for r, v in results.items()}
    out = {"clients": args.clients, "seconds": args.seconds, "turns": args.turns, "budget": args.budget,
           "rps": {str(r): [round(x, 2) for x in v] for r, v in results.items()},
           "speedup_2_vs_1": round(best[2] / best[1], 2), "replica_peak_rss_bytes": max(peaks)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"| replicas | requests/s (best of 2) |\n|---:|---:|\n| 1 | {best[1]:.1f} |\n| 2 | {best[2]:.1f} |")
    print(f"2 replicas / 1 replica: {out['speedup_2_vs_1']}x")


if __name__ == "__main__":
    main()
