"""Publish a run or export directory to the Hugging Face Hub with a generated model card.

    python -m training.publish --model DIR --repo-id OWNER/NAME [--onnx EXPORT_DIR] [--private]
                               [--revision BRANCH] [--license apache-2.0] [--dry-run]

DIR is a run directory (safetensors model at the top) or an export directory (model.onnx at the top).
--onnx EXPORT_DIR also uploads an export into the repo's onnx/ folder (optimum / transformers.js layout).
The card (training/model_card.py) is written to DIR/README.md and uploaded with the folder.

Before anything is uploaded: weights must be safetensors or ONNX (pickles - *.bin, *.pt, *.pth, *.pkl, *.ckpt -
are refused), no custom code (*.py, config.json auto_map) is allowed, and no file may contain a Hub token.
Trainer checkpoints (checkpoints/), test.jsonl (a copy of public data, not part of the model) and logs are not
uploaded. The token is read from $HF_TOKEN only and is never printed or written anywhere.
--dry-run prints the file list, the sizes and the card, writes nothing and touches no network.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import sys
from pathlib import Path

from huggingface_hub import HfApi

from training.model_card import CardError, render_card

TOKEN_ENV = "HF_TOKEN"
PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.pkl", "*.pickle", "*.ckpt")
IGNORE_PATTERNS = ["checkpoints/*", "*.partial/*", "*.failed/*", ".git/*", ".cache/*", "__pycache__/*",
                   "test.jsonl", "*.log"]
TEXT_SUFFIXES = {".json", ".jsonl", ".yaml", ".yml", ".txt", ".md", ".cfg", ".ini", ".csv"}
TOKEN_PATTERN = re.compile(r"hf_[A-Za-z0-9]{30,}")


class PublishError(RuntimeError):
    """The folder cannot be published as is; the message names the file and the fix."""


def _ignored(rel: str) -> bool:
    # Same matching as huggingface_hub's ignore_patterns: fnmatch on the relative path ("*" spans "/").
    return any(fnmatch.fnmatch(rel, pat) for pat in IGNORE_PATTERNS)


def upload_files(folder: Path) -> list[tuple[str, int]]:
    """(relative path, bytes) of every file that would be uploaded, sorted."""
    out = []
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            rel = path.relative_to(folder).as_posix()
            if not _ignored(rel):
                out.append((rel, path.stat().st_size))
    return out


def check_folder(folder: Path, files: list[tuple[str, int]], token: str | None) -> None:
    """Refuse pickles, remote code and leaked tokens before any network call."""
    names = [rel for rel, _ in files]
    pickles = [n for n in names if any(fnmatch.fnmatch(n.lower(), p) for p in PICKLE_PATTERNS)]
    if pickles:
        raise PublishError(f"{folder}: pickled files are not published ({', '.join(pickles)}); "
                           "keep weights as safetensors (save_pretrained(safe_serialization=True)) or ONNX")
    if not any(n.endswith((".safetensors", ".onnx")) for n in names):
        raise PublishError(f"{folder}: no *.safetensors or *.onnx weights to publish")
    code = [n for n in names if n.endswith(".py")]
    if code:
        raise PublishError(f"{folder}: Python files would need trust_remote_code ({', '.join(code)}); remove them")
    config = folder / "config.json"
    if config.is_file() and '"auto_map"' in config.read_text(encoding="utf-8"):
        raise PublishError(f"{config}: auto_map points at custom code (trust_remote_code); only standard "
                           "transformers architectures are published")
    for rel, size in files:
        if Path(rel).suffix.lower() not in TEXT_SUFFIXES or size > 50 * 2**20:
            continue
        text = (folder / rel).read_text(encoding="utf-8", errors="ignore")
        if (token and token in text) or TOKEN_PATTERN.search(text):
            raise PublishError(f"{folder / rel}: contains what looks like a Hugging Face token; remove it "
                               "before publishing")


def _human(size: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


def publish(model_dir: str | Path, repo_id: str, *, onnx_dir: str | Path | None = None, private: bool = False,
            revision: str | None = None, license: str = "apache-2.0", dry_run: bool = False,
            out=None) -> str | None:
    """Check, card, then create_repo + upload_folder (+ onnx/). Returns the commit URL (None for a dry run)."""
    out = out or sys.stdout
    folder = Path(model_dir)
    if not folder.is_dir():
        raise PublishError(f"{folder}: directory not found")
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo_id):
        raise PublishError(f"--repo-id {repo_id!r}: expected OWNER/NAME")
    token = os.environ.get(TOKEN_ENV) or None
    onnx_folder = Path(onnx_dir) if onnx_dir else None
    files = upload_files(folder)
    check_folder(folder, files, token)
    onnx_files = []
    if onnx_folder is not None:
        if not (onnx_folder / "model.onnx").is_file():
            raise PublishError(f"--onnx {onnx_folder}: no model.onnx (export with python -m training.export)")
        onnx_files = upload_files(onnx_folder)
        check_folder(onnx_folder, onnx_files, token)
        files = [(r, s) for r, s in files if not r.startswith("onnx/")]  # replaced by --onnx
    try:
        card = render_card(folder, repo_id, license=license, onnx_dir=onnx_folder)
    except CardError as exc:
        raise PublishError(str(exc)) from None

    listing = [(r, s) for r, s in files if r != "README.md"] + [("README.md", len(card.encode()))] \
        + [(f"onnx/{r}", s) for r, s in onnx_files]
    if dry_run:
        print(f"dry run: would publish to https://huggingface.co/{repo_id}"
              f" ({'private' if private else 'public'}, revision {revision or 'main'}); nothing is sent.", file=out)
        for rel, size in sorted(listing):
            print(f"  {size:>12,d}  {_human(size):>9}  {rel}", file=out)
        print(f"  total {_human(sum(s for _, s in listing))} in {len(listing)} files", file=out)
        print("\n----- README.md -----\n" + card, file=out)
        return None
    if not token:
        raise PublishError(f"${TOKEN_ENV} is not set: create a write token at https://huggingface.co/settings/tokens "
                           f"and export {TOKEN_ENV}=..., or use --dry-run to check the upload without the Hub")

    (folder / "README.md").write_text(card, encoding="utf-8")
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        if revision:
            api.create_branch(repo_id, branch=revision, repo_type="model", exist_ok=True)
        message = f"Upload {folder.name} with halugate"
        ignore = IGNORE_PATTERNS + (["onnx/*"] if onnx_folder is not None else [])  # --onnx replaces onnx/
        commit = api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type="model", revision=revision,
                                   commit_message=message, ignore_patterns=ignore)
        if onnx_folder is not None:
            commit = api.upload_folder(repo_id=repo_id, folder_path=str(onnx_folder), path_in_repo="onnx",
                                       repo_type="model", revision=revision, commit_message=message + " (ONNX)",
                                       ignore_patterns=IGNORE_PATTERNS)
    except Exception as exc:  # noqa: BLE001 - Hub/network errors: one line (huggingface_hub never echoes tokens)
        first = str(exc).splitlines()[0][:300] if str(exc) else ""
        raise PublishError(f"upload to {repo_id} failed: {type(exc).__name__}: {first}") from None
    url = getattr(commit, "commit_url", None) or f"https://huggingface.co/{repo_id}"
    print(f"published {len(listing)} files to {url}", file=out)
    return url


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m training.publish", description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  python -m training.publish --model runs/detector-offline --onnx runs/detector-offline-onnx "
               "--repo-id OWNER/halugate-detector --dry-run")
    p.add_argument("--model", required=True, help="run or export directory to upload")
    p.add_argument("--repo-id", required=True, help="OWNER/NAME on the Hub")
    p.add_argument("--onnx", help="export directory to upload into the repo's onnx/ folder")
    p.add_argument("--private", action="store_true", help="create the repo as private")
    p.add_argument("--revision", help="branch to upload to (created when missing; default main)")
    p.add_argument("--license", default="apache-2.0", help="license in the card (default apache-2.0)")
    p.add_argument("--dry-run", action="store_true", help="print files, sizes and card; no network, no writes")
    args = p.parse_args(argv)
    try:
        publish(args.model, args.repo_id, onnx_dir=args.onnx, private=args.private, revision=args.revision,
                license=args.license, dry_run=args.dry_run)
    except PublishError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
