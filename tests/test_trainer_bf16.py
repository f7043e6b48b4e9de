"""bf16 autocast on CPU: when it is used, and that it computes the same loss as fp32 on a few steps."""

import pytest

from training.trainer import use_bf16


def test_bf16_setting_auto_and_explicit(monkeypatch):
    from training import trainer

    assert not use_bf16(False, "cuda") and use_bf16(None, "cuda") and use_bf16(True, "cuda")
    monkeypatch.setattr(trainer, "cpu_has_bf16", lambda flags=None: False)
    assert not use_bf16(None, "cpu")  # emulated bf16 is slower than fp32: off
    monkeypatch.setattr(trainer, "cpu_has_bf16", lambda flags=None: True)
    assert use_bf16(None, "cpu") and not use_bf16(False, "cpu")


@pytest.mark.parametrize("flags, on, why", [
    ({"avx2", "fma"}, False, "x86-64 AVX2) has no native bf16"),
    ({"avx2", "avx512f", "avx512_vnni"}, False, "AVX-512 VNNI) has no native bf16"),
    ({"avx2", "avx512f", "avx512_vnni", "avx512_bf16"}, True, "AVX-512 VNNI+BF16) has native bf16"),
    ({"avx2", "avx512f", "amx_tile", "amx_int8", "amx_bf16"}, True, "(AMX) has native bf16"),
])
@pytest.mark.parametrize("setting", [None, True])
def test_bf16_on_a_cpu_only_where_it_is_native(flags, on, why, setting):
    """train.bf16 null (auto) or true: bf16 autocast on a CPU with avx512_bf16 / amx_bf16, fp32 elsewhere (torch
    would emulate bf16 there, slower), and the reason names the CPU class; false is always fp32."""
    from training.trainer import bf16_choice

    chosen, reason = bf16_choice(setting, "cpu", flags=flags)
    assert chosen is on and why in reason
    assert ("CUDA and native-bf16 CPUs only" in reason) == (setting is True and not on)
    assert bf16_choice(False, "cpu", flags=flags) == (False, "train.bf16: false")


@pytest.mark.slow
def test_bf16_autocast_loss_matches_fp32_over_a_few_steps(tiny_bert_dir):
    """The same 4 optimizer steps from the same weights, once in fp32 and once under bf16 autocast: the losses
    agree to within bf16's precision (~1%), so bf16 changes speed, not what is learned."""
    import torch
    from transformers import AutoModelForTokenClassification

    def run(autocast: bool) -> list[float]:
        torch.manual_seed(0)
        model = AutoModelForTokenClassification.from_pretrained(tiny_bert_dir, num_labels=2)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        gen = torch.Generator().manual_seed(1)
        ids = torch.randint(5, 1000, (8, 48), generator=gen)
        labels = torch.randint(0, 2, (8, 48), generator=gen)
        losses = []
        for _ in range(4):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(float(loss))
        return losses

    fp32, bf16 = run(False), run(True)
    assert fp32[-1] < fp32[0]  # it learns
    for a, b in zip(fp32, bf16):
        assert b == pytest.approx(a, rel=0.03)


@pytest.mark.slow
def test_predict_keeps_the_record_order_under_length_grouping(tiny_bert_dir, tmp_path):
    """group_by_length must group training batches only: transformers also length-groups (and shuffles)
    evaluation batches, which silently paired the Sentinel's dev logits with other records' labels and sources
    (its calibrated threshold came out at 0.0002)."""
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, TrainingArguments

    from training.trainer import _weighted_trainer_cls

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    texts = [" ".join(["word"] * (1 + (i * 7) % 37)) for i in range(64)]  # lengths out of order
    ds = Dataset.from_dict({"text": texts, "labels": [i % 3 % 2 for i in range(64)]})
    ds = ds.map(lambda b: tok(b["text"], truncation=True, max_length=64), batched=True, remove_columns=["text"])
    args = TrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=4, group_by_length=True,
                             report_to=[], use_cpu=True)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert_dir, num_labels=2)
    trainer = _weighted_trainer_cls()(model=model, args=args, processing_class=tok)
    pred = trainer.predict(ds)
    assert pred.label_ids.tolist() == ds["labels"]


