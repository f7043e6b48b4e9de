"""Published models through the runtime: LettuceDetect-format Detectors give lettucedetect 0.2.3's spans, NLI
label maps are found by name, Sentinels by their fact-check label, Hub ids fail fast without a network.

Every model here is a tiny random checkpoint made in the test (ModernBERT, the architecture of LettuceDetect,
tasksource/ModernBERT-base-nli and halugate-sentinel) with the MiniLM WordPiece tokenizer saved beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from inference.formats import FORMAT_FILE, lettuce_prompt, read_format
from inference.labels import LabelMapError, NliLabelMap, sentinel_label

REPO = Path(__file__).resolve().parents[1]
LETTUCE_CONFIG = REPO / "configs" / "inference.lettucedetect.yaml"
HALUGATE_CONFIG = REPO / "configs" / "inference.halugate.yaml"
MAX_LENGTH = 160  # small enough that the long inputs below need several passage chunks

PASSAGES = [
    "The Eiffel Tower is in Paris. It was completed in 1889 and is 330 metres tall.",
    "The tower was designed by the engineering company of Gustave Eiffel for the World's Fair.",
]
LONG_PASSAGES = [
    f"Passage about topic {i}: the river flows {i * 10} kilometres north of the old mill, past {i + 3} bridges "
    f"built in {1800 + i * 7}, and the town council met there on {i + 1} occasions." for i in range(6)
] + ["An overlong passage: " + " ".join(f"word{i} {i * 3}" for i in range(70))]  # alone over a chunk's budget
ANSWER = "The Eiffel Tower is 500 metres tall and was completed in 1950 by Gustave Eiffel, in Paris, France."
LONG_ANSWER = "The river flows 25 kilometres north, past 9 bridges built in 1801, and the council met 4 times."
ITEMS = [
    {"context": PASSAGES, "question": "How tall is the Eiffel Tower?", "answer": ANSWER},        # QA, fits
    {"context": PASSAGES, "answer": ANSWER},                                                      # summary, fits
    {"context": LONG_PASSAGES, "question": "How far does the river flow?", "answer": LONG_ANSWER},  # QA, chunks
    {"context": LONG_PASSAGES, "answer": LONG_ANSWER},                                            # summary, chunks
    {"context": [" ".join(LONG_PASSAGES)], "answer": "  " + LONG_ANSWER},  # one passage cut to fit; leading spaces
]


def _tokenizer(minilm_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(minilm_dir)
    tok.model_input_names = ["input_ids", "attention_mask"]  # ModernBERT takes no token types
    return tok


def _modernbert_config(tok, **kw):
    from transformers import ModernBertConfig

    return ModernBertConfig(
        vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=512, global_attn_every_n_layers=2, local_attention=64, pad_token_id=tok.pad_token_id,
        bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id, cls_token_id=tok.cls_token_id,
        sep_token_id=tok.sep_token_id, **kw)


@pytest.fixture(scope="module")
def lettuce_checkpoint(tmp_path_factory, minilm_dir) -> Path:
    """A LettuceDetect-shaped checkpoint: ModernBERT token classifier, labels LABEL_0 / LABEL_1, random weights;
    the classifier is scaled up so that tokens fall clearly on both sides of 0.5 (random heads sit at ~0.5)."""
    import torch
    from transformers import ModernBertForTokenClassification

    torch.manual_seed(0)
    tok = _tokenizer(minilm_dir)
    model = ModernBertForTokenClassification(_modernbert_config(tok, num_labels=2)).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(30.0)
    path = tmp_path_factory.mktemp("lettuce-ckpt")
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def lettuce_export(lettuce_checkpoint, tmp_path_factory) -> Path:
    from training.export import export

    out = tmp_path_factory.mktemp("lettuce-export") / "export"
    export(lettuce_checkpoint, out, exporter="torch", samples=8, input_format="lettucedetect")
    return out


@pytest.fixture(scope="module")
def reference_spans(lettuce_checkpoint) -> list[list[tuple[int, int]]]:
    """lettucedetect 0.2.3's own spans on ITEMS (PyTorch, fp32)."""
    pytest.importorskip("lettucedetect", reason="lettucedetect==0.2.3 (pip install --no-deps) is the reference")
    from lettucedetect.models.inference import HallucinationDetector

    det = HallucinationDetector(method="transformer", model_path=str(lettuce_checkpoint), max_length=MAX_LENGTH,
                                device="cpu")
    return [[(s["start"], s["end"]) for s in det.predict(it["context"], it["answer"], it.get("question"),
                                                         output_format="spans")] for it in ITEMS]


