"""`precision: auto` picks the faster shipped ONNX file per model and CPU (inference.precision), caches it, and
names the CPU (inference.hardware). The selection logic runs on injected timings: no real CPU speed is needed."""

from __future__ import annotations

import json
import logging
import os

import pytest

from inference.hardware import CpuInfo, cpu_class, parse_cpuinfo
from inference.precision import PrecisionCache, cache_dir, choose, decide, time_sessions, timing_shape

AVX2 = CpuInfo("AMD EPYC 7B12", frozenset({"avx2", "fma"}), 2, 2)
VNNI = CpuInfo("AMD EPYC 9B14", frozenset({"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"}), 2, 2)


class FakeInput:
    def __init__(self, name, type_="tensor(int64)"):
        self.name, self.type = name, type_


class FakeSession:
    def __init__(self, path):
        self.path, self.calls = path, []

    def get_inputs(self):
        return [FakeInput("input_ids"), FakeInput("attention_mask"), FakeInput("token_type_ids", "tensor(int32)")]

    def run(self, outputs, feeds):
        self.calls.append({k: (v.shape, v.dtype) for k, v in feeds.items()})
        return [None]


@pytest.fixture
def export_dir(tmp_path):
    d = tmp_path / "export"
    d.mkdir()
    (d / "model.onnx").write_bytes(b"fp32" * 10)
    (d / "model_quantized.onnx").write_bytes(b"int8" * 5)
    return d


class Loader:
    def __init__(self):
        self.loaded = []

    def __call__(self, path):
        self.loaded.append(path.name)
        return FakeSession(path)


def timer_of(fp32_ms, int8_ms):
    def timer(sessions, feeds):
        assert set(sessions) == {"fp32", "int8"}
        return {"fp32": [fp32_ms, fp32_ms + 5, fp32_ms - 1], "int8": [int8_ms, int8_ms + 5, int8_ms - 1]}
    return timer


def run_decide(export_dir, cache, fp32_ms, int8_ms, cpu=VNNI, load=None, **kw):
    load = load or Loader()
    decision, session = decide(export_dir, fp32=export_dir / "model.onnx", int8=export_dir / "model_quantized.onnx",
                               task="token", max_length=512, load=load, threads=2, cache=cache, cpu=cpu,
                               timer=timer_of(fp32_ms, int8_ms), runtime="1.23.0", **kw)
    return decision, session, load


# ---- the rule ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fp32, int8, expected", [
    (100.0, 60.0, "int8"),    # AVX-512 VNNI: int8 clearly faster
    (142.0, 200.0, "fp32"),   # AVX2-only (the 512-token Detector figures measured there): int8 slower
    (100.0, 98.0, "fp32"),    # 2% faster is within noise: the exact model wins
    (100.0, 97.0, "int8"),    # 3% is enough
    (100.0, 100.0, "fp32"),
])
def test_choose_takes_int8_only_when_it_is_faster(fp32, int8, expected):
    assert choose(fp32, int8) == expected


def test_choose_refuses_impossible_timings():
    with pytest.raises(ValueError, match="positive"):
        choose(0.0, 10.0)


def test_timing_shape_follows_the_task_and_the_model_length():
    assert timing_shape("token", 512) == (1, 512)
    assert timing_shape("token", 8192) == (1, 512)
    assert timing_shape("sequence", 512) == (1, 128)
    assert timing_shape("sequence", 64) == (1, 64)


# ---- decide: measured, cached, invalidated ---------------------------------------------------------------------

