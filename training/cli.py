"""Flags shared by every training CLI: --config, --output-dir, --data-dir, --max-steps, --seed, --set."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TypeVar

from inference.config import ConfigError, apply_overrides, from_dict, read_yaml
from training.data.base import DataError
from training.models import BaseModelError

T = TypeVar("T")


# explicit flag -> the config field it sets, as given (never re-parsed as YAML)
FLAG_FIELDS = (("output_dir", "run.output_dir"), ("data_dir", "run.data_dir"), ("max_steps", "train.max_steps"),
               ("seed", "run.seed"))


def training_parser(prog: str, description: str, default_config: str) -> argparse.ArgumentParser:
    epilog = (f"example:\n  python -m {prog.split()[-1]} --config {default_config} --output-dir runs/try "
              "--max-steps 20 --set train.learning_rate=3e-5")
    p = argparse.ArgumentParser(prog=prog, description=description, epilog=epilog,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=default_config, help=f"YAML recipe (default: {default_config})")
    p.add_argument("--output-dir", help="run directory (overrides run.output_dir)")
    p.add_argument("--data-dir", help="local data dir (overrides run.data_dir and $HALUGATE_DATA_DIR)")
    p.add_argument("--max-steps", type=int, help="stop after this many optimizer steps (smoke runs)")
    p.add_argument("--seed", type=int, help="seed for splits, sampling and training")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one config value (the value is read as YAML); repeatable")
    return p


def resolve_config(cls: type[T], args: argparse.Namespace) -> T:
    """The recipe `args.config` with the `--set` overrides, then the explicit flags (which win)."""
    values = {key: getattr(args, flag) for flag, key in FLAG_FIELDS if getattr(args, flag, None) is not None}
    return _load(cls, args.config, args.overrides, values)


def resolve_config_file(cls: type[T], path: str, overrides: list[str] | None = None, data_dir: str | None = None) -> T:
    """The recipe at `path` with `--set` overrides and an optional data dir (for CLIs that run recipes)."""
    return _load(cls, path, overrides, {} if data_dir is None else {"run.data_dir": data_dir})


def _load(cls: type[T], path: str | None, overrides: list[str] | None, values: dict[str, Any]) -> T:
    """`--set` strings are parsed as YAML (the user wrote them so); `values` (dotted key -> value, from typed
    flags) go into the config as they are, so a path such as `runs/x #1` or a name such as `on` stays intact."""
    data = read_yaml(path) if path else {}
    apply_overrides(data, overrides)
    for dotted, value in values.items():
        *sections, key = dotted.split(".")
        node = data
        for part in sections:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{path}: {part}: expected a section (a mapping), got {type(node).__name__}")
        node[key] = value
    return from_dict(cls, data, str(path) if path else "<defaults>")


def run_cli(main_fn, argv=None) -> int:
    """Run `main_fn(argv)`, turning expected user errors into one clear line and exit code 2."""
    try:
        main_fn(argv)
    except (ConfigError, DataError, BaseModelError, DeviceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


class DeviceError(RuntimeError):
    """A device was requested that this machine does not have."""