@pytest.mark.parametrize("fixture, field", [("tiny_bert_dir", "attention_probs_dropout_prob"),
                                            ("tiny_modernbert_dir", "attention_dropout")])
def test_attention_dropout_reaches_the_model_config(request, fixture, field):
    """model.attention_dropout: 0.0 (fused attention while training, ~3x faster at 512 tokens on this CPU)
    lands in each architecture's own config field; unset keeps the base model's value."""
    from training.models import build_model

    path = request.getfixturevalue(fixture)
    base = build_model(path, "token", ["SUPPORTED", "HALLUCINATED"])
    assert getattr(base.config, field) > 0.0 or fixture == "tiny_modernbert_dir"
    model = build_model(path, "token", ["SUPPORTED", "HALLUCINATED"], attention_dropout=0.0)
    assert getattr(model.config, field) == 0.0
    model = build_model(path, "token", ["SUPPORTED", "HALLUCINATED"], attention_dropout=0.2)
    assert getattr(model.config, field) == 0.2


def test_attention_dropout_is_validated():
    from training.config import ModelConfig

    with pytest.raises(ValueError, match="model.attention_dropout"):
        ModelConfig(attention_dropout=1.5).validate()


def _train_six_steps(tiny_bert_dir, tmp_path, callback, prepare=None):
    """Six steps of the recipes' trainer on a tiny BERT classifier with `callback`; returns the model, its tensors
    before training and after every step."""
    from datasets import Dataset
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        TrainerCallback,
        TrainingArguments,
    )

    from training.trainer import _weighted_trainer_cls

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    ds = Dataset.from_dict({"text": [f"word {i} " * (1 + i % 5) for i in range(24)], "labels": [i % 2 for i in range(24)]})
    ds = ds.map(lambda b: tok(b["text"], truncation=True, max_length=32), batched=True, remove_columns=["text"])
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert_dir, num_labels=2)
    if prepare is not None:
        prepare(model)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    seen: list[dict] = []

    class Record(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            seen.append({n: p.detach().clone() for n, p in model.named_parameters()})

    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=6, learning_rate=1e-2,
                             report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no")
    trainer = _weighted_trainer_cls()(model=model, args=args, train_dataset=ds, processing_class=tok,
                                      data_collator=DataCollatorWithPadding(tok), callbacks=[Record(), callback])
    trainer.train()
    assert len(seen) == 6
    return model, start, seen


def test_weight_averaging_leaves_the_mean_of_the_last_steps(tiny_bert_dir, tmp_path):
    """train.swa_start: after training, every trainable tensor is the mean of its values after each optimizer
    step from swa_start x the planned steps on; frozen tensors are untouched."""
    import torch

    from training.trainer import weight_averaging_callback

    def freeze_embeddings(model):
        for p in model.bert.embeddings.parameters():
            p.requires_grad_(False)

    model, start, seen = _train_six_steps(tiny_bert_dir, tmp_path, weight_averaging_callback(0.5), freeze_embeddings)
    name, frozen = "classifier.weight", "bert.embeddings.word_embeddings.weight"
    expected = torch.stack([s[name] for s in seen[2:]]).mean(0)  # steps 3-6: global_step >= 0.5 x 6
    assert not torch.allclose(seen[-1][name], expected)  # the weights moved, so the mean is not the last step
    assert torch.allclose(dict(model.named_parameters())[name].detach(), expected, atol=1e-6)
    assert torch.equal(dict(model.named_parameters())[frozen].detach(), start[frozen])


def test_swa_start_is_checked():
    from training.config import TrainArgs

    with pytest.raises(ValueError, match="train.swa_start"):
        TrainArgs(swa_start=1.0).validate()
    TrainArgs(swa_start=0.5).validate()


def test_head_first_trains_only_the_head_then_everything(tiny_bert_dir, tmp_path):
    """train.head_first: in the first head_first x planned steps the encoder's tensors do not move and the head's
    do; afterwards the encoder trains as well (its tensors requires_grad again)."""
    import torch

    from training.trainer import head_first_callback

    model, start, seen = _train_six_steps(tiny_bert_dir, tmp_path, head_first_callback(0.5))
    encoder, head = "bert.encoder.layer.0.attention.self.query.weight", "classifier.weight"
    # steps 1-3 (global_step 0-2 < 0.5 x 6): the head moves, the encoder does not
    assert all(torch.equal(seen[i][encoder], start[encoder]) for i in range(3))
    assert not torch.equal(seen[0][head], start[head])
    assert not torch.equal(seen[5][encoder], seen[2][encoder])  # steps 4-6: the encoder trains
    assert all(p.requires_grad for p in model.parameters())


def test_head_first_is_checked():
    from training.config import TrainArgs

    with pytest.raises(ValueError, match="train.head_first"):
        TrainArgs(head_first=1.0).validate()
    TrainArgs(head_first=0.25).validate()


def test_label_smoothing_reaches_the_loss_and_is_checked(tiny_bert_dir, tmp_path):
    """train.label_smoothing: the trainer's loss is torch's smoothed cross-entropy (class weights kept), and the
    option reaches a recipe's own loss that takes it (the Explainer's two-way mask) and is refused by one that
    does not (it would silently do nothing there)."""
    import torch
    from transformers import AutoModelForSequenceClassification, TrainingArguments

    from training.config import TrainArgs
    from training.trainer import _weighted_trainer_cls

    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert_dir, num_labels=2)
    inputs = {"input_ids": torch.tensor([[2, 15, 27, 3], [2, 44, 8, 3]]), "labels": torch.tensor([1, 0])}
    with torch.no_grad():
        logits = model(input_ids=inputs["input_ids"]).logits
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)

    def loss(eps):
        trainer = _weighted_trainer_cls()(model=model, args=args, loss_weights=[1.0, 3.0], label_smoothing=eps)
        with torch.no_grad():
            return float(trainer.compute_loss(model, dict(inputs)))

    weight = torch.tensor([1.0, 3.0])
    for eps in (0.0, 0.2):
        expected = torch.nn.functional.cross_entropy(logits, inputs["labels"], weight=weight, label_smoothing=eps)
        assert loss(eps) == pytest.approx(float(expected), rel=1e-5)
    assert loss(0.2) != pytest.approx(loss(0.0))
    with pytest.raises(ValueError, match="train.label_smoothing"):
        _weighted_trainer_cls()(model=model, args=args, loss_fn=lambda *a: None, label_smoothing=0.1)
    seen = {}

    def own_loss(logits, labels, weight, label_smoothing=0.0):
        seen["eps"] = label_smoothing
        return torch.nn.functional.cross_entropy(logits, labels, weight=weight, label_smoothing=label_smoothing)

    trainer = _weighted_trainer_cls()(model=model, args=args, loss_weights=[1.0, 3.0], loss_fn=own_loss,
                                      label_smoothing=0.2)
    with torch.no_grad():
        assert float(trainer.compute_loss(model, dict(inputs))) == pytest.approx(loss(0.2), rel=1e-5)
    assert seen["eps"] == 0.2
    with pytest.raises(ValueError, match="train.label_smoothing"):
        TrainArgs(label_smoothing=1.0).validate()
    TrainArgs(label_smoothing=0.1).validate()