def test_decide_measures_then_hits_the_cache(export_dir, tmp_path, caplog):
    cache = PrecisionCache(tmp_path / "cache" / "precision.json")
    with caplog.at_level(logging.INFO, logger="halugate.inference"):
        decision, session, load = run_decide(export_dir, cache, 100.0, 60.0)
    assert (decision.precision, decision.file, decision.source) == ("int8", "model_quantized.onnx", "measured")
    assert (decision.fp32_ms, decision.int8_ms) == (100.0, 60.0)  # medians of the injected calls
    assert decision.cpu_class == "AVX-512 VNNI+BF16" and decision.shape == [1, 512]
    assert session.path.name == "model_quantized.onnx"  # the timed session is handed back, not loaded again
    assert sorted(load.loaded) == ["model.onnx", "model_quantized.onnx"]
    assert "int8 60.0 ms vs fp32 100.0 ms" in caplog.text  # the decision and both timings are logged
    entry = next(iter(json.loads(cache.path.read_text())["entries"].values()))
    assert entry["precision"] == "int8" and entry["fp32_all_ms"] == [100.0, 105.0, 99.0]

    # a later load pays nothing: no session is loaded or timed, the cached decision (and its timings) come back
    decision2, session2, load2 = run_decide(export_dir, cache, 1.0, 999.0)
    assert (decision2.precision, decision2.source, decision2.int8_ms) == ("int8", "cached", 60.0)
    assert decision2.reason.startswith("int8 measured 1.67x faster than fp32") and "cached in" in decision2.reason
    assert session2 is None and load2.loaded == []

    # --retime (HALUGATE_PRECISION_RETIME=1) measures again and replaces the entry
    decision3, _, _ = run_decide(export_dir, cache, 50.0, 80.0, retime=True)
    assert (decision3.precision, decision3.source) == ("fp32", "measured")
    assert run_decide(export_dir, cache, 1.0, 999.0)[0].precision == "fp32"


def test_avx2_keeps_fp32_where_int8_is_slower(export_dir, tmp_path):
    decision, session, _ = run_decide(export_dir, PrecisionCache(tmp_path / "p.json"), 142.0, 200.0, cpu=AVX2)
    assert (decision.precision, decision.file) == ("fp32", "model.onnx")
    assert decision.cpu_class == "x86-64 AVX2" and "not at least 3% faster" in decision.reason
    assert session.path.name == "model.onnx"


