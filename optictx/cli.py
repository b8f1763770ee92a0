"""`optictx` command line: demo, plan, render, fidelity, tune, niah, serve, bill, train-reader."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .budget import Budget
from .cost import COST_MODELS
from .errors import ConfigError, OptictxError
from .eval.bill import gaps_arg, risk_arg, since_arg
from .handles import key_for
from .io import read_jsonl
from .memory import Memory
from .progress import Bar, each
from .promptcache import CACHE_PRICING as BILL_PROVIDERS
from .report import contact_sheet, plan_table, printable
from .serve.flags import add_arguments as add_serve_arguments
from .serve.flags import config_from
from .turns import Turn, to_turn


def _memory(turns: Sequence[Turn], args: argparse.Namespace) -> Memory:
    # One key for every run: the pages' handles, and so their labels' tokens, are the same each time.
    mem = Memory(vision=args.vision, budget=Budget(tokens=args.budget), keep_recent=args.keep_recent,
                 tokens_per_page=args.tokens_per_page, key=key_for("optictx command line"))
    for t in each(turns, "packing", "turn"):
        mem.add(t)  # a Turn keeps its own `pinned`
    return mem


def _write_pages(ctx: Any, out: Path) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    names = []
    for seg in ctx.pages:
        if seg.tier.is_image:
            name = f"page_{seg.page.index:04d}_{seg.tier.value}.png"
            seg.image.save(out / name)
            names.append(name)
    return names


def cmd_demo(args: argparse.Namespace) -> int:
    from .sample import sample_conversation

    t0 = time.perf_counter()
    turns = [to_turn(m) for m in sample_conversation()]
    mem = _memory(turns, args)
    ctx = mem.context()
    out = Path(args.out)
    names = _write_pages(ctx, out / "pages")
    s = mem.stats(ctx)
    (out / "plan.md").write_text(plan_table(ctx, mem.transcript(), s["text_tokens"]) + "\n")
    contact_sheet(ctx).save(out / "contact_sheet.png")
    print(f"optictx demo: {s['turns']} turns ({s['text_tokens']} text tokens) -> {ctx.tokens} context tokens "
          f"under '{ctx.vision.name}' (budget {ctx.budget.limit}), {s['ratio']}x smaller")
    print(f"  pages per tier: {s['pages']}; sealed pages: {s['sealed_pages']}")
    print(f"  wrote {len(names)} page images to {out / 'pages'}, {out / 'plan.md'}, {out / 'contact_sheet.png'}")
    print(f"  took {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    turns = read_jsonl(args.file)
    mem = _memory(turns, args)
    ctx = mem.context()
    print(plan_table(ctx, mem.transcript(), mem.stats(ctx)["text_tokens"]))
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    turns = read_jsonl(args.file)
    mem = _memory(turns, args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    index = []
    for page in each(mem.pages, "rendering", "page"):
        name = f"page_{page.index:04d}.png"
        mem.images.master(page).save(out / name)
        index.append({"page": page.index, "file": name, "sealed": page.sealed, "turn_ids": list(page.turn_ids),
                      "text": page.text})
    (out / "pages.json").write_text(json.dumps(index, ensure_ascii=False, indent=1))
    print(f"rendered {len(index)} pages at {mem.render.size}px to {out} (pages.json lists their text and turns)")
    return 0


def _reader(args: argparse.Namespace) -> tuple[Any, str]:
    from .readers import OpenAIReader, RapidOcrReader, TesseractReader

    if args.reader == "rapidocr":
        return RapidOcrReader(), "RapidOCR (PP-OCRv6 small)"
    if args.reader == "reflex":
        from .models import ReflexReader

        weights = getattr(args, "weights", None)
        return ReflexReader(weights), "reflex" + (f" ({Path(weights).name})" if weights else "")
    if args.reader == "tesseract":
        lines = getattr(args, "line_boxes", False)
        return TesseractReader(line_boxes=lines), "Tesseract 5" + (" (line boxes)" if lines else "")
    if not args.base_url or not args.model:
        raise ConfigError("--reader openai needs --base-url and --model")
    return OpenAIReader(args.base_url, args.model), args.model


def _render_config(args: argparse.Namespace) -> Any:
    """The RenderConfig that --render (a JSON file) and --columns ask for; without --render, the
    one --vision's pages are drawn at, where it has its own (a consumer that prices pixels)."""
    from .renderers import RenderConfig
    from .settings import as_render

    vision = COST_MODELS.get(getattr(args, "vision", "") or "")
    base = RenderConfig.load(args.render) if args.render else as_render(None, vision)
    if args.columns:
        base = RenderConfig.model_validate({**base.model_dump(), "columns": args.columns})
    return base


