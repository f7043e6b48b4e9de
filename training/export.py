"""Export a run directory to ONNX, optionally int8-quantised, and prove parity with PyTorch before succeeding.

    python -m training.export --model RUN_DIR --out EXPORT_DIR [--quantize int8 [--require-int8]] [--opset N]
                              [--agreement-floor 0.99] [--atol 1e-4] [--samples 256] [--overwrite]
                              [--fallback-quantile 0.99]
    python -m training.export --model RUN_DIR --out EXPORT_DIR --verify-only    # re-check an existing export

RUN_DIR is the standard run layout (training/trainer.py): merged model + tokenizer + label_map.json at the top,
optionally `adapter/` (LoRA). When the top-level weights are missing but `adapter/` is there, the adapter is
merged into its base model first. Only safetensors weights are read (no pickles, no remote code).

EXPORT_DIR layout (what a runtime looks for; names are fixed):

    model.onnx              fp32 graph. Inputs: input_ids, attention_mask (+ token_type_ids for BERT-style
                            models; check session.get_inputs()), int64 [batch, sequence]. Output: logits,
                            float32 [batch, num_labels] (sequence task) or [batch, sequence, num_labels] (token).
    model_quantized.onnx    int8 graph (onnxruntime dynamic quantisation, the products it cannot take blockwise;
                            only with --quantize int8); same I/O.
                            The name is optimum's ORTQuantizer convention: ORTModelFor...from_pretrained(
                            EXPORT_DIR, file_name="model_quantized.onnx") loads it.
    tokenizer.json          fast tokenizer, readable by the `tokenizers` package alone (torch-free runtime),
                            plus tokenizer_config.json / special_tokens_map.json / vocab for transformers.
    config.json             transformers config (id2label, architecture) used by optimum.onnxruntime.
    label_map.json          {"labels": [...], "id2label": {...}} copied from the run dir.
    config.yaml, metrics.json   copied from the run dir when present (provenance and model card).
    sentinel.json           the Sentinel's calibrated threshold (inference.calibration), copied when present.
    export_report.json      parity figures: max |logit difference| and label agreement vs PyTorch, per file.

Parity is measured on real inputs: up to --samples records of RUN_DIR/test.jsonl (fields "text",
"premise"/"hypothesis", or the Detector's "context"/"question"/"answer"), else built-in sentences; batched with
padding at the run's max_length. For token classification only non-padding positions are compared.
fp32 must agree within --atol (1e-4); int8 must keep label agreement >= --agreement-floor (0.99). The int8
scheme is chosen on up to --samples other records (int8_selection in the report): the rest of the same file, then
RUN_DIR/parity.jsonl (training inputs the Detector writes), so the check that ships it is not the one it was
chosen on.

Everything is written to EXPORT_DIR.partial first and renamed to EXPORT_DIR only when the fp32 check passed. When
fp32 fails, the command exits with status 1 and the rejected files + report are left in EXPORT_DIR.failed for
inspection; EXPORT_DIR is never created or changed then.

When fp32 passes but int8 misses its agreement floor, a good fp32 model is not thrown away: EXPORT_DIR gets the
fp32 export and its report, with `int8_status: "refused"`, `status: "int8_refused"` and the int8 figures
(agreement, floor, max |diff|, size) under `refused.int8`; the rejected int8 file and a copy of the report go to
EXPORT_DIR.failed. The command then exits 0 with a warning, or 1 with --require-int8 (the fp32 export is written
either way). `int8_status` is "shipped", "refused" or "not_requested".

Before refusing a sequence classifier's int8 file, the export tries it with an fp32 fallback for near-ties: the
change int8 made to the gap between two logits of an input, at its --fallback-quantile (0.99; 1.0: the largest)
over the selection records, is the `margin`; at run time every input whose two top int8 logits are closer than
that is answered by model.onnx instead (int8_fallback.json, inference.runners.near_ties). It ships when the
parity check, run the same way, keeps the agreement floor; the report gives the agreement of int8 alone beside
it and the share of inputs that went to fp32.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from inference.detector_stage import load_detector_json
from inference.formats import INPUT_FORMATS, ModelFormat, write_format
from inference.grounding import answer_type_ids, grounding_features
from inference.hub import WEIGHT_PATTERNS, ModelRefError, resolve_model, split_ref
from inference.labels import DETECTOR_LABELS, EXPLAINER_LABELS, SENTINEL_LABELS, id2label, label2id
from inference.runners import FALLBACK_FILE, max_positions, near_ties, read_fallback
from training.data.base import DataError, numbered_jsonl
from training.data.records import record_class
from training.hardware import hardware
from training.models import BaseModelError, load_tokenizer, resolve_base_model
from training.onnx_graph import (
    KEPT_BLOCKWISE,
    applicable_schemes,
    blockwise_products,
    embeddings_fp32,
    fuse_transformer,
    quantize_int8,
    weighted_nodes,
)
from training.onnx_modernbert import MODERNBERT_ATTENTION, modernbert_export_attention

log = logging.getLogger("halugate.export")

FP32_FILE = "model.onnx"
INT8_FILE = "model_quantized.onnx"
REPORT_FILE = "export_report.json"
PARITY_FILE = "parity.jsonl"  # training inputs written by training.detector (never test records)
COPIED_FILES = ("label_map.json", "config.yaml", "metrics.json", "sentinel.json", "detector.json")  # calibrations
TASKS = {"sequence": "text-classification", "token": "token-classification"}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")

# Used when the run dir has no test.jsonl: varied lengths, questions and non-questions, one long passage.
SAMPLE_TEXTS = [
    "Who was the first person to walk on the Moon?",
    "Write a short poem about autumn leaves.",
    "What is the boiling point of water at sea level in Fahrenheit?",
    "def add(a, b):\n    return a + b",
    "Summarise the plot of Hamlet in two sentences.",
    "When did the Berlin Wall fall, and what led to it?",
    "Translate 'good morning' into Spanish.",
    "How many moons does Jupiter have according to NASA?",
    "Tell me a joke about programmers.",
    "Which element has the atomic number 79?",
    "Draft an email asking my landlord to fix the heating.",
    "The Eiffel Tower was completed in 1889 for the World's Fair in Paris and is about 330 metres tall.",
    ("The Amazon rainforest spans nine countries and covers roughly 5.5 million square kilometres. " * 12).strip(),
    "ok",
    "Is it true that the Great Wall of China is visible from space with the naked eye?",
    "Explain recursion to a five-year-old.",
]


class ExportError(RuntimeError):
    """The export could not be produced or failed a parity check; the message says which and why."""


class ExportInputError(ExportError):
    """Bad input (a missing or unusable run directory, an --out that is in the way, a bad option): exit code 2."""


class Int8RefusedError(ExportError):
    """int8 missed its agreement floor under --require-int8; the fp32 export was written all the same."""


@dataclass
class ParityResult:
    file: str
    n_examples: int
    n_compared: int  # examples (sequence task) or non-padding tokens (token task)
    max_abs_diff: float
    mean_abs_diff: float
    label_agreement: float
    threshold: str
    passed: bool
    # int8 with an fp32 fallback for near-ties (sequence task): the margin (never rounded: a smaller one would
    # miss flips), int8 alone, and the share redone
    fallback_margin: float | None = None
    int8_alone_agreement: float | None = None
    fallback_rate: float | None = None


# ---- loading the PyTorch reference ---------------------------------------------------------------------------

def _has_safetensors(path: Path) -> bool:
    return any(path.glob("*.safetensors"))


def _refuse_pickles(path: Path) -> None:
    pickles = sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles and not _has_safetensors(path):
        raise ExportError(f"{path}: only pickled weights found ({', '.join(pickles)}); "
                          "re-save the model with safe_serialization=True (safetensors)")


def task_of(config) -> str:
    """"sequence" | "token" from the checkpoint's architecture."""
    archs = getattr(config, "architectures", None) or []
    for arch in archs:
        if arch.endswith("ForSequenceClassification"):
            return "sequence"
        if arch.endswith("ForTokenClassification"):
            return "token"
    raise ExportError(f"architecture {archs or '(none)'} is neither ...ForSequenceClassification nor "
                      "...ForTokenClassification; only classification checkpoints can be exported")