def test_a_changed_file_or_another_cpu_is_a_cache_miss(export_dir, tmp_path):
    cache = PrecisionCache(tmp_path / "p.json")
    run_decide(export_dir, cache, 100.0, 60.0)
    assert run_decide(export_dir, cache, 100.0, 60.0)[0].source == "cached"
    # another CPU (other speed flags): measured again, and its decision stands beside the first
    d_avx2 = run_decide(export_dir, cache, 142.0, 200.0, cpu=AVX2)[0]
    assert (d_avx2.source, d_avx2.precision) == ("measured", "fp32")
    assert run_decide(export_dir, cache, 1.0, 2.0, cpu=AVX2)[0].source == "cached"
    assert run_decide(export_dir, cache, 1.0, 2.0, cpu=VNNI)[0].precision == "int8"
    # a re-export rewrites the int8 file (other size / mtime): the old decision no longer applies
    (export_dir / "model_quantized.onnx").write_bytes(b"int8, re-exported")
    d = run_decide(export_dir, cache, 100.0, 120.0)[0]
    assert (d.source, d.precision) == ("measured", "fp32")
    # the same size, a newer modification time only
    st = (export_dir / "model.onnx").stat()
    os.utime(export_dir / "model.onnx", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert run_decide(export_dir, cache, 100.0, 50.0)[0].source == "measured"


def test_the_key_covers_threads_and_the_runtime_version(export_dir, tmp_path):
    cache = PrecisionCache(tmp_path / "p.json")
    load = Loader()
    base = {"fp32": export_dir / "model.onnx", "int8": export_dir / "model_quantized.onnx", "task": "token",
                "max_length": 512, "load": load, "cache": cache, "cpu": VNNI, "timer": timer_of(100.0, 60.0)}
    assert decide(export_dir, threads=2, runtime="1.23.0", **base)[0].source == "measured"
    assert decide(export_dir, threads=2, runtime="1.23.0", **base)[0].source == "cached"
    assert decide(export_dir, threads=4, runtime="1.23.0", **base)[0].source == "measured"
    assert decide(export_dir, threads=2, runtime="1.24.0", **base)[0].source == "measured"


def test_only_the_shipped_files_are_candidates(export_dir, tmp_path):
    """No int8 file (the export refused it, or did not quantise): fp32, nothing loaded or timed."""
    load = Loader()
    decision, session = decide(export_dir, fp32=export_dir / "model.onnx", int8=None, task="token", max_length=512,
                               load=load, cache=PrecisionCache(tmp_path / "p.json"), cpu=VNNI,
                               timer=timer_of(100.0, 1.0), runtime="x")
    assert (decision.precision, decision.source, session, load.loaded) == ("fp32", "only-fp32", None, [])
    assert "no int8 file" in decision.reason
    assert not (tmp_path / "p.json").exists()


def test_an_int8_fp32_fallback_is_charged_to_int8(export_dir, tmp_path):
    """A sequence classifier whose int8 answers its near-ties again in fp32 (int8_fallback.json) pays that share of
    fp32's time: 70 ms + 40% of 100 ms is slower than fp32, so fp32 runs; without the fallback int8 would."""
    from inference.precision import fallback_share

    assert fallback_share(export_dir) == 0.0
    (export_dir / "int8_fallback.json").write_text(json.dumps({"margin": 0.5, "fp32_file": "model.onnx"}))
    (export_dir / "export_report.json").write_text(json.dumps({"parity": {"int8": {"fallback_rate": 0.4}}}))
    assert fallback_share(export_dir) == 0.4
    cache = PrecisionCache(tmp_path / "p.json")
    assert run_decide(export_dir, cache, 100.0, 70.0)[0].precision == "int8"
    d = run_decide(export_dir, cache, 100.0, 70.0, int8_fallback_share=0.4)[0]
    assert (d.precision, d.source, d.int8_ms) == ("fp32", "measured", 110.0)
    assert "fp32 fallback on 40.0% of inputs" in d.reason


def test_an_unreadable_or_unwritable_cache_is_passed_over(export_dir, tmp_path, caplog):
    bad = tmp_path / "p.json"
    bad.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="halugate.inference"):
        assert run_decide(export_dir, PrecisionCache(bad), 100.0, 60.0)[0].source == "measured"
    assert "unreadable" in caplog.text
    assert run_decide(export_dir, PrecisionCache(bad), 1.0, 2.0)[0].source == "cached"  # rewritten whole
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="halugate.inference"):
        d = run_decide(export_dir, PrecisionCache(blocker / "sub" / "p.json"), 100.0, 60.0)[0]
    assert d.precision == "int8" and "not written" in caplog.text


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HALUGATE_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("HALUGATE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "halugate"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "halugate"


def test_time_sessions_alternates_after_a_warm_up():
    order = []

    class S(FakeSession):
        def __init__(self, name):
            super().__init__(name)
            self.name = name

        def run(self, outputs, feeds):
            order.append(self.name)

    ticks = iter(range(1000))
    times = time_sessions({"fp32": S("fp32"), "int8": S("int8")}, {"fp32": {}, "int8": {}}, runs=3,
                          clock=lambda: next(ticks) / 1000)
    assert order == ["fp32", "int8"] + ["fp32", "int8"] * 3
    assert times == {"fp32": pytest.approx([1.0] * 3), "int8": pytest.approx([1.0] * 3)}


def test_the_timing_input_matches_the_graph_inputs(export_dir, tmp_path):
    _decision, session = decide(export_dir, fp32=export_dir / "model.onnx", int8=export_dir / "model_quantized.onnx",
                               task="sequence", max_length=512, load=Loader(), threads=1,
                               cache=PrecisionCache(tmp_path / "p.json"), cpu=VNNI,
                               timer=lambda s, f: time_sessions(s, f, runs=2), runtime="x")
    assert len(session.calls) == 3  # one warm-up, two timed
    assert session.calls[0] == {"input_ids": ((1, 128), "int64"), "attention_mask": ((1, 128), "int64"),
                                "token_type_ids": ((1, 128), "int32")}


# ---- the CPU description ---------------------------------------------------------------------------------------

CPUINFO = """processor\t: 0
model name\t: AMD EPYC 7B13
physical id\t: 0
core id\t: 0
flags\t\t: fpu sse4_2 avx fma avx2 bmi2

processor\t: 1
model name\t: AMD EPYC 7B13
physical id\t: 0
core id\t: 0
flags\t\t: fpu sse4_2 avx fma avx2 bmi2

processor\t: 2
model name\t: AMD EPYC 7B13
physical id\t: 0
core id\t: 1
flags\t\t: fpu sse4_2 avx fma avx2 bmi2
"""


def test_parse_cpuinfo_counts_physical_cores_and_reads_the_flags():
    model, flags, physical = parse_cpuinfo(CPUINFO)
    assert model == "AMD EPYC 7B13" and physical == 2 and {"avx2", "fma"} <= flags and "avx512f" not in flags
    info = CpuInfo(model, flags, physical, 3)
    assert info.cpu_class == "x86-64 AVX2" and info.isa == ("avx2", "fma") and not info.native_bf16
    assert info.describe() == "AMD EPYC 7B13 (x86-64 AVX2; avx2 fma), 2 physical / 3 visible cores"


@pytest.mark.parametrize("flags, label", [
    ({"avx2"}, "x86-64 AVX2"), ({"avx2", "avx_vnni"}, "x86-64 AVX2+AVX-VNNI"), ({"avx2", "avx512f"}, "AVX-512"),
    ({"avx512f", "avx512_vnni"}, "AVX-512 VNNI"), ({"avx512f", "avx512_vnni", "avx512_bf16"}, "AVX-512 VNNI+BF16"),
    ({"avx512f", "avx512_vnni", "amx_tile", "amx_int8", "amx_bf16"}, "AMX"), (set(), "x86-64"),
])
def test_cpu_class_labels(flags, label):
    assert cpu_class(flags) == label


def test_the_fingerprint_changes_with_the_speed_flags_only():
    assert AVX2.fingerprint != VNNI.fingerprint
    more_cores = CpuInfo(AVX2.model, AVX2.flags | {"sse4_2"}, 16, 32)  # cores and other flags: the same class
    assert more_cores.fingerprint == AVX2.fingerprint
    assert cpu_class(set(), machine="aarch64") == "aarch64"


def test_training_hardware_line_is_built_on_the_inference_description():
    from inference.hardware import cpu_info
    from training.hardware import hardware

    assert cpu_info().describe() in hardware()


# ---- through the runner and the service ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_int8_export(tmp_path_factory, minilm_dir):
    from detect_helpers import export_tiny, make_run_dir

    from inference.labels import DETECTOR_LABELS

    root = tmp_path_factory.mktemp("precision-export")
    return export_tiny(make_run_dir(root / "run", "token", DETECTOR_LABELS, minilm_dir), root / "export",
                       quantize=True)


def test_the_runner_times_once_then_reads_the_cache(tiny_int8_export, monkeypatch, tmp_path):
    from inference.runners import load_runner

    monkeypatch.setenv("HALUGATE_CACHE_DIR", str(tmp_path / "cache"))
    first = load_runner(tiny_int8_export, "token")  # real timings on this CPU
    d = first.precision_decision
    assert d.source == "measured" and d.fp32_ms > 0 and d.int8_ms > 0 and d.shape == [1, 512]
    assert first.onnx_path.name == d.file and first.precision == d.precision
    assert d.precision == choose(d.fp32_ms, d.int8_ms)
    second = load_runner(tiny_int8_export, "token")
    assert second.precision_decision.source == "cached" and second.onnx_path.name == d.file
    monkeypatch.setenv("HALUGATE_PRECISION_RETIME", "1")
    assert load_runner(tiny_int8_export, "token").precision_decision.source == "measured"


def test_forced_and_pinned_files_time_nothing(tiny_int8_export, monkeypatch, tmp_path):
    from inference.runners import load_runner

    monkeypatch.setenv("HALUGATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("inference.precision.time_sessions", lambda *a: pytest.fail("timed a forced precision"))
    for precision, file in (("fp32", "model.onnx"), ("int8", "model_quantized.onnx")):
        d = load_runner(tiny_int8_export, "token", precision=precision).precision_decision
        assert (d.precision, d.file, d.source, d.fp32_ms) == (precision, file, "forced", None)
    d = load_runner(tiny_int8_export, "token", onnx_file="model.onnx").precision_decision
    assert (d.file, d.source) == ("model.onnx", "pinned")
    assert not (tmp_path / "cache" / "precision.json").exists()


def test_metrics_show_the_cpu_and_each_stage_decision(tiny_int8_export, auto_prefers_int8):
    pytest.importorskip("prometheus_client")
    from inference.runners import load_runner
    from inference.serve.metrics import Metrics

    m = Metrics()
    m.observe_models({"detector": load_runner(tiny_int8_export, "token"),
                      "sentinel": load_runner(tiny_int8_export, "token", precision="fp32"), "explainer": None})
    text = m.render().decode()
    assert 'halugate_model_precision_info{file="model_quantized.onnx",precision="int8"' in text
    assert 'source="measured",stage="detector"' in text and 'source="forced",stage="sentinel"' in text
    assert 'halugate_precision_timing_ms{precision="fp32",stage="detector"} 10.0' in text
    assert 'halugate_precision_timing_ms{precision="int8",stage="detector"} 5.0' in text
    assert "halugate_cpu_info{" in text and 'cpu_class="' in text
