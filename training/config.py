"""Config sections shared by the three training recipes (loaded with inference.config)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class LoraConfig:
    enabled: bool = True
    r: int = 16
    alpha: int = 32
    dropout: float = 0.1
    target_modules: list[str] | None = None  # None: chosen from the architecture (training.models)

    def validate(self):
        if self.r <= 0:
            raise ValueError("lora.r: must be positive")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError("lora.dropout: must be in [0, 1)")


@dataclass
class ModelConfig:
    base_model: str = "answerdotai/ModernBERT-base"  # Hub id, local dir, offline:minilm or offline:mpnet
    max_length: int = 256
    lora: LoraConfig = field(default_factory=LoraConfig)
    # Dropout on the attention probabilities; None keeps the base model's (0.1 for BERT / MPNet). 0.0 lets
    # PyTorch's fused scaled-dot-product attention run while training: on this CPU a MiniLM step on 8 x 512
    # tokens then takes ~1.8 s instead of ~5 s (`scripts/bench_train_step.py`); hidden dropout stays.
    attention_dropout: float | None = None
    # Re-initialise the top k encoder layers before fine-tuning (0 = off). Few-sample fine-tuning is reported to
    # gain from it (Zhang et al., 2021): the top layers of a pretrained encoder are specialised to its
    # pretraining objective (all-MiniLM-L6-v2's to sentence similarity) and transfer least (training.models).
    reinit_top_layers: int = 0

    def validate(self):
        if self.reinit_top_layers < 0:
            raise ValueError(f"model.reinit_top_layers: must be 0 or more, got {self.reinit_top_layers}")
        if self.max_length < 16:
            raise ValueError("model.max_length: must be at least 16")
        if self.attention_dropout is not None and not 0.0 <= self.attention_dropout < 1.0:
            raise ValueError("model.attention_dropout: must be in [0, 1)")


@dataclass
class TrainArgs:
    learning_rate: float = 2e-5
    epochs: float = 3.0
    batch_size: int = 16
    eval_batch_size: int = 64
    gradient_accumulation_steps: int = 1
    weight_decay: float = 0.01
    warmup_ratio: float = 0.06
    lr_scheduler: str = "linear"
    max_steps: int = -1  # > 0 caps the run (smoke tests); -1 trains for `epochs`
    class_weighted: bool = True  # inverse-frequency class weights in the cross-entropy
    group_by_length: bool = True  # length-grouped batches (less padding)
    eval_every: Literal["epoch", "steps"] = "epoch"
    eval_steps: int = 500
    logging_steps: int = 25
    save_total_limit: int = 2
    metric_for_best_model: str = "macro_f1"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    bf16: bool | None = None  # None: bf16 autocast on CUDA and on CPUs with native bf16 (AVX512-BF16 / AMX)
    dataloader_workers: int = 0
    # Stochastic weight averaging: null = off; 0.5 = the final model is the mean of the trainable weights after
    # every optimizer step of the second half of training (the best-checkpoint choice then does not apply).
    swa_start: float | None = None
    # Linear probing, then fine-tuning (LP-FT): null = off; 0.25 = for the first quarter of the planned steps only
    # the classification head trains (the encoder, its LoRA adapters included, is frozen), then everything that
    # is trainable does (training.trainer.head_first_callback).
    head_first: float | None = None
    # Label smoothing of the cross-entropy (0.0 = off): the target puts 1 - eps on the gold class and spreads eps
    # over all classes, so the model is not pushed to certainty on prompts whose style alone gives the label
    # (Szegedy et al., 2016; Mueller et al., 2019). The Explainer's two-way masked loss smooths the same way.
    label_smoothing: float = 0.0
    # Layer-wise learning-rate decay (null = off; 0.8 = each encoder layer learns at 0.8 x the rate of the one
    # above it, the embeddings lowest, the head at train.learning_rate): the pretrained lower layers move less
    # (Howard & Ruder, 2018; Clark et al., 2020), the usual guard when few labelled examples drive a full
    # fine-tune (training.trainer.layerwise_param_groups).
    layer_lr_decay: float | None = None

    def validate(self):
        if self.learning_rate <= 0:
            raise ValueError("train.learning_rate: must be positive")
        for name in ("swa_start", "head_first"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value < 1.0:
                raise ValueError(f"train.{name}: must be null or in [0, 1), got {value}")
        if self.layer_lr_decay is not None and not 0.0 < self.layer_lr_decay <= 1.0:
            raise ValueError(f"train.layer_lr_decay: must be null or in (0, 1], got {self.layer_lr_decay}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"train.label_smoothing: must be in [0, 1), got {self.label_smoothing}")
        if self.batch_size <= 0 or self.eval_batch_size <= 0:
            raise ValueError("train.batch_size: must be positive")


@dataclass
class RunConfig:
    output_dir: str = "runs/model"
    data_dir: str | None = None  # None: $HALUGATE_DATA_DIR, else the Hub
    seed: int = 42


@dataclass
class SplitConfig:
    dev: float = 0.1
    test: float = 0.1

    def validate(self):
        if not (0 <= self.dev < 1 and 0 <= self.test < 1 and self.dev + self.test < 1):
            raise ValueError("split: dev and test must be fractions with dev + test < 1")


@dataclass
class SourceSpec:
    name: str
    limit: int | None = None  # at most this many records from the source (after dedup), sampled by seed
