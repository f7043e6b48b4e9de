"""Model card + Hub publishing: front matter, HfApi calls (mocked at the boundary), dry run, refusals."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import yaml

from inference.labels import SENTINEL_LABELS
from training import publish as publish_mod
from training.model_card import render_card
from training.publish import IGNORE_PATTERNS, PublishError, main, publish

TOKEN = "hf_" + "Ab3" * 12  # shaped like a real token; must never leak

METRICS = {
    "test": {
        "n": 200, "accuracy": 0.9123, "macro_f1": 0.8877,
        "per_class": {"NO_FACT_CHECK_NEEDED": {"precision": 0.9, "recall": 0.8, "f1": 0.85, "support": 80},
                      "FACT_CHECK_NEEDED": {"precision": 0.92, "recall": 0.95, "f1": 0.93, "support": 120}},
        "per_source_accuracy": {"nq_open": {"accuracy": 0.95, "n": 120}, "alpaca": {"accuracy": 0.85, "n": 80}},
    },
    "dev": {"n": 190, "accuracy": 0.9, "macro_f1": 0.88},
    "train_size": 1600, "dev_size": 190, "test_size": 200, "base_model": "offline:minilm",
    "global_steps": 150, "train_seconds": 321.0, "hardware": "CPU x86_64, 2 cores",
}


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A run dir as training writes it (weights are a tiny real safetensors file; nothing here needs torch)."""
    from safetensors.numpy import save_file

    d = tmp_path / "run"
    d.mkdir()
    save_file({"w": np.zeros((2, 2), dtype=np.float32)}, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({"architectures": ["BertForSequenceClassification"],
                                               "model_type": "bert", "id2label": {"0": "A", "1": "B"}}))
    (d / "tokenizer.json").write_text("{}")
    (d / "label_map.json").write_text(json.dumps({"labels": SENTINEL_LABELS}))
    (d / "config.yaml").write_text(yaml.safe_dump({
        "run": {"output_dir": "runs/x", "seed": 42},
        "model": {"base_model": "offline:minilm", "max_length": 256,
                  "lora": {"enabled": True, "r": 16, "alpha": 32, "dropout": 0.1}},
        "train": {"learning_rate": 3e-4, "epochs": 3, "batch_size": 32},
        "data": {"sources": [{"name": "nq_open", "limit": 100}, {"name": "alpaca"}]},
    }))
    (d / "metrics.json").write_text(json.dumps(METRICS))
    (d / "test.jsonl").write_text('{"text": "q", "label": 1}\n')
    (d / "train.log").write_text("log\n")
    ck = d / "checkpoints" / "checkpoint-10"
    ck.mkdir(parents=True)
    (ck / "optimizer.pt").write_bytes(b"\x80\x04pickle")  # Trainer resume state: never uploaded
    return d


@pytest.fixture
def export_dir(tmp_path) -> Path:
    d = tmp_path / "export"
    d.mkdir()
    (d / "model.onnx").write_bytes(b"onnx")
    (d / "model_quantized.onnx").write_bytes(b"q")
    (d / "label_map.json").write_text(json.dumps({"labels": SENTINEL_LABELS}))
    (d / "export_report.json").write_text(json.dumps({
        "task": "text-classification", "files": {"fp32": "model.onnx", "int8": "model_quantized.onnx"},
        "size_mb": {"fp32": 86.7, "int8": 22.0},
        "inputs": {"source": "runs/x/test.jsonl", "n_examples": 64},
        "parity": {"fp32": {"file": "model.onnx", "max_abs_diff": 2e-6, "label_agreement": 1.0},
                   "int8": {"file": "model_quantized.onnx", "max_abs_diff": 0.03, "label_agreement": 0.9844}}}))
    return d


