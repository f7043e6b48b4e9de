"""The runtime config: YAML in the seed router's shape, loaded into typed dataclasses by inference.config.

    hallucination_mitigation:            # models and thresholds (seed: router-defaults.yaml)
      enabled: true
      backend: onnx                      # onnx | torch
      precision: auto                    # auto (the faster of fp32 / shipped int8 here) | fp32 | int8
      fail_mode: open                    # open: pass the answer when a model is unavailable; closed: withhold it
      fact_check_model:    {model_id, threshold: (unset: the model's calibrated one, else 0.6), use_cpu}
      hallucination_model: {model_id, threshold: 0.8, use_cpu: true, min_span_length, min_span_confidence,
                            enable_nli_filtering, nli_entailment_threshold, keep_ungrounded, window_overlap,
                            max_context_tokens}
      nli_model:           {model_id, threshold: 0.7, use_cpu: true, hypothesis: sentence, max_premise_windows,
                            max_premise_sentences, premise_window_tokens, max_nli_pairs, max_pair_tokens}
    decisions:                           # seed: config.yaml decisions with rules and the hallucination plugin
      - name: fact_check
        priority: 100
        rules: {operator: OR, conditions: [{type: fact_check, name: needs_fact_check}]}
        plugins:
          - type: hallucination
            configuration: {enabled: true, use_nli: true, hallucination_action: header,
                            unverified_factual_action: header, include_hallucination_details: true}

Relative model_id paths are resolved against the current directory first, then the config file's directory's
parent (so `runs/demo/export/detector` works from the repository root and from elsewhere).

When no file is named, `default_config_path()` picks configs/inference.yaml in the current directory (a
checkout) or else the copy shipped inside this package (inference/defaults/inference.yaml, package data, so
an installed wheel works from any directory); tests/test_packaging.py keeps the two files identical.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from inference.config import ConfigError, from_dict, load_config
from inference.spans import check_span_extension

HALLUCINATION_ACTIONS = ("header", "body", "block", "none")
UNVERIFIED_ACTIONS = ("header", "body", "none")
FACT_CHECK_NAMES = ("needs_fact_check", "no_fact_check_needed")
CONDITION_TYPES = ("fact_check", "context", "always")
CONTEXT_NAMES = ("present", "missing")


def _unit(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name}: must be in [0, 1], got {value}")


@dataclass
class ModelSettings:
    model_id: str = ""            # export dir (onnx) or run dir / checkpoint (torch) or Hub id; "" = not used
    threshold: float = 0.5
    use_cpu: bool = True
    batch_size: int = 8
    onnx_file: str = ""           # override the ONNX file name inside model_id

    def validate(self) -> None:
        _unit("threshold", self.threshold)
        if self.batch_size < 1:
            raise ValueError(f"batch_size: must be >= 1, got {self.batch_size}")


@dataclass
class SentinelSettings(ModelSettings):
    # None: the model's calibrated threshold (sentinel.json in its dir, see inference.calibration), else 0.6
    threshold: float | None = None
    fact_check_label: str = ""    # the label meaning "needs fact-checking"; "": found by name (FACT_CHECK_NEEDED,
                                  # fact_check, factcheck, needs_fact_check, ...: inference.labels.sentinel_label)

    def validate(self) -> None:
        if self.threshold is not None:
            _unit("threshold", self.threshold)
        if self.batch_size < 1:
            raise ValueError(f"batch_size: must be >= 1, got {self.batch_size}")


@dataclass
class DetectorSettings(ModelSettings):
    threshold: float = 0.8                 # token probability of HALLUCINATED to flag a token
    min_span_length: int = 2               # characters; shorter merged spans are dropped
    min_span_confidence: float = 0.6       # spans whose mean token probability is below are dropped (never
                                           # above the threshold in effect)
    span_extension: float = 0.5            # a flagged span grows over the adjacent answer tokens whose
                                           # probability is >= span_extension x the threshold (hysteresis: the
                                           # threshold finds an error, the lower bound its extent); 1.0: off.
                                           # A model's calibration brings the extension its thresholds were
                                           # fitted with, which replaces this one (docs/detector.md)
    enable_nli_filtering: bool = True      # entailed spans with confidence >= nli_entailment_threshold dropped
    nli_entailment_threshold: float = 0.75
    keep_ungrounded: bool = True           # a span holding a number, quantity or name that the context lacks
                                           # (Span.ungrounded, an exact check) is never dropped as entailed, and
                                           # its severity is at least that of "neutral": small NLI models miss
                                           # number swaps ("500 meters" against "330 meters")
    flag_ungrounded: bool = True           # a number, quantity or name of the answer that the context lacks
                                           # (the exact check, strict: inference.grounding.unsupported_spans) is
                                           # a span even where the model's probability stays under the threshold;
                                           # its confidence stays the model's (docs/detector.md)
    max_length: int = 0                    # tokens per window; 0 = the model's position limit
    window_overlap: int = 32               # at least this many context tokens shared by consecutive windows
                                           # (the fewest windows that allow it, spread evenly)
    window_fill: Literal["auto", "full", "even", "packed"] = "auto"  # auto: the plan the Detector was trained
                                           # with (detector.json "window_fill"), else even. even: the fewest
                                           # windows, each only as long as covering the context needs
                                           # (2026-12-02: no loss, fewer tokens); full: every
                                           # window a full budget of context; packed: one window of the context
                                           # sentences sharing the most words with the answer
                                           # (inference.spans.pack_context_ranges)
    max_windows: int = 4                   # > 0: only the windows sharing the most words with the answer
                                           # (see max_windows_under); 0 = all
    max_windows_under: Literal["min", "any"] = "any"  # any: the budget applies under either aggregation (under
                                           # max a dropped window, one sharing few words with the answer, would
                                           # mostly add flags; measured: docs/inference.md); min: under min only
    window_aggregation: Literal["max", "min"] = "max"  # per answer token across windows
    max_context_tokens: int = 16384        # hard limit: longer contexts are refused with an error
    use_model_calibration: bool = True     # the model's detector.json (threshold, aggregation, grounding
                                           # combiner, fitted on held-out data) overrides threshold/aggregation
    input_format: Literal["auto", "halugate", "lettucedetect"] = "auto"  # how the Detector is fed: auto = what
                                           # its export declares (halugate_format.json), else halugate's own
                                           # format; lettucedetect: lettucedetect 0.2.3's prompts and passage
                                           # chunks (inference.formats)
    span_builder: Literal["halugate", "lettucedetect"] = "halugate"  # token probabilities -> spans: halugate
                                           # (merging over small gaps, word snapping, span extension) or
                                           # lettucedetect's (runs of consecutive flagged tokens, as they are)

    def validate(self) -> None:
        super().validate()
        _unit("min_span_confidence", self.min_span_confidence)
        check_span_extension(self.span_extension)
        _unit("nli_entailment_threshold", self.nli_entailment_threshold)
        if self.min_span_length < 0:
            raise ValueError(f"min_span_length: must be >= 0, got {self.min_span_length}")
        if self.max_length < 0 or self.window_overlap < 0 or self.max_windows < 0 or self.max_context_tokens < 1:
            raise ValueError("max_length, window_overlap, max_windows must be >= 0 and max_context_tokens >= 1")


@dataclass
class ExplainerSettings(ModelSettings):
    threshold: float = 0.7                 # NLI confidence under this lowers a span's severity by one
    hypothesis: Literal["sentence", "clause", "span"] = "sentence"  # how far a span is widened for NLI
    max_premise_windows: int = 1           # the premise windows sharing the most words with the hypothesis
    max_premise_sentences: int = 4         # + the context sentences sharing the most (precise evidence); 0: off
    premise_window_tokens: int = 96        # tokens per premise window; 0: as many as fit the pair (the rule
                                           # before: windows of ~230 tokens, which the Explainer reads worse)
    max_nli_pairs: int = 64                # latency budget: Explainer pairs scored per request (sentences are
                                           # dropped first, then windows, down to one window per hypothesis)
    max_pair_tokens: int = 0               # tokens per (premise, hypothesis) pair; 0: the length the Explainer
                                           # was fine-tuned at (its config.yaml), else its position limit

    def validate(self) -> None:
        super().validate()
        if self.max_premise_windows < 1:
            raise ValueError(f"max_premise_windows: must be >= 1, got {self.max_premise_windows}")
        if self.max_premise_sentences < 0:
            raise ValueError(f"max_premise_sentences: must be >= 0, got {self.max_premise_sentences}")
        if self.premise_window_tokens < 0:
            raise ValueError(f"premise_window_tokens: must be >= 0 (0: fill the pair), got {self.premise_window_tokens}")
        if self.max_nli_pairs < 1:
            raise ValueError(f"max_nli_pairs: must be >= 1, got {self.max_nli_pairs}")
        if self.max_pair_tokens < 0:
            raise ValueError(f"max_pair_tokens: must be >= 0 (0: the trained length), got {self.max_pair_tokens}")


@dataclass
class MitigationSettings:
    enabled: bool = True
    backend: Literal["onnx", "torch"] = "onnx"
    precision: Literal["auto", "fp32", "int8"] = "auto"  # auto: the faster of fp32 and int8 on this CPU, timed
                                                          # once and cached (inference.precision); int8 only
                                                          # where the export shipped it, else fp32
    fail_mode: Literal["open", "closed"] = "open"
    num_threads: int = 0                   # onnxruntime / torch intra-op threads; 0 = the physical cores
    spin_wait: bool = False                # onnxruntime threads spin between ops. Off: the stack runs three
                                           # sessions in turn, and one session's spinning threads took the
                                           # cores from the next stage (full stack 274 -> 196 ms at 512 tokens
                                           # on 2 cores, runs/bench-s18-spin); the server keeps it off too
    fact_check_model: SentinelSettings = field(default_factory=SentinelSettings)
    hallucination_model: DetectorSettings = field(default_factory=DetectorSettings)
    nli_model: ExplainerSettings = field(default_factory=ExplainerSettings)


@dataclass
class HallucinationPlugin:
    enabled: bool = True
    use_nli: bool = True
    hallucination_action: str = "header"
    unverified_factual_action: str = "header"
    include_hallucination_details: bool = True

    def validate(self) -> None:
        if self.hallucination_action not in HALLUCINATION_ACTIONS:
            raise ValueError(f"hallucination_action: expected one of {', '.join(HALLUCINATION_ACTIONS)}, "
                             f"got {self.hallucination_action!r}")
        if self.unverified_factual_action not in UNVERIFIED_ACTIONS:
            hint = " (block withholds hallucinated answers only)" if self.unverified_factual_action == "block" else ""
            raise ValueError(f"unverified_factual_action: expected one of {', '.join(UNVERIFIED_ACTIONS)}, "
                             f"got {self.unverified_factual_action!r}{hint}")


@dataclass
class Plugin:
    type: str
    configuration: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        if self.type != "hallucination":
            raise ValueError(f"type: unsupported plugin {self.type!r} (this runtime implements: hallucination)")


@dataclass
class Condition:
    type: str
    name: str = ""

    def validate(self) -> None:
        if self.type not in CONDITION_TYPES:
            raise ValueError(f"type: unsupported condition {self.type!r} (supported: {', '.join(CONDITION_TYPES)})")
        if self.type == "fact_check" and self.name not in FACT_CHECK_NAMES:
            raise ValueError(f"name: fact_check conditions are {', '.join(FACT_CHECK_NAMES)}, got {self.name!r}")
        if self.type == "context" and self.name not in CONTEXT_NAMES:
            raise ValueError(f"name: context conditions are {', '.join(CONTEXT_NAMES)}, got {self.name!r}")


@dataclass
class Rules:
    operator: Literal["AND", "OR"] = "OR"
    conditions: list[Condition] = field(default_factory=list)


@dataclass
class Decision:
    name: str
    description: str = ""
    priority: int = 0
    rules: Rules = field(default_factory=Rules)
    modelRefs: list[dict[str, Any]] = field(default_factory=list)
    plugins: list[Plugin] = field(default_factory=list)

    def plugin(self) -> HallucinationPlugin | None:
        """The hallucination plugin's configuration, parsed once when the config is loaded (validate)."""
        parsed = self.__dict__.get("_parsed_plugin")
        if parsed is None:
            self.validate()
            parsed = self.__dict__["_parsed_plugin"]
        return parsed[0]

    def validate(self) -> None:
        plugin = None
        for p in self.plugins:
            if p.type != "hallucination":
                continue
            try:
                plugin = from_dict(HallucinationPlugin, p.configuration, f"decisions.{self.name}.plugins.hallucination")
            except ConfigError as exc:
                raise ValueError(f"plugins.hallucination.configuration.{str(exc).split(': ', 1)[-1]}") from None
            break
        self.__dict__["_parsed_plugin"] = (plugin,)  # not a dataclass field: never serialised or compared

    def matches(self, fact_check_needed: bool | None, has_context: bool) -> bool:
        """Rules on the request's signals; an unknown fact-check signal (Sentinel unavailable) counts as
        needs_fact_check, the conservative side. No conditions = always."""
        results = []
        for cond in self.rules.conditions:
            if cond.type == "always":
                results.append(True)
            elif cond.type == "fact_check":
                needed = fact_check_needed is not False
                results.append(needed if cond.name == "needs_fact_check" else not needed)
            else:
                results.append(has_context if cond.name == "present" else not has_context)
        if not results:
            return True
        return all(results) if self.rules.operator == "AND" else any(results)


