#!/usr/bin/env bash
# `make demo`: train quick offline versions of the three models, export them to ONNX, and run detection.
# Usage: scripts/demo.sh [DEMO_DIR]   (default runs/demo; needs the public data under $HALUGATE_DATA_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO_DIR="${1:-runs/demo}"
PY="${PY:-.venv/bin/python}"
export HALUGATE_DATA_DIR="${HALUGATE_DATA_DIR:-$(cd .. && pwd)/shared/data}"
if [ ! -d "$HALUGATE_DATA_DIR" ]; then
  echo "error: data dir $HALUGATE_DATA_DIR not found; set HALUGATE_DATA_DIR to the public data (see README)" >&2
  exit 2
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

step() { printf '\n==== %s\n' "$*"; }

for model in sentinel detector explainer; do
  if [ -f "$DEMO_DIR/$model/metrics.json" ]; then
    step "$model: already trained in $DEMO_DIR/$model (delete it to retrain)"
  else
    step "training a quick $model (configs/$model.demo.yaml)"
    "$PY" -m "training.$model" --config "configs/$model.demo.yaml" --output-dir "$DEMO_DIR/$model"
  fi
  if [ -f "$DEMO_DIR/export/$model/model.onnx" ] && [ "$DEMO_DIR/export/$model/model.onnx" -nt "$DEMO_DIR/$model/metrics.json" ]; then
    step "$model: already exported to $DEMO_DIR/export/$model"
  else
    step "exporting $model to ONNX"
    # --overwrite: a retrained model replaces an older export (a second `make demo` must not fail on it);
    # --quantize int8: shipped only where it keeps >= 0.99 agreement with fp32 (the runtime then uses it)
    "$PY" -m training.export --model "$DEMO_DIR/$model" --out "$DEMO_DIR/export/$model" --overwrite --quantize int8
  fi
done

MODELS=(--sentinel "$DEMO_DIR/export/sentinel" --detector "$DEMO_DIR/export/detector" --explainer "$DEMO_DIR/export/explainer")

step "detection: the Eiffel Tower answer (tool result as context)"
"$PY" -m inference.detect --config configs/inference.yaml "${MODELS[@]}" --messages examples/eiffel_messages.json

step "detection: a creative-writing prompt (the Sentinel should skip verification)"
"$PY" -m inference.detect --config configs/inference.yaml "${MODELS[@]}" --messages examples/creative_messages.json
