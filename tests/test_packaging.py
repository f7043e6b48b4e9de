"""The runtime works outside a checkout: its default config ships inside the `inference` package.

configs/inference.yaml is the repository's documented copy; inference/defaults/inference.yaml is the same file
shipped as package data. `HaluGate.from_config()` and `python -m inference.detect` use configs/inference.yaml
from the current directory when there is one, else the packaged copy. The slow test builds the wheel offline,
installs it into a fresh venv and runs detection from a temporary directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from inference.config import to_dict
from inference.detect import HaluGate
from inference.labels import DETECTOR_LABELS
from inference.settings import PACKAGED_CONFIG, REPO_CONFIG, default_config_path, load_settings

REPO = Path(__file__).resolve().parents[1]


def test_packaged_config_is_the_repository_config():
    assert PACKAGED_CONFIG == REPO / "inference" / "defaults" / "inference.yaml"
    assert PACKAGED_CONFIG.read_bytes() == (REPO / REPO_CONFIG).read_bytes(), (
        "configs/inference.yaml and inference/defaults/inference.yaml differ: edit one, copy it to the other")


def test_pyproject_ships_the_defaults_as_package_data():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = data["tool"]["setuptools"]["package-data"]["inference"]
    assert any(PACKAGED_CONFIG.relative_to(REPO / "inference").match(p) for p in patterns), patterns


def test_default_config_is_the_checkout_one_else_the_packaged_one(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    assert default_config_path() == REPO_CONFIG
    monkeypatch.chdir(tmp_path)
    assert default_config_path() == PACKAGED_CONFIG


def test_from_config_outside_a_checkout_reads_the_packaged_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    gate = HaluGate.from_config(None, load=False)
    expected = load_settings(REPO / REPO_CONFIG)
    assert to_dict(gate.settings) == to_dict(expected)  # model dirs resolved as from the checkout's root
    assert gate.settings.decisions and gate.settings.hallucination_mitigation.hallucination_model.threshold == 0.8


# ---- the wheel, in a fresh venv ------------------------------------------------------------------------------

def _tiny_onnx_detector(out: Path, tokenizer_dir: str) -> Path:
    """A token classifier as small as it gets: logits = a per-token-id table (ONNX Gather), MiniLM's tokenizer.
    Every token but the specials is HALLUCINATED, so detection must return a span."""
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    tok = json.loads((Path(tokenizer_dir) / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = max(tok["model"]["vocab"].values()) + 1
    table = np.tile(np.array([[-4.0, 4.0]], dtype=np.float32), (vocab, 1))
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "input_ids"], ["logits"], axis=0)], "tiny-detector",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", 2])],
        [numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    out.mkdir(parents=True)
    onnx.save(model, str(out / "model.onnx"))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (Path(tokenizer_dir) / name).is_file():
            shutil.copy(Path(tokenizer_dir) / name, out / name)
    (out / "label_map.json").write_text(json.dumps({"labels": list(DETECTOR_LABELS)}))
    return out


@pytest.mark.slow
def test_wheel_installs_and_detects_outside_the_checkout(tmp_path, minilm_dir):
    # Build from a copy of the sources, so the checkout gets no build/ or egg-info from this test.
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("inference", "training", "eval"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    dist = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "--quiet", "-w", str(dist), str(src)], check=False, capture_output=True, text=True,
                           timeout=600)
    wheels = sorted(dist.glob("halugate-*.whl"))
    if built.returncode != 0 or not wheels:
        pytest.skip(f"the wheel cannot be built offline here: {(built.stderr or built.stdout).strip()[-300:]}")

    # A fresh venv that sees this environment's dependencies (numpy, tokenizers, onnxruntime, pyyaml) but not
    # the checkout: this venv is itself a venv, so --system-site-packages would only reach the base Python; a
    # .pth line adds its site-packages as a plain path (its own .pth files, e.g. the editable install's finder,
    # are not run), after the fresh venv's own site-packages.
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    fresh_site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                     capture_output=True, text=True, check=True).stdout.strip())
    (fresh_site / "halugate_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps",
                                "--no-index", "--quiet", str(wheels[0])], check=False, capture_output=True,
                               text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr

    detector = _tiny_onnx_detector(tmp_path / "models" / "detector", minilm_dir)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["OMP_NUM_THREADS"] = "1"

    def run(*args):
        return subprocess.run([str(py), *args], check=False, cwd=work, env=env, capture_output=True, text=True,
                              timeout=300)

    probe = run("-c", (
        "import json, sys, inference, inference.detect\n"
        "from pathlib import Path\n"
        "from inference.detect import HaluGate\n"
        "from inference.settings import PACKAGED_CONFIG, default_config_path\n"
        "assert Path(inference.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()), inference.__file__\n"
        "assert default_config_path() == PACKAGED_CONFIG and PACKAGED_CONFIG.is_file()\n"
        "gate = HaluGate.from_config(overrides=['hallucination_mitigation.hallucination_model.model_id="
        f"{detector}'])\n"
        "assert gate.settings.decisions and gate.runners['detector'] is not None, gate.load_errors\n"
        f"gate = HaluGate.from_dirs({str(detector)!r})\n"
        "r = gate.detect(context='The tower is in Paris.', question='Where is it?', answer='It is in Rome.')\n"
        "print(json.dumps({'status': r.status, 'spans': len(r.spans)}))\n"))
    assert probe.returncode == 0, probe.stderr
    result = json.loads(probe.stdout.strip().splitlines()[-1])
    assert result["status"] == "ok" and result["spans"] >= 1, result

    helped = run("-m", "inference.detect", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "packaged" in helped.stdout or "package" in helped.stdout

    cli = run("-m", "inference.detect", "--detector", str(detector), "--compact",
              "--context", "The tower is in Paris.", "--question", "Where is it?", "--answer", "It is in Rome.")
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout.strip().splitlines()[-1])["hallucination_detected"] is True