def test_layer_lr_decay_gives_each_depth_its_rate(tiny_bert_dir, tmp_path):
    """train.layer_lr_decay: the optimizer holds one rate per depth, the head at train.learning_rate and each
    layer below at decay x the one above (embeddings lowest), with weight decay off for biases and norms; the
    option is checked."""
    from transformers import AutoModelForSequenceClassification, TrainingArguments

    from training.config import TrainArgs
    from training.trainer import _weighted_trainer_cls, layer_depth

    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert_dir, num_labels=2)
    n = model.config.num_hidden_layers
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True, learning_rate=1e-3,
                             weight_decay=0.01)
    optimizer = _weighted_trainer_cls()(model=model, args=args, layer_lr_decay=0.5).create_optimizer()
    rate = {id(p): (g["lr"], g["weight_decay"]) for g in optimizer.param_groups for p in g["params"]}
    named = dict(model.named_parameters())
    assert len(rate) == len(named)  # every tensor is in exactly one group
    assert rate[id(named["classifier.weight"])] == (pytest.approx(1e-3), 0.01)
    assert rate[id(named["bert.pooler.dense.weight"])][0] == pytest.approx(1e-3)
    assert rate[id(named[f"bert.encoder.layer.{n - 1}.output.dense.weight"])][0] == pytest.approx(5e-4)
    assert rate[id(named["bert.encoder.layer.0.attention.self.query.weight"])][0] == pytest.approx(1e-3 * 0.5 ** n)
    assert rate[id(named["bert.embeddings.word_embeddings.weight"])][0] == pytest.approx(1e-3 * 0.5 ** (n + 1))
    assert rate[id(named["bert.encoder.layer.0.attention.self.query.bias"])][1] == 0.0
    assert layer_depth("model.layers.11.attn.Wqkv.weight", 22) == 12  # ModernBERT's naming
    assert layer_depth("model.final_norm.weight", 22) == 23
    plain = _weighted_trainer_cls()(model=model, args=args).create_optimizer()
    assert {g["lr"] for g in plain.param_groups} == {1e-3}
    with pytest.raises(ValueError, match="train.layer_lr_decay"):
        TrainArgs(layer_lr_decay=0.0).validate()
    TrainArgs(layer_lr_decay=0.8).validate()


