"""`python -m eval.claims`: two-stage claim fact-checking over JSONL, and the comparison with the Detector.

    python -m eval.claims check --input answers.jsonl --explainer runs/explainer-offline --out runs/claims
    python -m eval.claims check --input answers.jsonl --extractor llm --verifier llm --backend openai \\
        --base-url http://localhost:8000/v1 --model qwen2.5-7b --out runs/claims-llm
    python -m eval.claims compare --data ragtruth_test_subset --per-task 50 --detector runs/detector-offline \\
        --explainer runs/explainer-offline --out runs/claims-vs-detector

check input: one JSON object per line with `content` (the answer to check), optional `prompt` and `context`
(a string or a list of documents), optional `id`; or `turns`: [{prompt, content, context}, ...] for a multi-turn
conversation (each turn is checked against its own context). A halurate results.jsonl is read as is (answer ->
content, question -> prompt). Writes good.jsonl (passed), bad.jsonl (failed),
summary.json and config.yaml under --out.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from eval.backends import BackendConfigError, FatalBackendError
from eval.backends.registry import backend_names
from eval.backends.settings import BackendSettings, S, add_backend_arguments
from inference.config import ConfigError, from_dict, save_config
from inference.detect import HaluGate
from inference.runners import ModelLoadError
from training.data.base import DataError, numbered_jsonl
from training.data.spans import SpanDataReport, load_span_source, read_span_file
from training.hardware import hardware

from .checker import DEFAULT_BATCH_SIZE, DEFAULT_THRESHOLD, ClaimChecker
from .compare import run_comparison, stratified_sample, write_outputs
from .extract import LLMClaimExtractor, SentenceClaimExtractor
from .verify import LLMVerifier, NLIVerifier


@dataclass
class ClaimsConfig(BackendSettings):
    """The LLM backend keys (backend, model, base_url, concurrency, rpm_limit, max_retries, timeout_s, threads)
    are eval.backends.BackendSettings; here no backend is the default (no LLM stage)."""

    command: Literal["check", "compare"]
    out: str
    input: str | None = None
    limit: int | None = None
    extractor: Literal["sentences", "llm"] | None = None   # default: llm when a backend is given
    verifier: Literal["nli", "llm"] | None = None          # default: nli when an explainer is given
    threshold: float = DEFAULT_THRESHOLD
    batch_size: int = DEFAULT_BATCH_SIZE
    candidates: int = 3
    min_confidence: float = 0.5
    max_pair_tokens: int | None = None      # NLI: longest (premise, claim) pair; default: the trained length
    explainer: str | None = None
    model_backend: Literal["onnx", "torch"] | None = None  # default: onnx when the dir holds model.onnx
    backend: str | None = field(default=None, kw_only=True)   # no LLM unless --backend is given
    max_output_tokens: int = 1024           # LLM extraction writes a JSON list of claims: 128 would cut it
    # compare
    data: str = "ragtruth_test_subset"
    data_dir: str | None = None
    per_task: int | None = 50
    seed: int = 0
    detector: str | None = None
    sentinel: str | None = None
    overrides: list[str] = field(default_factory=list)
    progress: bool = False

    def validate(self) -> None:
        super().validate()
        if self.max_output_tokens < 1:
            raise ValueError(f"max_output_tokens: must be >= 1, got {self.max_output_tokens}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold: must be in [0, 1], got {self.threshold}")
        if self.batch_size < 1 or self.candidates < 1:
            raise ValueError("batch_size and candidates: must be >= 1")
        if self.command == "check" and not self.input:
            raise ValueError("input: `check` needs --input FILE.jsonl")
        if self.command == "compare" and not self.detector:
            raise ValueError("detector: `compare` needs --detector DIR")
        if self.extractor == "llm" and not self.backend:
            raise ValueError(f"extractor: llm needs --backend ({', '.join(backend_names())})")
        if self.verifier == "llm" and not self.backend:
            raise ValueError("verifier: llm needs --backend")
        if self.verifier == "nli" and not self.explainer:
            raise ValueError("verifier: nli needs --explainer DIR (the NLI Explainer)")
        if self.verifier is None and not self.explainer and not self.backend:
            raise ValueError("verifier: give --explainer DIR (NLI verification) or --backend (LLM verification)")


def build_parser() -> argparse.ArgumentParser:
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--out", default=S, help="output folder")
    shared.add_argument("--progress", action="store_true", default=S)
    c = shared.add_argument_group("claim checker")
    c.add_argument("--extractor", choices=["sentences", "llm"], default=S,
                   help="stage 1 (default: llm when --backend is given, else sentences)")
    c.add_argument("--verifier", choices=["nli", "llm"], default=S,
                   help="stage 2 (default: nli when --explainer is given, else llm)")
    c.add_argument("--threshold", type=float, default=S, help="factual_ratio needed to pass (default 0.8)")
    c.add_argument("--batch-size", dest="batch_size", type=int, default=S, help="claims per verification batch (10)")
    c.add_argument("--candidates", type=int, default=S, help="NLI: context sentences tried per claim (3)")
    c.add_argument("--min-confidence", dest="min_confidence", type=float, default=S,
                   help="NLI: true/false under this confidence become unsure (0.5)")
    c.add_argument("--max-pair-tokens", dest="max_pair_tokens", type=int, default=S,
                   help="NLI: joined sentences / whole passages only when the pair fits (default: the length the "
                        "Explainer was trained at, from its config.yaml, else the model's limit)")
    c.add_argument("--explainer", default=S, help="NLI Explainer dir (export dir or run dir)")
    c.add_argument("--model-backend", dest="model_backend", choices=["onnx", "torch"], default=S,
                   help="for the model dirs (default: onnx when the dir holds model.onnx, else torch)")
    b = shared.add_argument_group("LLM backend (extractor / verifier)")
    add_backend_arguments(b, ClaimsConfig)
    b.add_argument("--max-output-tokens", dest="max_output_tokens", type=int, default=S,
                   help="LLM extraction (default 1024; verification uses at least 2048)")

    p = argparse.ArgumentParser(prog="python -m eval.claims", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    ck = sub.add_parser("check", parents=[shared], help="fact-check the answers of a JSONL file")
    ck.add_argument("--input", default=S, help="JSONL: prompt, content, optional context (or turns)")
    ck.add_argument("--limit", type=int, default=S)
    cp = sub.add_parser("compare", parents=[shared], help="claims vs Detector vs gold on span data (RAGTruth)")
    cp.add_argument("--data", default=S, help="span adapter or JSONL file (default ragtruth_test_subset)")
    cp.add_argument("--data-dir", dest="data_dir", default=S)
    cp.add_argument("--per-task", dest="per_task", type=int, default=S, help="responses per task type (default 50)")
    cp.add_argument("--seed", type=int, default=S)
    cp.add_argument("--detector", default=S, help="Detector model dir")
    cp.add_argument("--sentinel", default=S, help="Sentinel dir (default none: every response is checked)")
    cp.add_argument("--set", dest="overrides", action="append", default=S, metavar="SECTION.KEY=VALUE",
                    help="HaluGate setting, e.g. hallucination_mitigation.hallucination_model.threshold=0.5")
    return p


def parse_config(argv: Sequence[str]) -> ClaimsConfig:
    args = vars(build_parser().parse_args(argv))
    args.setdefault("out", f"runs/claims-{args['command']}")
    return from_dict(ClaimsConfig, args, "command line")


def model_backend(cfg: ClaimsConfig, model_dir: str) -> str:
    if cfg.model_backend:
        return cfg.model_backend
    return "onnx" if any(Path(model_dir).glob("*.onnx")) else "torch"


def build_checker(cfg: ClaimsConfig, explainer_runner=None) -> ClaimChecker:
    backend = cfg.build_backend() if cfg.backend else None
    extractor_kind = cfg.extractor or ("llm" if backend else "sentences")
    extractor = (LLMClaimExtractor(backend, max_output_tokens=cfg.max_output_tokens) if extractor_kind == "llm"
                 else SentenceClaimExtractor())
    verifier_kind = cfg.verifier or ("nli" if cfg.explainer else "llm")
    if verifier_kind == "nli":
        if explainer_runner is None:
            from inference.runners import load_runner  # tests patch inference.runners.load_runner

            explainer_runner = load_runner(cfg.explainer, "sequence", model_backend(cfg, cfg.explainer))
        verifier = NLIVerifier(explainer_runner, batch_size=cfg.batch_size, candidates=cfg.candidates,
                               min_confidence=cfg.min_confidence, max_pair_tokens=cfg.max_pair_tokens)
    else:
        verifier = LLMVerifier(backend, batch_size=cfg.batch_size, max_output_tokens=max(cfg.max_output_tokens, 2048))
    return ClaimChecker(extractor, verifier, threshold=cfg.threshold)


def read_input(path: str, limit: int | None = None) -> list[dict]:
    """Rows of the check input, validated before any work starts; a DataError names the file, line and field."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: input file not found")
    rows = []
    for n, row in numbered_jsonl(p):
        where = f"{p}:{n}"
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
        if "content" not in row and "turns" not in row and isinstance(row.get("answer"), str):
            # a halurate results.jsonl: check the same answers at the claim level
            row = {**row, "content": row["answer"], "prompt": row.get("question")}
        turns = row.get("turns")
        if turns is not None:
            if not isinstance(turns, list) or not turns:
                raise DataError(f"{where}: field 'turns' must be a non-empty list of {{prompt, content, context}}")
            for i, t in enumerate(turns):
                _check_fields(t, f"{where}: turns[{i}]")
        else:
            _check_fields(row, where)
        row.setdefault("id", f"{p.stem}-{n}")
        rows.append(row)
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise DataError(f"{p}: no records")
    return rows


