"""HaluGate: Sentinel gate -> Detector (windowed) -> span merging -> Explainer -> severity -> actions.

    from inference.detect import HaluGate
    gate = HaluGate.from_config("configs/inference.yaml")            # or HaluGate.from_dirs(detector=..., ...)
    result = gate.detect(messages=[...])                              # OpenAI-style chat
    result = gate.detect(context=["doc 1", "doc 2"], question="...", answer="...")
    results = gate.detect_batch([{"messages": [...]}, {"context": ..., "answer": ...}])   # batched per stage
    print(result.to_json()); result.headers

    python -m inference.detect --config configs/inference.yaml --messages chat.json
    python -m inference.detect --context "..." --question "..." --answer "..."

Runs on ONNX Runtime without torch (backend="onnx", the default); backend="torch" loads run dirs with
transformers. A model that fails to load or run makes the result `unavailable` (never "no hallucination");
`fail_mode` decides whether the answer then passes. See docs/inference.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inference.actions import apply_actions
from inference.config import ConfigError, apply_overrides, from_dict, to_dict
from inference.detector_stage import (
    Calibration,
    DetectorJob,
    DetectorScores,
    effective,
    load_detector_json,
    score_answers,
)
from inference.formats import ModelFormat, detector_format, lettuce_windows
from inference.labels import DETECTOR_LABELS
from inference.messages import DetectInput, InputError, blank, parse_input
from inference.result import STAGES, Result, Span
from inference.runners import ClassifierRunner, load_runner
from inference.settings import InferenceSettings, default_config_path, load_settings
from inference.spans import AnswerTooLongError, SpecialTokens
from inference.stages import Stage, label_index, pipeline
from inference.structured import as_structured_text
from inference.windowing import (
    InputTooLongError,
    context_coverage,
    detector_windows,
    join_documents,
)

log = logging.getLogger("halugate.inference")

__all__ = ["HaluGate", "InputError", "InputTooLongError", "Result", "Span", "detect", "detect_batch"]

# The model stages in pipeline order: stage name -> its config section under hallucination_mitigation
STAGE_MODELS = {s.name: s.settings_key for s in pipeline() if s.settings_key}


@dataclass
class _Item:
    """Per-input working state of one detect_batch call."""

    data: DetectInput
    result: Result
    context: str = ""
    windows: list | None = None
    plugin: Any = None
    run_detector: bool = False


class HaluGate:
    """The whole detection stack behind one call. Runners may be injected (tests, custom backends)."""

    def __init__(self, settings: InferenceSettings | None = None, *, sentinel: ClassifierRunner | None = None,
                 detector: ClassifierRunner | None = None, explainer: ClassifierRunner | None = None,
                 load: bool = True, runners: dict[str, ClassifierRunner] | None = None):
        self.settings = settings or InferenceSettings()
        m = self.settings.hallucination_mitigation
        self.stages = pipeline()
        injected = {"sentinel": sentinel, "detector": detector, "explainer": explainer, **(runners or {})}
        self.runners: dict[str, ClassifierRunner | None] = {
            stage.name: injected.get(stage.name) for stage in self.stages if stage.settings_key}
        self.load_errors: dict[str, str] = {}
        if load:
            for stage in self.stages:
                model_cfg = getattr(m, stage.settings_key) if stage.settings_key else None
                if model_cfg is not None and self.runners[stage.name] is None and model_cfg.model_id:
                    self._load(stage, model_cfg)
        if self.runners["detector"] is None and not m.hallucination_model.model_id and "detector" not in \
                self.load_errors:
            raise ConfigError("hallucination_mitigation.hallucination_model.model_id: required (the Detector's "
                              "export dir, run dir or Hub id)")
        for stage in self.stages:
            runner = self.runners.get(stage.name)
            if runner is not None:
                try:
                    self._check_model(stage, runner)
                except RuntimeError as exc:
                    self.runners[stage.name] = None
                    self.load_errors[stage.name] = str(exc)
        self.detector_calibration = Calibration()
        # "needed": only the grounding signals the calibrated combiner reads; evaluation passes that rescore the
        # same scores under other combiners set "all" (inference.detector_stage.score_answers)
        self.detector_signals = "needed"
        self.detector_trained_fill: str | None = None
        self.detector_structured_context = "json"  # how the Detector reads a JSON context (inference.structured)
        self.detector_answer_types = "plain"  # its answer tokens' types (inference.grounding.ANSWER_TYPES)
        self.detector_format = ModelFormat()  # how the Detector is fed (inference.formats): halugate's own format
        if self.runners["detector"] is not None:
            try:
                self.detector_format = detector_format(m.hallucination_model, self.runners["detector"].model_dir)
                (self.detector_calibration, self.detector_trained_fill, self.detector_structured_context,
                 self.detector_answer_types) = load_detector_json(self.runners["detector"].model_dir)
                if self.detector_answer_types != "plain" and not self.runners["detector"].takes_token_type_ids:
                    raise ValueError(f"{self.runners['detector'].model_dir}: detector.json asks for answer types "
                                     f"{self.detector_answer_types!r}, but the model takes no token_type_ids")
            except ValueError as exc:
                self.runners["detector"] = None
                self.load_errors["detector"] = str(exc)
        for stage, message in self.load_errors.items():
            log.warning("%s unavailable: %s", stage, message)

    # ---- construction ----------------------------------------------------------------------------------------

    @classmethod
    def from_config(cls, path: str | Path | None = None, overrides: list[str] | None = None, **runners) -> HaluGate:
        """Load `path` (a file in the shape of configs/inference.yaml; default: `default_config_path()`, that file
        from the current directory or the package's copy); `overrides` are `section.key=value` strings."""
        return cls(load_settings(path or default_config_path(), overrides), **runners)

    @classmethod
    def from_dirs(cls, detector: str | Path, sentinel: str | Path | None = None,
                  explainer: str | Path | None = None, *, backend: str = "onnx", precision: str = "auto",
                  use_cpu: bool = True, overrides: list[str] | None = None) -> HaluGate:
        """From model directories (export dirs for onnx, run dirs for torch); everything else at its default,
        or set through `overrides` (e.g. ["hallucination_mitigation.fail_mode=closed"])."""
        if backend not in ("onnx", "torch") or precision not in ("auto", "fp32", "int8"):
            raise ConfigError(f"from_dirs: backend must be onnx|torch and precision auto|fp32|int8, got "
                              f"{backend!r}, {precision!r}")
        settings = InferenceSettings()
        m = settings.hallucination_mitigation
        m.backend, m.precision = backend, precision
        for stage, path in (("sentinel", sentinel), ("detector", detector), ("explainer", explainer)):
            model = getattr(m, STAGE_MODELS[stage])
            model.model_id, model.use_cpu = (str(path) if path else ""), use_cpu
        if overrides:  # the caller's own "section.key=value" strings (they win over the arguments)
            settings = from_dict(InferenceSettings, apply_overrides(to_dict(settings), overrides), "<from_dirs>")
        return cls(settings)

    def _load(self, stage: Stage, model_cfg) -> None:
        m = self.settings.hallucination_mitigation
        try:
            self.runners[stage.name] = load_runner(
                model_cfg.model_id, stage.task, m.backend, use_cpu=model_cfg.use_cpu,
                precision=m.precision, onnx_file=model_cfg.onnx_file, num_threads=m.num_threads,
                batch_size=model_cfg.batch_size, spin_wait=m.spin_wait)
        except Exception as exc:  # noqa: BLE001 - any load failure makes the stage unavailable, with the reason
            self.load_errors[stage.name] = f"{type(exc).__name__}: {exc}" if not str(exc).startswith(
                str(model_cfg.model_id)) else str(exc)

    def _check_model(self, stage: Stage, runner: ClassifierRunner) -> None:
        stage.check_labels(runner, self.settings.hallucination_mitigation)
        if runner.task != stage.task:
            raise RuntimeError(f"{stage.name} model {runner.model_dir}: a {runner.task} classifier, "
                               f"a {stage.task} classifier is needed")

    # ---- public API --------------------------------------------------------------------------------------------

    def detect(self, messages: list | None = None, *, context: str | list[str] | None = None,
               question: str | None = None, answer: str | None = None, documents: Any = None) -> Result:
        """Check one answer: give `messages` (OpenAI chat; optional extra `documents`), or `context` / `question`
        / `answer`. Raises InputError for malformed input and InputTooLongError over the limits."""
        if messages is not None:
            item: dict = {"messages": messages}
            if documents is not None:
                item["documents"] = documents
            for name, value in (("context", context), ("question", question), ("answer", answer)):
                if value is not None:
                    raise InputError(f"give either messages or {name}, not both")
        else:
            item = {"context": context, "question": question, "answer": answer}
        return self._run([item], where=lambda i: "")[0]

    def detect_batch(self, inputs: Sequence[dict | DetectInput]) -> list[Result]:
        """Check many answers with one batched model call per stage (length-bucketed padding in each runner).
        Stage timings in each result are those of the whole batch."""
        if isinstance(inputs, (str, bytes, dict)) or not isinstance(inputs, Sequence):
            raise InputError("inputs: expected a list of inputs (objects with messages or context/question/answer)")
        return self._run(list(inputs), where=lambda i: f"inputs[{i}]")

    # ---- pipeline ----------------------------------------------------------------------------------------------

    def fail(self, item: _Item, stage: str, message: str) -> None:
        """Record a stage failure on one input (its result becomes `unavailable`)."""
        item.result.errors.append({"stage": stage, "message": message})

    def _run(self, raw: list, where) -> list[Result]:
        t_start = time.perf_counter()
        m = self.settings.hallucination_mitigation
        timings = {s: 0.0 for s in STAGES}

        # Context extraction: parse, validate, and window every input before any model runs, so that bad or
        # oversized input fails fast and loses nothing.
        t0 = time.perf_counter()
        items = self.prepare(raw, where)
        timings["context"] = time.perf_counter() - t0

        active = []
        for it in items:
            if not m.enabled:
                it.result.status, it.result.reason = "skipped", "disabled"
            elif blank(it.data.answer) or (it.windows and not it.windows[0].answer_offsets):
                # nothing to score (no visible character, or no Detector token): never "no hallucination"
                # (hallucination_detected stays null, so no x-vsr-hallucination-detected header)
                it.result.status, it.result.reason = "skipped", "empty_answer"
            else:
                active.append(it)

        for stage in self.stages:  # each stage picks the items it applies to (inference.stages)
            t0 = time.perf_counter()
            stage.run(self, active)
            if stage.name in timings:
                timings[stage.name] += time.perf_counter() - t0

        timings["total"] = time.perf_counter() - t_start
        for it in items:
            r = it.result
            if r.errors:
                r.status, r.reason = "unavailable", "model_unavailable"
            r.timings_ms = {k: v * 1000.0 for k, v in timings.items()}
            apply_actions(r, it.data.answer, it.plugin, m.fail_mode)
        return [it.result for it in items]

    def _detector_max_length(self) -> int:
        detector = self.runners["detector"]
        if detector is None:
            return 0
        configured = self.settings.hallucination_mitigation.hallucination_model.max_length
        return min(configured, detector.max_length) if configured else detector.max_length

    def max_windows(self) -> int:
        """Windows per answer. Under `min` window aggregation `max_windows` applies (dropping a window can only
        raise the model's probability for a token); under `max` only with `max_windows_under: any`, where a
        dropped window can only lower it, else every window is read. (The grounding signals then describe the
        windows read: detector_stage.read_context.)"""
        hm = self.settings.hallucination_mitigation.hallucination_model
        _, aggregation, combiner = effective(hm, self.detector_calibration)
        if aggregation == "max":
            return hm.max_windows if hm.max_windows_under == "any" else 0
        monotone = combiner is None or dict(zip(combiner.features, combiner.coef)).get("model_logit", 0.0) > 0
        return hm.max_windows if monotone else 0

    def window_fill(self) -> str:
        """The Detector's window plan: the configured one, or (`auto`) the one it was trained with, else even."""
        fill = self.settings.hallucination_mitigation.hallucination_model.window_fill
        if fill != "auto":
            return fill
        return self.detector_trained_fill or "even"

    @staticmethod
    def _special(runner: ClassifierRunner) -> SpecialTokens | None:
        tok = getattr(runner, "tok", None)
        return SpecialTokens(tok.cls_id, tok.sep_id, tok.pad_id) if tok is not None else None

    @staticmethod
    def task_type(data: DetectInput) -> str:
        # RAGTruth-style template: the caller's task type, else QA when there is a question, Summary otherwise.
        return data.task_type or ("QA" if data.question else "Summary")

    def stage_error(self, stage: str) -> str | None:
        if stage in self.load_errors:
            return f"not loaded: {self.load_errors[stage]}"
        return None

    def score_tokens(self, items: list[_Item]) -> list[DetectorScores]:
        """The Detector stage's token scores for prepared items (windows built): what eval.detector scores."""
        runner = self.runners["detector"]
        if self.detector_format.input_format == "lettucedetect" and DETECTOR_LABELS[1].lower() not in [
                str(x).lower() for x in runner.labels]:
            hallucinated = 1  # a LettuceDetect checkpoint's LABEL_1, as lettucedetect reads it
        else:
            hallucinated = label_index(runner.labels, DETECTOR_LABELS[1], "detector", runner.model_dir)
        jobs = [DetectorJob(it.windows, it.data.answer, it.context, it.data.question, self.task_type(it.data))
                for it in items]
        return score_answers(runner, jobs, self.settings.hallucination_mitigation.hallucination_model,
                             self.detector_calibration, hallucinated, self.detector_signals,
                             self.detector_answer_types)

    def context_documents(self, documents: Sequence[str]) -> list[str]:
        """The documents as every stage reads them: a document that is one JSON object / array becomes
        "key: value" lines when the Detector was trained on those (detector.json "structured_context": "text"),
        so evidence offsets then point into that rendering; otherwise unchanged."""
        if self.detector_structured_context != "text":
            return list(documents)
        return [as_structured_text(d) or d for d in documents]

    def prepare(self, raw: list, where=lambda i: f"inputs[{i}]") -> list[_Item]:
        """Parse inputs and build their Detector windows exactly as detect_batch does (for evaluation)."""
        m = self.settings.hallucination_mitigation
        items = [_Item(parse_input(x, where(i)), Result()) for i, x in enumerate(raw)]
        detector = self.runners["detector"]
        max_windows = self.max_windows()
        for i, it in enumerate(items):
            it.context = join_documents(self.context_documents(it.data.context))
            if detector is not None and m.enabled and it.context and not blank(it.data.answer) and \
                    self.detector_format.input_format == "lettucedetect":
                it.windows = self._lettuce_windows(it, where(i))
                it.result.context_tokens = it.windows[0].context_tokens
                it.result.detector_context_coverage = context_coverage(it.windows)
            elif detector is not None and m.enabled and it.context and not blank(it.data.answer):
                it.windows = detector_windows(
                    detector.tokenizer, it.context, it.data.question, it.data.answer,
                    max_length=self._detector_max_length(), overlap=m.hallucination_model.window_overlap,
                    max_context_tokens=m.hallucination_model.max_context_tokens,
                    task_type=self.task_type(it.data), special_tokens=self._special(detector), where=where(i),
                    max_windows=max_windows, fill=self.window_fill())
                it.result.context_tokens = it.windows[0].context_tokens
                it.result.detector_context_coverage = context_coverage(it.windows)
        return items

    def _lettuce_windows(self, it: _Item, where: str) -> list:
        """lettucedetect's inputs for one item (inference.formats): the documents as its passages, one input per
        passage chunk; the hard context limit applies as to halugate's windows."""
        hm = self.settings.hallucination_mitigation.hallucination_model
        passages = [d for d in self.context_documents(it.data.context) if d.strip()]
        try:
            windows = lettuce_windows(self.runners["detector"].tokenizer, passages, it.data.question, it.data.answer,
                                      max_length=self._detector_max_length(), lang=self.detector_format.lang)
        except AnswerTooLongError as exc:
            raise InputTooLongError(
                f"{where or 'input'}: the answer alone needs {exc.needed} tokens, more than the Detector's "
                f"{exc.max_length} (hallucination_mitigation.hallucination_model.max_length)") from None
        if windows[0].context_tokens > hm.max_context_tokens:
            raise InputTooLongError(
                f"{where or 'input'}: the context has {windows[0].context_tokens} tokens, over the hard limit of "
                f"{hm.max_context_tokens} (hallucination_mitigation.hallucination_model.max_context_tokens); it is "
                "refused rather than truncated")
        return windows

# ---- module-level helpers ------------------------------------------------------------------------------------

_DEFAULT_GATE: dict[str, HaluGate] = {}


def _gate(config: str | Path | None) -> HaluGate:
    key = str(config or default_config_path())  # configs/inference.yaml here, else the package's copy
    if key not in _DEFAULT_GATE:
        _DEFAULT_GATE[key] = HaluGate.from_config(key)
    return _DEFAULT_GATE[key]


def detect(messages: list | None = None, *, context=None, question=None, answer=None, documents=None,
           config: str | Path | None = None, gate: HaluGate | None = None) -> Result:
    """One-off call: a HaluGate from `config` (default configs/inference.yaml, loaded once) unless `gate`."""
    gate = gate or _gate(config)
    return gate.detect(messages, context=context, question=question, answer=answer, documents=documents)


def detect_batch(inputs: Sequence[dict], *, config: str | Path | None = None, gate: HaluGate | None = None):
    gate = gate or _gate(config)
    return gate.detect_batch(inputs)


# ---- CLI -----------------------------------------------------------------------------------------------------

def _inputs_from_json(data: Any, name: str) -> list[dict]:
    """{messages|context/answer} -> one input; a messages list -> one input; a list of inputs -> a batch."""
    if isinstance(data, dict):
        return [data]
    if isinstance(data, list) and data and all(isinstance(x, dict) and "role" in x for x in data):
        return [{"messages": data}]
    if isinstance(data, list) and data:
        return data
    raise InputError(f"{name}: expected an object with messages or context/question/answer, a messages list, "
                     "or a list of such objects")


def _read_text(path: str) -> str:
    """A file's (or stdin's, for "-") UTF-8 text; InputError naming it and the offset when it is not UTF-8."""
    name = "<stdin>" if path == "-" else path
    if path == "-":
        stdin = getattr(sys.stdin, "buffer", None)  # a replaced sys.stdin may be text only
        raw = stdin.read() if stdin is not None else sys.stdin.read().encode("utf-8", "surrogateescape")
    else:
        raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None


def _read_input_file(path: str) -> list[dict]:
    name = "<stdin>" if path == "-" else path
    text = _read_text(path)
    if not text.strip():
        raise InputError(f"{name}: empty input")
    try:
        return _inputs_from_json(json.loads(text), name)
    except json.JSONDecodeError:
        pass
    except RecursionError:
        raise InputError(f"{name}: JSON nested deeper than the parser allows") from None
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InputError(f"{name}:{n}: invalid JSON ({exc.msg})") from None
            except RecursionError:
                raise InputError(f"{name}:{n}: JSON nested deeper than the parser allows") from None
    return rows


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m inference.detect", description="Check an answer for hallucinations against its context "
        "(HaluGate).", formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  python -m inference.detect --detector runs/demo/export/detector --context \"The tower is "
               "330 m tall.\" --answer \"It is 500 m tall.\"\n  python -m inference.detect --detector "
               "runs/demo/export/detector --messages examples/eiffel_messages.json")
    p.add_argument("--config", default=None, help="inference YAML (default: configs/inference.yaml when present, "
                                                  "else the copy shipped with the package)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config value, e.g. hallucination_mitigation.fail_mode=closed")
    for stage in pipeline():  # one flag per model stage, named as the stage
        if stage.settings_key:
            p.add_argument(f"--{stage.name}", metavar="DIR",
                           help=f"{stage.name} model: export dir, or Hub id org/name[@rev] of a repo with ONNX files "
                                f"(overrides hallucination_mitigation.{stage.settings_key})")
    p.add_argument("--backend", choices=["onnx", "torch"], help="onnx (export dirs) or torch (run dirs)")
    p.add_argument("--precision", choices=["auto", "fp32", "int8"],
                   help="ONNX precision (default from the config: auto = the faster of fp32 and the shipped int8 "
                        "on this CPU, inference.precision)")
    p.add_argument("--int8", action="store_true", help="same as --precision int8")
    src = p.add_argument_group("input (one of)")
    src.add_argument("--input", help="JSON file (or - for stdin): {messages: [...]} or {context, question, answer}; "
                                     "a JSON list or JSONL file is checked as one batch")
    src.add_argument("--messages", help="JSON file with an OpenAI-style messages list")
    src.add_argument("--context", action="append", help="a context document (repeatable)")
    src.add_argument("--context-file", action="append", help="a file whose text is a context document")
    src.add_argument("--question")
    src.add_argument("--answer")
    p.add_argument("--compact", action="store_true", help="one JSON line per result (no headers block)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    config = args.config or default_config_path()
    try:
        settings = load_settings(config, args.overrides)
        # explicit flags set the fields directly (no "key=value" string round trip: paths stay as typed)
        m = settings.hallucination_mitigation
        for stage in pipeline():
            if stage.settings_key and getattr(args, stage.name, None):
                getattr(m, stage.settings_key).model_id = getattr(args, stage.name)
        m.backend = args.backend or m.backend
        m.precision = "int8" if args.int8 else (args.precision or m.precision)
        if args.input:
            inputs = _read_input_file(args.input)
        elif args.messages:
            try:
                data = json.loads(_read_text(args.messages))
            except json.JSONDecodeError as exc:
                raise InputError(f"{args.messages}: invalid JSON ({exc.msg}, line {exc.lineno} column "
                                 f"{exc.colno})") from None
            except RecursionError:
                raise InputError(f"{args.messages}: JSON nested deeper than the parser allows") from None
            inputs = [data if isinstance(data, dict) else {"messages": data}]
        else:
            docs = list(args.context or [])
            for f in args.context_file or []:
                docs.append(_read_text(f))
            if args.answer is None:
                raise InputError("--answer is required (or --input / --messages)")
            inputs = [{"context": docs, "question": args.question, "answer": args.answer}]
        gate = HaluGate(settings)
        # A model named on the command line that does not load is a mistake in the command (a mistyped path), not
        # an outage to report as `unavailable` (what a service does, and what this CLI still does for the models
        # of the config file): one error line, exit status 2, nothing checked.
        named = [s.name for s in pipeline() if s.settings_key and getattr(args, s.name, None)]
        failed = [f"--{name}{'' if getattr(args, name) in gate.load_errors[name] else ' ' + getattr(args, name)}: "
                  f"{gate.load_errors[name]}" for name in named if name in gate.load_errors]
        # Without its Detector nothing can be checked: a configured one that does not load (a missing, truncated or
        # corrupted file, a missing tokenizer) is a start-up error too, naming the file.
        if "detector" in gate.load_errors and "detector" not in named:
            failed.append(f"{config}: hallucination_mitigation.hallucination_model.model_id: "
                          f"{gate.load_errors['detector']}")
        if failed:
            raise InputError("; ".join(failed))
        results = gate.detect_batch(inputs)
    except (ConfigError, InputError, InputTooLongError, OSError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for r in results:
        if args.compact:
            print(r.to_json(indent=None))
        else:
            print(r.to_json())
            print("\n".join(f"{k}: {v}" for k, v in r.headers.items()) or "(no headers)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
