"""Sentinel: does this prompt need fact-checking? Binary prompt classifier (encoder + LoRA).

    python -m training.sentinel --config configs/sentinel.yaml            # published recipe (Hub)
    python -m training.sentinel --config configs/sentinel.offline.yaml    # offline recipe (local data)
    accelerate launch -m training.sentinel --config configs/sentinel.yaml # several GPUs
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field

from inference.formatting import sentinel_text
from inference.labels import SENTINEL_LABELS
from training.cli import resolve_config, run_cli, training_parser
from training.config import ModelConfig, RunConfig, SourceSpec, SplitConfig, TrainArgs
from training.data.base import DataError, get_adapter, resolve_data_dir
from training.data.prep import check_classes, count_table, dedup, length_filter, stratified_split

log = logging.getLogger("halugate.training.sentinel")


@dataclass
class SentinelData:
    sources: list[SourceSpec] = field(default_factory=list)
    min_chars: int = 8
    max_chars: int = 4000
    split: SplitConfig = field(default_factory=SplitConfig)

    def validate(self):
        if not self.sources:
            raise ValueError("data.sources: at least one source is required")


@dataclass
class SentinelConfig:
    run: RunConfig = field(default_factory=lambda: RunConfig(output_dir="runs/sentinel"))
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainArgs = field(default_factory=TrainArgs)
    data: SentinelData = field(default_factory=SentinelData)


def load_prompt_records(data_cfg: SentinelData, data_dir, seed: int) -> list[dict]:
    """Load every configured source, dedup (within and across sources), length-filter, then cap per source."""
    rng = random.Random(seed)
    records: list[dict] = []
    for spec in data_cfg.sources:
        adapter = get_adapter(spec.name)
        if adapter.kind != "prompt":
            raise DataError(f"data.sources: {spec.name!r} is a {adapter.kind} dataset, not a prompt dataset")
        rows = adapter.load(data_dir)
        rows, n_dup = dedup(rows, key=lambda r: r["text"])
        rows, n_len = length_filter(rows, lambda r: r["text"], data_cfg.min_chars, data_cfg.max_chars)
        if spec.limit is not None and len(rows) > spec.limit:
            rows = rng.sample(rows, spec.limit)
        log.info("%-22s %6d records (dropped %d duplicates, %d by length)", spec.name, len(rows), n_dup, n_len)
        records.extend(rows)
    records, n_cross = dedup(records, key=lambda r: r["text"])
    if n_cross:
        log.info("dropped %d prompts that appear in more than one source", n_cross)
    check_classes(records, SENTINEL_LABELS, "sentinel data")
    return records


def main(argv=None) -> None:
    parser = training_parser("python -m training.sentinel", __doc__.splitlines()[0], "configs/sentinel.yaml")
    cfg = resolve_config(SentinelConfig, parser.parse_args(argv))

    from training.classify import run_sequence_classification
    from training.models import resolve_base_model

    resolve_base_model(cfg.model.base_model)  # fail in seconds, before loading data, if it can't be fetched
    data_dir = resolve_data_dir(cfg.run.data_dir)
    records = load_prompt_records(cfg.data, data_dir, cfg.run.seed)
    for r in records:
        r["text"] = sentinel_text(r["text"])
    train, dev, test = stratified_split(
        records, (1 - cfg.data.split.dev - cfg.data.split.test, cfg.data.split.dev, cfg.data.split.test),
        seed=cfg.run.seed)
    for name, part in (("train", train), ("dev", dev), ("test", test)):
        check_classes(part, SENTINEL_LABELS, f"sentinel {name} split")
    table = count_table({"train": train, "dev": dev, "test": test}, SENTINEL_LABELS)
    print(table, flush=True)
    run_sequence_classification(cfg, train, dev, test, SENTINEL_LABELS, table,
                                text_fields=("text",))


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
