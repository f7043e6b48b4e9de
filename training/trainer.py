"""The training loop every recipe shares: HF Trainer with class weights, resume, logs and the run-dir layout.

Run directory (standard HF layout at the top, so `AutoModelFor...from_pretrained(RUN_DIR)` just works):

    RUN_DIR/config.json, model.safetensors, tokenizer files   merged model (LoRA folded in)
    RUN_DIR/adapter/                                           LoRA adapter alone (when LoRA is on)
    RUN_DIR/checkpoints/checkpoint-N/                          resumable Trainer checkpoints
    RUN_DIR/config.yaml                                        resolved config
    RUN_DIR/label_map.json, metrics.json, data_counts.txt, train_log.jsonl, train.log
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from pathlib import Path

import numpy as np

from inference.config import save_config
from training.cli import DeviceError
from training.models import encoder_layer_index, head_modules, merge_lora

log = logging.getLogger("halugate.training")


def setup_run(cfg, output_dir: str | Path) -> Path:
    """Create the run dir, save the resolved config, and log to RUN_DIR/train.log as well as stderr."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out / "config.yaml")
    setup_logging(out)
    return out


def setup_logging(out: Path) -> None:
    """Log the halugate loggers to stderr and to RUN_DIR/train.log (appended)."""
    root = logging.getLogger("halugate")
    root.setLevel(logging.INFO)
    root.propagate = False  # these handlers print it; a CLI's basicConfig would print every line twice
    for h in list(root.handlers):
        root.removeHandler(h)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S")
    for h in (logging.StreamHandler(sys.stderr), logging.FileHandler(out / "train.log", encoding="utf-8")):
        h.setFormatter(fmt)
        root.addHandler(h)


def check_device(device: str) -> str:
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise DeviceError("train.device=cuda was requested but no CUDA GPU is visible "
                          "(torch.cuda.is_available() is False); use train.device=auto or cpu")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def cpu_has_bf16(flags=None) -> bool:
    """Native bf16 on this CPU (AVX512-BF16 or AMX-BF16; `flags`: /proc/cpuinfo flags, default this machine's,
    from inference.hardware): autocast then trains ~1.5x faster than fp32 (measured on MiniLM pairs); on other
    CPUs torch emulates bf16, slower than fp32 (an AVX2-only AMD EPYC took ~27 minutes for the offline
    Sentinel recipe, against 8.8 with AVX512-BF16)."""
    from inference.hardware import cpu_info, native_bf16

    return native_bf16(cpu_info().flags if flags is None else flags)


def bf16_choice(setting: bool | None, device: str, flags=None) -> tuple[bool, str]:
    """(bf16 autocast on?, why) for train.bf16 = true / false / null (auto) on `device`. On a CPU bf16 runs
    only where it is native: `true` in a recipe means "where it pays" (CUDA, or a CPU with native bf16), so
    on a CPU without it training stays fp32 and says so."""
    if setting is False:
        return False, "train.bf16: false"
    if device == "cuda":
        return True, f"CUDA (train.bf16: {'true' if setting else 'auto'})"
    if device != "cpu":
        return bool(setting), f"train.bf16: {setting} on {device}"
    if flags is None:
        native = cpu_has_bf16()
        from inference.hardware import cpu_info

        label = cpu_info().cpu_class
    else:
        from inference.hardware import cpu_class

        native, label = cpu_has_bf16(flags), cpu_class(flags)
    if native:
        return True, f"this CPU ({label}) has native bf16 (avx512_bf16 or amx_bf16)"
    return False, (f"this CPU ({label}) has no native bf16 (no avx512_bf16 / amx_bf16): torch would emulate it, "
                   f"slower than fp32{' (train.bf16: true applies to CUDA and native-bf16 CPUs only)' if setting else ''}")


def use_bf16(setting: bool | None, device: str, flags=None) -> bool:
    """train.bf16: false, or true / null (auto): on for CUDA and for CPUs with native bf16, else fp32."""
    return bf16_choice(setting, device, flags)[0]


def class_weights(labels: list[int], num_labels: int) -> list[float]:
    """Inverse-frequency weights, normalised so that their mean over classes is 1."""
    counts = np.bincount(np.asarray([x for x in labels if x >= 0], dtype=int), minlength=num_labels).astype(float)
    counts[counts == 0] = 1.0
    w = counts.sum() / (num_labels * counts)
    return (w / w.mean()).tolist()


