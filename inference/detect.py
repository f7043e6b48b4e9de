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

from inference import explain
from inference.actions import apply_actions
from inference.backends import ClassifierRunner, load_runner
from inference.calibration import sentinel_threshold
from inference.config import ConfigError, apply_overrides, from_dict, to_dict
from inference.detector_stage import Calibration, DetectorJob, DetectorScores, score_answers, scores_to_spans
from inference.formatting import nli_pair, sentinel_text
from inference.labels import DETECTOR_LABELS, EXPLAINER_LABELS, SENTINEL_LABELS
from inference.messages import DetectInput, InputError, parse_input
from inference.result import STAGES, Evidence, Result, Span
from inference.settings import InferenceSettings, default_config_path, load_settings
from inference.spans import SpecialTokens
from inference.windowing import (
    InputTooLongError,
    detector_windows,
    join_documents,
)

log = logging.getLogger("halugate.inference")

__all__ = ["HaluGate", "InputError", "InputTooLongError", "Result", "Span", "detect", "detect_batch"]

STAGE_MODELS = {"sentinel": "fact_check_model", "detector": "hallucination_model", "explainer": "nli_model"}
STAGE_TASKS = {"sentinel": "sequence", "detector": "token", "explainer": "sequence"}


def _label_index(labels: Sequence[str], name: str, stage: str, model: str) -> int:
    lowered = [x.lower() for x in labels]
    if name.lower() in lowered:
        return lowered.index(name.lower())
    raise RuntimeError(f"{stage} model {model}: label {name!r} not in its label map {list(labels)}")


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
                 load: bool = True):
        self.settings = settings or InferenceSettings()
        m = self.settings.hallucination_mitigation
        self.runners: dict[str, ClassifierRunner | None] = {"sentinel": sentinel, "detector": detector,
                                                             "explainer": explainer}
        self.load_errors: dict[str, str] = {}
        if load:
            for stage, key in STAGE_MODELS.items():
                model_cfg = getattr(m, key)
                if self.runners[stage] is None and model_cfg.model_id:
                    self._load(stage, model_cfg)
        if self.runners["detector"] is None and not m.hallucination_model.model_id and "detector" not in \
                self.load_errors:
            raise ConfigError("hallucination_mitigation.hallucination_model.model_id: required (the Detector's "
                              "export dir, run dir or Hub id)")
        for stage, runner in self.runners.items():
            if runner is not None:
                try:
                    self._check_labels(stage, runner)
                except RuntimeError as exc:
                    self.runners[stage] = None
                    self.load_errors[stage] = str(exc)
        self.detector_calibration = Calibration()
        if self.runners["detector"] is not None:
            try:
                self.detector_calibration = Calibration.from_model_dir(self.runners["detector"].model_dir)
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
                  explainer: str | Path | None = None, *, backend: str = "onnx", precision: str = "fp32",
                  use_cpu: bool = True, overrides: list[str] | None = None) -> HaluGate:
        """From model directories (export dirs for onnx, run dirs for torch); everything else at its default,
        or set through `overrides` (e.g. ["hallucination_mitigation.fail_mode=closed"])."""
        data = to_dict(InferenceSettings())
        m = data["hallucination_mitigation"]
        m.update(backend=backend, precision=precision)
        for key, path in (("fact_check_model", sentinel), ("hallucination_model", detector),
                          ("nli_model", explainer)):
            m[key]["model_id"] = str(path) if path else ""
            m[key]["use_cpu"] = use_cpu
        apply_overrides(data, overrides)
        return cls(from_dict(InferenceSettings, data, "<from_dirs>"))

    def _load(self, stage: str, model_cfg) -> None:
        m = self.settings.hallucination_mitigation
        try:
            self.runners[stage] = load_runner(
                model_cfg.model_id, STAGE_TASKS[stage], m.backend, use_cpu=model_cfg.use_cpu,
                precision=m.precision, onnx_file=model_cfg.onnx_file, num_threads=m.num_threads,
                batch_size=model_cfg.batch_size)
        except Exception as exc:  # noqa: BLE001 - any load failure makes the stage unavailable, with the reason
            self.load_errors[stage] = f"{type(exc).__name__}: {exc}" if not str(exc).startswith(
                str(model_cfg.model_id)) else str(exc)

    @staticmethod
    def _check_labels(stage: str, runner: ClassifierRunner) -> None:
        needed = {"sentinel": SENTINEL_LABELS[1:], "detector": DETECTOR_LABELS[1:], "explainer": EXPLAINER_LABELS}
        for name in needed[stage]:
            _label_index(runner.labels, name, stage, runner.model_dir)
        if runner.task != STAGE_TASKS[stage]:
            raise RuntimeError(f"{stage} model {runner.model_dir}: a {runner.task} classifier, "
                               f"a {STAGE_TASKS[stage]} classifier is needed")

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

    def _fail(self, item: _Item, stage: str, message: str) -> None:
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
            elif not it.data.answer.strip():
                it.result.status, it.result.reason = "skipped", "empty_answer"
                it.result.hallucination_detected = False  # nothing was said, so nothing is unsupported
            else:
                active.append(it)

        t0 = time.perf_counter()
        self._sentinel(active)
        timings["sentinel"] = time.perf_counter() - t0

        for it in active:
            self._decide(it)

        t0 = time.perf_counter()
        self._detector([it for it in active if it.run_detector])
        timings["detector"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        self._explainer([it for it in active if it.run_detector and it.result.spans])
        timings["explainer"] = time.perf_counter() - t0

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

    @staticmethod
    def _special(runner: ClassifierRunner) -> SpecialTokens | None:
        tok = getattr(runner, "tok", None)
        return SpecialTokens(tok.cls_id, tok.sep_id, tok.pad_id) if tok is not None else None

    @staticmethod
    def _task_type(data: DetectInput) -> str:
        # RAGTruth-style template: the caller's task type, else QA when there is a question, Summary otherwise.
        return data.task_type or ("QA" if data.question else "Summary")

    def _stage_error(self, stage: str) -> str | None:
        if stage in self.load_errors:
            return f"not loaded: {self.load_errors[stage]}"
        return None

    def _sentinel(self, items: list[_Item]) -> None:
        m = self.settings.hallucination_mitigation
        runner = self.runners["sentinel"]
        asked = []
        for it in items:
            if not it.data.question:
                # Explicit context/answer without a question: the caller asks for verification.
                it.result.fact_check_needed = True
            elif runner is None and "sentinel" not in self.load_errors:
                it.result.fact_check_needed = True  # no Sentinel configured: verify everything
            elif runner is None:
                self._fail(it, "sentinel", self._stage_error("sentinel"))
            else:
                asked.append(it)
        if not asked:
            return
        try:
            probs = runner.classify([sentinel_text(it.data.question) for it in asked])
            needed = _label_index(runner.labels, SENTINEL_LABELS[1], "sentinel", runner.model_dir)
            # the config's threshold, else the model's calibrated one (sentinel.json), else 0.6
            threshold = sentinel_threshold(m.fact_check_model.threshold, getattr(runner, "model_dir", None))
        except Exception as exc:  # noqa: BLE001 - a failing model is reported, never read as "not needed"
            for it in asked:
                self._fail(it, "sentinel", f"run failed: {type(exc).__name__}: {exc}")
            return
        for it, p in zip(asked, probs):
            it.result.fact_check_confidence = float(p[needed])
            it.result.fact_check_needed = bool(p[needed] >= threshold)

    def _decide(self, it: _Item) -> None:
        r = it.result
        has_context = bool(it.context)
        decision = self.settings.select(r.fact_check_needed, has_context)
        plugin = decision.plugin() if decision else None
        r.decision = decision.name if decision else None
        if plugin is None or not plugin.enabled:
            r.status = "skipped"
            r.reason = "no_fact_check_needed" if r.fact_check_needed is False else (
                "no_decision" if decision is None else "plugin_disabled")
            return
        it.plugin = plugin
        if not has_context:
            r.status, r.reason = "skipped", "no_context"
            r.unverified_factual = r.fact_check_needed is not False
            return
        if self.runners["detector"] is None:
            self._fail(it, "detector", self._stage_error("detector") or "no Detector")
            return
        it.run_detector = True

    def _detector(self, items: list[_Item]) -> None:
        if not items:
            return
        hm = self.settings.hallucination_mitigation.hallucination_model
        for it in items:
            it.result.detector_windows = len(it.windows)
        try:
            scores = self.score_tokens(items)
        except Exception as exc:  # noqa: BLE001
            for it in items:
                self._fail(it, "detector", f"run failed: {type(exc).__name__}: {exc}")
                it.run_detector = False
            return
        for it, sc in zip(items, scores):
            raw = scores_to_spans(it.data.answer, sc, hm, self.detector_calibration)
            it.result.hallucination_score = sc.score
            it.result.spans = [
                Span(start=s["start"], end=s["end"], text=s["text"], confidence=s["confidence"],
                     severity=explain.UNEXPLAINED_SEVERITY,
                     explanation=explain.explanation(None, None, s["confidence"], "", "NLI not run"))
                for s in raw]
            it.result.hallucination_detected = bool(it.result.spans)

    def score_tokens(self, items: list[_Item]) -> list[DetectorScores]:
        """The Detector stage's token scores for prepared items (windows built): what eval.detector scores."""
        runner = self.runners["detector"]
        hallucinated = _label_index(runner.labels, DETECTOR_LABELS[1], "detector", runner.model_dir)
        jobs = [DetectorJob(it.windows, it.data.answer, it.context, it.data.question, self._task_type(it.data))
                for it in items]
        return score_answers(runner, jobs, self.settings.hallucination_mitigation.hallucination_model,
                             self.detector_calibration, hallucinated)

    def prepare(self, raw: list, where=lambda i: f"inputs[{i}]") -> list[_Item]:
        """Parse inputs and build their Detector windows exactly as detect_batch does (for evaluation)."""
        m = self.settings.hallucination_mitigation
        items = [_Item(parse_input(x, where(i)), Result()) for i, x in enumerate(raw)]
        detector = self.runners["detector"]
        for i, it in enumerate(items):
            it.context = join_documents(it.data.context)
            if detector is not None and m.enabled and it.context and it.data.answer.strip():
                it.windows = detector_windows(
                    detector.tokenizer, it.context, it.data.question, it.data.answer,
                    max_length=self._detector_max_length(), overlap=m.hallucination_model.window_overlap,
                    max_context_tokens=m.hallucination_model.max_context_tokens,
                    task_type=self._task_type(it.data), special_tokens=self._special(detector), where=where(i))
                it.result.context_tokens = it.windows[0].context_tokens
        return items

    def _explainer(self, items: list[_Item]) -> None:
        m = self.settings.hallucination_mitigation
        runner = self.runners["explainer"]
        wanted = [it for it in items if it.plugin.use_nli]
        for it in items:
            if not it.plugin.use_nli:
                for s in it.result.spans:
                    s.explanation = explain.explanation(None, None, s.confidence, "", "use_nli is off")
        if not wanted:
            return
        if runner is None:
            if "explainer" in self.load_errors:
                for it in wanted:
                    self._fail(it, "explainer", self._stage_error("explainer"))
            else:
                for it in wanted:
                    for s in it.result.spans:
                        s.explanation = explain.explanation(None, None, s.confidence, "", "no Explainer configured")
            return
        nm = m.nli_model
        hyp_of: list[list[str]] = []
        candidates: dict[tuple[int, str], explain.PremiseSet] = {}  # (item, hypothesis) -> ranked premises
        for k, it in enumerate(wanted):
            answer = it.data.answer
            hyps = []
            for s in it.result.spans:
                a, b = explain.widen(answer, s.start, s.end, nm.hypothesis)
                hyps.append(answer[a:b] or s.text)
            hyp_of.append(hyps)
            for hyp in dict.fromkeys(hyps):  # one NLI job per distinct hypothesis
                candidates[(k, hyp)] = self._premises(runner, it.context, it.data.question or "", hyp)
        # The latency budget: at most max_nli_pairs Explainer pairs per request (per item of a batch).
        budget = {k: explain.fit_budget([ps for (j, _), ps in candidates.items() if j == k], nm.max_premise_windows,
                                        nm.max_premise_sentences, nm.max_nli_pairs) for k in range(len(wanted))}
        pairs: list[tuple[str, str]] = []
        jobs: dict[tuple[int, str], tuple[list[explain.Premise], int]] = {}  # -> (premises read, first pair)
        for (k, hyp), premise_set in candidates.items():
            read = premise_set.pick(*budget[k])
            question = wanted[k].data.question or ""
            jobs[(k, hyp)] = (read, len(pairs))
            pairs.extend(nli_pair(p.text + ("\n" + question if question else ""), hyp) for p in read)
        try:
            probs = runner.classify(pairs)
        except Exception as exc:  # noqa: BLE001
            for it in wanted:
                self._fail(it, "explainer", f"run failed: {type(exc).__name__}: {exc}")
            return
        column = {name.lower(): i for i, name in enumerate(runner.labels)}
        hm = m.hallucination_model
        for k, it in enumerate(wanted):
            kept = []
            for s, hyp in zip(it.result.spans, hyp_of[k]):
                read, first = jobs[(k, hyp)]
                p = probs[first:first + len(read)]
                label, conf, decisive = explain.decide_nli(p, runner.labels)
                s.premise_coverage = explain.coverage(it.context, read)
                level = explain.severity(label, conf, entailment_threshold=hm.nli_entailment_threshold,
                                         low_confidence=nm.threshold, filter_entailed=hm.enable_nli_filtering)
                if level is None:
                    continue
                best = explain.pick_evidence(read, decisive, explain.span_words(it.data.answer, s.start, s.end))
                ev = read[best]
                s.evidence = Evidence(ev.text, ev.start, ev.end, ev.kind,
                                      {lab: float(p[best][column[lab]]) for lab in EXPLAINER_LABELS})
                s.nli_label, s.nli_confidence, s.severity = label, conf, level
                s.explanation = explain.explanation(label, conf, s.confidence, hyp, evidence=ev)
                kept.append(s)
            # True when, for some span, the Explainer read less than the whole context.
            it.result.context_truncated_for_nli = any(s.premise_coverage < 1.0 for s in it.result.spans)
            it.result.spans = kept
            it.result.hallucination_detected = bool(kept)

    def _premises(self, runner: ClassifierRunner, context: str, question: str,
                  hypothesis: str) -> explain.PremiseSet:
        """Candidate premises (windows and sentences of the context, with offsets; the question is appended to
        each) that fit the Explainer with the hypothesis, ranked by the words they share with it."""
        from inference.spans import tokenize_segment

        tok = runner.tokenizer
        nm = self.settings.hallucination_mitigation.nli_model
        fixed = len(tokenize_segment(tok, hypothesis)[0]) + len(tokenize_segment(tok, question)[0]) + 4
        return explain.premise_candidates(tok, context, hypothesis, runner.max_length - fixed,
                                          nm.max_premise_windows, nm.max_premise_sentences)


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


def _read_input_file(path: str) -> list[dict]:
    name = "<stdin>" if path == "-" else path
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    if not text.strip():
        raise InputError(f"{name}: empty input")
    try:
        return _inputs_from_json(json.loads(text), name)
    except json.JSONDecodeError:
        pass
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InputError(f"{name}:{n}: invalid JSON ({exc.msg})") from None
    return rows


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m inference.detect",
                                description="Check an answer for hallucinations against its context (HaluGate).")
    p.add_argument("--config", default=None, help="inference YAML (default: configs/inference.yaml when present, "
                                                  "else the copy shipped with the package)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config value, e.g. hallucination_mitigation.fail_mode=closed")
    p.add_argument("--sentinel", help="Sentinel model dir (overrides the config)")
    p.add_argument("--detector", help="Detector model dir (overrides the config)")
    p.add_argument("--explainer", help="Explainer model dir (overrides the config)")
    p.add_argument("--backend", choices=["onnx", "torch"], help="onnx (export dirs) or torch (run dirs)")
    p.add_argument("--int8", action="store_true", help="use the int8 ONNX files")
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
    overrides = list(args.overrides)
    for stage, value in (("fact_check_model", args.sentinel), ("hallucination_model", args.detector),
                         ("nli_model", args.explainer)):
        if value:
            overrides.append(f"hallucination_mitigation.{stage}.model_id={value}")
    if args.backend:
        overrides.append(f"hallucination_mitigation.backend={args.backend}")
    if args.int8:
        overrides.append("hallucination_mitigation.precision=int8")
    config = args.config or default_config_path()
    try:
        if args.input:
            inputs = _read_input_file(args.input)
        elif args.messages:
            data = json.loads(Path(args.messages).read_text(encoding="utf-8"))
            inputs = [data if isinstance(data, dict) else {"messages": data}]
        else:
            docs = list(args.context or [])
            for f in args.context_file or []:
                docs.append(Path(f).read_text(encoding="utf-8"))
            if args.answer is None:
                raise InputError("--answer is required (or --input / --messages)")
            inputs = [{"context": docs, "question": args.question, "answer": args.answer}]
        gate = HaluGate.from_config(config, overrides)
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
