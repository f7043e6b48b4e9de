"""Classifier runners: one interface over ONNX Runtime (default, torch-free) and PyTorch (unexported checkpoints).

A runner takes already-encoded sequences (`Features`: token ids + token type ids) and returns one logits array
per sequence: shape (num_labels,) for sequence classification, (seq_len, num_labels) for token classification.
Tokenisation stays outside the runner (the Detector needs offsets and windows), but every runner carries the
raw `tokenizers.Tokenizer` of its model so that both backends tokenise identically.

Batching is real batching: sequences are sorted by length, cut into batches of `batch_size` (and at most
`max_batch_tokens` padded tokens), padded to the longest sequence of their batch only, run in one call each,
and returned in the caller's order.

An int8 sequence classifier whose export ships `int8_fallback.json` (training.export: int8 alone missed its
agreement floor, int8 with this fallback kept it) runs int8 first and answers every input whose two highest int8
logits are closer than the export's margin with model.onnx (only there can int8 change a label), in a second
pass over the near-ties of all batches of the call.

    runner = load_runner("runs/demo/export/detector", task="token")   # the faster of int8 (if shipped) and fp32
    runner = load_runner("runs/demo/export/detector", task="token", precision="fp32")
    runner = load_runner("runs/detector-offline", task="token", backend="torch")  # run dir / checkpoint
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from inference.formatting import head_tail
from inference.hardware import cpu_info
from inference.hub import ONNX_PATTERNS, WEIGHT_PATTERNS, ModelRefError, has_onnx, resolve_model, split_ref

log = logging.getLogger("halugate.inference")

BACKENDS = ("onnx", "torch")
TASKS = ("sequence", "token")
INT8_FILES = ("model_quantized.onnx", "model.int8.onnx", "model_int8.onnx")
FP32_FILES = ("model.onnx",)
# Written by training.export when an int8 classifier keeps its agreement floor only with an fp32 second pass over
# its near-ties: {"margin": ..., "fp32_file": "model.onnx", ...} (docs/export.md, "int8 with an fp32 fallback").
FALLBACK_FILE = "int8_fallback.json"


class ModelLoadError(RuntimeError):
    """A model directory could not be loaded; the message names the directory and what is missing."""


@dataclass
class Features:
    """One encoded sequence, special tokens included."""

    input_ids: list[int]
    token_type_ids: list[int] | None = None

    def __len__(self) -> int:
        return len(self.input_ids)


def physical_cores() -> int:
    """Physical CPU cores this process may run on (inference.hardware, which every figure names the CPU by)."""
    return cpu_info().physical_cores


def near_ties(logits: np.ndarray, margin: float) -> np.ndarray:
    """Rows of (n, num_labels) logits whose two highest logits are less than `margin` apart. int8 moves each
    logit a little; only where the top two are that close can it change the label, so only these rows need
    the fp32 model's answer (the export takes `margin` from the changes int8 made to the gap between two logits
    on records outside its parity check: their 99th percentile by default)."""
    logits = np.asarray(logits, dtype=np.float32)
    if logits.ndim != 2 or logits.shape[1] < 2:
        raise ValueError(f"near_ties: logits of shape (n, num_labels >= 2) expected, got {logits.shape}")
    top2 = np.sort(logits, axis=1)[:, -2:]
    return (top2[:, 1] - top2[:, 0]) < margin


def read_fallback(model_dir: str | Path) -> dict | None:
    """The export's fp32 fallback for its int8 file, or None when it has none."""
    path = Path(model_dir) / FALLBACK_FILE
    if not path.is_file():
        return None
    spec = _read_json(path)
    margin = spec.get("margin")
    if not isinstance(margin, (int, float)) or margin < 0 or not (Path(model_dir) / spec.get("fp32_file", "")).is_file():
        raise ModelLoadError(f"{path}: needs a non-negative 'margin' and an existing 'fp32_file' (got {spec})")
    return spec


def softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    z = logits - logits.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


# ----------------------------------------------------------------------------------------------------------
# Model directory reading (no torch)
# ----------------------------------------------------------------------------------------------------------

def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"{path}: cannot read JSON ({exc})") from None


