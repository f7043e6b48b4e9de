"""`python -m eval.halurate`: evaluate a model's answers with the detection stack (HaluGate).

    python -m eval.halurate --config configs/halurate.yaml
    python -m eval.halurate --data halueval_qa --limit 100 --backend local --out runs/halurate-smollm2 \\
        --sentinel runs/sentinel-offline --detector runs/detector-offline --explainer runs/explainer-offline \\
        --detect-backend torch
    python -m eval.halurate --mode score --data answers.jsonl --out runs/halurate-mysystem   # no generation

Rerun the same command to resume: finished answers are never generated again (see eval/halurate/runner.py).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from eval.backends import BackendConfigError
from eval.backends.settings import (
    S,
    SamplingSettings,
    add_backend_arguments,
    add_sampling_arguments,
    setting_names,
)
from eval.gemhall.runner import run_resumable
from inference.config import ConfigError, from_dict, read_yaml, save_config
from training.data.base import DataError
from training.hardware import hardware

from .config import GenerationSettings, HalurateConfig
from .data import load_records
from .detection import build_gate, describe_gate
from .metrics import compute_metrics
from .prompt import PROMPT_VERSION
from .report import write_reports
from .runner import Runner

# flag dest -> (section, key); section None = top level. The backend and sampling flags are
# eval.backends.settings' (their dests are the fields of GenerationSettings).
FLAGS = {
    "mode": (None, "mode"), "out": (None, "out"), "progress": (None, "progress"), "redetect": (None, "redetect"),
    "data": ("data", "source"), "data_dir": ("data", "data_dir"), "limit": ("data", "limit"),
    "offset": ("data", "offset"),
    **{name: ("generation", name) for name in setting_names(SamplingSettings)},
    "inference_config": ("detection", "config"), "sentinel": ("detection", "sentinel"),
    "detector": ("detection", "detector"), "explainer": ("detection", "explainer"),
    "detect_backend": ("detection", "backend"), "batch_size": ("detection", "batch_size"),
    "worst": ("report", "worst_examples"),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eval.halurate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=None, help="YAML file (configs/halurate.yaml); flags win over it")
    p.add_argument("--mode", choices=["generate", "score"], default=S,
                   help="generate answers (default) or score the data's existing answers")
    p.add_argument("--out", default=S, help="output folder (default runs/halurate)")
    p.add_argument("--progress", action="store_true", default=S, help="show a progress bar")
    p.add_argument("--redetect", action="store_true", default=S, help="detect every answer again")
    d = p.add_argument_group("data")
    d.add_argument("--data", default=S, help="halueval_qa | ragtruth_test_subset | span adapter | .jsonl/.json/.csv")
    d.add_argument("--data-dir", dest="data_dir", default=S, help="public data folder (default $HALUGATE_DATA_DIR)")
    d.add_argument("--limit", type=int, default=S, help="the first N records")
    d.add_argument("--offset", type=int, default=S, help="skip the first N records")
    g = p.add_argument_group("generation (the model under test)")
    add_backend_arguments(g, GenerationSettings)
    add_sampling_arguments(g, GenerationSettings)
    t = p.add_argument_group("detection (HaluGate)")
    t.add_argument("--inference-config", dest="inference_config", default=S,
                   help="HaluGate config (default configs/inference.yaml)")
    t.add_argument("--sentinel", default=S, help="Sentinel model dir, or none to switch the gate off")
    t.add_argument("--detector", default=S, help="Detector model dir")
    t.add_argument("--explainer", default=S, help="Explainer model dir, or none")
    t.add_argument("--detect-backend", dest="detect_backend", choices=["onnx", "torch"], default=S,
                   help="onnx: export dirs; torch: run dirs")
    t.add_argument("--set", dest="overrides", action="append", default=S, metavar="SECTION.KEY=VALUE",
                   help="HaluGate setting, e.g. hallucination_mitigation.hallucination_model.threshold=0.5")
    t.add_argument("--batch-size", dest="batch_size", type=int, default=S, help="answers per detection batch")
    p.add_argument("--worst", type=int, default=S, help="worst examples in report.md (default 10)")
    return p


def parse_config(argv: Sequence[str] | None = None) -> HalurateConfig:
    args = vars(build_parser().parse_args(argv))
    path = args.pop("config", None)
    data = read_yaml(path) if path else {}
    overrides = args.pop("overrides", None)
    for dest, value in args.items():
        section, key = FLAGS[dest]
        if section is None:
            data[key] = value
        else:
            if not isinstance(data.setdefault(section, {}), dict):
                raise ConfigError(f"{path}: {section}: expected a mapping")
            data[section][key] = value
    if overrides:
        det = data.setdefault("detection", {})
        det["overrides"] = list(det.get("overrides") or []) + overrides
    return from_dict(HalurateConfig, data, path or "command line")


def main(argv: Sequence[str] | None = None) -> int:
    import logging

    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        cfg = parse_config(argv)
        records = load_records(cfg.data.source, mode=cfg.mode, data_dir=cfg.data.data_dir, limit=cfg.data.limit,
                               offset=cfg.data.offset)
        backend = cfg.generation.build_backend() if cfg.mode == "generate" else None
        gate = build_gate(cfg.detection)
    except (ConfigError, DataError, BackendConfigError, ValueError) as exc:
        print(f"halurate: error: {exc}", file=sys.stderr)
        return 2
    for stage, message in gate.load_errors.items():
        print(f"halurate: warning: {stage} unavailable ({message}); affected answers are counted as unavailable, "
              "never as clean", file=sys.stderr)

    g = cfg.generation
    out = Path(cfg.out)
    fingerprint = {"mode": cfg.mode}
    gen_kwargs = {}
    if backend is not None:
        gen_kwargs = g.generation_kwargs()
        fingerprint.update(prompt_version=PROMPT_VERSION, prompt_template=g.prompt_template, **backend.describe(),
                           **gen_kwargs)
        fingerprint.pop("base_url", None)
    try:
        runner = Runner(records, gate, out, mode=cfg.mode, backend=backend, gen_kwargs=gen_kwargs,
                        prompt_template=g.prompt_template, batch_size=cfg.detection.batch_size,
                        fingerprint=fingerprint, redetect=cfg.redetect, progress=cfg.progress,
                        use_async=backend is not None and backend.name != "local" and g.concurrency > 1)
    except ValueError as exc:
        print(f"halurate: error: {exc}", file=sys.stderr)
        return 2
    result, code = run_resumable("halurate", "answers", runner.log.path,
                                 lambda: runner.run(on_start=lambda: save_config(cfg, out / "config.yaml")))
    if code:
        return code
    entries, stats = result

    metrics = compute_metrics(entries)
    gate_desc = describe_gate(gate)
    det = ", ".join(f"{s}: {gate_desc[s]['model_id'] or 'off'}" + ("" if gate_desc[s]["state"] in (
        "loaded", "not configured") else " (UNAVAILABLE)") for s in ("sentinel", "detector", "explainer"))
    meta = {
        "title": f"{cfg.data.source} · " + (f"{backend.model} ({backend.name})" if backend else "existing answers"),
        "command": "python -m eval.halurate " + shlex.join(argv), "mode": cfg.mode,
        "data": f"{cfg.data.source}: {len(records)} records (offset {cfg.data.offset}, limit {cfg.data.limit})",
        "model": f"{backend.model} via {backend.name}, temperature {g.temperature}, max_output_tokens "
                 f"{g.max_output_tokens}" if backend else None,
        "detection": f"{det}; backend {gate_desc['backend']}", "detection_models": gate_desc,
        "hardware": hardware(),
        "seconds": f"generation {stats.seconds_generation:.1f} s for {stats.generated} answers, detection "
                   f"{stats.seconds_detection:.1f} s for {stats.detected} answers this invocation "
                   f"({stats.answers_reused} answers and {stats.detections_reused} detections reused from the log)",
        "stats": vars(stats),
    }
    paths = write_reports(out, entries, metrics, meta, worst_k=cfg.report.worst_examples,
                          context_chars=cfg.report.context_chars)
    print(f"halurate: {len(entries)} records: {stats.generated} answers generated, {stats.answers_reused} reused, "
          f"{stats.generation_errors} generation errors; {stats.detected} detected, {stats.detections_reused} reused")
    rate = metrics["hallucination_rate"]
    print(f"hallucination rate {'n/a' if rate is None else f'{100 * rate:.1f}%'} "
          f"({metrics['hallucinated']}/{metrics['checked']} checked); skipped {metrics['verdicts']['skipped']}, "
          f"unavailable {metrics['unavailable']}, input errors {metrics['verdicts']['input_error']}; "
          f"spans/answer {metrics['spans_per_response']}; Sentinel skip rate {metrics['sentinel']['skip_rate']}")
    print(f"results: {runner.log.path}  report: {paths['report']}  metrics: {paths['metrics']}")
    return 0
