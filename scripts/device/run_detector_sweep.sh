# On the lent GPU machine (device tool `run`, carry [".gpu"], timeout_s 570):
#   set -o pipefail; SWEEP_BUDGET=480 bash scripts/device/run_detector_sweep.sh 2>&1 | tee $OUT/run.log
# Installs the carried wheels, unpacks the fp16 MiniLM, checks the imports on the GPU, then runs
# scripts/device/detector_sweep.py (results: $OUT/summary.json and $OUT/sweep.tgz). Prepared and smoke-tested on
# the CPU; ran once on an H200 on 2026-12-04 (docs/experiments.md, "recipe sweep on an H200").
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD HALUGATE_DATA_DIR=$PWD/.gpu/data HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1
mkdir -p /tmp/minilm && cp .gpu/minilm/*.json .gpu/minilm/vocab.txt /tmp/minilm/ \
  && gunzip -c .gpu/minilm/model.safetensors.gz > /tmp/minilm/model.safetensors || exit 4
export SWEEP_MODEL=/tmp/minilm
nproc --all; nvidia-smi --query-gpu=name,memory.used --format=csv
python3 - <<'PY' || exit 5
import torch, transformers, tokenizers, datasets
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__,
      "tokenizers", tokenizers.__version__, "datasets", datasets.__version__)
from training.detector import DetectorConfig  # noqa: F401  our code imports
from transformers import AutoModelForTokenClassification
m = AutoModelForTokenClassification.from_pretrained("/tmp/minilm", num_labels=2).cuda()
print("model ok", m(torch.ones(1, 8, dtype=torch.long).cuda()).logits.shape)
PY
echo "setup $(( $(date +%s) - T0 ))s"
python3 scripts/device/detector_sweep.py /tmp/sweep "$OUT" "${SWEEP_BUDGET:-480}"