class FakeHfApi:
    """Stands in for huggingface_hub.HfApi and records every call."""

    instances: ClassVar[list[FakeHfApi]] = []

    def __init__(self, token=None, **kwargs):
        self.token = token
        self.calls: list[tuple[str, tuple, dict]] = []
        FakeHfApi.instances.append(self)

    def create_repo(self, *args, **kwargs):
        self.calls.append(("create_repo", args, kwargs))

    def create_branch(self, *args, **kwargs):
        self.calls.append(("create_branch", args, kwargs))

    def upload_folder(self, *args, **kwargs):
        self.calls.append(("upload_folder", args, kwargs))

        class Commit:
            commit_url = f"https://huggingface.co/{kwargs['repo_id']}/commit/abc"

        return Commit()


@pytest.fixture
def fake_api(monkeypatch):
    FakeHfApi.instances = []
    monkeypatch.setattr(publish_mod, "HfApi", FakeHfApi)
    return FakeHfApi


def _front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_card_front_matter_carries_metadata_and_metrics(run_dir):
    from huggingface_hub import ModelCard

    from training.data.base import get_adapter

    card = render_card(run_dir, "acme/sentinel-minilm")
    meta = _front_matter(card)
    assert meta["license"] == "apache-2.0"
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert meta["pipeline_tag"] == "text-classification"
    assert meta["language"] == ["en"]
    assert {"halugate", "hallucination-detection", "lora"} <= set(meta["tags"])
    expected_ds = [h for h in (get_adapter("nq_open").hub_id, get_adapter("alpaca").hub_id) if h]
    assert meta.get("datasets", []) == expected_ds
    results = meta["model-index"][0]["results"]
    values = {m["type"]: m["value"] for r in results for m in r["metrics"]}
    assert values == {"accuracy": 0.9123, "f1": 0.8877}
    assert all(r["dataset"]["split"] == "test" for r in results)
    # The Hub's own parser reads the same numbers back.
    parsed = ModelCard(card).data
    assert sorted(e.metric_value for e in parsed.eval_results) == [0.8877, 0.9123]
    for text in ("## Intended use", "| 1 | FACT_CHECK_NEEDED |", "## Training", "learning rate", "## Evaluation",
                 "| test | 200 |", "## Limitations", "### With transformers", "pipeline(",
                 "### With halugate", "nq_open"):
        assert text in card, text
    # Data licences: each source's as its source states it; alpaca (CC BY-NC 4.0) and nq_open (CC BY-SA 3.0) are
    # named in the warning that a model trained on them carries.
    assert "- `alpaca`: CC BY-NC 4.0" in card and "- `nq_open`: CC BY-SA 3.0" in card
    assert "non-commercial (`alpaca`)" in card and "share-alike (`nq_open`)" in card


def test_licences_cover_every_adapter_the_recipes_train_on():
    from training.data.base import get_adapter
    from training.data.licences import GENERATED, licence_note, licence_of

    for recipe in sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml")):
        for spec in (yaml.safe_load(recipe.read_text()).get("data") or {}).get("sources") or []:
            name = spec["name"] if isinstance(spec, dict) else spec
            # local data always has one; a Hub-only source may not (the card then says so)
            assert licence_of(name) is not None or not get_adapter(name).local_files, f"{recipe}: {name}"
    assert licence_of("synthetic_math") == GENERATED
    assert licence_of("synthetic:dolly_extractive").share_alike  # derived data keeps its source's terms
    assert licence_of("sick").non_commercial and licence_of("nli/unknown") is None
    assert "not recorded" in licence_note(["no_such_dataset"]) and "Licence note" not in licence_note(["summedits"])


