"""Model card (README.md) generated from what a run or export directory already holds.

Reads label_map.json, config.json, config.yaml (resolved training config), metrics.json and, when present,
export_report.json / onnx/export_report.json. The front matter is built with huggingface_hub's ModelCardData so
that the Hub parses it (license, base_model, datasets, pipeline_tag, language, tags, model-index metrics).
Nothing from the environment is read: tokens cannot end up in a card.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from inference.labels import DETECTOR_LABELS, EXPLAINER_LABELS, SENTINEL_LABELS
from training.data.base import DataError, get_adapter
from training.data.licences import licence_note
from training.models import OFFLINE_HUB_IDS
from training.onnx_graph import BLOCKWISE_SCHEME, KEPT_BLOCKWISE

RECIPES = {
    "sentinel": {
        "labels": SENTINEL_LABELS,
        "title": "Sentinel: does this prompt need fact-checking?",
        "summary": "Binary prompt classifier that decides whether an LLM answer to this prompt should be "
                   "fact-checked (FACT_CHECK_NEEDED) or not (NO_FACT_CHECK_NEEDED: creative writing, code, "
                   "opinion, chit-chat). It gates the more expensive hallucination Detector.",
        "use": "Route prompts in an LLM application: run the token-level hallucination Detector only on answers "
               "to prompts labelled FACT_CHECK_NEEDED. Input: the user's prompt alone, whitespace-normalised; a "
               "prompt longer than the max length below keeps its first quarter and last three quarters of "
               "tokens (halugate's inference.formatting.head_tail_split), as in training.",
        "tags": ["prompt-classification", "fact-checking"],
    },
    "detector": {
        "labels": DETECTOR_LABELS,
        "title": "Detector: token-level hallucination detection",
        "summary": "LettuceDetect-style token classifier: given a context, a question and an answer, it labels each "
                   "answer token SUPPORTED or HALLUCINATED (unsupported by the context).",
        "use": "Flag unsupported spans in RAG answers. Input: context + question as the first segment and the "
               "answer as the second; only answer tokens carry labels.",
        "tags": ["token-classification", "rag", "hallucination-spans"],
    },
    "explainer": {
        "labels": EXPLAINER_LABELS,
        "title": "Explainer: natural language inference",
        "summary": "Three-way NLI classifier (entailment / neutral / contradiction) used to explain why a "
                   "flagged span is unsupported.",
        "use": "Classify a (premise, hypothesis) pair, e.g. (retrieved context, flagged answer sentence).",
        "tags": ["nli", "natural-language-inference"],
    },
}

LIMITATIONS = [
    "Trained and evaluated on English public datasets only; other languages and domains are untested.",
    ("Scores are calibrated only as far as the training data's label balance allows; tune the decision "
     "threshold on your own traffic before acting on them."),
    "A classifier cannot know facts outside its input: it detects what looks unsupported, not what is false.",
    ("Evaluation figures come from a held-out split of the same sources as training; expect lower scores "
     "out of distribution."),
]


class CardError(ValueError):
    """The directory lacks what a card needs; the message names the file."""


@dataclass
class CardInputs:
    """Everything the card is built from, read once from the directory."""

    model_dir: Path
    labels: list[str]
    config: dict = field(default_factory=dict)  # config.json
    run_config: dict = field(default_factory=dict)  # config.yaml
    metrics: dict = field(default_factory=dict)  # metrics.json
    export_report: dict = field(default_factory=dict)
    onnx_prefix: str | None = None  # "" (ONNX at the top), "onnx" (subfolder) or None (no ONNX)
    has_safetensors: bool = False

    @property
    def recipe(self) -> str | None:
        for name, spec in RECIPES.items():
            if self.labels == spec["labels"]:
                return name
        return None

    @property
    def task(self) -> str:
        for arch in self.config.get("architectures") or []:
            if arch.endswith("ForTokenClassification"):
                return "token"
        return "token" if self.export_report.get("task") == "token-classification" else "sequence"


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CardError(f"{path}: invalid JSON ({exc.msg}, line {exc.lineno})") from None


def read_inputs(model_dir: str | Path, onnx_dir: str | Path | None = None) -> CardInputs:
    import yaml

    d = Path(model_dir)
    if not (d / "label_map.json").is_file():
        raise CardError(f"{d}/label_map.json is missing: the card's label table and the runtime need it")
    labels = [str(x) for x in _read_json(d / "label_map.json")["labels"]]
    inputs = CardInputs(model_dir=d, labels=labels, has_safetensors=any(d.glob("*.safetensors")))
    if (d / "config.json").is_file():
        inputs.config = _read_json(d / "config.json")
    if (d / "config.yaml").is_file():
        try:
            inputs.run_config = yaml.safe_load((d / "config.yaml").read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise CardError(f"{d}/config.yaml: invalid YAML ({exc})") from None
    if (d / "metrics.json").is_file():
        inputs.metrics = _read_json(d / "metrics.json")
    for prefix, folder in (("", d), ("onnx", Path(onnx_dir) if onnx_dir else d / "onnx")):
        if (folder / "model.onnx").is_file():
            inputs.onnx_prefix = prefix
            if (folder / "export_report.json").is_file():
                inputs.export_report = _read_json(folder / "export_report.json")
            break
    return inputs


def base_model_id(name: str | None) -> str | None:
    """A Hub id for the card's base_model field; local paths have none."""
    if not name:
        return None
    if name.startswith("offline:"):
        return OFFLINE_HUB_IDS.get(name.removeprefix("offline:"))
    if name.startswith((".", "/", "~")) or name.count("/") != 1 or Path(name).exists():
        return None
    return name


