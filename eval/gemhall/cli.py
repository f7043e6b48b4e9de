"""`gemhall run --data CSV` and `gemhall mmlu`: the abstention-aware benchmark from the command line."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from eval.backends import BackendConfigError
from eval.backends.settings import S, add_backend_arguments, add_sampling_arguments
from inference.config import ConfigError, from_dict, read_yaml, save_config
from training.data.base import DataError
from training.hardware import hardware

from .config import GemhallConfig
from .data import Item, load_items_csv
from .judges import ExactJudge, LLMJudge
from .metrics import compute_metrics
from .mmlu import build_mmlu_items, load_mmlu_rows, local_split_dir
from .report import write_reports
from .runner import PROMPT_VERSION, Runner, run_resumable

EPILOG = """\
examples:
  gemhall run --data examples/toy.csv --thresholds 0.5 0.75 0.9 --backend local
  gemhall mmlu --limit 200 --idk-frac 0.3 --thresholds 0.5 0.75 0.9 0.95 --async --rpm-limit 60
  gemhall mmlu --backend openai --base-url http://localhost:8000/v1 --model qwen2.5-7b --thresholds 0.5 0.9
Rerun the same command to resume: only (item, t) pairs missing from --out/results.jsonl are asked.
"""


def build_parser() -> argparse.ArgumentParser:
    shared = argparse.ArgumentParser(add_help=False)
    g = shared.add_argument_group("thresholds and judging")
    g.add_argument("--thresholds", type=float, nargs="+", default=S, metavar="T",
                   help="confidence targets, each in [0, 1) (required)")
    g.add_argument("--judge", choices=["exact", "llm"], default=S, help="default exact")
    g.add_argument("--judge-model", dest="judge_model", default=S,
                   help="model for --judge llm (default: the answering model), same backend and limits")
    b = shared.add_argument_group("LLM backend and sampling")
    add_backend_arguments(b, GemhallConfig)
    add_sampling_arguments(b, GemhallConfig)
    e = shared.add_argument_group("execution")
    e.add_argument("--async", dest="use_async", action="store_true", default=S, help="concurrent asyncio calls")
    e.add_argument("--progress", action="store_true", default=S, help="show a progress bar")
    e.add_argument("--out", default=S, help="output folder (default: outputs)")
    e.add_argument("--config", default=None, help="YAML file with any of these settings (flags win)")

    parser = argparse.ArgumentParser(prog="gemhall", description=__doc__, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", parents=[shared], help="benchmark a CSV of questions")
    run.add_argument("--data", default=S, help="CSV with columns id, question, gold, unknown_ok (+ extras)")
    mmlu = sub.add_parser("mmlu", parents=[shared], help="benchmark MMLU with optional unanswerable items")
    mmlu.add_argument("--split", choices=["test", "validation", "dev"], default=S, help="default test")
    mmlu.add_argument("--subjects", nargs="+", default=S, help="subject names, or all (default)")
    mmlu.add_argument("--limit", type=int, default=S, help="sample N items after subject filtering")
    mmlu.add_argument("--idk-frac", dest="idk_frac", type=float, default=S,
                      help="fraction in [0, 1] of items made unanswerable (default 0)")
    mmlu.add_argument("--data-dir", dest="data_dir", default=S,
                      help="folder with mmlu/data/{dev,val,test} (default: $HALUGATE_DATA_DIR, else the Hub)")
    return parser


def parse_config(argv: Sequence[str] | None = None) -> GemhallConfig:
    args = vars(build_parser().parse_args(argv))
    config_path = args.pop("config", None)
    data = read_yaml(config_path) if config_path else {}
    data.update(args)
    if "thresholds" not in data:
        raise ConfigError("--thresholds is required (one or more confidence targets in [0, 1))")
    return from_dict(GemhallConfig, data, config_path or "command line")


def load_items(cfg: GemhallConfig) -> tuple[list[Item], str]:
    if cfg.command == "run":
        items = load_items_csv(cfg.data)
        return items, f"{cfg.data} ({len(items)} items)"
    rows = load_mmlu_rows(cfg.split, cfg.subjects, cfg.data_dir)
    items = build_mmlu_items(rows, split=cfg.split, limit=cfg.limit, idk_frac=cfg.idk_frac, seed=cfg.seed)
    source = local_split_dir(cfg.split, cfg.data_dir) or "cais/mmlu (Hub)"
    n_idk = sum(it.unknown_ok for it in items)
    desc = (f"MMLU {cfg.split} from {source}, subjects {' '.join(cfg.subjects)}: {len(items)} of {len(rows)} "
            f"items sampled with seed {cfg.seed}, {n_idk} made unanswerable (idk-frac {cfg.idk_frac:g})")
    return items, desc


def build_backends(cfg: GemhallConfig):
    backend = cfg.build_backend()
    if cfg.judge == "exact":
        return backend, ExactJudge()
    judge_backend = backend
    if cfg.judge_model and cfg.judge_model != backend.model:
        judge_backend = cfg.build_backend(model=cfg.judge_model, limits=backend.limits)  # one rate window for both
    return backend, LLMJudge(judge_backend, seed=cfg.seed, thinking_budget=cfg.thinking_budget)


def print_table(metrics: dict) -> None:
    print(f"{'t':>6} {'n':>5} {'answered':>8} {'IDK':>5} {'err':>4} {'coverage':>9} {'cond_acc':>9} "
          f"{'halluc':>7} {'avg_score':>9}")
    for m in metrics.values():
        def f(x):
            return "n/a" if x is None else f"{x:.3f}"
        print(f"{m['t']:>6g} {m['n']:>5} {m['answered']:>8} {m['abstentions']:>5} {m['errors']:>4} "
              f"{f(m['coverage']):>9} {f(m['accuracy_conditioned_on_answering']):>9} "
              f"{f(m['hallucination_rate_among_answers']):>7} {f(m['avg_expected_score']):>9}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from .behavior import behavior_checks  # scipy.stats: ~1 s to import, so not at the top

    try:
        cfg = parse_config(argv)
        items, data_desc = load_items(cfg)
        backend, judge = build_backends(cfg)
    except (ConfigError, DataError, BackendConfigError) as exc:
        print(f"gemhall: error: {exc}", file=sys.stderr)
        return 2

    out = Path(cfg.out)
    gen_kwargs = cfg.generation_kwargs()
    fingerprint = {"prompt_version": PROMPT_VERSION, **backend.describe(), **gen_kwargs, "judge": cfg.judge,
                   "judge_model": cfg.judge_model if cfg.judge == "llm" else None}
    fingerprint.pop("base_url", None)  # the same server may move ports; the model is what matters
    runner = Runner(backend, judge, out, **gen_kwargs, workers=cfg.concurrency, progress=cfg.progress,
                    fingerprint=fingerprint)
    try:
        stats, code = run_resumable("gemhall", "results", runner.log.path, lambda: runner.run(
            items, cfg.thresholds, use_async=cfg.use_async, on_start=lambda: save_config(cfg, out / "config.yaml")))
        if code:
            return code
    finally:
        backend.close()
        judge_backend = getattr(judge, "backend", backend)
        if judge_backend is not backend:
            judge_backend.close()

    metrics = compute_metrics(stats.records, cfg.thresholds)
    behavior = behavior_checks(metrics)
    meta = {
        "title": f"{cfg.command} · {backend.model} ({cfg.backend})",
        "command": "gemhall " + shlex.join(argv),
        "backend": cfg.backend, "model": backend.model, "data": data_desc, "items": len(items),
        "seed": cfg.seed, "temperature": cfg.temperature, "judge": cfg.judge,
        "hardware": hardware() + (f"; local model on {backend.device}, {backend.threads} torch CPU thread(s)"
                                  if cfg.backend == "local" else ""),
        "seconds": f"{stats.seconds:.1f} for {stats.attempted} pairs this invocation "
                   f"({stats.resumed} resumed from the log, {stats.errors} errors); "
                   f"per-pair call time summed over all invocations "
                   f"{sum(r.get('latency_s') or 0 for r in stats.records):.1f} s",
    }
    paths = write_reports(out, stats.records, metrics, behavior, meta)
    print(f"gemhall: {stats.total} (item, t) pairs: {stats.resumed} resumed, {stats.attempted} asked "
          f"in {stats.seconds:.1f}s, {stats.errors} errors")
    print_table(metrics)
    mono = behavior["coverage_monotonicity"]
    cal = behavior["calibration"]
    print(f"coverage monotonic: {'yes' if mono['ok'] else 'no (' + str(len(mono['violations'])) + ' violations)'}; "
          f"cond. accuracy below t at: {cal['below_threshold'] or 'none'} "
          f"(significantly: {cal['significantly_below'] or 'none'})")
    print(f"report: {paths['report']}  plot: {paths['plot']}  rows: {paths['results_csv']}")
    return 0