def test_card_documents_onnx_when_present(run_dir, export_dir):
    card = render_card(run_dir, "acme/sentinel-minilm", onnx_dir=export_dir)
    assert "onnx" in _front_matter(card)["tags"]
    assert 'subfolder="onnx"' in card and "model_quantized.onnx" in card and "0.9844" in card
    assert "fallback" not in card
    assert "times both once per CPU" in card and "Export checks ran on" not in card  # no hardware recorded
    report = json.loads((export_dir / "export_report.json").read_text())
    report["parity"]["int8"].update(label_agreement=0.9961, fallback_margin=0.7312, int8_alone_agreement=0.9883,
                                    fallback_rate=0.125)
    (export_dir / "export_report.json").write_text(json.dumps(report))
    card = render_card(run_dir, "acme/sentinel-minilm", onnx_dir=export_dir)
    assert "0.9961" in card and "less than 0.731 apart" in card and "(12.5% of these inputs)" in card
    assert "`model_quantized.onnx` alone agrees on 0.9883" in card
    assert "(int8, dynamic quantisation)" in card
    report["hardware"] = "Linux AMD EPYC (x86-64 AVX2; avx2 fma), 2 physical / 2 visible cores"
    (export_dir / "export_report.json").write_text(json.dumps(report))
    card = render_card(run_dir, "acme/sentinel-minilm", onnx_dir=export_dir)
    assert "Export checks ran on: Linux AMD EPYC (x86-64 AVX2; avx2 fma), 2 physical / 2 visible cores." in card
    # the card says which int8 file ships: products turned blockwise after a dynamic scheme, or blockwise alone
    report["int8_schemes_tried"] = [{"scheme": "all", "passed": False}, {"scheme": "ffn_fp32", "passed": True},
                                    {"scheme": "kept_blockwise", "products": 7, "passed": True}]
    (export_dir / "export_report.json").write_text(json.dumps(report))
    card = render_card(run_dir, "acme/sentinel-minilm", onnx_dir=export_dir)
    assert "(int8, dynamic quantisation, 7 matrix products blockwise (MatMulNBits; ONNX Runtime >= 1.22))" in card
    report["int8_schemes_tried"] = [{"scheme": "all", "passed": False}, {"scheme": "blockwise_int8", "passed": True}]
    (export_dir / "export_report.json").write_text(json.dumps(report))
    assert "(int8, blockwise: MatMulNBits" in render_card(run_dir, "acme/sentinel-minilm", onnx_dir=export_dir)