def model_source(ref: str | Path) -> Path:
    """--model as a directory: a local run dir / checkpoint / adapter dir as it is, a Hub id (`org/name[@rev]`)
    downloaded into the Hugging Face cache (inference.hub); ExportInputError (exit 2) naming it otherwise."""
    if split_ref(str(ref)) is None and not Path(ref).expanduser().exists():
        raise ExportInputError(f"run directory {ref} does not exist")
    try:
        path = resolve_model(ref, patterns=WEIGHT_PATTERNS)
    except ModelRefError as exc:
        raise ExportInputError(str(exc)) from None
    if not path.is_dir():
        raise ExportInputError(f"run directory {ref} does not exist")
    return path


REMOTE_CODE_HINT = ("it would run Python code shipped with the checkpoint: pass --trust-remote-code to allow that "
                    "(EuroBERT checkpoints need it), after reading the code")


def remote_code_reason(model_dir: Path) -> str | None:
    """Why loading MODEL_DIR needs the checkpoint's own code (config.json's auto_map, or a model_type transformers
    does not know), or None."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return None
    config = json.loads(path.read_text(encoding="utf-8"))
    if config.get("auto_map"):
        return f"{path} maps the model to code in the checkpoint (auto_map: {sorted(config['auto_map'])})"
    from transformers import CONFIG_MAPPING

    model_type = config.get("model_type")
    if model_type and model_type not in CONFIG_MAPPING:
        return f"{path}: model_type {model_type!r} is not one transformers implements"
    return None


def load_run_model(run_dir: Path, trust_remote_code: bool = False):
    """(model, tokenizer, task, merged_from_adapter) for RUN_DIR (a dir or a Hub id); merges a LoRA adapter (at the
    top: a PEFT adapter dir, or in adapter/ when the top has no weights) into its base model first."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoModelForTokenClassification

    run_dir = model_source(run_dir)
    classes = {"sequence": AutoModelForSequenceClassification, "token": AutoModelForTokenClassification}
    remote = remote_code_reason(run_dir)
    if remote and not trust_remote_code:
        raise ExportInputError(f"{run_dir}: {remote}; {REMOTE_CODE_HINT}")
    trust = {"trust_remote_code": True} if trust_remote_code else {}
    if (run_dir / "adapter_config.json").is_file():
        model, tokenizer, task = _merge_adapter(run_dir, classes, adapter_dir=run_dir)
        merged = True
    elif (run_dir / "config.json").is_file() and _has_safetensors(run_dir):
        config = AutoConfig.from_pretrained(run_dir, **trust)
        task = task_of(config)
        model = classes[task].from_pretrained(run_dir, dtype=torch.float32, use_safetensors=True, **trust)
        tokenizer = load_tokenizer(str(run_dir))
        merged = False
    elif (run_dir / "adapter" / "adapter_config.json").is_file():
        model, tokenizer, task = _merge_adapter(run_dir, classes)
        merged = True
    else:
        _refuse_pickles(run_dir)
        raise ExportInputError(f"{run_dir}: no model found (expected config.json + *.safetensors at the top, "
                          "or a LoRA adapter in adapter/)")
    model.eval()
    # optimum copies preprocessors from config._name_or_path: point it at the local dir, never at a Hub id.
    model.config._name_or_path = str(run_dir)
    return model, tokenizer, task, merged


def _merge_adapter(run_dir: Path, classes, adapter_dir: Path | None = None):
    import torch
    from peft import PeftModel
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    adapter_dir = adapter_dir or run_dir / "adapter"
    acfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    task = {"SEQ_CLS": "sequence", "TOKEN_CLS": "token"}.get(acfg.get("task_type"))
    if task is None:
        raise ExportError(f"{adapter_dir}/adapter_config.json: task_type {acfg.get('task_type')!r} is not "
                          "SEQ_CLS or TOKEN_CLS")
    labels = _labels(run_dir) or _adapter_labels(adapter_dir)
    if labels is None:
        raise ExportError(f"{run_dir}/label_map.json is needed to rebuild the classifier head for the adapter")
    base = resolve_base_model(acfg["base_model_name_or_path"])
    config = AutoConfig.from_pretrained(base, num_labels=len(labels), id2label=id2label(labels),
                                        label2id=label2id(labels))
    log.info("merging LoRA adapter %s into %s", adapter_dir, base)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "classifier newly initialized": true, and the adapter restores it next
    try:
        model = classes[task].from_pretrained(base, config=config, dtype=torch.float32, use_safetensors=True,
                                              ignore_mismatched_sizes=True)
    finally:
        hf_logging.set_verbosity(verbosity)
    model = PeftModel.from_pretrained(model, adapter_dir).merge_and_unload()
    tok_dir = adapter_dir if (adapter_dir / "tokenizer.json").is_file() else base
    return model, load_tokenizer(str(tok_dir)), task


def _adapter_labels(adapter_dir: Path) -> list[str] | None:
    """The labels of a published PEFT adapter without label_map.json: config.json's id2label when it ships one,
    else LABEL_0.. as many as its saved classifier head has rows (name the positive one in the runtime config,
    e.g. fact_check_model.fact_check_label: LABEL_1)."""
    config = adapter_dir / "config.json"
    if config.is_file():
        id2label = json.loads(config.read_text()).get("id2label")
        if isinstance(id2label, dict) and id2label:
            return [id2label[k] for k in sorted(id2label, key=int)]
    weights = adapter_dir / "adapter_model.safetensors"
    if not weights.is_file():
        return None
    from safetensors import safe_open

    with safe_open(str(weights), framework="np") as f:
        rows = [f.get_slice(k).get_shape()[0] for k in f.keys()  # noqa: SIM118 - safe_open has no __iter__
                if k.endswith(("classifier.weight", "score.weight")) and "lora_" not in k]
    return [f"LABEL_{i}" for i in range(rows[0])] if rows else None


def _labels(run_dir: Path) -> list[str] | None:
    path = run_dir / "label_map.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    if isinstance(data.get("labels"), list):
        return [str(x) for x in data["labels"]]
    if isinstance(data.get("id2label"), dict):
        return [data["id2label"][k] for k in sorted(data["id2label"], key=int)]
    raise ExportError(f"{path}: expected a 'labels' list or an 'id2label' mapping")