def _accepts_label_smoothing(loss_fn) -> bool:
    import inspect

    try:
        return "label_smoothing" in inspect.signature(loss_fn).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False


def _weighted_trainer_cls():
    import torch
    from transformers import Trainer

    class WeightedTrainer(Trainer):
        """Cross-entropy with class weights and optional label smoothing; works for sequence and token
        classification (-100 ignored)."""

        def __init__(self, *args, loss_weights=None, loss_fn=None, label_smoothing: float = 0.0,
                     layer_lr_decay: float | None = None, **kwargs):
            super().__init__(*args, **kwargs)
            self.layer_lr_decay = layer_lr_decay
            if loss_fn is not None and label_smoothing and not _accepts_label_smoothing(loss_fn):
                raise ValueError("train.label_smoothing: not supported with this recipe's own loss; set it to 0")
            self.loss_weights = loss_weights
            # optional (logits, labels, weight[, label_smoothing=]) -> loss, e.g. the Explainer's two-way mask
            self.loss_fn = loss_fn
            self.label_smoothing = label_smoothing

        def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
            labels = inputs.pop("labels")
            outputs = model(**inputs)
            logits = outputs.logits
            weight = None
            if self.loss_weights is not None:
                weight = torch.tensor(self.loss_weights, dtype=logits.dtype, device=logits.device)
            if self.loss_fn is not None:
                smoothing = {"label_smoothing": self.label_smoothing} if self.label_smoothing else {}
                loss = self.loss_fn(logits, labels, weight, **smoothing)
            else:
                loss = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), weight=weight, ignore_index=-100,
                    label_smoothing=self.label_smoothing,
                )
            return (loss, outputs) if return_outputs else loss

        def create_optimizer(self, *args, **kwargs):
            if self.layer_lr_decay is None or self.optimizer is not None:
                return super().create_optimizer(*args, **kwargs)
            optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, self.model)
            optimizer_kwargs.pop("lr", None)  # every group carries its own rate
            groups = layerwise_param_groups(self.model, self.args.learning_rate, self.layer_lr_decay,
                                            self.args.weight_decay, set(self.get_decay_parameter_names(self.model)))
            self.optimizer = optimizer_cls(groups, **optimizer_kwargs)
            return self.optimizer

        def _get_eval_sampler(self, eval_dataset):
            # With group_by_length, transformers also length-groups evaluation and predict() batches, in a random
            # order: the logits then no longer line up with the caller's records (their sources, labels, texts).
            # Evaluation keeps the dataset's order; callers sort by length themselves where padding matters.
            if eval_dataset is None or not hasattr(eval_dataset, "__len__"):
                return None
            return torch.utils.data.SequentialSampler(eval_dataset)

    return WeightedTrainer


def layer_depth(name: str, num_layers: int) -> int:
    """0 for the embeddings, i + 1 for encoder layer i, num_layers + 1 for what sits above the encoder (the
    classification head, BERT's pooler, ModernBERT's final norm)."""
    index = encoder_layer_index(name)
    if index is not None:
        return index + 1
    return 0 if "embed" in name else num_layers + 1


def layerwise_param_groups(model, learning_rate: float, decay: float, weight_decay: float,
                           decay_names: set[str]) -> list[dict]:
    """Optimizer groups for layer-wise learning-rate decay: a tensor at depth d (layer_depth) learns at
    learning_rate x decay ** (top - d); weight decay only on `decay_names` (the Trainer's choice: not on biases
    and norms). The scheduler scales every group's rate alike. The top group comes first, so the rate the Trainer
    logs (its first group's) is train.learning_rate's schedule."""
    num_layers = model.config.num_hidden_layers
    groups: dict[tuple[int, bool], dict] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        depth = layer_depth(name, num_layers)
        key = (depth, name in decay_names)
        if key not in groups:
            groups[key] = {"params": [], "lr": learning_rate * decay ** (num_layers + 1 - depth),
                           "weight_decay": weight_decay if key[1] else 0.0}
        groups[key]["params"].append(p)
    return [groups[k] for k in sorted(groups, reverse=True)]