def test_publish_goes_through_hfapi(run_dir, export_dir, fake_api, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    url = publish(run_dir, "acme/sentinel-minilm", onnx_dir=export_dir, private=True, revision="v1")
    assert url == "https://huggingface.co/acme/sentinel-minilm/commit/abc"
    (api,) = fake_api.instances
    assert api.token == TOKEN
    names = [c[0] for c in api.calls]
    assert names == ["create_repo", "create_branch", "upload_folder", "upload_folder"]
    _, args, kw = api.calls[0]
    assert args == ("acme/sentinel-minilm",) and kw["private"] is True and kw["exist_ok"] is True
    assert kw["repo_type"] == "model"
    assert api.calls[1][2]["branch"] == "v1"
    up = api.calls[2][2]
    assert up["folder_path"] == str(run_dir) and up["revision"] == "v1" and up["repo_id"] == "acme/sentinel-minilm"
    assert set(IGNORE_PATTERNS) | {"onnx/*"} == set(up["ignore_patterns"]) and "checkpoints/*" in IGNORE_PATTERNS
    onnx_up = api.calls[3][2]
    assert onnx_up["folder_path"] == str(export_dir) and onnx_up["path_in_repo"] == "onnx"
    readme = (run_dir / "README.md").read_text()
    assert readme.startswith("---\n") and TOKEN not in readme
    out = capsys.readouterr()
    assert TOKEN not in out.out + out.err
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_without_token_stops_before_the_hub(run_dir, fake_api, monkeypatch, capsys):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert main(["--model", str(run_dir), "--repo-id", "acme/x"]) == 1
    err = capsys.readouterr().err
    assert "HF_TOKEN" in err and "--dry-run" in err
    assert fake_api.instances == [] and not (run_dir / "README.md").exists()


def test_dry_run_touches_no_network(run_dir, export_dir, monkeypatch, capsys):
    class NoHub:
        def __init__(self, *a, **k):
            raise AssertionError("HfApi must not be used in a dry run")

    def no_connect(*args, **kwargs):
        raise AssertionError("network access in a dry run")

    monkeypatch.setattr(publish_mod, "HfApi", NoHub)
    monkeypatch.setattr(socket.socket, "connect", no_connect)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert main(["--model", str(run_dir), "--repo-id", "acme/x", "--onnx", str(export_dir), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "model.safetensors" in out and "onnx/model_quantized.onnx" in out and "README.md" in out
    listing = out.split("----- README.md -----")[0]
    assert "checkpoints" not in listing and "test.jsonl" not in listing and "train.log" not in listing
    assert "total" in out and "model-index" in out
    assert TOKEN not in out
    assert not (run_dir / "README.md").exists()  # a dry run writes nothing


@pytest.mark.parametrize("bad, match", [
    ("pytorch_model.bin", "pickled"),
    ("modeling_custom.py", "trust_remote_code"),
])
def test_refuses_pickles_and_code(run_dir, fake_api, monkeypatch, bad, match):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    (run_dir / bad).write_bytes(b"x")
    with pytest.raises(PublishError, match=match):
        publish(run_dir, "acme/x")
    assert fake_api.instances == []


def test_refuses_remote_code_config_and_leaked_token(run_dir, fake_api, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    cfg = json.loads((run_dir / "config.json").read_text())
    (run_dir / "config.json").write_text(json.dumps({**cfg, "auto_map": {"AutoModel": "x.Model"}}))
    with pytest.raises(PublishError, match="auto_map"):
        publish(run_dir, "acme/x")
    (run_dir / "config.json").write_text(json.dumps(cfg))
    (run_dir / "notes.txt").write_text(f"token={TOKEN}\n")
    with pytest.raises(PublishError, match="token") as err:
        publish(run_dir, "acme/x", dry_run=True)
    assert TOKEN not in str(err.value)
    assert fake_api.instances == []


def test_card_reads_detector_metrics(run_dir):
    """The Detector's metrics.json (levels of example/span/token scores, Trainer eval_* dev dict) maps cleanly."""
    from inference.labels import DETECTOR_LABELS

    (run_dir / "label_map.json").write_text(json.dumps({"labels": DETECTOR_LABELS}))
    (run_dir / "config.json").write_text(json.dumps({"architectures": ["BertForTokenClassification"]}))
    level = lambda f: {"overall": {"precision": f + 0.05, "recall": f - 0.05, "f1": f}, "by_task_type": {}}
    (run_dir / "metrics.json").write_text(json.dumps({
        "test": {"threshold": 0.5, "max_length": 512, "n_scored": 300, "n_skipped": 0,
                 "levels": {"example": level(0.71), "span": level(0.52), "token": level(0.6)}},
        "dev": {"eval_loss": 0.3, "eval_token_f1": 0.58, "eval_runtime": 12.0, "epoch": 2.0},
    }))
    card = render_card(run_dir, "acme/detector")
    meta = _front_matter(card)
    assert meta["pipeline_tag"] == "token-classification"
    results = meta["model-index"][0]["results"]
    values = {m["name"]: m["value"] for r in results for m in r["metrics"]}
    assert values["Example-level F1"] == 0.71 and values["Span-level F1"] == 0.52
    assert len(values) == 9 and not any("threshold" in k or "n " in k for k in values)
    assert "n=300" in results[0]["dataset"]["name"]
    assert "| dev |" in card and "token_f1" in card and "| runtime" not in card and "eval_loss" not in card


def test_every_offline_base_model_names_its_hub_original():
    # a card for a model fine-tuned from an offline copy must still say which Hub model it started from
    from training.model_card import base_model_id
    from training.models import OFFLINE_HUB_IDS, OFFLINE_MODELS, SPLIT_ZIP_MODELS
    assert set(OFFLINE_HUB_IDS) == {*OFFLINE_MODELS, *SPLIT_ZIP_MODELS}
    for name in [*OFFLINE_MODELS, *SPLIT_ZIP_MODELS]:
        assert base_model_id(f"offline:{name}").startswith("sentence-transformers/all-"), name
    assert base_model_id("offline:mpnet") == "sentence-transformers/all-mpnet-base-v2"