def test_the_export_declares_the_lettucedetect_format_and_renames_generic_labels(lettuce_export):
    fmt = read_format(lettuce_export)
    assert (fmt.task, fmt.input_format, fmt.lang) == ("detector", "lettucedetect", "en")
    assert fmt.source_labels == ["LABEL_0", "LABEL_1"]
    assert json.loads((lettuce_export / "label_map.json").read_text())["labels"] == ["SUPPORTED", "HALLUCINATED"]


def test_the_inputs_chunk_as_lettucedetect_chunks_them(lettuce_checkpoint):
    pytest.importorskip("lettucedetect")
    from lettucedetect.detectors.transformer import TransformerDetector
    from tokenizers import Tokenizer

    from inference.formats import lettuce_passage_groups

    ref = TransformerDetector(str(lettuce_checkpoint), max_length=MAX_LENGTH, device="cpu")
    tok = Tokenizer.from_file(str(lettuce_checkpoint / "tokenizer.json"))
    for it in ITEMS:
        ours = lettuce_passage_groups(tok, it["context"], it.get("question"), it["answer"], MAX_LENGTH)
        assert ours == ref._group_passages_into_chunks(it["context"], it.get("question"), it["answer"])
    assert len(lettuce_passage_groups(tok, LONG_PASSAGES, None, LONG_ANSWER, MAX_LENGTH)) > 2  # chunking is tested


def test_the_lettucedetect_config_gives_lettucedetects_spans(lettuce_export, reference_spans, tmp_path):
    """The command of the guide: inference.detect with configs/inference.lettucedetect.yaml, one JSON line per
    input, spans (start, end) exactly lettucedetect's, with and without a question, fitting and chunked."""
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(it) + "\n" for it in ITEMS))
    proc = subprocess.run(
        [sys.executable, "-m", "inference.detect", "--config", str(LETTUCE_CONFIG), "--detector", str(lettuce_export),
         "--input", str(items), "--compact",
         "--set", f"hallucination_mitigation.hallucination_model.max_length={MAX_LENGTH}"],
        check=False, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(ITEMS)
    results = [json.loads(line) for line in lines]
    assert [r["status"] for r in results] == ["ok"] * len(ITEMS)
    windows = [r["detector_windows"] for r in results]
    assert windows[:2] == [1, 1] and min(windows[2:4]) > 1 and windows[4] == 1  # fitting, chunked, cut to fit
    ours = [[(s["start"], s["end"]) for s in r["spans"]] for r in results]
    assert all(reference_spans) and any(len(s) > 1 for s in reference_spans)  # the comparison can fail
    assert ours == reference_spans


@pytest.fixture(scope="module")
def reference_probs(lettuce_checkpoint) -> list[np.ndarray]:
    """lettucedetect's P(hallucinated) per answer token on ITEMS (max over chunks where it chunks)."""
    pytest.importorskip("lettucedetect")
    from lettucedetect.models.inference import HallucinationDetector

    det = HallucinationDetector(method="transformer", model_path=str(lettuce_checkpoint), max_length=MAX_LENGTH,
                                device="cpu")
    return [np.array([t["prob"] for t in det.predict(it["context"], it["answer"], it.get("question"),
                                                      output_format="tokens")]) for it in ITEMS]


def _runtime_probs(export: Path, input_format: str) -> list[np.ndarray]:
    from inference.detect import HaluGate

    gate = HaluGate.from_config(LETTUCE_CONFIG, [
        f"hallucination_mitigation.hallucination_model.model_id={export}",
        f"hallucination_mitigation.hallucination_model.max_length={MAX_LENGTH}",
        f"hallucination_mitigation.hallucination_model.input_format={input_format}"])
    return [sc.model_probs for sc in gate.score_tokens(gate.prepare(ITEMS))]


def test_the_runtime_reads_each_answer_token_as_lettucedetect_does(lettuce_export, reference_probs):
    """Token by token, the probabilities lettucedetect's model gives (PyTorch) are the runtime's (ONNX): the same
    prompts, pairs, answer tokens and chunks. (lettucedetect also lists the closing separator: left out.)"""
    for ours, ref in zip(_runtime_probs(lettuce_export, "lettucedetect"), reference_probs):
        assert len(ref) == len(ours) + 1
        np.testing.assert_allclose(ours, ref[:-1], atol=1e-4)


def test_the_comparison_can_fail_halugates_own_format_reads_other_probabilities(lettuce_export, reference_probs):
    ours = _runtime_probs(lettuce_export, "halugate")
    assert all(len(o) == len(r) - 1 for o, r in zip(ours, reference_probs))
    assert max(float(np.abs(o - r[:-1]).max()) for o, r in zip(ours, reference_probs)) > 1e-3  # 10x the atol


def test_the_prompt_templates_are_lettucedetects():
    pytest.importorskip("lettucedetect")
    from lettucedetect.detectors.prompt_utils import LANG_TO_PASSAGE, PromptUtils

    for lang in LANG_TO_PASSAGE:
        for question in (None, "Who built it?"):
            assert lettuce_prompt(["a $b", "c"], question, lang) == PromptUtils.format_context(
                ["a $b", "c"], question, lang)


def test_remote_code_checkpoints_are_refused_without_the_flag(tmp_path):
    from training.export import ExportInputError, load_run_model

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "eurobert", "architectures": [
        "EuroBertForTokenClassification"], "auto_map": {"AutoModelForTokenClassification": "modeling_eurobert.X"}}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ExportInputError, match="--trust-remote-code"):
        load_run_model(tmp_path)
    from training.export import main

    assert main(["--model", str(tmp_path), "--out", str(tmp_path / "out"), "--input-format", "lettucedetect"]) == 2


