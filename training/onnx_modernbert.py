"""Export-time attention for ModernBERT: the same numbers as transformers' SDPA path, a cheaper ONNX graph.

transformers' `sdpa` / `eager` ModernBERT attention exports to plain MatMul / Add / Softmax over fp32
[batch, heads, L, L] score matrices, one per layer, plus two [batch, 1, L, L] masks (global, and the sliding
window of `local_attention`); at 4K tokens that is 800 MB of scores per layer, and ONNX Runtime's transformer
fusions do not recognise the pattern. `modernbert_export_attention(model)` swaps, for the duration of an export:

- local layers (|i - j| <= local_attention // 2, two layers in three in ModernBERT-base): banded attention over
  blocks of w = local_attention // 2 queries, each against the 3w keys of its own and both neighbouring blocks,
  with the window and the key padding applied as an additive mask of the same values transformers uses
  (0 or finfo.min). Every (query, key) pair inside the window is scored exactly as before; pairs outside it
  score exp(finfo.min - max) = 0 in both graphs. Work and memory go from O(L^2) to O(L * 3w).
- global layers: ONNX Runtime's `com.microsoft::MultiHeadAttention` (CPU kernel: one fused pass per head, no
  materialised mask) with the key padding mask, default scale 1 / sqrt(head_dim) like SDPA.
- the model-level masks: a [batch, 1, 1, L] additive key mask instead of the two [batch, 1, L, L] ones.

Padding query rows whose whole window is padding are the only positions whose outputs differ (a uniform average
over another set of keys); the parity check compares non-padding tokens only, and no real token reads them.
training.export keeps the result only after its parity check against PyTorch, as for every export.
"""

from __future__ import annotations

import contextlib
import logging

log = logging.getLogger("halugate.export")

# what export_report.json's "attention" says when the swap below was applied
MODERNBERT_ATTENTION = "banded local attention + MultiHeadAttention for global layers (training.onnx_modernbert)"


def _key_bias(attention_mask, dtype):
    """[batch, L] 0/1 mask -> [batch, 1, 1, L] additive mask (0 kept, finfo.min padded), as transformers builds."""
    import torch

    keep = attention_mask[:, None, None, :].to(torch.bool)
    return torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)


def banded_attention(query, key, value, key_bias, half_window: int):
    """Attention of query i to keys j with |i - j| <= half_window (and key_bias[j] added), by blocks.

    query / key / value: [batch, heads, L, head_dim]; key_bias: [batch, L] additive (0 or finfo.min).
    Returns [batch, heads, L, head_dim]."""
    import torch
    import torch.nn.functional as F

    w = half_window
    b, h, n, d = query.shape
    pad = (w - n % w) % w
    low = torch.finfo(query.dtype).min
    nb = (n + pad) // w
    q = F.pad(query, (0, 0, 0, pad)).reshape(b, h, nb, w, d)
    # keys padded by one block each side: block i of the queries reads key blocks i, i+1, i+2 of the padded keys
    k = F.pad(key, (0, 0, w, pad + w)).reshape(b, h, nb + 2, w, d)
    v = F.pad(value, (0, 0, w, pad + w)).reshape(b, h, nb + 2, w, d)
    kb = F.pad(key_bias, (w, pad + w), value=low).reshape(b, 1, nb + 2, 1, w)
    k = torch.cat([k[:, :, :-2], k[:, :, 1:-1], k[:, :, 2:]], dim=3)  # [b, h, nb, 3w, d]
    v = torch.cat([v[:, :, :-2], v[:, :, 1:-1], v[:, :, 2:]], dim=3)
    kb = torch.cat([kb[:, :, :-2], kb[:, :, 1:-1], kb[:, :, 2:]], dim=4)  # [b, 1, nb, 1, 3w]
    rows = torch.arange(w).unsqueeze(1)
    cols = torch.arange(3 * w).unsqueeze(0)
    window = (cols - w - rows).abs() <= w  # query r of a block, key c of its 3 blocks: distance c - w - r
    bias = torch.where(window, kb, torch.full((), low, dtype=query.dtype))
    scores = torch.matmul(q, k.transpose(-1, -2)) * (d ** -0.5) + bias
    out = torch.matmul(torch.softmax(scores, dim=-1), v).reshape(b, h, nb * w, d)
    return out[:, :, :n]