def _check_fields(row, where: str) -> None:
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected an object")
    if not isinstance(row.get("content"), str):
        raise DataError(f"{where}: field 'content' (the answer to check) is required and must be a string")
    if row.get("prompt") is not None and not isinstance(row["prompt"], str):
        raise DataError(f"{where}: field 'prompt' must be a string")
    ctx = row.get("context")
    if ctx is not None and not isinstance(ctx, str) and not (
            isinstance(ctx, list) and all(isinstance(c, str) for c in ctx)):
        raise DataError(f"{where}: field 'context' must be a string or a list of strings")


def run_check(cfg: ClaimsConfig, argv: Sequence[str]) -> int:
    from tqdm.auto import tqdm

    rows = read_input(cfg.input, cfg.limit)
    checker = build_checker(cfg)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out / "config.yaml")
    start = time.perf_counter()
    good, bad, scores = [], [], []
    for row in tqdm(rows, disable=not cfg.progress, desc="claims", unit="record"):
        if "turns" in row:
            res = checker.check_turns(row["turns"])
        else:
            res = checker.check(row["content"], row.get("context"), row.get("prompt"))
        scores.append(res.score)
        (good if res.passed else bad).append({**row, "factcheck": res.to_dict()})
    seconds = time.perf_counter() - start
    for name, items in (("good", good), ("bad", bad)):
        with (out / f"{name}.jsonl").open("w", encoding="utf-8") as fh:
            for r in items:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    summary = {"command": "python -m eval.claims " + shlex.join(argv), "input": cfg.input, "records": len(rows),
               "good": len(good), "bad": len(bad), "pass_rate": round(len(good) / len(rows), 4),
               "mean_score": round(sum(scores) / len(scores), 4), "threshold": cfg.threshold,
               "extractor": type(checker.extractor).__name__, "verifier": type(checker.verifier).__name__,
               "seconds": round(seconds, 2), **checker.summary()}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    llm = summary.get("llm_extraction", {}).get("outcomes")
    print(f"claims: {len(rows)} records, {len(good)} good, {len(bad)} bad (threshold {cfg.threshold}); "
          f"{summary['claims']} claims {summary['verdicts']}" + (f"; LLM extraction {llm}" if llm else ""))
    print(f"good: {out / 'good.jsonl'}  bad: {out / 'bad.jsonl'}  summary: {out / 'summary.json'}")
    return 0