# ---- Explainer: NLI label maps by name ---------------------------------------------------------------------

def test_nli_labels_are_found_by_name_in_any_order_and_case():
    assert NliLabelMap(["ENTAILMENT", "Neutral", "contradiction"]).columns == [0, 1, 2]
    assert NliLabelMap(["contradiction", "entailment", "neutral"]).columns == [1, 2, 0]  # cross-encoder order
    two = NliLabelMap(["not_entailment", "Entailment"])
    assert two.two_way and two.kind == "two-way" and two.columns == [1, 0, None]
    np.testing.assert_allclose(two.canonical([[0.3, 0.7]]), [[0.7, 0.3, 0.0]])
    for bad in (["LABEL_0", "LABEL_1", "LABEL_2"], ["entailment", "entailment", "neutral"], ["entailment"]):
        with pytest.raises(LabelMapError):
            NliLabelMap(bad)


def _nli_checkpoint(path: Path, tok, labels: list[str], order: list[int] | None = None, seed: int = 0) -> Path:
    """A tiny random ModernBERT NLI classifier; with `order`, the same weights with its classifier rows and
    id2label permuted (row i of the new head is row order[i] of the original)."""
    import torch
    from transformers import ModernBertForSequenceClassification

    torch.manual_seed(seed)
    model = ModernBertForSequenceClassification(_modernbert_config(
        tok, num_labels=len(labels), id2label=dict(enumerate(labels)),
        label2id={n: i for i, n in enumerate(labels)})).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(40.0)  # clear verdicts from random weights
        if order is not None:
            model.classifier.weight.copy_(model.classifier.weight[order].clone())
            model.classifier.bias.copy_(model.classifier.bias[order].clone())
            names = [labels[i] for i in order]
            model.config.id2label = dict(enumerate(names))
            model.config.label2id = {n: i for i, n in enumerate(names)}
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return path


