"""Per-token decode latency and KV memory vs generated length: R-SWA cache vs transformers'
DynamicCache (full attention), on the same small random Llama, in the same run.

    python benchmarks/rswa_decode.py                      # CPU, 8192 tokens, one thread
    python benchmarks/rswa_decode.py --device cuda        # where a GPU is available

Every step decodes one forced token (EOS never stops it), so both caches run the same work but
for attention. Latency per step is the median over a bucket of steps ending at each checkpoint.
On CPU it is CPU time of one thread (steady on a shared VM); on CUDA, wall time after a
synchronize. The two caches step in lockstep, so machine noise hits both alike. Memory is the
K/V bytes each cache holds (the tensors themselves; the rest of the model is the same for both).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import transformers

from optictx.eval.fidelity import pyplot
from optictx.models import rswa_cache

CHECKPOINTS = (256, 512, 1024, 2048, 4096, 6144, 8192)


def small_llama(device: str) -> transformers.LlamaForCausalLM:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16384)
    return transformers.LlamaForCausalLM._from_config(config, attn_implementation="sdpa").eval().to(device)


def cache_bytes(cache: transformers.Cache) -> int:
    total = 0
    for layer in cache.layers:
        for name in ("keys", "values", "prefill_keys", "prefill_values"):
            t = getattr(layer, name, None)
            if t is not None:
                total += t.numel() * t.element_size()
    return total


@torch.no_grad()
def run(model: transformers.PreTrainedModel, caches: dict[str, transformers.Cache], prefix: int, steps: int,
        device: str, bucket: int) -> dict[str, list[dict]]:
    """Decode `steps` forced tokens after a `prefix`-token prompt with each cache, in lockstep (one
    step of each in turn, so both see the same machine noise); a row per checkpoint per cache."""
    cuda = device.startswith("cuda")
    now = time.perf_counter if cuda else time.process_time
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, model.config.vocab_size, (1, prefix), generator=g).to(device)
    forced = torch.randint(0, model.config.vocab_size, (1, steps), generator=g).to(device)
    for cache in caches.values():
        model(input_ids=prompt, cache=cache, use_cache=True)
    times: dict[str, list[float]] = {name: [] for name in caches}
    rows: dict[str, list[dict]] = {name: [] for name in caches}
    for i in range(steps):
        for name, cache in caches.items():
            if cuda:
                torch.cuda.synchronize()
            t0 = now()
            model(input_ids=forced[:, i:i + 1], cache=cache, use_cache=True)
            if cuda:
                torch.cuda.synchronize()
            times[name].append(now() - t0)
        if i + 1 in CHECKPOINTS:
            for name, cache in caches.items():
                ms = statistics.median(times[name][-bucket:]) * 1000
                rows[name].append({"generated": i + 1, "ms_per_token": round(ms, 4),
                                   "tokens_per_s": round(1000 / ms, 1), "kv_bytes": cache_bytes(cache)})
    return rows


def plot(results: dict[str, list[dict]], path: Path, title: str) -> None:
    plt = pyplot()
    fig, (lat, mem) = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, rows in results.items():
        xs = [r["generated"] for r in rows]
        lat.plot(xs, [r["ms_per_token"] for r in rows], marker="o", label=name)
        mem.plot(xs, [r["kv_bytes"] / 2**20 for r in rows], marker="o", label=name)
    for ax, label in ((lat, "ms per token (median of bucket)"), (mem, "KV cache (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("generated tokens")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--prefix", type=int, default=1024, help="prompt (fixed prefix) tokens")
    p.add_argument("--steps", type=int, default=8192, help="generated tokens")
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--bucket", type=int, default=128, help="steps per latency median")
    p.add_argument("--threads", type=int, default=1, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--out", default="out/rswa")
    args = p.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    model = small_llama(args.device)
    results = run(model, {f"R-SWA (window {args.window})": rswa_cache(model.config, args.window),
                          "full attention (DynamicCache)": transformers.DynamicCache(config=model.config)},
                  args.prefix, args.steps, args.device, args.bucket)
    rswa, full = results.values()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    title = (f"Llama 4x256 (GQA 4/2), prefix {args.prefix}, {args.device}"
             + (f", {args.threads} thread(s)" if args.device == "cpu" else ""))
    plot(results, out / "rswa_decode.png", title)
    summary = {
        "setup": title, "window": args.window,
        "rswa_flatness_last_over_first": round(rswa[-1]["ms_per_token"] / rswa[0]["ms_per_token"], 3),
        "full_growth_last_over_first": round(full[-1]["ms_per_token"] / full[0]["ms_per_token"], 3),
        "rswa_over_full_tps": {r["generated"]: round(r["tokens_per_s"] / f["tokens_per_s"], 3)
                               for r, f in zip(rswa, full)},
        "kv_bytes_rswa_over_full_at_end": round(rswa[-1]["kv_bytes"] / full[-1]["kv_bytes"], 4),
        "results": results,
    }
    (out / "rswa_decode.json").write_text(json.dumps(summary, indent=1))
    print(f"{title}; window {args.window}")
    print("| generated | R-SWA ms/token | full ms/token | R-SWA / full tokens/s | R-SWA KV MiB | full KV MiB |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r, f in zip(rswa, full):
        mib = r["kv_bytes"] / 2**20, f["kv_bytes"] / 2**20
        print(f"| {r['generated']} | {r['ms_per_token']:.3f} | {f['ms_per_token']:.3f} | "
              f"{r['tokens_per_s'] / f['tokens_per_s']:.2f} | {mib[0]:.2f} | {mib[1]:.2f} |")
    print(f"R-SWA latency at {rswa[-1]['generated']} / at {rswa[0]['generated']}: "
          f"{summary['rswa_flatness_last_over_first']} (target <= 1.15); full attention: "
          f"{summary['full_growth_last_over_first']}")
    print(f"wrote {out / 'rswa_decode.json'} and {out / 'rswa_decode.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
