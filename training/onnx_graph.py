"""Graph-level work on an exported ONNX model: ONNX Runtime's transformer fusions and int8 quantisation schemes.

Both are only ever kept after training.export's parity check against PyTorch (docs/export.md has the figures):

- `fuse_transformer`: onnxruntime.transformers' offline fusions (Attention, EmbedLayerNormalization,
  SkipLayerNormalization, BiasGelu) for BERT-family encoders. ONNX Runtime applies most of them online at session
  start as well, so fp32 gains little; the fused graph matters for int8, where fused attention quantises into
  one QAttention op.
- `quantize_int8`: dynamic quantisation (int8 per-channel weights, uint8 activations scaled at run time) under a
  named scheme. Schemes keep more of the graph in fp32 in order: the feed-forward output projection reads GELU
  activations with large outliers, the one place where per-tensor activation scales lose most (Bondarenko et
  al., 2021), then the whole feed-forward block; each with and without the embedding lookups in fp32 (their
  rounding error enters the residual stream of every layer, and they cost no matrix products). Export tries
  them in order and ships the first that passes the agreement floor.
- `blockwise_int8`, tried after the dynamic schemes: int8 weights with one scale per block of 128 inputs
  (ONNX Runtime's MatMulNBits, bits=8), and at accuracy level 4 the activations quantised to int8 per block as
  well at run time (VNNI dot products where the CPU has them). A scale per block, not per tensor, keeps the
  outliers that the dynamic schemes lose. On the mpnet Explainer, where every dynamic scheme missed 0.99, it
  agrees with fp32 on 0.9933 of 1,502 test pairs (docs/export.md). It needs ONNX Runtime 1.22 or newer to run.
- `blockwise_products`, the step after a dynamic scheme passed: the products it keeps in fp32 become MatMulNBits
  as above, since the outliers that rule out a per-tensor scale there are what a scale per block keeps.
- `weighted_nodes` and `quantize_int8(..., keep_fp32=...)`: the pieces of the last resort when no named scheme
  passes (training.export measures which matrix products int8 hurts most and keeps only those in fp32).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger("halugate.export")

# transformers model_type -> onnxruntime.transformers optimizer model type (BERT-style graphs only; ModernBERT and
# MPNet have attention the fusion passes do not recognise, so they are exported unfused)
FUSION_MODEL_TYPES = {"bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "electra": "bert",
                      "distilbert": "bert"}

# scheme -> (substrings of MatMul node names kept in fp32 (BERT-family names, fused or not), op types quantised;
# None: ORT's default set, which includes Gather, the embedding lookups). Tried in this order.
_DEFAULT_OPS = None
_NO_EMBEDDINGS = ("MatMul", "Attention")  # the embedding tables stay fp32: their error enters every layer
INT8_SCHEMES: dict[str, tuple[tuple[str, ...], tuple[str, ...] | None]] = {
    "all": ((), _DEFAULT_OPS),
    "embeddings_fp32": ((), _NO_EMBEDDINGS),
    "ffn_output_fp32": (("/output/dense/",), _DEFAULT_OPS),
    "ffn_output_embeddings_fp32": (("/output/dense/",), _NO_EMBEDDINGS),
    "ffn_fp32": (("/output/dense/", "/intermediate/dense/"), _DEFAULT_OPS),
    "ffn_embeddings_fp32": (("/output/dense/", "/intermediate/dense/"), _NO_EMBEDDINGS),
}


BLOCKWISE_SCHEME = "blockwise_int8"
KEPT_BLOCKWISE = "kept_blockwise"  # after a dynamic scheme: its fp32 products blockwise (blockwise_products)
# 32 agreed more on the mpnet Explainer (0.9947 / 0.9925 on test / never-trained pairs, against 0.9933 / 0.9869)
# but was only 1.06-1.13x faster than fp32, against 1.34x (docs/export.md)
BLOCK_SIZE = 128


def embeddings_fp32(scheme: str) -> bool:
    """Whether `scheme` leaves the embedding lookups in fp32."""
    return scheme == BLOCKWISE_SCHEME or INT8_SCHEMES[scheme][1] == _NO_EMBEDDINGS


def fuse_transformer(src: Path, dst: Path, config) -> dict:
    """Write the fused graph of `src` to `dst`; returns what was fused, or why nothing was (then dst is a copy)."""
    kind = FUSION_MODEL_TYPES.get(getattr(config, "model_type", ""))
    if kind is None:
        shutil.copy2(src, dst)
        return {"applied": False, "reason": f"no ONNX Runtime fusions for model_type {config.model_type!r}"}
    from onnxruntime.transformers import optimizer

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the optimizer logs every pass
    try:
        # opt_level 0: the Python fusions only, so the file stays portable (no hardware-specific ORT rewrites)
        model = optimizer.optimize_model(str(src), model_type=kind, num_heads=config.num_attention_heads,
                                         hidden_size=config.hidden_size, opt_level=0, use_gpu=False)
        model.save_model_to_file(str(dst))
    finally:
        root.setLevel(level)
    fused = {k: v for k, v in model.get_fused_operator_statistics().items() if v}
    return {"applied": bool(fused), "fused_ops": fused}


def excluded_nodes(path: Path, scheme: str) -> list[str]:
    import onnx

    patterns, _ = INT8_SCHEMES[scheme]
    if not patterns:
        return []
    graph = onnx.load(str(path), load_external_data=False).graph
    return [n.name for n in graph.node
            if n.op_type == "MatMul" and "attention" not in n.name and any(p in n.name for p in patterns)]


def weighted_nodes(path: Path) -> list[str]:
    """The MatMul and Attention nodes of `path` in graph order: the matrix products int8 runs in integers."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return [n.name for n in graph.node if n.op_type in ("MatMul", "Attention")]


