"""python -m inference.batch: score a whole dataset with HaluGate, in resumable Parquet shards, then report.

    python -m inference.batch --config configs/inference.yaml --input answers.jsonl --output out/ --progress
    python -m inference.batch ... --engine ray --address auto          # the same run on a Ray cluster
    python -m inference.batch --report-only --output out/ --group-by model

A rerun of the same command skips the shards already written; a rerun with a different config (input, column
mapping, shard size, limit, group columns or any HaluGate setting) is refused (exit 2, naming the key) rather
than mixing two runs' results in one output. Guide: docs/batch.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
import time
from pathlib import Path

import yaml

from inference.batch.io import (
    FORMATS,
    BatchError,
    Columns,
    Source,
    chunks,
    clean_partial,
    finished,
    need,
    plan,
    write_shard,
)
from inference.config import ConfigError, to_dict
from inference.hardware import cpu_info
from inference.settings import default_config_path, load_settings
from inference.stages import pipeline

CONFIG_NAME = "config.yaml"
RUN_NAME = "run.json"
log = logging.getLogger("halugate.batch")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m inference.batch", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Check every answer of a dataset for hallucinations (HaluGate), streaming, in resumable "
                    "Parquet shards, and write a report (report.md, report.json, plots/).",
        epilog="examples:\n  python -m inference.batch --input answers.jsonl --output out/ --workers 2 --progress\n"
               "  python -m inference.batch --input logs.parquet --output out/ --group-by model --engine ray\n"
               "  python -m inference.batch --report-only --output out/ --group-by model")
    p.add_argument("--config", default=None, help="inference YAML (default: configs/inference.yaml when present)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config value, e.g. hallucination_mitigation.fail_mode=closed")
    for stage in pipeline():
        if stage.settings_key:
            p.add_argument(f"--{stage.name}", metavar="DIR",
                           help=f"{stage.name} model dir (overrides hallucination_mitigation.{stage.settings_key})")
    p.add_argument("--input", help="JSONL, JSON list, CSV, Parquet, or a datasets save_to_disk directory")
    p.add_argument("--format", default="auto", choices=["auto", *FORMATS], help="input format (default: by name)")
    p.add_argument("--split", help="split of a datasets DatasetDict directory")
    p.add_argument("--output", required=True, metavar="DIR", help="output directory (shards/, config.yaml, report)")
    cols = p.add_argument_group("columns (found by these names without a flag)")
    for role in ("id", "context", "question", "answer", "messages", "task_type"):
        cols.add_argument(f"--{role.replace('_', '-')}-column", dest=f"{role}_column", metavar="COL",
                          help=f"column with the {role.replace('_', ' ')} (default: {role})")
    p.add_argument("--group-by", nargs="+", default=None, metavar="COL",
                   help="input columns carried into the output; the report gives rates per value")
    p.add_argument("--engine", choices=["local", "ray"], default="local")
    p.add_argument("--workers", type=int, default=1,
                   help="local: worker processes (each with cores // N threads); ray: actors (0: one per CPU)")
    p.add_argument("--address", default=None, help="ray: cluster address (auto: the running cluster; default: "
                                                   "a local instance)")
    p.add_argument("--shard-size", type=int, default=256, help="rows per shard (the unit of resume)")
    p.add_argument("--limit", type=int, default=None, help="only the first N rows")
    p.add_argument("--progress", action="store_true", help="progress bar (rows/s, ETA) on stderr")
    p.add_argument("--report-only", action="store_true", help="report a finished output again, without scoring")
    p.add_argument("--no-report", action="store_true", help="skip the report at the end")
    p.add_argument("--top-k", type=int, default=10, help="most confident flagged answers in the report")
    return p


def _flatten(d, prefix: str = "") -> dict:
    if isinstance(d, dict):
        out: dict = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: d}


def check_same_run(path: Path, resolved: dict) -> None:
    """A rerun must have the resolved config of the run that wrote the output."""
    old = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    a, b = _flatten(old), _flatten(json.loads(json.dumps(resolved)))
    for key in sorted(set(a) | set(b)):
        if a.get(key, "<unset>") != b.get(key, "<unset>"):
            raise BatchError(f"{path}: {key} was {a.get(key, '<unset>')!r}, now {b.get(key, '<unset>')!r}; this "
                             "output holds another run's results: use a new --output, or rerun with the same "
                             "settings")


def _settings(args):
    settings = load_settings(args.config or default_config_path(), args.overrides)
    m = settings.hallucination_mitigation
    for stage in pipeline():
        if stage.settings_key and getattr(args, stage.name, None):
            getattr(m, stage.settings_key).model_id = getattr(args, stage.name)
    for stage in pipeline():  # local model dirs as absolute paths: workers and Ray actors run elsewhere
        model = getattr(m, stage.settings_key) if stage.settings_key else None
        if model is not None and model.model_id and Path(model.model_id).expanduser().exists():
            model.model_id = str(Path(model.model_id).expanduser().resolve())
    return settings


def run(args) -> dict:
    out = Path(args.output)
    if args.shard_size < 1 or args.workers < 0 or (args.limit is not None and args.limit < 0):
        raise BatchError("--shard-size must be >= 1, --workers >= 0, --limit >= 0")
    if not args.input:
        raise BatchError("--input is required (or --report-only)")
    need("pyarrow")
    source = Source.open(args.input, args.format, args.split)
    cols = Columns(group_by=list(args.group_by or []))
    explicit = set()
    for role in ("id", "context", "question", "answer", "messages", "task_type"):
        value = getattr(args, f"{role}_column")
        if value:
            setattr(cols, role, value)
            explicit.add(role)
    cols.check(source.columns, explicit)
    settings = _settings(args)
    settings_dict = to_dict(settings)
    resolved = {"batch": {**source.describe(), "columns": {k: v for k, v in vars(cols).items()
                                                           if k != "group_by"},
                          "group_by": cols.group_by, "shard_size": args.shard_size, "limit": args.limit},
                "inference": settings_dict}
    from inference.batch.io import schema

    schema(cols.group_by)  # a group column that clashes with an output column fails here, before any work
    out.mkdir(parents=True, exist_ok=True)
    config_path = out / CONFIG_NAME
    if config_path.is_file():
        check_same_run(config_path, resolved)
    else:
        config_path.write_text(yaml.safe_dump(resolved, sort_keys=False, allow_unicode=True), encoding="utf-8")

    total = source.rows if args.limit is None else min(source.rows, args.limit)
    sizes = plan(total, args.shard_size)
    clean_partial(out)
    done = finished(out, sizes)
    todo_rows = sum(s for k, s in enumerate(sizes) if k not in done)
    started = time.time()
    tqdm = need("tqdm.auto").tqdm
    bar = tqdm(total=total, initial=total - todo_rows, unit="rows", disable=not args.progress, smoothing=0.1,
               dynamic_ncols=True, desc="halugate")
    written = {"shards": 0, "rows": 0}

    def write(k: int, table) -> None:
        if table.num_rows != sizes[k]:
            raise BatchError(f"shard {k}: {table.num_rows} rows scored, {sizes[k]} expected")
        write_shard(out, k, table)
        written["shards"] += 1
        written["rows"] += table.num_rows
        bar.update(table.num_rows)

    stream = chunks(source, args.shard_size, total, done)
    try:
        if todo_rows:
            if args.engine == "ray":
                from inference.batch.engines import run_ray

                run_ray(settings_dict, cols, stream, args.workers, write, args.shard_size, args.address)
            else:
                from inference.batch.engines import run_local

                run_local(settings_dict, cols, stream, max(1, args.workers), write)
    finally:
        bar.close()
    seconds = time.time() - started
    info = {"engine": args.engine, "workers": args.workers, "rows": total, "shards": len(sizes),
            "shards_before": len(done), "shards_written": written["shards"], "rows_scored": written["rows"],
            "seconds": round(seconds, 2),
            "rows_per_s": round(written["rows"] / seconds, 2) if written["rows"] and seconds else None,
            "hardware": cpu_info().describe(), "command": "python -m inference.batch " + shlex.join(sys.argv[1:])}
    (out / RUN_NAME).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info


def report(args, info: dict | None = None) -> dict:
    from inference.batch.report import write_report

    out = Path(args.output)
    group_by = args.group_by
    config_path = out / CONFIG_NAME
    resolved = yaml.safe_load(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    if group_by is None:
        group_by = (resolved.get("batch") or {}).get("group_by") or []
    if info is None and (out / RUN_NAME).is_file():
        info = json.loads((out / RUN_NAME).read_text(encoding="utf-8"))
    info = info or {}
    batch = resolved.get("batch") or {}
    m = (resolved.get("inference") or {}).get("hallucination_mitigation") or {}
    meta = {"input": batch.get("input"), "rows": info.get("rows"), "command": info.get("command"),
            "engine": f"{info.get('engine')} ({info.get('workers')} workers)" if info.get("engine") else None,
            "config": ", ".join(f"{k}={(m.get(k) or {}).get('model_id')}" for k in
                                ("fact_check_model", "hallucination_model", "nli_model") if m.get(k)),
            "seconds": info.get("seconds"), "hardware": info.get("hardware")}
    return write_report(out, list(group_by), meta, args.top_k)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        info = None
        if not args.report_only:
            info = run(args)
            print(json.dumps({k: info[k] for k in ("rows", "shards", "shards_before", "shards_written",
                                                   "rows_scored", "seconds", "rows_per_s")}))
        if not args.no_report:
            paths = report(args, info)
            print(f"report: {paths['report_md']}", file=sys.stderr)
    except (BatchError, ConfigError, OSError, yaml.YAMLError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