def _log_callback(path: Path):
    from transformers import TrainerCallback

    class JsonlLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and state.is_world_process_zero:
                with open(path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"step": state.global_step, "epoch": state.epoch, **logs}) + "\n")
                log.info("step %d %s", state.global_step,
                         " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in logs.items()))

    return JsonlLog()


def _final_step_callback():
    """With step-based evaluation, also evaluate and save at the last step (when it is not a multiple of
    eval_steps), so that the final weights compete in load_best_model_at_end instead of being discarded."""
    from transformers import TrainerCallback

    class FinalStepEval(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            steps = getattr(args.eval_strategy, "value", args.eval_strategy) == "steps"
            if steps and state.max_steps and state.global_step >= state.max_steps:
                control.should_evaluate = True
                control.should_save = True
            return control

    return FinalStepEval()


def weight_averaging_callback(start: float):
    """Stochastic weight averaging (Izmailov et al., 2018): from `start` x the planned steps on, the trainable
    weights after every optimizer step are summed, and when training ends their mean replaces the weights the
    Trainer kept. Averaging the last part of a trajectory finds flatter minima, which transfer better to data
    unlike the training data (Cha et al., 2021, SWAD, on held-out domains). Only trainable tensors are averaged:
    with LoRA the adapters and the head, so the cost is small (torch.optim.swa_utils.AveragedModel would copy
    and average the whole model, frozen base included, at every step). A run resumed from a checkpoint averages
    the steps after the resume only (logged)."""
    import torch
    from transformers import TrainerCallback

    class WeightAveraging(TrainerCallback):
        def __init__(self):
            self.sums: dict[str, torch.Tensor] = {}
            self.count = 0
            self.resumed_at = 0

        def on_train_begin(self, args, state, control, **kwargs):
            self.resumed_at = state.global_step  # > 0 when resumed from a checkpoint
            return control

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if model is None or state.global_step < start * state.max_steps:
                return control
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if p.requires_grad:
                        value = p.detach().float()
                        if name in self.sums:
                            self.sums[name].add_(value)
                        else:
                            self.sums[name] = value.clone()
            self.count += 1
            return control

        def on_train_end(self, args, state, control, model=None, **kwargs):
            if model is None or not self.count:
                return control
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if name in self.sums:
                        p.copy_((self.sums[name] / self.count).to(p.dtype))
            resumed_late = 0 < self.resumed_at and self.resumed_at >= start * state.max_steps
            log.info("weight averaging: the final model is the mean of %d steps' weights (steps %d-%d)%s",
                     self.count, state.global_step - self.count + 1, state.global_step,
                     " - the run resumed after averaging began, so only the steps after the resume are in the mean"
                     if resumed_late else "")
            return control

    return WeightAveraging()


def head_first_callback(until: float):
    """Linear probing, then fine-tuning (Kumar et al., 2022, LP-FT): until `until` x the planned steps only the
    classification head trains, then every trainable tensor does. A randomly initialised head sends large,
    arbitrary gradients into the encoder in the first steps; training it first on the pretrained features is
    reported to distort those features less and to transfer better to data unlike the training data. The
    encoder's tensors are frozen with requires_grad, so the optimizer skips them (no gradient) until they are
    released; the learning-rate schedule is the run's own throughout."""
    from transformers import TrainerCallback

    class HeadFirst(TrainerCallback):
        def __init__(self):
            self.frozen: list = []

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            if model is None or state.global_step >= until * state.max_steps:
                return control
            heads = set(head_modules(model.config.model_type))
            self.frozen = [p for n, p in model.named_parameters()
                           if p.requires_grad and heads.isdisjoint(n.split("."))]
            if len(self.frozen) == sum(1 for p in model.parameters() if p.requires_grad):
                raise ValueError(f"train.head_first: no head among the trainable tensors (modules {sorted(heads)})")
            for p in self.frozen:
                p.requires_grad_(False)
            log.info("head first: only the classification head trains until step %d of %d",
                     math.ceil(until * state.max_steps), state.max_steps)
            return control

        def on_step_begin(self, args, state, control, **kwargs):
            if self.frozen and state.global_step >= until * state.max_steps:
                for p in self.frozen:
                    p.requires_grad_(True)
                log.info("head first: the encoder trains from step %d on", state.global_step + 1)
                self.frozen = []
            return control

    return HeadFirst()


def _supported_args(cls, kwargs: dict, group_by_length: bool) -> dict:
    """Keep the TrainingArguments this transformers version has (4.5x and 5.x differ)."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(cls)}
    if group_by_length:  # batches of similar length: far less padding, which matters most on CPU
        if "train_sampling_strategy" in names:
            kwargs["train_sampling_strategy"] = "group_by_length"
        else:
            kwargs["group_by_length"] = True
    return {k: v for k, v in kwargs.items() if k in names}


def train(model, tokenizer, train_ds, dev_ds, cfg, out: Path, compute_metrics, data_collator,
          loss_weights=None, loss_fn=None):
    """Train with HF Trainer, resuming from RUN_DIR/checkpoints when a checkpoint is there; returns the trainer."""
    from transformers import TrainingArguments, set_seed
    from transformers.trainer_utils import get_last_checkpoint

    t = cfg.train
    device = check_device(t.device)
    set_seed(cfg.run.seed)
    bf16, why = bf16_choice(t.bf16, device)
    log.info("device %s, training precision %s: %s", device, "bf16 autocast" if bf16 else "fp32", why)
    ckpt_dir = out / "checkpoints"
    per_epoch = t.eval_every == "epoch"
    kwargs = dict(  # noqa: C408 - keyword form reads like TrainingArguments(...)
        output_dir=str(ckpt_dir),
        learning_rate=t.learning_rate,
        num_train_epochs=t.epochs,
        max_steps=t.max_steps,
        per_device_train_batch_size=t.batch_size,
        per_device_eval_batch_size=t.eval_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        weight_decay=t.weight_decay,
        warmup_ratio=t.warmup_ratio,
        lr_scheduler_type=t.lr_scheduler,
        eval_strategy="epoch" if per_epoch else "steps",
        save_strategy="epoch" if per_epoch else "steps",
        eval_steps=None if per_epoch else t.eval_steps,
        save_steps=None if per_epoch else t.eval_steps,
        logging_steps=t.logging_steps,
        save_total_limit=t.save_total_limit,
        load_best_model_at_end=True,
        metric_for_best_model=t.metric_for_best_model,
        greater_is_better=True,
        seed=cfg.run.seed,
        data_seed=cfg.run.seed,
        use_cpu=device == "cpu",
        bf16=bf16,
        dataloader_num_workers=t.dataloader_workers,
        report_to=[],
        disable_tqdm=not sys.stderr.isatty() and os.environ.get("HALUGATE_PROGRESS", "1") == "0",
        save_safetensors=True,
    )
    args = TrainingArguments(**_supported_args(TrainingArguments, kwargs, t.group_by_length))
    trainer = _weighted_trainer_cls()(
        model=model, args=args, train_dataset=train_ds, eval_dataset=dev_ds,
        processing_class=tokenizer, data_collator=data_collator, compute_metrics=compute_metrics,
        callbacks=[_log_callback(out / "train_log.jsonl"), _final_step_callback(),
                   *([weight_averaging_callback(t.swa_start)] if t.swa_start is not None else []),
                   *([head_first_callback(t.head_first)] if t.head_first is not None else [])],
        loss_weights=loss_weights, loss_fn=loss_fn, label_smoothing=t.label_smoothing,
        layer_lr_decay=t.layer_lr_decay,
    )
    last = get_last_checkpoint(str(ckpt_dir)) if ckpt_dir.is_dir() else None
    if last:
        log.info("resuming from %s", last)
    trainer.train(resume_from_checkpoint=last)
    return trainer


def save_model(trainer, tokenizer, out: Path, labels: list[str]) -> None:
    """Save the LoRA adapter (if any) and the merged model + tokenizer + label map at the top of the run dir."""
    model = trainer.model
    if hasattr(model, "peft_config"):
        model.save_pretrained(out / "adapter")
        tokenizer.save_pretrained(out / "adapter")
    merged = merge_lora(model)
    merged.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "label_map.json").write_text(json.dumps({"labels": labels, "id2label": dict(enumerate(labels))},
                                                   indent=2))


def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