def quantize_int8(src: Path, dst: Path, scheme: str = "all", keep_fp32: Sequence[str] = ()) -> list[str]:
    """Dynamic int8 quantisation of `src` into `dst` under `scheme`, with the nodes named in `keep_fp32` left in
    fp32 as well; returns the nodes kept in fp32."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # Per-channel int8 on every supported op (MatMul, Attention, Gather/embeddings): on the MiniLM Sentinel label
    # agreement 1.0 on 986 test records, 4x smaller, 1.8-2.3x faster than fp32 (docs/export.md). ORT's
    # pre-processing pass gave no gain, and its symbolic shape inference fails on these graphs; the fused
    # graph's contrib ops have no shape inference, hence DefaultTensorType.
    if scheme == BLOCKWISE_SCHEME:
        return _quantize_blockwise(src, dst, keep_fp32)
    exclude = excluded_nodes(src, scheme)
    exclude += [n for n in keep_fp32 if n not in exclude]
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # ORT logs a "consider pre-processing" line and one line per skipped tensor
    try:
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8, per_channel=True, nodes_to_exclude=exclude,
                         op_types_to_quantize=list(INT8_SCHEMES[scheme][1] or []) or None,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    finally:
        root.setLevel(level)
    return exclude


def _quantize_blockwise(src: Path, dst: Path, keep_fp32: Sequence[str] = ()) -> list[str]:
    """Every MatMul with a constant weight to MatMulNBits (8 bits, blocks of BLOCK_SIZE, int8 compute); the
    embeddings and fused Attention ops stay fp32. Returns the nodes kept in fp32 (those of `keep_fp32`)."""
    import onnx

    _matmul_nbits(onnx.load(str(src)), dst, exclude=keep_fp32)
    return list(keep_fp32)


def blockwise_products(src: Path, dst: Path, nodes: Sequence[str]) -> None:
    """The fp32 MatMul nodes named in `nodes` of `src` (an int8 graph whose other products are dynamic int8) to
    MatMulNBits, written to `dst`. The products a dynamic scheme had to keep in fp32 are those whose activations
    have outliers that one scale per tensor loses; a scale per row and block of 128 inputs keeps them, at a cost
    half-way between fp32 and dynamic int8 on the `make demo` Detector (docs/export.md, 2026-12-07)."""
    import onnx

    model = onnx.load(str(src))
    wanted = set(nodes)
    others = [n.name for n in model.graph.node if n.op_type == "MatMul" and n.name not in wanted]
    _matmul_nbits(model, dst, exclude=others)


def _matmul_nbits(model, dst: Path, exclude: Sequence[str]) -> None:
    """The MatMul nodes of `model` (an onnx.ModelProto) with a constant weight, except `exclude`, to MatMulNBits."""
    # the module calls logging.basicConfig(level=INFO) on import and logs one line per node: undo the one, mute
    # the other
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )
    root.setLevel(level)
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    config = DefaultWeightOnlyQuantConfig(block_size=BLOCK_SIZE, is_symmetric=True, accuracy_level=4, bits=8)
    quantizer = MatMulNBitsQuantizer(model, bits=8, block_size=BLOCK_SIZE, is_symmetric=True,
                                     accuracy_level=4, nodes_to_exclude=list(exclude), algo_config=config)
    quantizer.process()
    quantizer.model.save_model_to_file(str(dst), use_external_data_format=False)


def applicable_schemes(path: Path) -> list[str]:
    """The schemes that differ from each other on this graph (a graph without BERT names has only "all"), then
    the blockwise scheme."""
    out, seen = [], set()
    for scheme, (_, ops) in INT8_SCHEMES.items():
        key = (tuple(excluded_nodes(path, scheme)), ops)
        if key not in seen:
            seen.add(key)
            out.append(scheme)
    return [*out, BLOCKWISE_SCHEME]