def _multi_head_attention_fn():
    import torch

    class MultiHeadAttention(torch.autograd.Function):
        """SDPA with a key padding mask in PyTorch; com.microsoft::MultiHeadAttention in the exported graph.
        query [batch, L, heads * head_dim]; key / value [batch, heads, L, head_dim]; key_mask [batch, L] int32."""

        @staticmethod
        def forward(ctx, query, key, value, key_mask, num_heads: int):
            b, n, _ = query.shape
            q = query.reshape(b, n, num_heads, -1).transpose(1, 2)
            bias = _key_bias(key_mask, query.dtype)
            out = torch.nn.functional.scaled_dot_product_attention(q, key, value, attn_mask=bias)
            return out.transpose(1, 2).reshape(b, n, -1)

        @staticmethod
        def symbolic(g, query, key, value, key_mask, num_heads: int):
            from torch.onnx import symbolic_helper

            empty = symbolic_helper._optional_input_placeholder_tensor(g)  # no packed QKV bias
            out = g.op("com.microsoft::MultiHeadAttention", query, key, value, empty, key_mask,
                       num_heads_i=num_heads)
            out.setType(query.type())
            return out

    return MultiHeadAttention


def _attention_forward(mm, mha):
    """A replacement for transformers' ModernBERT attention functions (same signature)."""
    import torch

    def forward(module, qkv, attention_mask, sliding_window_mask, position_ids, local_attention, bs, dim, **_):
        cos, sin = module.rotary_emb(qkv, position_ids=position_ids)
        query, key, value = qkv.transpose(3, 1).unbind(dim=2)  # [batch, heads, L, head_dim]
        query, key = mm.apply_rotary_pos_emb(query, key, cos, sin)
        key_bias = attention_mask[:, 0, 0, :]  # [batch, L]: the [batch, 1, 1, L] mask of _update_attention_mask
        if local_attention != (-1, -1):
            out = banded_attention(query, key, value, key_bias, local_attention[0])
            return (out.transpose(1, 2).contiguous().view(bs, -1, dim),)
        key_mask = (key_bias == 0).to(torch.int32)
        q = query.transpose(1, 2).reshape(bs, -1, dim)
        return (mha.apply(q, key, value, key_mask, module.num_heads),)

    return forward


def _update_attention_mask(self, attention_mask, output_attentions: bool):
    return _key_bias(attention_mask, self.dtype), None


@contextlib.contextmanager
def modernbert_export_attention(model):
    """While active, `model` (a transformers ModernBERT) runs and traces with banded local attention and ONNX
    Runtime's MultiHeadAttention for global layers. A no-op, with a log line, for any other attention setup."""
    from transformers.models.modernbert import modeling_modernbert as mm

    impl = getattr(model.config, "_attn_implementation", None)
    local = getattr(model.config, "local_attention", 0)
    table = getattr(mm, "MODERNBERT_ATTENTION_FUNCTION", None)
    if impl not in ("sdpa", "eager") or not isinstance(table, dict) or local < 2 \
            or not hasattr(mm.ModernBertModel, "_update_attention_mask"):
        log.info("ModernBERT export attention: left as is (attn_implementation %r)", impl)
        yield False
        return
    saved = dict(table)
    saved_mask = mm.ModernBertModel._update_attention_mask
    table[impl] = _attention_forward(mm, _multi_head_attention_fn())
    mm.ModernBertModel._update_attention_mask = _update_attention_mask
    try:
        yield True
    finally:
        table.clear()
        table.update(saved)
        mm.ModernBertModel._update_attention_mask = saved_mask