def run_max_length(run_dir: Path, model, override: int | None) -> int:
    if override:
        length = override
    else:
        length = 256
        cfg_path = run_dir / "config.yaml"
        if cfg_path.is_file():
            import yaml

            data = yaml.safe_load(cfg_path.read_text()) or {}
            length = int((data.get("model") or {}).get("max_length") or length)
    return min(length, max_positions(model.config.to_dict()))


# ---- parity inputs -------------------------------------------------------------------------------------------

def run_answer_types(run_dir: Path) -> str:
    """The answer token types a Detector run was trained with (its detector.json; "plain" for other runs)."""
    try:
        return load_detector_json(run_dir)[3]
    except ValueError as exc:
        raise ExportError(str(exc)) from None


def record_kind(run_dir: Path) -> str:
    """The kind of record a run's test.jsonl / parity.jsonl holds, from the labels the run trained."""
    labels = _labels(run_dir)
    kinds = {tuple(SENTINEL_LABELS): "prompt", tuple(EXPLAINER_LABELS): "nli", tuple(DETECTOR_LABELS): "span"}
    if labels is None or tuple(labels) not in kinds:
        raise ExportError(f"{run_dir}/label_map.json: labels {labels} are none of the Sentinel, Explainer or "
                          "Detector labels, so its test.jsonl / parity.jsonl cannot be read")
    return kinds[tuple(labels)]


def parity_examples(run_dir: Path, n: int, seed: int = 0,
                    held_out: bool = False) -> tuple[list[tuple[str, ...]], str]:
    """Up to n inputs from RUN_DIR/test.jsonl, else RUN_DIR/parity.jsonl (a sample of training inputs; random,
    seeded), else the built-in sentences. `held_out`: up to n other inputs, none of those the plain call picks:
    the rest of the check's file, then, when the check read test.jsonl and left fewer than n, parity.jsonl (the
    Detector's test splits are smaller than --samples); empty when there are none."""
    files = [Path(run_dir) / name for name in ("test.jsonl", PARITY_FILE)]
    tables = [(path, list(numbered_jsonl(path)) if path.is_file() else []) for path in files]
    tables = [(path, rows) for path, rows in tables if rows]
    if not tables:
        return ([] if held_out else [(t,) for t in SAMPLE_TEXTS[:n]]), "built-in sample sentences"
    cls = record_class(record_kind(run_dir))
    (path, rows), later = tables[0], tables[1:]
    picked = [(path, i, r) for i, r in random.Random(seed).sample(rows, min(n, len(rows)))]
    if held_out:
        taken = {i for _, i, _ in picked}
        rest = [(path, i, r) for i, r in rows if i not in taken]
        for other, other_rows in later:  # a different file holds different records (training vs test inputs)
            if len(rest) < n:
                rest += [(other, i, r) for i, r in other_rows]
        picked = random.Random(seed + 1).sample(rest, min(n, len(rest)))
    try:
        examples = [cls.from_dict(r, f"{p}:{i}").model_inputs() for p, i, r in picked]
    except DataError as exc:
        raise ExportError(str(exc)) from None
    return examples, " + ".join(sorted({str(p) for p, _, _ in picked})) or str(path)


def encode_batches(tokenizer, examples: list[tuple[str, ...]], max_length: int, batch_size: int = 8,
                   answer_types: str = "plain") -> list[dict[str, np.ndarray]]:
    """Padded batches of `examples`. `answer_types` "grounding" (a Detector trained with data.answer_types:
    grounding): the answer tokens carry types 2 / 3 where their word is not in the first segment, as the runtime
    sends them (inference.detector_stage.score_answers), so the parity check reads the embeddings those types
    added; plain pairs would leave them unchecked."""
    batches = []
    for i in range(0, len(examples), batch_size):
        chunk = examples[i:i + batch_size]
        args = [[ex[k] for ex in chunk] for k in range(len(chunk[0]))]
        enc = tokenizer(*args, truncation=True, max_length=max_length, padding=True, return_tensors="np",
                        return_offsets_mapping=answer_types != "plain")
        offsets = enc.pop("offset_mapping", None)
        batch = {k: np.asarray(v, dtype=np.int64) for k, v in enc.items()}
        if answer_types == "grounding":
            type_answers(batch, offsets, chunk)
        batches.append(batch)
    return batches


def type_answers(batch: dict[str, np.ndarray], offsets: np.ndarray, chunk: list[tuple[str, ...]]) -> None:
    """Give the answer tokens of a (first segment, answer) batch their grounding types, in place: the tokens of
    the second segment with a non-empty offset (not the closing separator), typed against the first segment
    (context + question, what training types them against; inference.grounding.answer_type_ids)."""
    if "token_type_ids" not in batch:
        raise ExportError("answer_types grounding: the tokenizer gives no token_type_ids")
    for row, (first, answer) in enumerate(chunk):
        types = batch["token_type_ids"][row]
        spans = offsets[row]
        at = np.flatnonzero((types == 1) & (spans[:, 1] > spans[:, 0]))
        grounding = grounding_features(answer, first, None, [tuple(spans[k]) for k in at], copy=False)
        types[at] = answer_type_ids(grounding)


# ---- logits and comparison -----------------------------------------------------------------------------------