def dataset_ids(run_config: dict) -> list[str]:
    """Hub ids of the configured training sources (adapters without a Hub copy are left out)."""
    ids = []
    for spec in (run_config.get("data") or {}).get("sources") or []:
        name = spec.get("name") if isinstance(spec, dict) else spec
        try:
            hub_id = get_adapter(name).hub_id
        except DataError:
            continue
        if hub_id and hub_id not in ids:
            ids.append(hub_id)
    return ids


_NOT_METRICS = ("runtime", "per_second", "loss", "seconds", "steps", "size", "epoch", "max_length", "threshold")


def split_metrics(split: dict) -> dict[str, float]:
    """The headline numbers of one split: accuracy / macro_f1 (classifiers), or precision / recall / F1 per level
    (the Detector's example / span / token "levels"); counts, losses and timings are left out."""
    if isinstance(split.get("levels"), dict):
        out = {}
        for level, data in split["levels"].items():
            overall = (data or {}).get("overall") or {}
            for k in ("precision", "recall", "f1"):
                if isinstance(overall.get(k), (int, float)):
                    out[f"{level}_{k}"] = float(overall[k])
        return out
    out = {}
    for k, v in split.items():
        key = k.removeprefix("eval_")  # HF Trainer's evaluate() names
        if (isinstance(v, (int, float)) and not isinstance(v, bool) and key not in ("n", "support")
                and not key.startswith("n_") and not any(x in key for x in _NOT_METRICS)):
            out[key] = float(v)
    return out


def headline_metrics(metrics: dict) -> dict[str, float]:
    """Numbers of the test split (or of metrics.json itself when it has no "test" section)."""
    return split_metrics(metrics["test"] if isinstance(metrics.get("test"), dict) else metrics)


def split_size(split) -> int | None:
    if not isinstance(split, dict):
        return None
    return split.get("n", split.get("n_scored"))


def metric_type(key: str) -> tuple[str, str]:
    """(model-index metric type, display name) for a metric key."""
    if key == "accuracy":
        return "accuracy", "Accuracy"
    if key == "macro_f1":
        return "f1", "Macro F1"
    for kind in ("f1", "precision", "recall"):
        if key.endswith("_" + kind):
            level = key[: -len(kind) - 1]
            return kind, f"{level.capitalize()}-level {'F1' if kind == 'f1' else kind}"
    return key, key.replace("_", " ")


