"""Flags shared by every training CLI: --config, --output-dir, --data-dir, --max-steps, --seed, --set."""

from __future__ import annotations

import argparse
import sys
from typing import TypeVar

from inference.config import ConfigError, load_config

T = TypeVar("T")


def training_parser(prog: str, description: str, default_config: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--config", default=default_config, help=f"YAML recipe (default: {default_config})")
    p.add_argument("--output-dir", help="run directory (overrides run.output_dir)")
    p.add_argument("--data-dir", help="local data dir (overrides run.data_dir and $HALUGATE_DATA_DIR)")
    p.add_argument("--max-steps", type=int, help="stop after this many optimizer steps (smoke runs)")
    p.add_argument("--seed", type=int, help="seed for splits, sampling and training")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one config value; repeatable")
    return p


def resolve_config(cls: type[T], args: argparse.Namespace) -> T:
    overrides = list(args.overrides)
    for flag, key in (("output_dir", "run.output_dir"), ("data_dir", "run.data_dir"),
                      ("max_steps", "train.max_steps"), ("seed", "run.seed")):
        value = getattr(args, flag, None)
        if value is not None:
            overrides.append(f"{key}={value}")
    return load_config(cls, args.config, overrides)


def resolve_config_file(cls: type[T], path: str, overrides: list[str] | None = None, data_dir: str | None = None) -> T:
    """The recipe at `path` with `--set` overrides and an optional data dir (for CLIs that run recipes)."""
    extra = list(overrides or [])
    if data_dir is not None:
        extra.append(f"run.data_dir={data_dir}")
    return load_config(cls, path, extra)


def run_cli(main_fn, argv=None) -> int:
    """Run `main_fn(argv)`, turning expected user errors into one clear line and exit code 2."""
    from training.data.base import DataError
    from training.models import BaseModelError

    try:
        main_fn(argv)
    except (ConfigError, DataError, BaseModelError, DeviceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


class DeviceError(RuntimeError):
    """A device was requested that this machine does not have."""