def _explain(explainer_dir: Path, minilm_dir: str, detector_dir: Path) -> list[list[tuple]]:
    from inference.detect import HaluGate
    from tests.detect_helpers import FakeDetector

    gate = HaluGate.from_config(REPO / "configs" / "inference.yaml", [
        "hallucination_mitigation.fact_check_model.model_id=",
        f"hallucination_mitigation.nli_model.model_id={explainer_dir}",
        "hallucination_mitigation.precision=fp32",
        f"hallucination_mitigation.hallucination_model.model_id={detector_dir}"],
        detector=FakeDetector(minilm_dir))
    assert "explainer" not in gate.load_errors, gate.load_errors
    items = [{"context": "The tower is 330 metres tall and was built in 1889 in Paris.",
              "answer": f"The tower is {n} metres tall and was built in {y}."} for n, y in
             ((500, 1950), (330, 1901), (120, 1889), (45, 2001))]
    out = []
    for r in gate.detect_batch(items):
        assert r.status == "ok", r.errors
        out.append([(s.start, s.end, s.nli_label, round(s.nli_confidence or 0, 4), s.severity,
                     s.evidence.to_dict()["probabilities"] if s.evidence else None) for s in r.spans])
    return out


def test_a_permuted_nli_label_map_gives_the_same_verdicts(minilm_dir, tmp_path):
    from tests.detect_helpers import export_tiny

    tok = _tokenizer(minilm_dir)
    labels = ["entailment", "neutral", "contradiction"]
    exports = []
    for name, order, names in (("plain", None, labels), ("permuted", [2, 0, 1], labels),
                               ("upper", [1, 2, 0], ["ENTAILMENT", "NEUTRAL", "CONTRADICTION"])):
        ckpt = _nli_checkpoint(tmp_path / name, tok, names, order)
        exports.append(export_tiny(ckpt, tmp_path / f"{name}-export"))
    got = [_explain(e, minilm_dir, exports[0]) for e in exports]
    assert any(spans for spans in got[0]) and {s[2] for spans in got[0] for s in spans} - {None}
    assert got[1] == got[0] and got[2] == got[0]


def test_a_two_way_nli_model_is_accepted_and_reported(minilm_dir, tmp_path):
    from tests.detect_helpers import export_tiny

    tok = _tokenizer(minilm_dir)
    export = export_tiny(_nli_checkpoint(tmp_path / "two", tok, ["entailment", "not_entailment"]),
                         tmp_path / "two-export")
    got = _explain(export, minilm_dir, export)
    spans = [s for item in got for s in item]
    assert spans, "the fake Detector flags numbers the context lacks"
    for _, _, label, _, _, probs in spans:
        assert label in ("neutral", "entailment") and set(probs) == {"entailment", "not_entailment"}


# ---- Sentinel: fact-check label by name, LoRA adapters merged ----------------------------------------------

def test_the_fact_check_label_is_found_by_name_or_configured():
    assert sentinel_label(["NO_FACT_CHECK_NEEDED", "FACT_CHECK_NEEDED"]) == 1
    assert sentinel_label(["fact_check", "no_fact_check"]) == 0
    assert sentinel_label(["other", "FactCheck"]) == 1
    assert sentinel_label(["LABEL_0", "LABEL_1"], "label_1") == 1
    with pytest.raises(LabelMapError, match="fact_check_label"):
        sentinel_label(["LABEL_0", "LABEL_1"])