def card_data(inputs: CardInputs, repo_id: str, license: str = "apache-2.0", language: list[str] | None = None):
    from huggingface_hub import EvalResult, ModelCardData

    recipe = inputs.recipe
    pipeline_tag = "token-classification" if inputs.task == "token" else "text-classification"
    base = base_model_id((inputs.run_config.get("model") or {}).get("base_model") or inputs.metrics.get("base_model"))
    tags = ["halugate", "hallucination-detection", *(RECIPES[recipe]["tags"] if recipe else [])]
    if inputs.onnx_prefix is not None:
        tags.append("onnx")
    if (inputs.model_dir / "adapter").is_dir() or (inputs.run_config.get("model") or {}).get("lora", {}).get("enabled"):
        tags += ["lora", "peft"]
    test_n = split_size(inputs.metrics.get("test"))
    name = repo_id.split("/")[-1]
    results = []
    for key, value in headline_metrics(inputs.metrics).items():
        kind, metric_name = metric_type(key)
        results.append(EvalResult(
            task_type=pipeline_tag, task_name=pipeline_tag.replace("-", " ").title(),
            dataset_type=f"halugate/{recipe or 'custom'}-test",
            dataset_name=f"halugate {recipe or ''} held-out test split".replace("  ", " ")
            + (f" (n={test_n})" if test_n else ""),
            dataset_split="test", metric_type=kind, metric_name=metric_name, metric_value=round(value, 4),
        ))
    return ModelCardData(
        license=license, language=language or ["en"], base_model=base, datasets=dataset_ids(inputs.run_config) or None,
        pipeline_tag=pipeline_tag, library_name="transformers" if inputs.has_safetensors else "onnx",
        tags=tags, model_name=name, eval_results=results or None,
    )


# ---- body ----------------------------------------------------------------------------------------------------

def _table(header: list[str], rows: list[list]) -> str:
    def fmt(v):
        return f"{v:.4f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _training_section(inputs: CardInputs) -> str:
    rc, m = inputs.run_config, inputs.metrics
    model, train, data = rc.get("model") or {}, rc.get("train") or {}, rc.get("data") or {}
    rows = []
    if model.get("base_model"):
        base = model["base_model"]
        hub = base_model_id(base)
        rows.append(["base model", f"`{base}`" + (f" ({hub})" if hub and hub != base else "")])
    if model.get("max_length"):
        rows.append(["max length (tokens)", model["max_length"]])
    lora = model.get("lora") or {}
    if lora:
        rows.append(["LoRA", f"r={lora.get('r')}, alpha={lora.get('alpha')}, dropout={lora.get('dropout')}"
                     if lora.get("enabled") else "off (full fine-tuning)"])
    for key in ("learning_rate", "epochs", "batch_size", "max_steps", "class_weighted", "weight_decay"):
        if key in train:
            rows.append([key.replace("_", " "), train[key]])
    for key in ("train_size", "dev_size", "test_size", "global_steps", "train_seconds", "hardware"):
        if key in m:
            rows.append([key.replace("_", " "), m[key]])
    sources = [s.get("name") if isinstance(s, dict) else str(s) for s in data.get("sources") or []]
    rows = [[k, f"{v:g}" if isinstance(v, float) else v] for k, v in rows]  # settings, not scores: no padding
    text = _table(["setting", "value"], rows) if rows else "No training config (config.yaml) in this folder."
    if sources:
        text += "\n\nTraining sources: " + ", ".join(f"`{s}`" for s in sources) + "."
        text += "\n\n### Data licences\n\n" + licence_note(sources)
    return text


