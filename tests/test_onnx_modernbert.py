"""ModernBERT export attention (training.onnx_modernbert): banded local layers and ONNX Runtime MultiHeadAttention
for global layers give the logits of transformers' own attention, in PyTorch and in the exported graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.onnx_modernbert import banded_attention, modernbert_export_attention

# 3 layers, global_attn_every_n_layers 3: layer 0 global, layers 1-2 local (|i - j| <= 16); inputs of 300-600
# tokens span many windows, and the second row is padded
LENGTHS = (517, 333)


def _tiny_modernbert():
    from transformers import ModernBertConfig, ModernBertForTokenClassification

    torch.manual_seed(0)
    cfg = ModernBertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                           intermediate_size=96, max_position_embeddings=1024, global_attn_every_n_layers=3,
                           local_attention=32, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1,
                           sep_token_id=2, num_labels=2, architectures=["ModernBertForTokenClassification"])
    model = ModernBertForTokenClassification(cfg).eval()
    with torch.no_grad():  # random weights near 0 make every layer's output look alike: spread them
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(4.0)
    return model


def _batch():
    rng = np.random.default_rng(0)
    n = max(LENGTHS)
    ids = rng.integers(3, 1000, size=(len(LENGTHS), n)).astype(np.int64)
    mask = np.zeros_like(ids)
    for row, length in enumerate(LENGTHS):
        mask[row, :length] = 1
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _torch_logits(model, batch):
    with torch.inference_mode():
        return model(**{k: torch.from_numpy(v) for k, v in batch.items()}).logits.numpy()


@pytest.mark.parametrize("n", [1, 15, 16, 17, 100])
def test_banded_attention_is_windowed_attention(n):
    torch.manual_seed(n)
    q, k, v = (torch.randn(2, 3, n, 8) for _ in range(3))
    keep = torch.ones(2, n, dtype=torch.bool)
    keep[1, n // 2 + 1:] = False  # padded keys in the second row
    low = torch.finfo(torch.float32).min
    key_bias = torch.zeros(2, n).masked_fill(~keep, low)
    pos = torch.arange(n)
    window = (pos[:, None] - pos[None, :]).abs() <= 16
    full = torch.where(window, key_bias[:, None, None, :], torch.tensor(low))
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=full)
    got = banded_attention(q, k, v, key_bias, 16)
    assert got.shape == want.shape
    rows = keep[:, None, :, None].expand_as(got)  # padding queries are never read
    assert torch.allclose(got[rows], want[rows], atol=1e-5)


def test_patched_modernbert_keeps_its_logits_and_restores_transformers():
    from transformers.models.modernbert import modeling_modernbert as mm

    model, batch = _tiny_modernbert(), _batch()
    before = dict(mm.MODERNBERT_ATTENTION_FUNCTION)
    want = _torch_logits(model, batch)
    with modernbert_export_attention(model) as applied:
        got = _torch_logits(model, batch)
    assert applied is True
    assert mm.MODERNBERT_ATTENTION_FUNCTION == before
    keep = batch["attention_mask"].astype(bool)
    assert np.abs(got - want)[keep].max() < 1e-4
    assert np.abs(want).max() > 0.1  # not a degenerate model whose logits all agree anyway


def test_exported_graph_uses_multi_head_attention_and_matches_pytorch(tmp_path):
    import onnx
    import onnxruntime as ort

    from training.export import FP32_FILE, export_fp32

    model, batch = _tiny_modernbert(), _batch()
    export_fp32(model, "token", tmp_path, None, exporter="torch")
    ops = [n.op_type for n in onnx.load(str(tmp_path / FP32_FILE)).graph.node]
    assert ops.count("MultiHeadAttention") == 1  # the one global layer; the two local ones are banded
    session = ort.InferenceSession(str(tmp_path / FP32_FILE), providers=["CPUExecutionProvider"])
    keep = batch["attention_mask"].astype(bool)
    want = _torch_logits(model, batch)  # transformers' own attention: the context manager has exited
    got = session.run(["logits"], batch)[0]
    assert np.abs(got - want)[keep].max() < 1e-4
    for row, length in enumerate(LENGTHS):  # one sequence alone, no padding: same logits as in the batch
        alone = {k: v[row:row + 1, :length] for k, v in batch.items()}
        assert np.abs(session.run(["logits"], alone)[0][0] - want[row, :length]).max() < 1e-4