def torch_logits(model, batches: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    import inspect

    import torch

    accepted = set(inspect.signature(model.forward).parameters)
    out = []
    with torch.inference_mode():
        for b in batches:
            feed = {k: torch.from_numpy(v) for k, v in b.items() if k in accepted}
            out.append(model(**feed).logits.float().numpy())
    return out


def onnx_session(path: Path, threads: int | None = None):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def session_feed(session, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inputs the graph declares; token_type_ids default to zeros when the tokenizer gave none."""
    feed = {}
    for inp in session.get_inputs():
        if inp.name in batch:
            feed[inp.name] = batch[inp.name]
        elif inp.name == "token_type_ids":
            feed[inp.name] = np.zeros_like(batch["input_ids"])
        else:
            raise ExportError(f"the ONNX graph wants input {inp.name!r}, which the tokenizer does not produce")
    return feed


def onnx_logits(path: Path, batches: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    session = onnx_session(path)
    return [session.run(["logits"], session_feed(session, b))[0] for b in batches]


def compare(reference: list[np.ndarray], candidate: list[np.ndarray], batches: list[dict[str, np.ndarray]],
            task: str) -> tuple[int, float, float, float]:
    """(n_compared, max |diff|, mean |diff|, label agreement). Token tasks compare the positions a Detector is
    trained and read on: the answer segment (token_type_ids 1) when the input has one, else every non-padding
    token (context positions carry no labels in training, so their logits are arbitrary). The answer segment
    is every type >= 1: a Detector with grounding answer types also has types 2 and 3 there."""
    diffs, agree = [], []
    for ref, got, b in zip(reference, candidate, batches):
        if ref.shape != got.shape:
            raise ExportError(f"ONNX logits have shape {got.shape}, PyTorch {ref.shape}")
        if task == "token":
            keep = b["attention_mask"].astype(bool)
            answer = keep & (b.get("token_type_ids", np.zeros_like(keep)) >= 1)  # 2 / 3: typed answer tokens
            keep = answer if answer.any() else keep
            ref, got = ref[keep], got[keep]
        diffs.append(np.abs(ref - got).max(axis=-1))
        agree.append(ref.argmax(-1) == got.argmax(-1))
    d, a = np.concatenate(diffs), np.concatenate(agree)
    if not np.all(np.isfinite(d)):
        return int(a.size), float("inf"), float("inf"), float(a.mean())
    return int(a.size), float(d.max()), float(d.mean()), float(a.mean())


FALLBACK_QUANTILE = 0.99


def fallback_margin(reference: list[np.ndarray], int8: list[np.ndarray], quantile: float = FALLBACK_QUANTILE) -> float:
    """The change int8 made to the gap between two logits of an input (the largest over its label pairs), at
    `quantile` over the inputs (sequence task). A label flips only where int8's two top logits are closer than
    the change it made to their gap, so with quantile 1.0 an fp32 answer for every input whose int8 top two are
    closer than this margin catches each flip of these inputs. The changes are heavy-tailed (the mpnet Explainer:
    median 0.02, 99th percentile 0.25, largest 0.41 on 256 pairs), so the largest sends three times as many
    inputs to fp32 as the 99th percentile (13% against 9%) for the rare flip of an input with an outsized change."""
    if not 0.0 < quantile <= 1.0:
        raise ValueError(f"fallback quantile must be in (0, 1], got {quantile}")
    changes = [(got - ref).max(axis=-1) - (got - ref).min(axis=-1) for ref, got in zip(reference, int8)]
    return float(np.quantile(np.concatenate(changes), quantile))


def with_fallback(int8: list[np.ndarray], fp32: list[np.ndarray], margin: float) -> tuple[list[np.ndarray], float]:
    """int8 logits with the near-ties replaced by fp32's (what OnnxRunner does), and the share replaced."""
    redo = [near_ties(x, margin) for x in int8]
    mixed = [np.where(r[:, None], f, x) for x, f, r in zip(int8, fp32, redo)]
    return mixed, float(np.concatenate(redo).mean())


def check_file(path: Path, reference, batches, task: str, *, atol: float | None = None,
               floor: float | None = None, margin: float | None = None,
               known: dict[str, list[np.ndarray]] | None = None) -> ParityResult:
    """Parity of one ONNX file; `margin` checks an int8 file with its fp32 fallback (the export dir's model.onnx)
    for near-ties, as the runtime runs it. `known`: logits of these batches already computed, by file name (the
    export's final files, which verify_export ran first), filled in as files are run."""
    known = {} if known is None else known

    def run(file: Path) -> list[np.ndarray]:
        if file.name not in known:
            known[file.name] = onnx_logits(file, batches)
        return known[file.name]

    logits = run(path)
    extra = {}
    if margin is not None:
        alone = compare(reference, logits, batches, task)[3]
        logits, rate = with_fallback(logits, run(path.with_name(FP32_FILE)), margin)
        extra = {"fallback_margin": margin, "int8_alone_agreement": alone, "fallback_rate": rate}
    n, max_diff, mean_diff, agreement = compare(reference, logits, batches, task)
    if atol is not None:
        passed, threshold = max_diff <= atol, f"max_abs_diff <= {atol:g}"
    else:
        passed, threshold = agreement >= floor, f"label_agreement >= {floor:g}" + (
            f" (inputs with int8 top-2 logit gap < {margin:.3g} answered by fp32)" if margin is not None else "")
    return ParityResult(file=path.name, n_examples=sum(len(b["input_ids"]) for b in batches), n_compared=n,
                        max_abs_diff=max_diff, mean_abs_diff=mean_diff, label_agreement=agreement,
                        threshold=threshold, passed=bool(passed), **extra)


# ---- export steps --------------------------------------------------------------------------------------------

def export_fp32(model, task: str, out: Path, opset: int | None, exporter: str = "optimum") -> str | None:
    """Write out/model.onnx + out/config.json with optimum (default) or torch.onnx directly (fallback); returns
    the export-time attention used instead of transformers' own, if any (for the export report)."""
    import warnings

    import torch

    # ModernBERT: banded local attention and ONNX Runtime MultiHeadAttention in the graph (training.onnx_modernbert)
    attention = (modernbert_export_attention(model) if model.config.model_type == "modernbert"
                 else contextlib.nullcontext())
    with warnings.catch_warnings(), attention as custom_attention:
        # Tracing warns that mask constants are baked in; the parity check on real inputs is the real guard.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        if exporter == "optimum":
            from optimum.exporters.onnx import onnx_export_from_model

            onnx_export_from_model(model, out, task=TASKS[task], opset=opset, do_validation=False)
        else:
            _torch_onnx_export(model, out / FP32_FILE, opset)
            model.config.save_pretrained(out)
    if not (out / FP32_FILE).is_file():
        raise ExportError(f"the exporter did not write {out / FP32_FILE}")
    return MODERNBERT_ATTENTION if custom_attention else None


def _torch_onnx_export(model, path: Path, opset: int | None) -> None:
    """Fallback: the TorchScript-based exporter with dynamic batch/sequence axes (no optimum needed)."""
    import inspect

    import torch

    names = [n for n in ("input_ids", "attention_mask", "token_type_ids")
             if n in inspect.signature(model.forward).parameters]
    if model.config.model_type == "modernbert":
        names = ["input_ids", "attention_mask"]

    class LogitsOnly(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            return self.inner(**dict(zip(names, args))).logits

    dummy = tuple(torch.ones(2, 16, dtype=torch.long) if n != "token_type_ids"
                  else torch.zeros(2, 16, dtype=torch.long) for n in names)
    axes = {n: {0: "batch_size", 1: "sequence_length"} for n in names}
    axes["logits"] = {0: "batch_size"} if task_of(model.config) == "sequence" else {0: "batch_size",
                                                                                   1: "sequence_length"}
    torch.onnx.export(LogitsOnly(model).eval(), dummy, str(path), input_names=names, output_names=["logits"],
                      dynamic_axes=axes, opset_version=opset or 17, dynamo=False, do_constant_folding=True)


def save_tokenizer(tokenizer, out: Path) -> None:
    tokenizer.save_pretrained(out)
    if not (out / "tokenizer.json").is_file():
        raise ExportError("the tokenizer has no tokenizer.json (a fast tokenizer is required by the runtime)")


def onnx_opset(path: Path) -> int | None:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def _versions() -> dict:
    import importlib.metadata as md

    out = {}
    for pkg in ("torch", "transformers", "optimum", "optimum-onnx", "onnx", "onnxruntime", "peft"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def _size_mb(path: Path) -> float:
    return round(path.stat().st_size / 2**20, 2)


@dataclass
class ParityInputs:
    """The parity inputs of a run and the PyTorch logits on them, computed once per export."""

    batches: list[dict[str, np.ndarray]]
    reference: list[np.ndarray]
    source: str
    n_examples: int
    max_length: int
    # ONNX logits of the export's final files on these inputs, by file name (verify_export, then the fallback's
    # check reads them instead of running the files again)
    final_logits: dict[str, list[np.ndarray]] = field(default_factory=dict, repr=False)
    answer_types: str = "plain"  # the Detector's answer token types the inputs carry (encode_batches)

    @classmethod
    def build(cls, run_dir: Path, model, tokenizer, samples: int, max_length: int | None,
              held_out: bool = False) -> ParityInputs | None:
        """`held_out`: other records than the parity check's (None when there are none), for choosing int8."""
        length = run_max_length(run_dir, model, max_length)
        examples, source = parity_examples(run_dir, samples, held_out=held_out)
        if not examples:
            return None
        answer_types = run_answer_types(run_dir)
        batches = encode_batches(tokenizer, examples, length, answer_types=answer_types)
        return cls(batches, torch_logits(model, batches), source, len(examples), length,
                   answer_types=answer_types)


def verify_export(run_dir: Path, export_dir: Path, *, samples: int = 256, max_length: int | None = None,
                  atol: float = 1e-4, agreement_floor: float = 0.99, model=None, tokenizer=None,
                  task: str | None = None, inputs: ParityInputs | None = None) -> dict:
    """Parity of every ONNX file in export_dir against the PyTorch model of run_dir; returns the report part."""
    run_dir, export_dir = Path(run_dir), Path(export_dir)
    if model is None:
        model, tokenizer, task, _ = load_run_model(run_dir)
    started = time.time()
    inputs = inputs or ParityInputs.build(run_dir, model, tokenizer, samples, max_length)
    batches, reference = inputs.batches, inputs.reference
    results = {}
    if not (export_dir / FP32_FILE).is_file():
        raise ExportError(f"{export_dir / FP32_FILE} is missing")
    inputs.final_logits.clear()  # the files are final from here on
    results["fp32"] = check_file(export_dir / FP32_FILE, reference, batches, task, atol=atol,
                                 known=inputs.final_logits)
    if (export_dir / INT8_FILE).is_file():
        fallback = read_fallback(export_dir) if task == "sequence" else None
        results["int8"] = check_file(export_dir / INT8_FILE, reference, batches, task, floor=agreement_floor,
                                     margin=fallback["margin"] if fallback else None, known=inputs.final_logits)
    return {
        "inputs": {"source": inputs.source, "n_examples": inputs.n_examples, "max_length": inputs.max_length,
                   "batch_size": 8, "max_tokens": int(max(b["input_ids"].shape[1] for b in batches)),
                   **({"answer_types": inputs.answer_types,
                       "typed_answer_tokens": int(sum((b["token_type_ids"] > 1).sum() for b in batches))}
                      if inputs.answer_types != "plain" else {})},
        "parity": {k: asdict(v) for k, v in results.items()},
        "passed": all(r.passed for r in results.values()),
        "verify_seconds": round(time.time() - started, 2),
    }


def check_optimum_load(export_dir: Path, task: str) -> None:
    """The exported dir must load with optimum.onnxruntime (what Hub users will do)."""
    from optimum.onnxruntime import ORTModelForSequenceClassification, ORTModelForTokenClassification

    cls = ORTModelForSequenceClassification if task == "sequence" else ORTModelForTokenClassification
    for name in (FP32_FILE, INT8_FILE):
        if (export_dir / name).is_file():
            cls.from_pretrained(export_dir, file_name=name)


def _failure_message(report: dict) -> str:
    bad = [f"{k}: {v['file']} {v['threshold']} failed (max_abs_diff={v['max_abs_diff']:.3g}, "
           f"label_agreement={v['label_agreement']:.4f} on {v['n_compared']} compared)"
           for k, v in report["parity"].items() if not v["passed"]]
    return "; ".join(bad)


def _refuse_int8(report: dict, staging: Path, failed: Path, agreement_floor: float) -> None:
    """Move the int8 file that missed its floor to `failed` and its figures from `parity` to `refused`."""
    shutil.rmtree(failed, ignore_errors=True)
    failed.mkdir(parents=True)
    shutil.move(str(staging / INT8_FILE), str(failed / INT8_FILE))
    figures = report["parity"].pop("int8")
    figures.update(status="refused", size_mb=report["size_mb"].pop("int8", None),
                   reason=(f"label agreement {figures['label_agreement']:.4f} with PyTorch is below the floor "
                           f"{agreement_floor:g} on {figures['n_compared']} inputs"),
                   rejected_file=str(failed / INT8_FILE))
    report["files"].pop("int8", None)
    report["refused"] = {"int8": figures}
    report["passed"] = all(v["passed"] for v in report["parity"].values())


def _fuse(staging: Path, config, inputs: ParityInputs, task: str, atol: float) -> dict:
    """Replace model.onnx by its fused graph when the fused graph passes the fp32 parity check."""
    fused_path = staging / "model.fused.onnx"
    try:
        fusion = fuse_transformer(staging / FP32_FILE, fused_path, config)
    except Exception as exc:  # noqa: BLE001 - the optimizer raises many types; the plain graph is still good
        fused_path.unlink(missing_ok=True)
        return {"applied": False, "reason": f"{type(exc).__name__}: {exc}"}
    if fusion["applied"]:
        parity = check_file(fused_path, inputs.reference, inputs.batches, task, atol=atol)
        fusion["parity_max_abs_diff"] = parity.max_abs_diff
        if parity.passed:
            fused_path.replace(staging / FP32_FILE)
            log.info("fused graph kept: %s", fusion["fused_ops"])
        else:
            fusion.update(applied=False, reason=f"fused graph failed parity (max |diff| {parity.max_abs_diff:.2e})")
    fused_path.unlink(missing_ok=True)
    return fusion


def _quantize(staging: Path, select: ParityInputs, task: str, floor: float, disjoint: bool) -> list[dict]:
    """int8 under each scheme in turn (training.onnx_graph) until one keeps the agreement floor on the selection
    inputs, then the sensitivity search (only when `disjoint`: the selection inputs are not the check's); the
    last one tried stays in INT8_FILE (the parity check of the report then ships or refuses it). A named scheme
    that passes with matrix products in fp32 is then trimmed: the same search over those products only, so
    that no more stay fp32 than keep the floor (the `make demo` Detector on 2026-12-06: 7 of ffn_fp32's 12), and
    the products still in fp32 become blockwise int8 where that keeps the floor (_blockwise_kept)."""
    tried = []
    for scheme in applicable_schemes(staging / FP32_FILE):
        log.info("quantising to int8 (%s)", scheme)
        kept_fp32 = quantize_int8(staging / FP32_FILE, staging / INT8_FILE, scheme)
        parity = check_file(staging / INT8_FILE, select.reference, select.batches, task, floor=floor)
        tried.append({"scheme": scheme, "fp32_nodes": len(kept_fp32), "embeddings_fp32": embeddings_fp32(scheme),
                      "selection_agreement": round(parity.label_agreement, 5), "passed": parity.passed})
        if parity.passed:
            if kept_fp32 and disjoint:
                tried.append(_trim(staging, select, task, floor, scheme, kept_fp32, parity.n_compared))
                if tried[-1]["passed"]:
                    kept_fp32 = tried[-1]["kept_fp32"]
            if kept_fp32:  # never for the blockwise scheme itself: it keeps nothing fp32 unless asked
                tried.append(_blockwise_kept(staging, select, task, floor, kept_fp32))
            return tried
    if not disjoint:  # the search fits the inputs it stops on (docs/export.md): only a separate check may judge it
        tried.append({"scheme": SENSITIVE_SCHEME, "passed": False,
                      "skipped": "no records outside the parity check's to choose on"})
        return tried
    tried.append(_sensitive_fp32(staging, select, task, floor, parity.n_compared))
    return tried


def _blockwise_kept(staging: Path, select: ParityInputs, task: str, floor: float, kept: list[str]) -> dict:
    """The matrix products the shipped dynamic scheme keeps in fp32 turned into blockwise int8 (MatMulNBits,
    training.onnx_graph.blockwise_products), kept when the selection's agreement stays at the floor: one fixed
    step like a named scheme, not a search, so the plain floor applies (the check then gates the file). The
    `make demo` Detector (2026-12-07): its graph 12% faster at 512 context tokens, agreement 0.9918 / 0.9924 on
    selection / check (0.9942 / 0.9927 before), through the runtime 4.2% of flagged characters unlike fp32's
    (3.5% before) and the same flag on 606 of 611 RAGTruth answers (the same)."""
    int8, candidate = staging / INT8_FILE, staging / "model.kept_blockwise.onnx"
    blockwise_products(int8, candidate, kept)
    parity = check_file(candidate, select.reference, select.batches, task, floor=floor)
    log.info("int8 with its %d fp32 matrix products blockwise: agreement %.4f", len(kept), parity.label_agreement)
    if parity.passed:
        candidate.replace(int8)
    candidate.unlink(missing_ok=True)
    return {"scheme": KEPT_BLOCKWISE, "products": len(kept), "selection_agreement": round(parity.label_agreement, 5),
            "passed": parity.passed}


SENSITIVE_SCHEME = "sensitive_fp32"
MAX_FP32_SHARE = 0.5  # beyond half of the matrix products in fp32, int8 saves too little to be worth a model
RANK_INPUTS = 64  # selection inputs the sensitivity ranking reads (the stopping check reads them all)


def search_target(floor: float, n_compared: int) -> float:
    """The agreement a search must reach on its selection inputs: the floor plus two standard errors of an
    agreement measured on `n_compared` labels. A search stops at the first k that passes, so its own pass is
    optimistic (the mpnet Explainer of 2026-12-05: 0.996 on the selection, 0.9805 on the check; the `make demo`
    Detector on 2026-12-06: 3 products at 0.9902 on its 44 selection inputs, 0.9893 on the check)."""
    p = min(max(floor, 0.0), 1.0)
    return floor + 2.0 * float(np.sqrt(p * (1.0 - p) / max(n_compared, 1)))


def _trim(staging: Path, select: ParityInputs, task: str, floor: float, scheme: str, kept_fp32: list[str],
          n_compared: int) -> dict:
    """A named scheme passed with `kept_fp32` in fp32: search those products for the fewest that keep the floor
    (with search_target's margin), the rest of the graph int8 as the scheme had it. INT8_FILE ends up holding
    the search's file when it needs fewer products in fp32, else the scheme's again."""
    if len(kept_fp32) < 2:
        return {"scheme": SENSITIVE_SCHEME, "trims": scheme, "passed": False,
                "skipped": "one product in fp32: nothing to trim"}
    base = "embeddings_fp32" if embeddings_fp32(scheme) else "all"
    entry = {"trims": scheme, **_sensitive_fp32(staging, select, task, floor, n_compared, candidates=kept_fp32,
                                                base=base, max_fp32=len(kept_fp32) - 1)}
    if not entry["passed"] and "skipped" not in entry:  # the search rewrote INT8_FILE: the scheme that passed
        quantize_int8(staging / FP32_FILE, staging / INT8_FILE, scheme)
    return entry


def _sensitive_fp32(staging: Path, select: ParityInputs, task: str, floor: float, n_compared: int, *,
                    candidates: list[str] | None = None, base: str = "embeddings_fp32",
                    max_fp32: int | None = None) -> dict:
    """The last resort when no named scheme keeps the floor. Quantise one matrix product at a time (the rest and
    the embeddings fp32) and rank them by the mean |logit difference| each causes alone on the first RANK_INPUTS
    selection inputs; then keep the most damaging in fp32, one more at a time, until the selection's agreement
    reaches search_target (the floor plus two standard errors of its `n_compared` labels) or half would be fp32.
    Skipped when that target is above 1. Which products hurt differs from model to model, so a fixed list of
    names cannot find it. With `candidates` (a passing scheme's fp32 products, _trim) only those are ranked and
    kept, the rest int8 under `base`, and at most `max_fp32` are kept."""
    src, dst = staging / FP32_FILE, staging / INT8_FILE
    target = search_target(floor, n_compared)
    entry = {"scheme": SENSITIVE_SCHEME, "embeddings_fp32": embeddings_fp32(base), "passed": False,
             "target": round(target, 5)}
    if target > 1.0 >= floor:
        return {**entry, "skipped": f"{n_compared} selection labels cannot show agreement >= {floor:g} beyond two "
                                    f"standard errors"}
    nodes = list(candidates) if candidates is not None else weighted_nodes(src)
    if not nodes or not all(nodes):  # quantize_dynamic excludes nodes by name
        return {**entry, "fp32_nodes": 0, "skipped": "the graph's matrix products are not all named"}
    if candidates is None:
        max_fp32 = max(1, int(len(nodes) * MAX_FP32_SHARE))
    damage = {}
    # the ranking reads the first RANK_INPUTS inputs (a mean |logit difference| settles on fewer than the
    # agreement does): with the Detector's 256 selection inputs, 12 candidates cost ~1 min instead of ~4
    per_batch = len(select.batches[0]["input_ids"]) if select.batches else 1
    rank_batches = select.batches[:max(1, RANK_INPUTS // per_batch)]
    rank_reference = select.reference[:len(rank_batches)]
    for node in tqdm(nodes, desc="int8 sensitivity per matrix product", unit="node", leave=False):
        quantize_int8(src, dst, base, keep_fp32=[n for n in nodes if n != node])
        damage[node] = compare(rank_reference, onnx_logits(dst, rank_batches), rank_batches, task)[2]
    ranked = sorted(nodes, key=lambda n: -damage[n])
    k, parity = 0, None
    for k in range(1, max_fp32 + 1):
        quantize_int8(src, dst, base, keep_fp32=ranked[:k])
        parity = check_file(dst, select.reference, select.batches, task, floor=target)
        log.info("int8 with the %d most sensitive of %d matrix products in fp32: agreement %.4f", k, len(nodes),
                 parity.label_agreement)
        if parity.passed:
            break
    return {**entry, "fp32_nodes": k, "of_nodes": len(nodes), "kept_fp32": ranked[:k],
            "mean_abs_diff_alone": {n: round(damage[n], 5) for n in ranked},
            "selection_agreement": round(parity.label_agreement, 5) if parity else None,
            "passed": bool(parity and parity.passed)}


def _try_fallback(staging: Path, select: ParityInputs, inputs: ParityInputs, task: str, floor: float,
                  disjoint: bool, quantile: float = FALLBACK_QUANTILE) -> dict:
    """int8 that missed its floor, once more with an fp32 fallback for near-ties: the margin comes from the
    selection inputs (only when they are not the check's: it is fitted to them), the check runs on the parity
    inputs. Writes FALLBACK_FILE into `staging` when it passes; returns the figures (+ "parity" when checked)."""
    if not disjoint:
        return {"tried": False, "reason": "no records outside the parity check's to measure the margin on"}
    select_int8 = onnx_logits(staging / INT8_FILE, select.batches)
    margin = fallback_margin(select.reference, select_int8, quantile)
    parity = check_file(staging / INT8_FILE, inputs.reference, inputs.batches, task, floor=floor, margin=margin,
                        known=inputs.final_logits)
    _, selection_rate = with_fallback(select_int8, onnx_logits(staging / FP32_FILE, select.batches), margin)
    log.info("int8 with an fp32 fallback below a top-2 gap of %.3f: agreement %.4f (int8 alone %.4f), %.1f%% of "
             "inputs answered by fp32", margin, parity.label_agreement, parity.int8_alone_agreement,
             100 * parity.fallback_rate)
    entry = {"tried": True, "margin": margin, "quantile": quantile,
             "margin_from": f"{select.source} ({select.n_examples})",
             "selection_fallback_rate": round(selection_rate, 5), "passed": parity.passed, "parity": asdict(parity)}
    if parity.passed:
        (staging / FALLBACK_FILE).write_text(json.dumps({
            "margin": margin, "quantile": quantile, "fp32_file": FP32_FILE, "int8_file": INT8_FILE,
            "rule": "inputs whose two highest int8 logits are less than `margin` apart are answered by fp32_file",
            "margin_from": entry["margin_from"], "check_agreement": parity.label_agreement,
            "check_int8_alone_agreement": parity.int8_alone_agreement, "check_fallback_rate": parity.fallback_rate,
        }, indent=2) + "\n")
    return entry


def export(run_dir: str | Path, out: str | Path, *, quantize: str | None = None, opset: int | None = None,
           agreement_floor: float = 0.99, atol: float = 1e-4, samples: int = 256, max_length: int | None = None,
           overwrite: bool = False, exporter: str = "optimum", require_int8: bool = False,
           optimize: bool = True, fallback_quantile: float = FALLBACK_QUANTILE, input_format: str | None = None,
           trust_remote_code: bool = False) -> dict:
    """Export RUN_DIR to OUT (see the module docstring); returns the report. Raises ExportError when fp32 fails,
    and Int8RefusedError (after writing the fp32 export) when int8 fails and `require_int8` is set.
    `input_format` (a Detector's: halugate | lettucedetect) is declared in OUT/halugate_format.json
    (inference.formats); RUN_DIR may also be a Hub id (inference.hub)."""
    if input_format not in (None, *INPUT_FORMATS["detector"]):
        raise ExportInputError(f"--input-format {input_format!r}: one of {', '.join(INPUT_FORMATS['detector'])}")
    run_dir, out = model_source(run_dir), Path(out)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise ExportInputError(f"{out} already exists and is not empty; pass --overwrite to replace it")
        if not (out / REPORT_FILE).is_file() or out.resolve() in (run_dir.resolve(), *run_dir.resolve().parents):
            # --overwrite deletes `out`: only ever a previous export, never the run dir or a folder holding it.
            raise ExportInputError(f"--overwrite only replaces a previous export (a folder with {REPORT_FILE}); "
                              f"{out} is not one: choose another --out")
    if quantize not in (None, "int8"):
        raise ExportInputError(f"--quantize {quantize!r}: only int8 is supported")
    started = time.time()
    model, tokenizer, task, merged = load_run_model(run_dir, trust_remote_code)
    if input_format and task != "token":
        raise ExportInputError(f"--input-format {input_format}: declares a Detector's format, but {run_dir} is a "
                               "sequence classifier (leave --input-format out for a Sentinel or an Explainer)")

    staging = out.with_name(out.name + ".partial")
    failed = out.with_name(out.name + ".failed")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    log.info("exporting %s (%s, %s classification) with %s", run_dir, model.config.model_type, task, exporter)
    custom_attention = export_fp32(model, task, staging, opset, exporter)
    save_tokenizer(tokenizer, staging)
    for name in COPIED_FILES:
        if (run_dir / name).is_file():
            shutil.copy2(run_dir / name, staging / name)
    if not (staging / "label_map.json").is_file():  # keep the runtime contract even for hand-made run dirs
        labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
        (staging / "label_map.json").write_text(json.dumps({"labels": labels, "id2label": dict(enumerate(labels))},
                                                           indent=2))
    if input_format:
        declare_format(staging, input_format, [model.config.id2label[i] for i in range(model.config.num_labels)])
    inputs = ParityInputs.build(run_dir, model, tokenizer, samples, max_length)
    fusion = _fuse(staging, model.config, inputs, task, atol) if optimize else {"applied": False,
                                                                             "reason": "--no-optimize"}
    int8_tried, int8_selection = [], None
    if quantize == "int8":
        # int8 is chosen on other records than the parity check's where the run has them, so that the check
        # that ships it is not the one it was fitted to
        held_out = ParityInputs.build(run_dir, model, tokenizer, samples, max_length, held_out=True)
        selection, disjoint = held_out or inputs, held_out is not None
        int8_tried = _quantize(staging, selection, task, agreement_floor, disjoint=disjoint)
        int8_selection = {"source": selection.source, "n_examples": selection.n_examples,
                          "disjoint_from_parity": disjoint}

    report = {
        "run_dir": str(run_dir.resolve()),
        "task": TASKS[task],
        "model_type": model.config.model_type,
        "architecture": (model.config.architectures or [type(model).__name__])[0],
        "merged_from_adapter": merged,
        "input_format": input_format or "halugate",  # declared in halugate_format.json when given (inference.formats)
        "exporter": exporter,
        "opset": onnx_opset(staging / FP32_FILE),
        "files": {"fp32": FP32_FILE, **({"int8": INT8_FILE} if quantize else {})},
        "onnx_inputs": [i.name for i in onnx_session(staging / FP32_FILE).get_inputs()],
        "size_mb": {k: _size_mb(staging / v) for k, v in
                    {"fp32": FP32_FILE, **({"int8": INT8_FILE} if quantize else {})}.items()},
    }
    report.update(verify_export(run_dir, staging, samples=samples, max_length=max_length, atol=atol,
                                agreement_floor=agreement_floor, model=model, tokenizer=tokenizer, task=task,
                                inputs=inputs))
    report["fusion"] = fusion
    if custom_attention:
        report["attention"] = custom_attention
    if int8_tried:
        report["int8_schemes_tried"] = int8_tried
        report["int8_selection"] = int8_selection
    int8 = report["parity"].get("int8")
    if int8 and not int8["passed"] and report["parity"]["fp32"]["passed"] and task == "sequence":
        report["int8_fallback"] = _try_fallback(staging, selection, inputs, task, agreement_floor, disjoint,
                                                fallback_quantile)
        int8 = report["parity"]["int8"] = report["int8_fallback"].pop("parity", int8)
        report["passed"] = all(v["passed"] for v in report["parity"].values())
    refused = bool(int8) and not int8["passed"] and report["parity"]["fp32"]["passed"]
    if refused:
        _refuse_int8(report, staging, failed, agreement_floor)
    report["int8_status"] = "not_requested" if quantize is None else ("refused" if refused else "shipped")
    if report["passed"]:
        check_optimum_load(staging, task)
        report["optimum_loads"] = True
    report["versions"] = _versions()
    report["hardware"] = hardware()  # the CPU the parity checks (and export_seconds) ran on
    report["export_seconds"] = round(time.time() - started, 1)
    report["status"] = ("int8_refused" if refused else "ok") if report["passed"] else "failed"
    (staging / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")
    if refused:
        shutil.copy2(staging / REPORT_FILE, failed / REPORT_FILE)

    if not report["passed"]:
        shutil.rmtree(failed, ignore_errors=True)
        staging.rename(failed)
        raise ExportError(f"parity check failed: {_failure_message(report)}. Nothing was written to {out}; "
                          f"the rejected files and {REPORT_FILE} are in {failed}")
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
    if not refused:
        shutil.rmtree(failed, ignore_errors=True)
    elif require_int8:
        raise Int8RefusedError(f"int8 refused: {report['refused']['int8']['reason']}; the fp32 export and its "
                               f"report were written to {out}, the rejected int8 file is in {failed}")
    return report


def declare_format(staging: Path, input_format: str, model_labels: list[str]) -> None:
    """Write halugate_format.json. A LettuceDetect checkpoint names its labels LABEL_0 / LABEL_1 (1: hallucinated,
    as lettucedetect reads it): the export's label map then says SUPPORTED / HALLUCINATED, and the format file keeps
    the checkpoint's own names."""
    source_labels = None
    labels = [str(x) for x in json.loads((staging / "label_map.json").read_text()).get("labels", model_labels)]
    if input_format == "lettucedetect" and DETECTOR_LABELS[1].lower() not in [x.lower() for x in labels]:
        if len(labels) != 2:
            raise ExportInputError(f"--input-format lettucedetect: a two-label token classifier is expected, this "
                                   f"one has labels {labels}")
        source_labels = labels
        (staging / "label_map.json").write_text(json.dumps(
            {"labels": DETECTOR_LABELS, "id2label": id2label(DETECTOR_LABELS)}, indent=2))
    write_format(staging, ModelFormat(task="detector", input_format=input_format, source_labels=source_labels))


def _summary(report: dict) -> str:
    lines = [(f"{report.get('task', '')} {report.get('model_type', '')}: parity on "
              f"{report['inputs']['n_examples']} inputs from {report['inputs']['source']}")]
    for key, p in report["parity"].items():
        lines.append(f"  {key:5s} {p['file']:22s} max|diff|={p['max_abs_diff']:.2e} "
                     f"agreement={p['label_agreement']:.4f} ({p['threshold']}: {'ok' if p['passed'] else 'FAILED'})")
    for key, p in (report.get("refused") or {}).items():
        lines.append(f"  {key:5s} {p['file']:22s} max|diff|={p['max_abs_diff']:.2e} "
                     f"agreement={p['label_agreement']:.4f} ({p['threshold']}: REFUSED, not shipped)")
    for p in [*report["parity"].values(), *(report.get("refused") or {}).values()]:
        if p.get("fallback_margin") is not None:
            lines.append(f"        int8 alone {p['int8_alone_agreement']:.4f}; with the fp32 fallback "
                         f"{p['label_agreement']:.4f}, {100 * p['fallback_rate']:.1f}% of inputs answered by fp32")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m training.export", description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  python -m training.export --model runs/detector-offline --out runs/detector-offline-onnx "
               "--quantize int8\n\nexit codes: 0 exported and parity holds, 2 bad input, 1 parity failed")
    p.add_argument("--model", required=True,
                   help="run directory (merged model or adapter/ + label_map.json), checkpoint or PEFT adapter "
                        "directory, or Hub id org/name[@revision]")
    p.add_argument("--out", required=True, help="export directory to create")
    p.add_argument("--quantize", choices=["int8"], help="also write an int8 dynamic-quantised model")
    p.add_argument("--require-int8", action="store_true",
                   help="exit 1 when int8 misses its agreement floor (the fp32 export is written either way)")
    p.add_argument("--no-optimize", action="store_true",
                   help="keep the plain graph (default: ONNX Runtime's transformer fusions, kept if parity holds)")
    p.add_argument("--opset", type=int, help="ONNX opset (default: optimum's choice for the architecture)")
    p.add_argument("--agreement-floor", type=float, default=0.99,
                   help="minimum int8 label agreement with PyTorch (default 0.99)")
    p.add_argument("--atol", type=float, default=1e-4, help="maximum fp32 |logit difference| (default 1e-4)")
    p.add_argument("--samples", type=int, default=256,
                   help="parity inputs taken from test.jsonl (default 256: 64 let an int8 Explainer with 0.980 agreement on 200 records pass)")
    p.add_argument("--max-length", type=int, help="tokens per parity input (default: the run's model.max_length)")
    p.add_argument("--exporter", choices=["optimum", "torch"], default="optimum",
                   help="optimum's ONNX exporter (default) or torch.onnx.export directly (fallback)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing non-empty --out")
    p.add_argument("--fallback-quantile", type=float, default=FALLBACK_QUANTILE,
                   help="int8 that misses its floor is tried with an fp32 fallback for inputs whose two top int8 "
                        "logits are closer than this quantile of int8's changes to the gap on the selection "
                        "records (default 0.99; 1.0: the largest change)")
    p.add_argument("--input-format", choices=list(INPUT_FORMATS["detector"]),
                   help="declare how the runtime feeds this Detector (halugate_format.json): halugate (ours, the "
                        "default) or lettucedetect (LettuceDetect checkpoints: its prompts and passage chunks)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow a checkpoint that needs its own Python code (EuroBERT); refused without it")
    p.add_argument("--verify-only", action="store_true",
                   help="re-run the parity check of an existing --out against --model; rewrites nothing")
    args = p.parse_args(argv)
    # Our progress at INFO; third-party loggers (onnxruntime.quantization logs every tensor) stay at WARNING.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    log.setLevel(logging.INFO)

    try:
        if args.verify_only:
            report = verify_export(args.model, args.out, samples=args.samples, max_length=args.max_length,
                                   atol=args.atol, agreement_floor=args.agreement_floor)
            print(_summary(report))
            if not report["passed"]:
                print(f"error: parity check failed: {_failure_message(report)}", file=sys.stderr)
                return 1
            return 0
        if args.require_int8 and args.quantize != "int8":
            raise ExportInputError("--require-int8 needs --quantize int8")
        if not 0.0 < args.fallback_quantile <= 1.0:
            raise ExportInputError(f"--fallback-quantile {args.fallback_quantile}: must be in (0, 1]")
        report = export(args.model, args.out, quantize=args.quantize, opset=args.opset,
                        agreement_floor=args.agreement_floor, atol=args.atol, samples=args.samples,
                        max_length=args.max_length, overwrite=args.overwrite, exporter=args.exporter,
                        require_int8=args.require_int8, optimize=not args.no_optimize,
                        fallback_quantile=args.fallback_quantile, input_format=args.input_format,
                        trust_remote_code=args.trust_remote_code)
    except (ExportError, BaseModelError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ExportInputError) else 1
    print(_summary(report))
    print(f"exported to {args.out} ({', '.join(report['files'].values())}); report: {Path(args.out) / REPORT_FILE}")
    if report.get("int8_status") == "refused":
        print(f"warning: int8 refused ({report['refused']['int8']['reason']}); only fp32 was exported, the rejected "
              f"int8 file is in {args.out}.failed (pass --require-int8 to make this an error)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
