"""scripts/bench_latency.py end to end on random-head MiniLM models (--build-missing): one cell, and the report
names the ONNX file each stage ran, so that a variant pinning another file is not read as the backend's."""

from __future__ import annotations

import json

import numpy as np
import pytest
from script_loader import load_script

pytest.importorskip("optimum.exporters.onnx", reason="optimum-onnx is needed to export the models")


@pytest.mark.slow
def test_bench_latency_smoke_names_the_files_each_stage_ran(tmp_path, minilm_dir, auto_prefers_int8):
    bench = load_script("bench_latency")
    none = tmp_path / "none"  # no trained models: random heads are built and exported
    out = tmp_path / "bench"
    rc = bench.main(["--build-missing", "--out", str(out), "--sentinel", str(none), "--detector", str(none),
                     "--explainer", str(none), "--lengths", "512", "--batches", "1", "--backends", "onnx-auto",
                     "--reps", "1", "--no-lettucedetect", "--allow-busy",
                     "--variant", "fp32det", "hallucination_mitigation.hallucination_model.onnx_file=model.onnx"])
    assert rc in (0, None)
    report = json.loads((out / "latency.json").read_text())
    rows = {r["backend"]: r for r in report["rows"]}
    assert set(rows) == {"onnx-auto", "onnx-auto+fp32det"}
    assert rows["onnx-auto"]["files"]["detector"] == "model_quantized.onnx"  # the random head's int8 is written
    assert rows["onnx-auto+fp32det"]["files"]["detector"] == "model.onnx"
    assert rows["onnx-auto"]["windows_per_input"] >= 1 and rows["onnx-auto"]["total"]["p50"] > 0
    md = (out / "latency.md").read_text()
    assert "onnx-auto+fp32det: sentinel `model_quantized.onnx`, detector `model.onnx`" in md


def test_ratio_interval_brackets_the_ratio_of_medians():
    bench = load_script("bench_latency")
    assert bench.ratio_interval([10.0] * 20, [5.0] * 20) == [2.0, 2.0]  # no spread, no doubt
    rng = np.random.default_rng(1)
    theirs = list(160 + 20 * rng.standard_normal(20))
    ours = list(80 + 4 * rng.standard_normal(20))
    low, high = bench.ratio_interval(theirs, ours)
    point = float(np.median(theirs) / np.median(ours))
    assert low < point < high and high - low < 0.6
    wide_low, wide_high = bench.ratio_interval(theirs[:5], ours[:5])  # fewer repetitions: a wider interval
    assert wide_high - wide_low > high - low