def test_a_peft_lora_adapter_dir_is_merged_and_its_label_configured(minilm_dir, tmp_path):
    """A published Sentinel adapter's layout (adapter_config.json + adapter_model.safetensors, base named by
    path, no label map): export merges it; the runtime reads LABEL_1 as configured, like transformers + peft."""
    import torch
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import ModernBertForSequenceClassification

    from inference.detect import HaluGate
    from tests.detect_helpers import FakeDetector

    tok = _tokenizer(minilm_dir)
    torch.manual_seed(1)
    base_dir = tmp_path / "base"
    ModernBertForSequenceClassification(_modernbert_config(tok, num_labels=2)).save_pretrained(base_dir)
    tok.save_pretrained(base_dir)
    model = ModernBertForSequenceClassification.from_pretrained(base_dir)
    peft = get_peft_model(model, LoraConfig(task_type=TaskType.SEQ_CLS, r=4, lora_alpha=8,
                                            target_modules=["Wqkv", "Wo", "Wi"], modules_to_save=["classifier"]))
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name or "modules_to_save" in name:
                p.normal_(0, 0.5)
    adapter = tmp_path / "adapter"
    peft.save_pretrained(adapter)
    assert (adapter / "adapter_config.json").is_file() and not (adapter / "label_map.json").exists()
    reference = peft.merge_and_unload().eval()

    from training.export import export

    out = tmp_path / "sentinel-export"
    report = export(adapter, out, exporter="torch", samples=8)
    assert report["merged_from_adapter"] and report["parity"]["fp32"]["passed"]
    prompts = ["Who was the first person on the Moon?", "Write a poem about leaves.", "What is 2 + 2?"]
    with torch.no_grad():
        enc = tok(prompts, padding=True, return_tensors="pt")
        want = torch.softmax(reference(**enc).logits, -1)[:, 1].numpy()
    gate = HaluGate.from_config(REPO / "configs" / "inference.yaml", [
        f"hallucination_mitigation.fact_check_model.model_id={out}", "hallucination_mitigation.precision=fp32",
        "hallucination_mitigation.fact_check_model.fact_check_label=LABEL_1",
        "hallucination_mitigation.nli_model.model_id="], detector=FakeDetector(minilm_dir))
    assert "sentinel" not in gate.load_errors, gate.load_errors
    got = [r.fact_check_confidence for r in gate.detect_batch(
        [{"context": "c", "question": q, "answer": "a"} for q in prompts])]
    np.testing.assert_allclose(got, want, atol=1e-4)
    unnamed = HaluGate.from_config(REPO / "configs" / "inference.yaml", [
        f"hallucination_mitigation.fact_check_model.model_id={out}", "hallucination_mitigation.nli_model.model_id="],
        detector=FakeDetector(minilm_dir))
    assert "fact_check_label" in unnamed.load_errors["sentinel"]


# ---- one way to name a model: Hub ids without a network ----------------------------------------------------

@pytest.mark.parametrize("env", [{"HF_ENDPOINT": "http://127.0.0.1:9"}, {"HF_HUB_OFFLINE": "1"}],
                         ids=["unreachable-endpoint", "hf-hub-offline"])
@pytest.mark.parametrize("command", [
    ["-m", "inference.detect", "--detector", "{id}", "--context", "c", "--answer", "a"],
    ["-m", "training.export", "--model", "{id}", "--out", "{tmp}/out", "--input-format", "lettucedetect"],
    ["-m", "eval.detector", "--model", "{id}", "--data", "{tmp}/none.jsonl", "--out", "{tmp}/eval"],
    ["-m", "eval.explainer", "--model", "{id}", "--out", "{tmp}/eval"],
], ids=["inference.detect", "training.export", "eval.detector", "eval.explainer"])
def test_a_hub_id_without_a_network_exits_2_within_seconds(env, command, tmp_path):
    model_id = "KRLabsOrg/lettucedect-base-modernbert-en-v1@main"
    full = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_ENDPOINT")}
    full.update(env, HF_HOME=str(tmp_path / "hf"))  # an empty cache: nothing to fall back on
    args = [a.format(id=model_id, tmp=tmp_path) for a in command]
    started = time.monotonic()
    proc = subprocess.run([sys.executable, *args], check=False, capture_output=True, text=True, timeout=60, cwd=REPO,
                          env=full)
    elapsed = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr
    assert elapsed < 10, f"{elapsed:.1f} s"
    assert model_id in proc.stderr and "--local-dir DIR" in proc.stderr, proc.stderr


def test_hub_ids_and_paths_are_told_apart():
    from inference.hub import split_ref

    assert split_ref("KRLabsOrg/lettucedect-base-modernbert-en-v1") == ("KRLabsOrg/lettucedect-base-modernbert-en-v1",
                                                                        None)
    assert split_ref("org/name@v1.0") == ("org/name", "v1.0")
    for path in ("runs/demo/export/detector", "./org/name", "/abs/dir", "~/x/y", "name", "org/name@"):
        assert split_ref(path) is None