def _evaluation_section(inputs: CardInputs) -> str:
    m = inputs.metrics
    if not m:
        return "No metrics.json in this folder: no evaluation figures to report."
    parts = []
    splits = {k: split_metrics(m[k]) for k in ("test", "dev") if isinstance(m.get(k), dict)}
    keys = sorted({k for nums in splits.values() for k in nums})
    rows = [[split, split_size(m[split]) or ""] + [nums.get(k, "") for k in keys] for split, nums in splits.items()]
    if rows:
        parts.append(_table(["split", "n", *keys], rows))
    per_class = (m.get("test") or {}).get("per_class") if isinstance(m.get("test"), dict) else None
    if per_class:
        parts.append("Per class (test):\n\n" + _table(
            ["label", "precision", "recall", "F1", "support"],
            [[k, v["precision"], v["recall"], v["f1"], v["support"]] for k, v in per_class.items()]))
    per_source = (m.get("test") or {}).get("per_source_accuracy") if isinstance(m.get("test"), dict) else None
    if per_source:
        parts.append("Accuracy per source (test):\n\n" + _table(
            ["source", "n", "accuracy"], [[k, v["n"], v["accuracy"]] for k, v in per_source.items()]))
    if not parts:
        parts.append(_table(["metric", "value"], [[k, v] for k, v in headline_metrics(m).items()]))
    if m.get("hardware"):
        parts.append(f"Trained and evaluated on: {m['hardware']}.")
    return "\n\n".join(parts)


def _int8_kind(report: dict) -> str:
    """How the shipped int8 file quantises, from the export report's steps (training.export._quantize)."""
    passed = [t for t in report.get("int8_schemes_tried") or [] if t.get("passed")]
    if passed and passed[0].get("scheme") == BLOCKWISE_SCHEME:
        return "blockwise: MatMulNBits, one scale per block of 128 inputs; ONNX Runtime >= 1.22"
    blockwise = [t for t in passed if t.get("scheme") == KEPT_BLOCKWISE]
    if blockwise:
        return (f"dynamic quantisation, {blockwise[0]['products']} matrix products blockwise (MatMulNBits; "
                "ONNX Runtime >= 1.22)")
    return "dynamic quantisation"


def _export_section(inputs: CardInputs) -> str:
    r = inputs.export_report
    if inputs.onnx_prefix is None:
        return ""
    where = f"`{inputs.onnx_prefix}/`" if inputs.onnx_prefix else "the repository root"
    source = str(r.get("inputs", {}).get("source", "?"))
    if source.endswith("test.jsonl"):  # a local path means nothing on the Hub
        source = "the run's held-out test split"
    text = (f"ONNX files in {where}: `model.onnx` (fp32)"
            + (f", `model_quantized.onnx` (int8, {_int8_kind(r)})" if "int8" in r.get("files", {}) else "")
            + ". Exported with `python -m training.export`; parity against PyTorch on "
            f"{r.get('inputs', {}).get('n_examples', '?')} inputs ({source}):\n\n")
    rows = [[k, p["file"], f"{p['max_abs_diff']:.2e}", p["label_agreement"], str(r.get("size_mb", {}).get(k, ""))]
            for k, p in (r.get("parity") or {}).items()]
    if not rows:
        return text.rstrip(":\n") + "."
    text += _table(["precision", "file", "max abs logit diff", "label agreement", "size (MB)"], rows)
    if "int8" in r.get("files", {}):
        # which file is faster depends on the CPU (inference.precision): say it, and where the checks ran
        text += ("\n\nWhich file is faster depends on the CPU: dynamic int8 gains on CPUs with AVX-512 VNNI or "
                 "AMX and can be slower than fp32 on AVX2-only CPUs. halugate's runner (`precision: auto`) times "
                 "both once per CPU and runs the faster; `precision=\"fp32\"` or `\"int8\"` forces one."
                 + (f" Export checks ran on: {r['hardware']}." if r.get("hardware") else ""))
    int8 = (r.get("parity") or {}).get("int8") or {}
    if int8.get("fallback_margin") is not None:
        # Hub users who load model_quantized.onnx with optimum get int8 alone: say what they get and what not.
        text += (f"\n\nThe int8 agreement above is with an fp32 fallback (`int8_fallback.json`): inputs whose two "
                 f"highest int8 logits are less than {int8['fallback_margin']:.3g} apart are answered by `model.onnx` "
                 f"({100 * int8['fallback_rate']:.1f}% of these inputs); halugate's runner applies it. "
                 f"`model_quantized.onnx` alone agrees on {int8['int8_alone_agreement']:.4f}.")
    return text


def _code(lang: str, *lines: str) -> str:
    return f"```{lang}\n" + "\n".join(lines) + "\n```"