def read_labels(model_dir: str | Path) -> list[str]:
    """Labels in id order, from label_map.json (written by training and export) or config.json's id2label."""
    model_dir = Path(model_dir)
    label_map = model_dir / "label_map.json"
    if label_map.is_file():
        data = _read_json(label_map)
        if isinstance(data.get("labels"), list):
            return [str(x) for x in data["labels"]]
        if isinstance(data.get("id2label"), dict):
            return [data["id2label"][k] for k in sorted(data["id2label"], key=int)]
        raise ModelLoadError(f"{label_map}: expected a 'labels' list or an 'id2label' mapping")
    config = model_dir / "config.json"
    if config.is_file():
        id2label = _read_json(config).get("id2label")
        if isinstance(id2label, dict) and id2label:
            return [id2label[k] for k in sorted(id2label, key=int)]
    raise ModelLoadError(f"{model_dir}: no label_map.json and no id2label in config.json")


def _special_token(model_dir: Path, tokenizer, key: str, defaults: Sequence[str]) -> int | None:
    """Id of the tokenizer's `key` token (cls/sep/pad), read from the HF tokenizer files, else by name."""
    names: list[str] = []
    for fname in ("tokenizer_config.json", "special_tokens_map.json"):
        path = model_dir / fname
        if path.is_file():
            value = _read_json(path).get(f"{key}_token")
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str):
                names.append(value)
    for name in [*names, *defaults]:
        token_id = tokenizer.token_to_id(name)
        if token_id is not None:
            return int(token_id)
    return None


@dataclass
class TokenizerInfo:
    """The raw tokenizer plus the special ids the Detector format and padding need."""

    tokenizer: object  # tokenizers.Tokenizer
    cls_id: int
    sep_id: int
    pad_id: int


def load_tokenizer_info(model_dir: str | Path) -> TokenizerInfo:
    """tokenizer.json via `tokenizers` (no transformers), with any saved truncation/padding switched off."""
    from tokenizers import Tokenizer

    model_dir = Path(model_dir)
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        raise ModelLoadError(f"{model_dir}: tokenizer.json not found (save the fast tokenizer with the model)")
    tok = Tokenizer.from_file(str(path))
    # Saved tokenizers may carry fixed padding/truncation (all-MiniLM's pads every input to 128): the runtime
    # decides lengths itself.
    tok.no_truncation()
    tok.no_padding()
    cls_id = _special_token(model_dir, tok, "cls", ("[CLS]", "<s>", "<cls>"))
    sep_id = _special_token(model_dir, tok, "sep", ("[SEP]", "</s>", "<sep>"))
    pad_id = _special_token(model_dir, tok, "pad", ("[PAD]", "<pad>"))
    if cls_id is None or sep_id is None:
        raise ModelLoadError(f"{model_dir}: tokenizer has no CLS/SEP tokens; a BERT-style encoder is expected")
    return TokenizerInfo(tok, cls_id, sep_id, pad_id if pad_id is not None else 0)


# Architectures whose position ids start after the padding index (RoBERTa-style): their
# max_position_embeddings (514 for a 512-token model) counts pad_token_id + 1 slots no token can use.
OFFSET_POSITION_TYPES = {"roberta", "xlm-roberta", "mpnet", "camembert", "longformer", "data2vec-text"}


def max_positions(config: dict) -> int:
    """The longest input (in tokens) a transformers config allows; 512 when it does not say."""
    value = config.get("max_position_embeddings")
    if not isinstance(value, int) or value <= 0:
        return 512
    if config.get("model_type") in OFFSET_POSITION_TYPES:
        value -= int(config.get("pad_token_id") or 0) + 1
    return value


def _max_positions(model_dir: Path) -> int:
    config = model_dir / "config.json"
    return max_positions(_read_json(config)) if config.is_file() else 512


