"""Batch prediction with torch for sequence-classification run dirs (used by eval.explainer and eval.sentinel).

    probs = predict_proba("runs/explainer-offline", premises, hypotheses)   # (n, num_labels), model label order
    labels = model_labels("runs/explainer-offline")                          # ["entailment", "neutral", ...]

Inputs are tokenised once, then batched longest-first by token length (little padding, and an out-of-memory
error shows up in the first batch rather than at the end); results come back in input order.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from inference.formatting import head_tail
from training.models import load_tokenizer
from training.trainer import check_device


@functools.lru_cache(maxsize=2)
def load_classifier(model_dir: str, device: str = "auto"):
    """(model, tokenizer, device) for a run dir, a local model dir or a Hub id; cached for repeated calls."""
    from transformers import AutoModelForSequenceClassification

    device = check_device(device)
    tokenizer = load_tokenizer(str(model_dir))
    model = AutoModelForSequenceClassification.from_pretrained(str(model_dir))
    model.eval().to(device)
    return model, tokenizer, device


def model_labels(model_dir: str) -> list[str]:
    """The model's label names in output order (config.id2label)."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(str(model_dir))
    return [cfg.id2label[i] for i in range(cfg.num_labels)]


TRUNCATIONS = ("head_tail", "end")


def encode_inputs(tokenizer, texts: Sequence[str], pairs: Sequence[str] | None, max_length: int,
                  truncation: str = "head_tail") -> dict:
    """Model inputs (input_ids, attention_mask, ...) as the runtime builds them: a pair that does not fit loses
    tokens of its longer side first; a single text keeps its beginning and end (`head_tail`, what
    inference.runners does) or, with `end`, its beginning only (the behaviour before; kept to measure it)."""
    if truncation not in TRUNCATIONS:
        raise ValueError(f"truncation: {truncation!r} is not one of {TRUNCATIONS}")
    if pairs is not None or truncation == "end":
        return tokenizer(list(texts), pairs, truncation=True, max_length=max_length)
    budget = max_length - tokenizer.num_special_tokens_to_add(pair=False)
    ids = tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]  # cut below, not here
    cut = [head_tail(x, budget) for x in ids]
    enc = {"input_ids": [tokenizer.build_inputs_with_special_tokens(x) for x in cut]}
    if "token_type_ids" in tokenizer.model_input_names:
        enc["token_type_ids"] = [tokenizer.create_token_type_ids_from_sequences(x) for x in cut]
    enc["attention_mask"] = [[1] * len(x) for x in enc["input_ids"]]
    return enc


def predict_proba(model_dir: str, texts: Sequence[str], pairs: Sequence[str] | None = None, batch_size: int = 64,
                  max_length: int = 256, device: str = "auto", progress: bool = True,
                  desc: str | None = None, truncation: str = "head_tail") -> np.ndarray:
    """Class probabilities, shape (len(texts), num_labels), in the model's label order.

    `texts` are the first segments; `pairs`, when given, the second segment of each input (e.g. premises and
    hypotheses for NLI). Inputs longer than `max_length` tokens are truncated as `encode_inputs` does.
    """
    import torch
    from tqdm.auto import tqdm

    texts = list(texts)
    if pairs is not None:
        pairs = list(pairs)
        if len(pairs) != len(texts):
            raise ValueError(f"predict_proba: {len(texts)} texts but {len(pairs)} pairs")
    for i, t in enumerate(texts + (pairs or [])):
        if not isinstance(t, str):
            raise TypeError(f"predict_proba: input {i % max(1, len(texts))} is {type(t).__name__}, not a string")
    model, tokenizer, dev = load_classifier(str(model_dir), device)
    n_labels = model.config.num_labels
    if not texts:
        return np.zeros((0, n_labels), dtype=np.float32)

    enc = encode_inputs(tokenizer, texts, pairs, max_length, truncation)
    keys = [k for k in tokenizer.model_input_names if k in enc]
    lengths = np.array([len(ids) for ids in enc["input_ids"]])
    order = np.argsort(-lengths, kind="stable")
    out = np.empty((len(texts), n_labels), dtype=np.float32)
    batches = range(0, len(texts), batch_size)
    for start in tqdm(batches, desc=desc or "predict", unit="batch", disable=not progress, leave=False):
        idx = order[start:start + batch_size]
        batch = tokenizer.pad({k: [enc[k][i] for i in idx] for k in keys}, return_tensors="pt")
        with torch.inference_mode():
            logits = model(**{k: v.to(dev) for k, v in batch.items()}).logits
        out[idx] = torch.softmax(logits.float(), dim=-1).cpu().numpy()
    return out