def _usage_section(inputs: CardInputs, repo_id: str) -> str:
    task = inputs.task
    ort_cls = "ORTModelForTokenClassification" if task == "token" else "ORTModelForSequenceClassification"
    pipe = "token-classification" if task == "token" else "text-classification"
    example = {"sentinel": "Who was the first person to walk on the Moon?",
               "explainer": "The Eiffel Tower is in Paris.",
               "detector": "Paris is the capital of France."}.get(inputs.recipe or "", "Your text here.")
    if inputs.onnx_prefix is not None:
        where = "path" if inputs.onnx_prefix == "" else f'path + "/{inputs.onnx_prefix}"'
        call = (f'print(runner.labels, runner.classify(["{example}"]))' if task == "sequence" else
                "# token logits per sequence; the Detector facade builds the inputs and merges spans")
        halugate = _code("python", "from huggingface_hub import snapshot_download",
                         "from inference.runners import load_runner", "",
                         f'path = snapshot_download("{repo_id}")',
                         f'runner = load_runner({where}, task="{task}")  # the faster of fp32 / int8 on this CPU',
                         call)
    else:
        halugate = (_code("bash", f"huggingface-cli download {repo_id} --local-dir model/",
                          "python -m training.export --model model/ --out export/ --quantize int8")
                    + f'\n\nthen `inference.runners.load_runner("export", task="{task}")`.')
    out = ["### With halugate (ONNX Runtime, no torch)", halugate]
    if inputs.has_safetensors:
        out += ["### With transformers",
                _code("python", "from transformers import pipeline", "",
                      f'clf = pipeline("{pipe}", model="{repo_id}")', f'print(clf("{example}"))')]
    if inputs.onnx_prefix is not None:
        sub = ', subfolder="onnx"' if inputs.onnx_prefix else ""
        out += ["### With optimum (ONNX Runtime)",
                _code("python", f"from optimum.onnxruntime import {ort_cls}",
                      "from transformers import AutoTokenizer, pipeline", "",
                      f'model = {ort_cls}.from_pretrained("{repo_id}"{sub}, file_name="model.onnx")',
                      f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}"{sub})',
                      f'clf = pipeline("{pipe}", model=model, tokenizer=tokenizer)', f'print(clf("{example}"))')]
    elif inputs.has_safetensors:
        out += ["### With optimum (export on the fly)",
                _code("python", f"from optimum.onnxruntime import {ort_cls}", "",
                      f'model = {ort_cls}.from_pretrained("{repo_id}", export=True)')]
    if inputs.recipe == "explainer":
        out.append('For pairs pass `{"text": premise, "text_pair": hypothesis}` to the pipeline.')
    return "\n\n".join(out)


def render_card(model_dir: str | Path, repo_id: str, *, license: str = "apache-2.0",
                language: list[str] | None = None, onnx_dir: str | Path | None = None) -> str:
    """README.md text for the folder (front matter + body)."""
    from huggingface_hub import ModelCard

    inputs = read_inputs(model_dir, onnx_dir)
    data = card_data(inputs, repo_id, license, language)
    recipe = RECIPES.get(inputs.recipe or "", {})
    title = recipe.get("title")
    label_rows = [[i, name] for i, name in enumerate(inputs.labels)]
    sections = [
        f"# {repo_id.split('/')[-1]}",
        f"**{title.rstrip('.?') + ('?' if title.endswith('?') else '.')}** {recipe['summary']}" if recipe
        else "Classifier trained with the halugate recipes.",
        "## Intended use\n\n" + recipe.get("use", "See the label map below."),
        "## Labels\n\n" + _table(["id", "label"], label_rows),
        "## Training\n\n" + _training_section(inputs),
        "## Evaluation\n\n" + _evaluation_section(inputs),
    ]
    export = _export_section(inputs)
    if export:
        sections.append("## ONNX export\n\n" + export)
    sections += [
        "## Limitations\n\n" + "\n".join(f"- {x}" for x in LIMITATIONS),
        "## How to use\n\n" + _usage_section(inputs, repo_id),
        "Weights are stored as safetensors / ONNX only; no custom code is needed (`trust_remote_code` stays off).",
    ]
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n\n".join(sections) + "\n")
    return str(card)