def trained_length(model_dir: str | Path) -> int | None:
    """The input length (tokens) the model was fine-tuned at: `model.max_length` of the training config that
    run dirs and exports keep (config.yaml); None when there is none (a model from elsewhere)."""
    path = Path(model_dir) / "config.yaml"
    if not path.is_file():
        return None
    try:
        value = ((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("model") or {}).get("max_length")
    except (yaml.YAMLError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def _config_task(model_dir: Path) -> str | None:
    config = model_dir / "config.json"
    if not config.is_file():
        return None
    for arch in _read_json(config).get("architectures") or []:
        if arch.endswith("ForTokenClassification"):
            return "token"
        if arch.endswith("ForSequenceClassification"):
            return "sequence"
    return None


def _first_file(model_dir: Path, names: Sequence[str]) -> Path | None:
    return next((model_dir / n for n in names if (model_dir / n).is_file()), None)


def find_onnx_file(model_dir: str | Path, precision: str = "fp32", onnx_file: str = "") -> Path:
    model_dir = Path(model_dir)
    if onnx_file:
        path = Path(onnx_file) if Path(onnx_file).is_absolute() else model_dir / onnx_file
        if not path.is_file():
            raise ModelLoadError(f"{path}: ONNX file not found")
        return path
    # "auto": the int8 file when the export has one (training.export leaves it there only when it passed its
    # agreement check against fp32), else fp32; OnnxRunner then keeps whichever of the two is faster on this CPU
    # (inference.precision)
    names = INT8_FILES if precision == "int8" else (INT8_FILES + FP32_FILES if precision == "auto" else FP32_FILES)
    for name in names:
        if (model_dir / name).is_file():
            return model_dir / name
    present = sorted(p.name for p in model_dir.glob("*.onnx")) if model_dir.is_dir() else []
    hint = "export it with `python -m training.export --model RUN_DIR --out EXPORT_DIR" + (
        " --quantize int8`" if precision == "int8" else "`")
    raise ModelLoadError(f"{model_dir}: no {precision} ONNX model ({' or '.join(names)}); "
                         f"found {present or 'no .onnx files'}; {hint}, or use backend=torch for a run dir")


# ----------------------------------------------------------------------------------------------------------
# Runners
# ----------------------------------------------------------------------------------------------------------

class ClassifierRunner:
    """Shared batching; subclasses implement `_run_batch(ids, mask, type_ids) -> logits`."""

    backend = "base"

    def __init__(self, *, model_dir: str, task: str, labels: list[str], tok: TokenizerInfo | None,
                 max_length: int, batch_size: int = 8, max_batch_tokens: int = 65536,
                 takes_token_type_ids: bool = True):
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        self.model_dir = model_dir
        self.task = task
        self.labels = list(labels)
        self.tok = tok
        self.max_length = int(max_length)
        # what the model saw in fine-tuning (None: unknown); pair builders keep inputs within it (Explainer)
        self.trained_length = trained_length(model_dir)
        self.batch_size = max(1, int(batch_size))
        self.max_batch_tokens = max(1, int(max_batch_tokens))
        self.takes_token_type_ids = takes_token_type_ids

    @property
    def tokenizer(self):
        return self.tok.tokenizer if self.tok is not None else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model_dir!r}, task={self.task}, labels={self.labels})"

    def batches(self, lengths: Sequence[int]) -> list[list[int]]:
        """Indices grouped into length-bucketed batches: longest first, at most batch_size sequences and
        max_batch_tokens padded tokens each."""
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        out: list[list[int]] = []
        current: list[int] = []
        for i in order:
            width = lengths[current[0]] if current else lengths[i]  # the first (longest) sets the padding
            if current and (len(current) >= self.batch_size or width * (len(current) + 1) > self.max_batch_tokens):
                out.append(current)
                current = []
            current.append(i)
        if current:
            out.append(current)
        return out

    def logits(self, features: Sequence[Features]) -> list[np.ndarray]:
        """Logits per sequence, in input order (token tasks: trimmed to each sequence's own length)."""
        for i, f in enumerate(features):
            if not f.input_ids:
                raise ValueError(f"features[{i}]: empty sequence")
            if len(f) > self.max_length:
                raise ValueError(f"features[{i}]: {len(f)} tokens exceed the model's {self.max_length} positions "
                                 f"({self.model_dir}); window or truncate before calling the runner")
        results: list[np.ndarray | None] = [None] * len(features)
        for batch in self.batches([len(f) for f in features]):
            out = np.asarray(self._run_batch(*self._padded([features[i] for i in batch])), dtype=np.float32)
            if not np.isfinite(out).all():  # a broken graph or session: the stage is unavailable, never "clean"
                raise FloatingPointError(f"{self.model_dir}: the model returned non-finite logits (NaN / inf)")
            for row, i in enumerate(batch):
                results[i] = out[row, : len(features[i])] if self.task == "token" else out[row]
        return results  # type: ignore[return-value]

    def _padded(self, features: Sequence[Features]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(input_ids, attention_mask, token_type_ids) of one batch, padded to its longest sequence."""
        width = max(len(f) for f in features)
        ids = np.full((len(features), width), self.tok.pad_id if self.tok is not None else 0, dtype=np.int64)
        mask = np.zeros((len(features), width), dtype=np.int64)
        types = np.zeros((len(features), width), dtype=np.int64)
        for row, f in enumerate(features):
            ids[row, : len(f)] = f.input_ids
            mask[row, : len(f)] = 1
            if f.token_type_ids is not None:
                types[row, : len(f)] = f.token_type_ids
        return ids, mask, types

    def probabilities(self, features: Sequence[Features]) -> list[np.ndarray]:
        return [softmax(x) for x in self.logits(features)]

    # Sequence classification over texts / text pairs (Sentinel, Explainer).
    def encode(self, text: str, pair: str | None = None) -> Features:
        """[CLS] text [SEP] (pair [SEP]) with the model's own post-processor (Sentinel prompts and NLI pairs; the
        Detector never comes through here). A pair that does not fit loses tokens of its longer side first; a
        single text longer than `text_length` keeps its beginning and its end (inference.formatting.head_tail)."""
        if self.tokenizer is None:
            raise RuntimeError(f"{self!r} has no tokenizer")
        if pair is not None:
            enc = self.tokenizer.encode(text, pair)
            if len(enc.ids) > self.max_length:
                enc = self._truncating_tokenizer().encode(text, pair)
        else:
            enc = self.tokenizer.encode(text)
            if len(enc.ids) > self.text_length:
                return self._head_tail(enc)
        return Features(list(enc.ids), list(enc.type_ids))

    @property
    def text_length(self) -> int:
        """Tokens a single text (a Sentinel prompt) is read at: the length the model was fine-tuned at, where
        known; past it the offline Sentinel was measured worse and slower (docs/sentinel.md, "Long prompts")."""
        return min(self.trained_length or self.max_length, self.max_length)

    def _head_tail(self, enc) -> Features:
        """`enc` (one text with its special tokens) cut to text_length by inference.formatting.head_tail, the
        rule training uses; the special tokens around the text are kept as they are."""
        n_special = self.tokenizer.num_special_tokens_to_add(False)
        lead = next(i for i, m in enumerate(enc.special_tokens_mask) if not m)  # specials before the text
        end = len(enc.ids) - (n_special - lead)                                   # ... and after it
        kept = head_tail(list(range(lead, end)), self.text_length - n_special)    # positions of the text kept
        positions = [*range(lead), *kept, *range(end, len(enc.ids))]
        return Features([enc.ids[i] for i in positions], [enc.type_ids[i] for i in positions])

    def _truncating_tokenizer(self):
        """A copy of the tokenizer that cuts the longest side to max_length (the shared one never truncates,
        so no call toggles state another thread may be using)."""
        if getattr(self, "_cut", None) is None:
            from tokenizers import Tokenizer

            cut = Tokenizer.from_str(self.tokenizer.to_str())
            cut.enable_truncation(self.max_length, strategy="longest_first")
            self._cut = cut
        return self._cut

    def classify(self, texts: Sequence[str | tuple[str, str]]) -> np.ndarray:
        """Probabilities (N, num_labels) for texts or (text, pair) tuples, batched."""
        if self.task != "sequence":
            raise RuntimeError(f"{self!r} is a token classifier; classify() needs a sequence classifier")
        feats = [self.encode(*t) if isinstance(t, tuple) else self.encode(t) for t in texts]
        if not feats:
            return np.zeros((0, len(self.labels)), dtype=np.float32)
        return np.stack(self.probabilities(feats))

    def _run_batch(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class OnnxRunner(ClassifierRunner):
    """onnxruntime InferenceSession; the graph's own input names decide what is fed."""

    backend = "onnx"

    def __init__(self, model_dir: str | Path, task: str, *, precision: str = "fp32", onnx_file: str = "",
                 use_cpu: bool = True, providers: Sequence[str] | None = None, num_threads: int = 0,
                 batch_size: int = 8, max_batch_tokens: int = 65536, spin_wait: bool = True,
                 fallback: bool = True):
        import onnxruntime as ort

        model_dir = Path(model_dir)
        if not model_dir.is_dir():
            raise ModelLoadError(f"{model_dir}: model directory not found")
        path = find_onnx_file(model_dir, precision, onnx_file)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # one thread per physical core: hyper-threads share the core's vector units and only add contention
        options.intra_op_num_threads = int(num_threads) or physical_cores()
        if not spin_wait:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if providers is None:
            available = ort.get_available_providers()
            providers = ["CPUExecutionProvider"] if use_cpu else [
                p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
        self._options, self._providers = options, list(providers)
        session = None
        if precision == "auto" and not onnx_file:  # the faster shipped file on this CPU (inference.precision)
            from inference.precision import decide, fallback_share

            self.precision_decision, session = decide(
                model_dir, fp32=_first_file(model_dir, FP32_FILES), int8=_first_file(model_dir, INT8_FILES),
                task=task, max_length=_max_positions(model_dir), load=self._load_session,
                threads=options.intra_op_num_threads, providers=self._providers,
                retime=os.environ.get("HALUGATE_PRECISION_RETIME") == "1",
                int8_fallback_share=fallback_share(model_dir) if fallback and task == "sequence" else 0.0)
            path = model_dir / self.precision_decision.file
        else:
            from inference.precision import forced

            self.precision_decision = forced(precision, path, pinned=bool(onnx_file))
        self.session = session if session is not None else self._load_session(path)
        self.onnx_path = path
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.input_types = {i.name: i.type for i in self.session.get_inputs()}
        output = self.session.get_outputs()[0]
        self.output_name = output.name
        graph_task = "token" if len(output.shape) == 3 else "sequence"
        if graph_task != task:
            raise ModelLoadError(f"{path}: graph output {output.name} has shape {output.shape}: a {graph_task} "
                                 f"classifier, but a {task} classifier is needed here")
        missing = {"input_ids"} - set(self.input_names)
        if missing:
            raise ModelLoadError(f"{path}: graph has no input_ids input (inputs: {self.input_names})")
        labels = read_labels(model_dir)
        n_out = output.shape[-1]
        if isinstance(n_out, int) and n_out != len(labels):
            raise ModelLoadError(f"{model_dir}: {len(labels)} labels in the label map but the graph outputs {n_out}")
        super().__init__(model_dir=str(model_dir), task=task, labels=labels, tok=load_tokenizer_info(model_dir),
                         max_length=_max_positions(model_dir), batch_size=batch_size,
                         max_batch_tokens=max_batch_tokens,
                         takes_token_type_ids="token_type_ids" in self.input_names)
        self.precision = "int8" if path.name in INT8_FILES else ("fp32" if precision == "auto" else precision)
        # An int8 classifier shipped with a fallback answers its near-ties with the fp32 model, loaded now so
        # that no request pays for loading it; fallback=False measures int8 alone. Counters: rows run, rows
        # answered by fp32.
        spec = read_fallback(model_dir) if fallback and self.precision == "int8" and task == "sequence" else None
        self.fallback_margin = float(spec["margin"]) if spec else None
        self._fallback_session = self._load_session(model_dir / spec["fp32_file"]) if spec else None
        self.rows_run = self.rows_fallback = 0

    def _load_session(self, path: Path):
        import onnxruntime as ort

        try:
            return ort.InferenceSession(str(path), sess_options=self._options, providers=self._providers)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            raise ModelLoadError(f"{path}: onnxruntime cannot load it ({type(exc).__name__}: {exc})") from None

    def _feed(self, name: str, array: np.ndarray) -> np.ndarray:
        return array.astype(np.int32) if self.input_types.get(name) == "tensor(int32)" else array

    def logits(self, features: Sequence[Features]) -> list[np.ndarray]:
        results = super().logits(features)
        if self.fallback_margin is None or not results:
            return results
        # The near-ties of all batches go to fp32 together, in their own length-sorted batches: a few rows per
        # int8 batch, each padded to that batch's width, cost fp32 about three times as much (measured).
        redo = np.flatnonzero(near_ties(np.stack(results), self.fallback_margin)).tolist()
        for batch in self.batches([len(features[i]) for i in redo]):
            rows = [redo[k] for k in batch]
            out = self._fallback_session.run([self.output_name],
                                             self._feeds(*self._padded([features[i] for i in rows])))[0]
            for row, i in enumerate(rows):
                results[i] = np.asarray(out[row], dtype=np.float32)
        self.rows_fallback += len(redo)
        return results

    def _run_batch(self, ids, mask, types):
        self.rows_run += len(ids)
        return self.session.run([self.output_name], self._feeds(ids, mask, types))[0]

    def _feeds(self, ids, mask, types) -> dict[str, np.ndarray]:
        feeds = {}
        for name in self.input_names:
            if name == "input_ids":
                feeds[name] = self._feed(name, ids)
            elif name == "attention_mask":
                feeds[name] = self._feed(name, mask)
            elif name == "token_type_ids":
                feeds[name] = self._feed(name, types)
            elif name == "position_ids":
                feeds[name] = self._feed(name, np.broadcast_to(np.arange(ids.shape[1]), ids.shape).copy())
            else:
                raise RuntimeError(f"{self.onnx_path}: unsupported graph input {name!r}")
        return feeds


class TorchRunner(ClassifierRunner):
    """transformers AutoModelFor{Sequence,Token}Classification from a run dir or checkpoint (torch imported here)."""

    backend = "torch"

    def __init__(self, model_dir: str | Path, task: str, *, use_cpu: bool = True, num_threads: int = 0,
                 batch_size: int = 8, max_batch_tokens: int = 65536):
        model_dir = Path(model_dir)
        if not (model_dir / "config.json").is_file():
            raise ModelLoadError(f"{model_dir}: no config.json; backend=torch needs a transformers model "
                                 "directory (a run dir or checkpoint)")
        try:
            import torch
            from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification
        except ImportError as exc:
            raise ModelLoadError(f"backend=torch needs torch and transformers ({exc}); "
                                 "install the `train` extra or use backend=onnx") from None
        found = _config_task(model_dir)
        if found is not None and found != task:
            raise ModelLoadError(f"{model_dir}: config.json declares a {found} classifier, "
                                 f"but a {task} classifier is needed here")
        if num_threads:
            torch.set_num_threads(int(num_threads))
        cls = AutoModelForTokenClassification if task == "token" else AutoModelForSequenceClassification
        try:
            model = cls.from_pretrained(str(model_dir))
        except Exception as exc:  # noqa: BLE001 - report any load failure in one line
            raise ModelLoadError(f"{model_dir}: transformers cannot load it ({type(exc).__name__}: {exc})") from None
        self.device = "cuda" if (not use_cpu and torch.cuda.is_available()) else "cpu"
        self.model = model.to(self.device).eval()
        self._torch = torch
        import inspect

        takes_types = "token_type_ids" in inspect.signature(self.model.forward).parameters
        super().__init__(model_dir=str(model_dir), task=task, labels=read_labels(model_dir),
                         tok=load_tokenizer_info(model_dir), max_length=_max_positions(model_dir),
                         batch_size=batch_size, max_batch_tokens=max_batch_tokens, takes_token_type_ids=takes_types)
        self.precision = "fp32"

    def _run_batch(self, ids, mask, types):
        torch = self._torch
        inputs = {"input_ids": torch.from_numpy(ids).to(self.device),
                  "attention_mask": torch.from_numpy(mask).to(self.device)}
        if self.takes_token_type_ids:
            inputs["token_type_ids"] = torch.from_numpy(types).to(self.device)
        with torch.inference_mode():
            return self.model(**inputs).logits.float().cpu().numpy()


def resolve_model_dir(model_id: str | Path, backend: str = "torch") -> Path:
    """A local directory, or a Hub id (`org/name[@rev]`) fetched (or found in the local cache) with huggingface_hub
    (inference.hub). For the onnx backend a Hub repo must hold ONNX files; else the error says to export it."""
    local = Path(os.path.expanduser(str(model_id)))
    try:
        path = resolve_model(model_id, patterns=ONNX_PATTERNS if backend == "onnx" else WEIGHT_PATTERNS)
    except ModelRefError as exc:
        raise ModelLoadError(str(exc)) from None
    if backend == "onnx" and not local.exists() and not has_onnx(path):
        hub = split_ref(str(model_id))
        raise ModelLoadError(
            f"{model_id}: the Hub repo has no ONNX files for the runtime (backend onnx); export it first: "
            f"python -m training.export --model {model_id} --out DIR (add --input-format lettucedetect for a "
            f"LettuceDetect Detector) and name DIR instead, or run it with backend torch"
            if hub else f"{model_id}: no ONNX files")
    return path


def load_runner(model_dir: str | Path, task: str, backend: str = "onnx", *, use_cpu: bool = True,
                precision: str = "auto", onnx_file: str = "", num_threads: int = 0, batch_size: int = 8,
                max_batch_tokens: int = 65536, providers: Sequence[str] | None = None,
                spin_wait: bool = True, fallback: bool = True) -> ClassifierRunner:
    """A runner for `model_dir` ("onnx": an export dir; "torch": a run dir / checkpoint)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    model_dir = resolve_model_dir(model_dir, backend)
    if backend == "onnx":
        return OnnxRunner(model_dir, task, precision=precision, onnx_file=onnx_file, use_cpu=use_cpu,
                          providers=providers, num_threads=num_threads, batch_size=batch_size,
                          max_batch_tokens=max_batch_tokens, spin_wait=spin_wait, fallback=fallback)
    return TorchRunner(model_dir, task, use_cpu=use_cpu, num_threads=num_threads, batch_size=batch_size,
                       max_batch_tokens=max_batch_tokens)