def run_compare(cfg: ClaimsConfig, argv: Sequence[str]) -> int:
    report = SpanDataReport()
    if Path(cfg.data).suffix == ".jsonl" or Path(cfg.data).is_file():
        records = read_span_file(Path(cfg.data), report)
    else:
        records = load_span_source(cfg.data, cfg.data_dir, report)
    records = stratified_sample(records, cfg.per_task, cfg.seed)
    backend = model_backend(cfg, cfg.detector)
    sentinel = None if (cfg.sentinel or "none").lower() == "none" else cfg.sentinel
    gate = HaluGate.from_dirs(cfg.detector, sentinel=sentinel, explainer=cfg.explainer, backend=backend,
                              overrides=cfg.overrides)
    if gate.load_errors:
        raise ConfigError("; ".join(f"{k}: {v}" for k, v in gate.load_errors.items()))
    checker = build_checker(cfg, explainer_runner=gate.runners.get("explainer") if cfg.explainer else None)
    start = time.perf_counter()
    rows, metrics = run_comparison(records, gate, checker, progress=cfg.progress)
    meta = {"command": "python -m eval.claims " + shlex.join(argv),
            "data": f"{cfg.data}: {len(records)} responses ({cfg.per_task} per task type, seed {cfg.seed})",
            "detector": f"HaluGate: detector {cfg.detector}, explainer {cfg.explainer or 'off'}, sentinel "
                        f"{sentinel or 'off (every response checked)'}, backend {backend}",
            "claims": f"{type(checker.extractor).__name__} + {type(checker.verifier).__name__}, threshold "
                      f"{cfg.threshold}",
            "hardware": hardware(), "seconds": f"{time.perf_counter() - start:.1f}"}
    paths = write_outputs(Path(cfg.out), rows, metrics, meta)
    save_config(cfg, Path(cfg.out) / "config.yaml")
    o = metrics["overall"]
    print(f"compare: {o['n']} responses; Detector F1 {o['detector_vs_gold'].get('f1')}, claims F1 "
          f"{o['claims_vs_gold'].get('f1')}, agreement {o['agreement'].get('agreement')} "
          f"(kappa {o['agreement'].get('cohen_kappa')})")
    print(f"report: {paths['report']}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg = parse_config(argv)
        return run_check(cfg, argv) if cfg.command == "check" else run_compare(cfg, argv)
    except (ConfigError, DataError, BackendConfigError, ModelLoadError, ValueError) as exc:
        print(f"claims: error: {exc}", file=sys.stderr)
        return 2
    except FatalBackendError as exc:
        print(f"claims: stopped: {exc}", file=sys.stderr)
        return 3
