"""One way to name a model, everywhere a model is taken: a local directory (a checkpoint in the Hub layout, a
run dir or an export dir) or a Hugging Face Hub id with an optional revision, `org/name` or `org/name@rev`.

    path = resolve_model("KRLabsOrg/lettucedect-base-modernbert-en-v1")        # the Hub cache's snapshot dir
    path = resolve_model("org/name@v1.0", patterns=ONNX_PATTERNS)              # a revision; only ONNX files
    path = resolve_model("runs/demo/export/detector")                          # a local dir, as it is

Hub ids are downloaded with huggingface_hub's `snapshot_download` into its cache (HF_HOME); a snapshot already
in the cache is used without the network. Without a network the call fails within seconds (one metadata request
with a short timeout and no retries before any download), with a ModelRefError naming the id and how to point at
a local directory instead. HF_HUB_OFFLINE=1 fails at once for a model that is not cached.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

HUB_TIMEOUT_S = 5.0  # the metadata request that tells a reachable Hub from an unreachable one
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
_REVISION = re.compile(r"^[\w./-]+$")

# what each consumer needs from a Hub repo (allow_patterns of snapshot_download)
WEIGHT_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "tokenizer*", "*.py"]
ONNX_PATTERNS = ["*.json", "*.onnx", "*.onnx_data", "*.txt", "*.model", "tokenizer*"]


class ModelRefError(RuntimeError):
    """A model name that is neither an existing directory nor a fetchable Hub id; the message says what to do."""


def split_ref(ref: str) -> tuple[str, str | None] | None:
    """("org/name", revision or None) when `ref` has the shape of a Hub id, None when it can only be a path."""
    text = str(ref).strip()
    repo, _, revision = text.partition("@")
    if not _HUB_ID.match(repo) or repo.startswith((".", "/", "~")):
        return None
    if "@" in text and not (revision and _REVISION.match(revision)):
        return None
    return repo, revision or None


def local_hint(ref: str, repo: str) -> str:
    return (f"to use {ref} without the Hub, download it where the Hub is reachable (`huggingface-cli download "
            f"{repo} --local-dir DIR`, or `git clone https://huggingface.co/{repo} DIR`), copy DIR here and name "
            "the directory instead of the id")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").strip().lower() in ("1", "true", "yes", "on")


def resolve_model(ref: str | Path, *, patterns: Sequence[str] | None = None) -> Path:
    """A local directory as it is; a Hub id (optionally `@revision`) as the local snapshot directory of the repo,
    downloaded into the Hub cache when it is not there (only the files matching `patterns`)."""
    text = str(ref).strip()
    path = Path(os.path.expanduser(text))
    if text and path.exists():
        return path
    hub = split_ref(text)
    if hub is None:
        raise ModelRefError(f"{ref}: model directory not found")
    repo, revision = hub
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ModelRefError(f"{ref}: not a local directory, and fetching a Hub id needs huggingface_hub "
                            f"(pip install huggingface_hub); or {local_hint(text, repo)}") from None
    allow = list(patterns) if patterns else None
    try:  # already in the cache: no network
        return Path(snapshot_download(repo, revision=revision, local_files_only=True, allow_patterns=allow))
    except Exception:  # noqa: BLE001, S110 - not cached (or only partly): the Hub below
        pass
    if _offline():
        raise ModelRefError(f"{ref}: not a local directory, not in the Hugging Face cache, and HF_HUB_OFFLINE is "
                            f"set; {local_hint(text, repo)}")
    from huggingface_hub import HfApi

    try:  # one short request: an unreachable Hub fails here in seconds, before any download and its retries
        HfApi().model_info(repo, revision=revision, timeout=HUB_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - every failure means "cannot fetch"; one line says why
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}" if str(exc) else type(exc).__name__
        raise ModelRefError(f"{ref}: not a local directory, and the Hugging Face Hub did not answer for it "
                            f"({reason}); {local_hint(text, repo)}") from None
    try:
        return Path(snapshot_download(repo, revision=revision, allow_patterns=allow, etag_timeout=HUB_TIMEOUT_S))
    except Exception as exc:  # noqa: BLE001
        raise ModelRefError(f"{ref}: download from the Hugging Face Hub failed ({type(exc).__name__}); "
                            f"{local_hint(text, repo)}") from None


def has_onnx(path: Path) -> bool:
    return any(Path(path).glob("*.onnx"))