def cmd_fidelity(args: argparse.Namespace) -> int:
    from .eval.fidelity import measure, write_outputs
    from .tiers import Tier

    reader, name = _reader(args)
    t0 = time.perf_counter()
    cells = measure(reader, densities=args.densities, tiers=[Tier(t) for t in args.tiers], pages=args.pages,
                    vision=args.vision, base=_render_config(args), corpus=args.corpus)
    paths = write_outputs(cells, args.out, name)
    print(Path(paths["md"]).read_text())
    if args.peer:
        paths.update(_peer(reader, name, args))
    print(f"wrote {', '.join(str(p) for p in paths.values())} in {time.perf_counter() - t0:.0f} s")
    return 0


def _peer(reader: Any, name: str, args: argparse.Namespace) -> dict[str, Path]:
    try:
        import pixelprompt  # noqa: F401
    except ImportError:
        print("pixelprompt is not installed (pip install 'optictx[eval]'): no peer comparison", file=sys.stderr)
        return {}
    from .eval import peer

    paths = peer.write_outputs(peer.compare(reader, pages=args.pages), args.out, name)
    print(paths["md"].read_text())
    return {f"peer_{k}": v for k, v in paths.items()}


def cmd_niah(args: argparse.Namespace) -> int:
    from .eval.niah import NiahConfig, run

    knobs = {k: v for k, v in vars(args).items() if k in NiahConfig.model_fields and v is not None}
    knobs["render"] = _render_config(args)
    if args.depth_list:
        knobs["depths"] = args.depth_list
    t0 = time.perf_counter()
    results = run(NiahConfig(**knobs), progress=sys.stderr.isatty())
    print(results.paths["md"].read_text())
    print(f"wrote {len(results.cells)} cells and {', '.join(str(p) for p in results.paths.values())} "
          f"in {time.perf_counter() - t0:.0f} s")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from .eval.tune import Scorer, summary, tune, write_outputs
    from .renderers import RenderConfig
    from .tiers import Tier

    reader, name = _reader(args)
    t0 = time.perf_counter()
    scorer = Scorer(reader, Tier(args.tier), corpus=args.corpus, pages=args.pages, min_accuracy=args.min_accuracy,
                    vision=args.vision)
    start = RenderConfig.load(args.start) if args.start else None
    log = (lambda t: print(f"  trial {t.step}: {t.changed} -> {t.char_acc:.2%} at {t.compression}x, score {t.score}",
                           file=sys.stderr)) if args.verbose else None
    result = tune(scorer, start=start, max_evals=args.max_evals, seed=args.seed, on_trial=log)
    paths = write_outputs(result, args.out)
    print(summary(result, scorer, name))
    print(f"wrote {paths['config']} (load it with Memory(render=...)) and {paths['trials']} "
          f"in {time.perf_counter() - t0:.0f} s")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="optictx", description="Agent memory that fits any context budget.")
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--budget", type=int, default=8192, help="context budget in tokens (default 8192)")
        sp.add_argument("--vision", default="deepseek-ocr", choices=list(COST_MODELS), help="consumer cost model")
        sp.add_argument("--keep-recent", type=int, default=4, help="turns kept as text (default 4)")
        sp.add_argument("--tokens-per-page", type=int, help="text tokens per page (default: the render config's)")

    def readers(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--reader", default="tesseract", choices=["tesseract", "rapidocr", "reflex", "openai"])
        sp.add_argument("--weights", help="a reflex model file, for --reader reflex (default: the shipped one)")
        sp.add_argument("--line-boxes", action="store_true", help="Tesseract: read the renderer's lines one by one")
        sp.add_argument("--base-url", help="OpenAI-compatible server, for --reader openai")
        sp.add_argument("--model", help="model name on that server, for --reader openai")

    def renders(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--columns", type=int, help="text columns per page (default: the render config's)")
        sp.add_argument("--render", help="RenderConfig JSON to measure (e.g. what optictx tune wrote)")

    demo = sub.add_parser("demo", help="shipped sample conversation -> pages, plan table, contact sheet")
    common(demo)
    demo.add_argument("--out", default="out/demo", help="output folder (default out/demo)")
    demo.set_defaults(func=cmd_demo)
    plan = sub.add_parser("plan", help="print where every turn of FILE.jsonl goes under a budget")
    plan.add_argument("file")
    common(plan)
    plan.set_defaults(func=cmd_plan)
    render = sub.add_parser("render", help="draw every page of FILE.jsonl at the master size")
    render.add_argument("file")
    render.add_argument("--out", required=True)
    common(render)
    render.set_defaults(func=cmd_render)
    fid = sub.add_parser("fidelity", help="read pages back at each tier: accuracy vs compression")
    fid.add_argument("--out", default="out/fidelity")
    fid.add_argument("--pages", type=int, default=3, help="full pages per cell (default 3)")
    fid.add_argument("--densities", type=int, nargs="+", default=[600, 800, 1000, 1200],
                     help="tokens per page, each with the font that fills a prose page at it")
    fid.add_argument("--as-is", dest="densities", action="store_const", const=[],
                     help="no density sweep: the render config's own font and tokens per page")
    fid.add_argument("--tiers", nargs="+", default=["base", "small", "tiny"],
                     choices=["gundam", "large", "base", "small", "tiny"])
    fid.add_argument("--vision", default="deepseek-ocr", choices=list(COST_MODELS))
    fid.add_argument("--corpus", nargs="+", default=["prose", "code", "tool"], metavar="NAME|PATH",
                     help="prose, code, tool, or an OpenAI-style .jsonl conversation (or a folder of them); "
                          "default: the three built-in ones")
    renders(fid)
    fid.add_argument("--no-peer", dest="peer", action="store_false",
                     help="skip the side-by-side with pixelprompt under the anthropic cost model")
    readers(fid)
    fid.set_defaults(func=cmd_fidelity)
    tune = sub.add_parser("tune", help="search render settings for the most legible text per visual token")
    tune.add_argument("--out", default="out/tune", help="folder for render.json and trials.csv")
    tune.add_argument("--tier", default="tiny", choices=["large", "base", "small", "tiny"])
    tune.add_argument("--corpus", default="prose", metavar="NAME|PATH",
                      help="prose (default), code, tool, or an OpenAI-style .jsonl conversation or folder of them")
    tune.add_argument("--pages", type=int, default=3, help="full pages read per trial (default 3)")
    tune.add_argument("--max-evals", type=int, default=40, help="trials at most (default 40)")
    tune.add_argument("--min-accuracy", type=float, help="legibility floor (default by tier: small 0.99, tiny 0.97)")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--start", help="RenderConfig JSON to start from (default: the built-in default)")
    tune.add_argument("--vision", default="deepseek-ocr", choices=list(COST_MODELS))
    readers(tune)
    tune.set_defaults(func=cmd_tune)
    niah = sub.add_parser("niah", help="needle-in-a-haystack grid: recall by length, depth, budget and tier")
    niah.add_argument("--out", default="out/niah")
    niah.add_argument("--haystack", help="'builtin' (agent traffic, default), 'prose', a .txt file or folder, "
                                           "or a .jsonl file")
    niah.add_argument("--needle", choices=["number", "uuid", "multikey", "multivalue", "multiquery", "free"])
    niah.add_argument("--needle-text", help="free needle: the sentence to hide")
    niah.add_argument("--question", help="free needle: the question")
    niah.add_argument("--answer", help="free needle: the string that must come back")
    niah.add_argument("--lengths", type=int, nargs="+", help="haystack sizes in tokens (default 8k 16k 32k 64k)")
    niah.add_argument("--depths", type=int, help="how many depths from 0 to 100%% (default 5)")
    niah.add_argument("--depth-list", type=float, nargs="+", help="explicit depth percents instead")
    niah.add_argument("--depth-spacing", choices=["linear", "sigmoid"])
    niah.add_argument("--budgets", type=float, nargs="+", help="<= 1: fraction of the transcript; > 1: tokens")
    niah.add_argument("--vision", choices=list(COST_MODELS))
    niah.add_argument("--keep-recent", type=int)
    niah.add_argument("--samples", type=int)
    niah.add_argument("--seed", type=int)
    niah.add_argument("--workers", type=int)
    niah.add_argument("--backend", choices=["reader", "vlm"])
    niah.add_argument("--gate", type=float, metavar="MAX_CER",
                      help="a legibility gate on the reflex reader, at this character error rate")
    renders(niah)
    niah.add_argument("--base-url", help="vlm backend: OpenAI-compatible server")
    niah.add_argument("--model", help="vlm backend: model name")
    niah.set_defaults(func=cmd_niah)
    serve = sub.add_parser("serve", help="a memory proxy for the OpenAI and Anthropic APIs, with a dashboard")
    add_serve_arguments(serve)
    serve.set_defaults(func=cmd_serve)
    bill = sub.add_parser("bill", help="what recorded sessions cost, request by request, as they came and "
                          "through optictx, with the provider's prompt cache counted")
    bill.add_argument("sessions", nargs="+", help="SESSION.jsonl files or folders of them: OpenAI-style messages "
                      "(with a .usage.json beside), Claude Code transcripts (~/.claude/projects/*/*.jsonl) or Codex "
                      "rollouts (~/.codex/sessions/YYYY/MM/DD/*.jsonl)")
    bill.add_argument("--provider", nargs="+", choices=[*BILL_PROVIDERS],
                      help="whose cache rules and prices (default: each session's client's: anthropic for Claude "
                      "Code and messages, openai:gpt-5 for Codex)")
    bill.add_argument("--vision", default="auto", choices=["auto", *COST_MODELS],
                      help="cost model; auto: by the provider's model (default)")
    bill.add_argument("--budget", type=int, help="X-Optictx-Budget on every request (default: the proxy's)")
    bill.add_argument("--gap-seconds", type=gaps_arg, default=(60.0,),
                      help="seconds between requests (default 60); a list (60,60,60,900) is taken in turn")
    bill.add_argument("--risk", type=risk_arg, default=0.1, help="the proxy's --risk: how far above sending each "
                      "session as it came a compaction may take its bill so far (0: never above; none: no bound; "
                      "default 0.1)")
    bill.add_argument("--image-instructions", action="store_true", help="the proxy's --image-instructions: the "
                      "system prompt's prose and the tools' descriptions drawn on pages")
    bill.add_argument("--since", type=since_arg, help="in a folder, only sessions written since: a date "
                      "(2026-12-01) or days back (7d)")
    bill.add_argument("--proxied", choices=["auto", "yes", "no"], default="auto", help="whether the sessions went "
                      "through optictx, so that what the provider billed was optictx's requests (auto: a Codex "
                      "rollout whose model provider is named optictx)")
    bill.add_argument("--requests", action="store_true", help="print every request, not only each session")
    bill.add_argument("--json", action="store_true", help="one JSON object per session, then the totals")
    bill.set_defaults(func=cmd_bill)
    train = sub.add_parser("train-reader", help="train the reflex reader on lines optictx draws (torch)")
    train.add_argument("--out", required=True, help="the model file to write (.npz)")
    train.add_argument("--pages", type=int, default=60, help="pages of generated text to cut lines from")
    train.add_argument("--steps", type=int, default=12_000)
    train.add_argument("--minutes", type=float, help="stop early when this much time is up")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--threads", type=int, help="torch threads (default: torch's own)")
    train.set_defaults(func=cmd_train_reader)
    return p


def cmd_bill(args: argparse.Namespace) -> int:
    from .errors import need

    need("starlette", "serve")
    from .eval.bill import replay, report, sessions

    found = list(sessions(args.sessions, args.since))
    for provider in args.provider or [None]:
        bills = []
        with Bar(sum(len(s.calls) for s in found), f"bill {provider or 'each'}", "request") as bar:  # one may be long
            for session in found:
                b = replay(session, provider or session.provider, budget=args.budget, gap=args.gap_seconds,
                           vision=args.vision, risk=args.risk, image_instructions=args.image_instructions,
                           done=bar.update)
                b = b if args.proxied == "auto" else replace(b, proxied=args.proxied == "yes")
                bills.append(b)
                print(b.as_json(args.requests) if args.json else b.text(args.requests), flush=True)
        total = report(bills)
        label = provider or "each session's provider"
        print(json.dumps({"provider": label, **total}) if args.json else
              f"{label}: {total['sessions']} sessions, {total['requests']} requests: " + (
                  "no request to price" if total["ratio"] is None else
                  f"optictx costs {total['ratio']}x pass-through (cost in base-input tokens "
                  f"{total['passthrough_cost']} -> {total['optictx_cost']}); sessions above 1.0x: "
                  f"{total['sessions_above_1']}; worst {total['worst']}"))
    return 0


def cmd_train_reader(args: argparse.Namespace) -> int:
    from .errors import need

    need("torch", "models")
    from .models.reflex_train import run

    run(args.out, pages=args.pages, steps=args.steps, minutes=args.minutes, seed=args.seed, threads=args.threads)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from .errors import need

    need("starlette", "serve"), need("uvicorn", "serve"), need("httpx", "serve")
    from .serve import run

    run(config_from(args))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        return int(args.func(args))
    except BrokenPipeError:  # `optictx plan ... | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    # Invalid settings (pydantic's ValueError) and files that cannot be written (--out naming a
    # file, a full disk) are the user's to fix too: one line, exit 2, no traceback.
    except (OptictxError, ValueError, OSError) as exc:
        print(f"optictx: error: {printable(str(exc))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