# ---- the configs -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [LETTUCE_CONFIG, HALUGATE_CONFIG], ids=lambda p: p.name)
def test_the_published_configs_load_and_unknown_keys_are_errors(path, tmp_path):
    from inference.config import ConfigError
    from inference.serve.config import load
    from inference.settings import load_settings

    settings = load_settings(path)
    load(path)  # inference.serve reads it too (its serve section included)
    hm = settings.hallucination_mitigation.hallucination_model
    assert hm.input_format == "lettucedetect"
    text = path.read_text().replace("  hallucination_model:\n", "  hallucination_model:\n    no_such_key: 1\n")
    bad = tmp_path / path.name
    bad.write_text(text)
    with pytest.raises(ConfigError, match="no_such_key"):
        load_settings(bad)


def test_the_halugate_config_holds_halugates_published_models_and_thresholds():
    from inference.settings import load_settings

    m = load_settings(HALUGATE_CONFIG).hallucination_mitigation
    hm = m.hallucination_model
    assert hm.model_id.endswith("lettucedect-base-modernbert-en-v1")
    assert (hm.threshold, hm.min_span_length, hm.min_span_confidence, hm.nli_entailment_threshold) == (
        0.82, 2, 0.6, 0.75)
    assert m.nli_model.model_id.endswith("ModernBERT-base-nli") and m.nli_model.threshold == 0.9
    assert m.fact_check_model.model_id.endswith("halugate-sentinel")
    assert FORMAT_FILE == "halugate_format.json"


def test_the_halugate_config_runs_the_three_stages(lettuce_export, minilm_dir, tmp_path):
    """configs/inference.halugate.yaml end to end on tiny stand-ins of its three models: every stage runs, and the
    Explainer only ever removes Detector spans (entailment filtering), never adds or moves one."""
    from inference.detect import HaluGate
    from inference.labels import SENTINEL_LABELS
    from tests.detect_helpers import export_tiny, make_run_dir

    tok = _tokenizer(minilm_dir)
    nli = export_tiny(_nli_checkpoint(tmp_path / "nli", tok, ["contradiction", "entailment", "neutral"]),
                      tmp_path / "nli-export")
    sentinel = export_tiny(make_run_dir(tmp_path / "sentinel", "sequence", SENTINEL_LABELS, minilm_dir),
                           tmp_path / "sentinel-export")
    common = [f"hallucination_mitigation.hallucination_model.model_id={lettuce_export}",
              f"hallucination_mitigation.hallucination_model.max_length={MAX_LENGTH}",
              "hallucination_mitigation.fact_check_model.threshold=0.0", "hallucination_mitigation.precision=fp32"]
    stack = HaluGate.from_config(HALUGATE_CONFIG, [*common, f"hallucination_mitigation.fact_check_model.model_id={sentinel}",
                                                   f"hallucination_mitigation.nli_model.model_id={nli}"])
    alone = HaluGate.from_config(HALUGATE_CONFIG, [*common, "hallucination_mitigation.fact_check_model.model_id=",
                                                   "hallucination_mitigation.nli_model.model_id="])
    assert not stack.load_errors and not alone.load_errors
    full, detector_only = stack.detect_batch(ITEMS), alone.detect_batch(ITEMS)
    assert all(r.status == "ok" and r.fact_check_needed for r in full)
    assert any(s.nli_label for r in full for s in r.spans) or sum(len(r.spans) for r in full) < sum(
        len(r.spans) for r in detector_only)  # the Explainer judged spans
    assert all(d.spans for d in detector_only)  # at threshold 0.82 the tiny Detector still flags in every item
    for r, d in zip(full, detector_only):
        assert {(s.start, s.end) for s in r.spans} <= {(s.start, s.end) for s in d.spans}
        assert all(s.confidence >= 0.82 and s.end - s.start >= 2 for s in d.spans)
