"""Helpers for the inference.detect tests: scripted fake runners (pipeline logic, no model) and tiny real models.

The fake runners subclass the real ClassifierRunner, so batching, padding and the Features contract are the
production code; only `_run_batch` is scripted. They read the real MiniLM tokenizer and decide from token
ids, so what they "see" is exactly what a window contains:

- FakeSentinel: P(FACT_CHECK_NEEDED) high when the prompt has a "?", low otherwise.
- FakeDetector: an answer number token is HALLUCINATED when the window's context has numbers and not this one
  (a window with no numbers has no evidence either way and flags nothing).
- FakeExplainer: contradiction when the hypothesis has a number the premise lacks while the premise has
  numbers; entailment when every hypothesis word is in the premise; neutral otherwise. `margin` sets how
  confident it is.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from inference.labels import DETECTOR_LABELS, EXPLAINER_LABELS, SENTINEL_LABELS
from inference.runners import ClassifierRunner, load_tokenizer_info


class _Fake(ClassifierRunner):
    backend = "fake"

    def __init__(self, tokenizer_dir, task, labels, max_length=512, batch_size=8):
        super().__init__(model_dir=f"fake:{type(self).__name__}", task=task, labels=labels,
                         tok=load_tokenizer_info(tokenizer_dir), max_length=max_length, batch_size=batch_size)
        self.calls: list[tuple[int, int]] = []  # (batch rows, padded width) per model call

    def _token(self, i: int) -> str:
        return self.tokenizer.id_to_token(int(i)) or ""

    def _segments(self, ids, mask, types):
        """(first segment ids, second segment ids) without specials or padding."""
        special = {self.tok.cls_id, self.tok.sep_id, self.tok.pad_id}
        n = int(mask.sum())
        first = [int(t) for t, ty in zip(ids[:n], types[:n]) if ty == 0 and t not in special]
        second = [int(t) for t, ty in zip(ids[:n], types[:n]) if ty == 1 and t not in special]
        return first, second

    def _run_batch(self, ids, mask, types):
        self.calls.append(ids.shape)
        return np.stack([self.row(ids[r], mask[r], types[r]) for r in range(ids.shape[0])])


class FakeSentinel(_Fake):
    def __init__(self, tokenizer_dir, **kw):
        super().__init__(tokenizer_dir, "sequence", SENTINEL_LABELS, **kw)

    def row(self, ids, mask, types):
        has_q = any(self._token(t) == "?" for t in ids[: int(mask.sum())])
        return np.array([-2.0, 2.0] if has_q else [2.0, -2.0], dtype=np.float32)


class FakeDetector(_Fake):
    def __init__(self, tokenizer_dir, **kw):
        super().__init__(tokenizer_dir, "token", DETECTOR_LABELS, **kw)

    def row(self, ids, mask, types):
        context, _ = self._segments(ids, mask, types)
        numbers = {self._token(t) for t in context if self._token(t).isdigit()}
        out = np.tile(np.array([4.0, -4.0], dtype=np.float32), (len(ids), 1))
        for pos in range(int(mask.sum())):
            tok = self._token(ids[pos])
            if types[pos] == 1 and tok.isdigit() and numbers and tok not in numbers:
                out[pos] = [-4.0, 4.0]
        return out


class FakeExplainer(_Fake):
    def __init__(self, tokenizer_dir, margin: float = 4.0, **kw):
        super().__init__(tokenizer_dir, "sequence", EXPLAINER_LABELS, **kw)
        self.margin = margin

    def row(self, ids, mask, types):
        premise, hyp = self._segments(ids, mask, types)
        p_tokens = {self._token(t) for t in premise}
        h_tokens = [self._token(t) for t in hyp if self._token(t).isalnum()]
        p_numbers = {t for t in p_tokens if t.isdigit()}
        logits = np.zeros(3, dtype=np.float32)
        if p_numbers and any(t.isdigit() and t not in p_numbers for t in h_tokens):
            logits[EXPLAINER_LABELS.index("contradiction")] = self.margin
        elif all(t in p_tokens for t in h_tokens):
            logits[EXPLAINER_LABELS.index("entailment")] = self.margin
        else:
            logits[EXPLAINER_LABELS.index("neutral")] = self.margin
        return logits


class FailingRunner(_Fake):
    """Loads fine, fails when run (a broken session, an OOM): the pipeline must say `unavailable`."""

    def __init__(self, tokenizer_dir, task, labels, **kw):
        super().__init__(tokenizer_dir, task, labels, **kw)

    def _run_batch(self, ids, mask, types):
        raise RuntimeError("simulated model failure")


def fakes(tokenizer_dir, **kw) -> dict:
    return {"sentinel": FakeSentinel(tokenizer_dir), "detector": FakeDetector(tokenizer_dir, **kw),
            "explainer": FakeExplainer(tokenizer_dir)}


# ---- tiny real models (torch at build time only) -----------------------------------------------------------

def make_run_dir(path: Path, task: str, labels: list[str], tokenizer_dir: str, seed: int = 0) -> Path:
    """A tiny random BERT classifier saved in the run-dir layout (model + tokenizer + label_map.json)."""
    import torch
    from transformers import (
        AutoTokenizer,
        BertConfig,
        BertForSequenceClassification,
        BertForTokenClassification,
    )

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=512, num_labels=len(labels),
                     id2label=dict(enumerate(labels)), label2id={n: i for i, n in enumerate(labels)})
    cls = BertForTokenClassification if task == "token" else BertForSequenceClassification
    model = cls(cfg).eval()
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    (path / "label_map.json").write_text(json.dumps({"labels": labels, "id2label": dict(enumerate(labels))}))
    return path


def export_tiny(run_dir: Path, out: Path, quantize: bool = False) -> Path:
    """The project's exporter (training.export) with the direct torch.onnx path: fast for tiny models."""
    from training.export import export

    export(run_dir, out, exporter="torch", samples=8, overwrite=True, quantize="int8" if quantize else None,
           agreement_floor=0.0)
    return out


def tiny_stack(out: Path, tokenizer_dir: str) -> Path:
    """Tiny random-weight Sentinel, Detector and Explainer exports under `out` (built once, reused after), for
    the service scripts that need a whole stack without `make demo` (scripts/bench_serve.py, soak_serve.py)."""
    from inference.labels import DETECTOR_LABELS, EXPLAINER_LABELS, SENTINEL_LABELS

    if not all((out / s / "model.onnx").exists() for s in ("sentinel", "detector", "explainer")):
        for stage, task, labels, seed in (("sentinel", "sequence", SENTINEL_LABELS, 1),
                                          ("detector", "token", DETECTOR_LABELS, 2),
                                          ("explainer", "sequence", EXPLAINER_LABELS, 3)):
            export_tiny(make_run_dir(out.parent / "runs" / stage, task, labels, tokenizer_dir, seed), out / stage)
    return out