def test_reinit_top_layers_renews_only_the_top(tiny_bert_dir):
    """model.reinit_top_layers: the top k encoder layers get fresh weights, the lower layers and the
    embeddings keep the pretrained ones; k outside the encoder's depth is refused with the field's name."""
    import torch
    from transformers import AutoModelForTokenClassification

    from training.config import LoraConfig, ModelConfig
    from training.models import BaseModelError, build_model

    base = AutoModelForTokenClassification.from_pretrained(tiny_bert_dir, num_labels=2)
    pretrained, n = dict(base.named_parameters()), base.config.num_hidden_layers
    model = build_model(tiny_bert_dir, "token", ["SUPPORTED", "HALLUCINATED"], seed=0, reinit_top=1)
    renewed = dict(model.named_parameters())
    top, below = f"bert.encoder.layer.{n - 1}.attention.self.query.weight", "bert.encoder.layer.0.output.dense.weight"
    assert not torch.equal(renewed[top], pretrained[top])
    assert torch.equal(renewed[f"bert.encoder.layer.{n - 1}.output.dense.bias"], torch.zeros_like(pretrained[
        f"bert.encoder.layer.{n - 1}.output.dense.bias"]))
    assert torch.equal(renewed[below], pretrained[below])
    assert torch.equal(renewed["bert.embeddings.word_embeddings.weight"], pretrained["bert.embeddings.word_embeddings.weight"])
    with pytest.raises(BaseModelError, match="model.reinit_top_layers"):
        build_model(tiny_bert_dir, "token", ["SUPPORTED", "HALLUCINATED"], reinit_top=n + 1)
    with pytest.raises(BaseModelError, match="model.reinit_top_layers: needs full fine-tuning"):
        build_model(tiny_bert_dir, "token", ["SUPPORTED", "HALLUCINATED"], lora=LoraConfig(enabled=True), reinit_top=1)
    with pytest.raises(ValueError, match="model.reinit_top_layers"):
        ModelConfig(reinit_top_layers=-1).validate()