def default_decisions() -> list[Decision]:
    return [Decision(
        name="fact_check", description="verify answers to fact-seeking prompts", priority=100,
        rules=Rules("OR", [Condition("fact_check", "needs_fact_check")]),
        plugins=[Plugin("hallucination", {})],
    )]


@dataclass
class InferenceSettings:
    hallucination_mitigation: MitigationSettings = field(default_factory=MitigationSettings)
    decisions: list[Decision] = field(default_factory=default_decisions)
    serve: dict[str, Any] = field(default_factory=dict)  # inference.serve's section, validated there

    def ordered_decisions(self) -> list[Decision]:
        """Highest priority first; equal priorities keep file order."""
        return sorted(self.decisions, key=lambda d: -d.priority)

    def select(self, fact_check_needed: bool | None, has_context: bool) -> Decision | None:
        for decision in self.ordered_decisions():
            if decision.matches(fact_check_needed, has_context):
                return decision
        return None


REPO_CONFIG = Path("configs") / "inference.yaml"  # the repository's documented copy, from a checkout's root
PACKAGED_CONFIG = Path(__file__).resolve().parent / "defaults" / "inference.yaml"  # the same file, shipped


def default_config_path() -> Path:
    """The runtime config used when none is named: configs/inference.yaml in the current directory, else the
    copy shipped with the package."""
    return REPO_CONFIG if REPO_CONFIG.is_file() else PACKAGED_CONFIG


def load_settings(path: str | Path | None = None, overrides: list[str] | None = None) -> InferenceSettings:
    settings = load_config(InferenceSettings, path, overrides)
    if path is not None:
        resolved = Path(path).resolve()
        # the shipped copy: its model dirs as from the root of a checkout (site-packages once installed)
        base = resolved.parents[2] if resolved == PACKAGED_CONFIG else resolved.parent.parent
        m = settings.hallucination_mitigation
        for model in (m.fact_check_model, m.hallucination_model, m.nli_model):
            model.model_id = resolve_model_path(model.model_id, base)
    return settings


def resolve_model_path(model_id: str, base: Path) -> str:
    """Relative local paths: as given when they exist from the current directory, else under `base`."""
    if not model_id or Path(model_id).is_absolute() or Path(model_id).expanduser().exists():
        return model_id
    candidate = base / model_id
    return str(candidate) if candidate.exists() else model_id
