"""The shared YAML -> dataclass config system: types, unknown keys, overrides, saving."""

from dataclasses import dataclass, field
from typing import Literal

import pytest
import yaml

from inference.config import ConfigError, load_config, save_config
from training.sentinel import SentinelConfig


@dataclass
class Inner:
    rate: float = 0.1
    names: list[str] = field(default_factory=list)
    mode: Literal["a", "b"] = "a"


@dataclass
class Outer:
    inner: Inner = field(default_factory=Inner)
    steps: int = 3
    path: str | None = None


def write(tmp_path, data, name="c.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return p


def test_loads_nested_types_and_int_to_float(tmp_path):
    cfg = load_config(Outer, write(tmp_path, {"inner": {"rate": 1, "names": ["x"], "mode": "b"}, "steps": 5}))
    assert cfg.inner.rate == 1.0 and isinstance(cfg.inner.rate, float)
    assert cfg.inner.names == ["x"] and cfg.inner.mode == "b" and cfg.steps == 5 and cfg.path is None


def test_scientific_notation_string_is_a_float(tmp_path):
    cfg = load_config(Outer, write(tmp_path, "inner:\n  rate: 2e-5\n"))
    assert cfg.inner.rate == pytest.approx(2e-5)


def test_unknown_key_names_file_and_dotted_key(tmp_path):
    p = write(tmp_path, {"inner": {"rte": 0.2}})
    with pytest.raises(ConfigError) as exc:
        load_config(Outer, p)
    assert str(p) in str(exc.value) and "inner.rte" in str(exc.value) and "unknown key" in str(exc.value)


def test_wrong_type_names_key(tmp_path):
    p = write(tmp_path, {"steps": "many"})
    with pytest.raises(ConfigError, match=r"steps: expected an integer"):
        load_config(Outer, p)
    with pytest.raises(ConfigError, match=r"inner.mode: expected one of 'a', 'b'"):
        load_config(Outer, write(tmp_path, {"inner": {"mode": "c"}}, "d.yaml"))
    with pytest.raises(ConfigError, match=r"steps: expected an integer, got True"):
        load_config(Outer, write(tmp_path, {"steps": True}, "e.yaml"))


def test_overrides_are_typed_and_checked(tmp_path):
    p = write(tmp_path, {"steps": 1})
    cfg = load_config(Outer, p, ["steps=7", "inner.rate=0.5", "inner.names=[a, b]", "path=/x"])
    assert (cfg.steps, cfg.inner.rate, cfg.inner.names, cfg.path) == (7, 0.5, ["a", "b"], "/x")
    with pytest.raises(ConfigError, match="inner.nope"):
        load_config(Outer, p, ["inner.nope=1"])
    with pytest.raises(ConfigError, match="expected section.key=value"):
        load_config(Outer, p, ["steps"])


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(Outer, tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(Outer, write(tmp_path, "a: [1, 2\n"))
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(Outer, write(tmp_path, "- 1\n", "list.yaml"))


def test_save_round_trip(tmp_path):
    cfg = load_config(Outer, None, ["inner.names=[q]"])
    path = save_config(cfg, tmp_path / "out" / "config.yaml")
    assert load_config(Outer, path) == cfg


@pytest.mark.parametrize("name", ["sentinel.yaml", "sentinel.offline.yaml"])
def test_shipped_sentinel_configs_load(name):
    cfg = load_config(SentinelConfig, f"configs/{name}")
    assert cfg.model.lora.r == 16 and cfg.model.lora.alpha == 32 and cfg.model.lora.dropout == 0.1
    # the offline recipe trains 2 epochs on its larger, augmented mix to stay within 30 CPU minutes
    assert cfg.model.max_length == 256 and cfg.train.epochs == (3 if name == "sentinel.yaml" else 2)
    assert len(cfg.data.sources) >= 14


def test_validation_errors_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match="lora.r: must be positive"):
        load_config(SentinelConfig, "configs/sentinel.offline.yaml", ["model.lora.r=0"])
    with pytest.raises(ConfigError, match="data.sources: at least one source"):
        load_config(SentinelConfig, write(tmp_path, {"data": {"sources": []}}))


def test_training_flags_reach_the_config_as_given(tmp_path):
    """--output-dir / --data-dir are set as typed, never re-read as YAML (a '#' or `on` used to be mangled)."""
    from training.cli import resolve_config, resolve_config_file, training_parser

    parser = training_parser("python -m training.sentinel", "x", "configs/sentinel.offline.yaml")
    args = parser.parse_args(["--output-dir", "runs/x #1", "--data-dir", "on", "--seed", "7", "--max-steps", "5",
                              "--set", "run.seed=3", "--set", "train.epochs=4"])
    cfg = resolve_config(SentinelConfig, args)
    assert cfg.run.output_dir == "runs/x #1" and cfg.run.data_dir == "on"
    assert cfg.run.seed == 7 and cfg.train.max_steps == 5 and cfg.train.epochs == 4  # flags win over --set
    cfg = resolve_config_file(SentinelConfig, "configs/sentinel.offline.yaml", ["run.seed=3"], data_dir="d: #2")
    assert cfg.run.data_dir == "d: #2" and cfg.run.seed == 3
    assert "example:" in parser.format_help()
    with pytest.raises(ConfigError, match="run: expected a section"):
        resolve_config(SentinelConfig, parser.parse_args(["--config", str(write(tmp_path, {"run": 1})),
                                                          "--output-dir", "x"]))
