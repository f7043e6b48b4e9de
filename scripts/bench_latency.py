"""Latency of the whole HaluGate stack per stage, per backend, and side by side with the PyPI `lettucedetect`.

    python scripts/bench_latency.py --detector runs/detector-offline --out runs/bench
    python scripts/bench_latency.py --build-missing --out runs/bench          # random-head MiniLM models

What it measures, on identical inputs for every backend:
- p50 / p99 (and n) of each stage (sentinel, context extraction, detector, explainer, total) in milliseconds, at
  context lengths 512, 2K, 4K, 8K Detector tokens and batch 1 / 8 (detect_batch; batch timings are for the
  whole batch), for ONNX fp32, ONNX int8 and PyTorch eager;
- lettucedetect 0.2.3 `HallucinationDetector(method="transformer", model_path=RUN_DIR)` on the same Detector
  checkpoint: (a) its own long-context path (`predict`, passages grouped into chunks, max over chunks) against
  our Detector path (context extraction + windowed Detector, ONNX fp32, threshold 0.5 like its argmax), with the
  ratio and whether the spans are the same; (b) the same tokens through both (`predict_prompt` vs our runner on
  the identical [CLS] prompt [SEP] answer [SEP] encoding): ratio and per-token agreement.
Every stage model is a run dir (torch) exported to ONNX (fp32 + int8) by training.export into OUT/models when it
has no export yet. `--build-missing` builds a random-head MiniLM classifier (training.models.build_model on
offline:minilm) for any stage without a checkpoint: realistic timing, meaningless predictions. MiniLM has 512
positions, so every context above ~450 tokens runs in several Detector windows.

The Sentinel threshold is 0 here so that every input goes through the full stack (the Sentinel still runs and
is timed). Results: OUT/latency.json and OUT/latency.md (with hardware, versions and load average).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from inference.detect import HaluGate
from inference.hardware import cpu_info, cpu_name
from inference.labels import DETECTOR_LABELS, EXPLAINER_LABELS, SENTINEL_LABELS
from inference.result import STAGES
from inference.runners import Features, physical_cores
from inference.spans import token_probs_to_spans
from inference.windowing import join_documents
from training.export import export as export_model
from training.models import build_model, load_tokenizer, resolve_base_model

STAGE_SPECS = {"sentinel": ("sequence", SENTINEL_LABELS), "detector": ("token", DETECTOR_LABELS),
               "explainer": ("sequence", EXPLAINER_LABELS)}
BACKENDS = {"onnx-auto": ("onnx", "auto"), "onnx-fp32": ("onnx", "fp32"), "onnx-int8": ("onnx", "int8"),
            "torch": ("torch", "fp32")}
MAX_LOAD_PER_CORE = 0.5  # above this the machine is busy: timings would measure the other work too
QUESTION = "When was the Eiffel Tower built, and how tall is it?"
EVIDENCE = "The Eiffel Tower in Paris was built from 1887 to 1889. It is 330 meters tall."
ANSWERS = ["The Eiffel Tower was built in 1950 and is 500 meters tall.",
           "It was built between 1887 and 1889 and is 330 meters tall, in Rome.",
           "The tower, finished in 1889, stands 330 meters tall in Paris.",
           "Construction ended in 1901; the tower is 290 meters tall."]
CITIES = ["Lyon", "Turin", "Ghent", "Porto", "Bergen", "Graz", "Malmo", "Leeds", "Split", "Tartu"]
THINGS = ["library", "bridge", "museum", "station", "market hall", "observatory", "theatre", "harbour crane"]


# ---- models ------------------------------------------------------------------------------------------------

def build_random_head(stage: str, out: Path) -> Path:
    task, labels = STAGE_SPECS[stage]
    base = resolve_base_model("offline:minilm")
    import torch

    torch.manual_seed(0)
    model = build_model(base, task, labels)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    load_tokenizer(base).save_pretrained(out)
    (out / "label_map.json").write_text(json.dumps({"labels": labels, "id2label": dict(enumerate(labels))}))
    return out


def has_weights(path: Path) -> bool:
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))


def prepare(stage: str, run: str | None, export: str | None, out: Path, build_missing: bool) -> dict:
    info = {"stage": stage}
    run_dir = Path(run) if run else None
    if run_dir is None or not has_weights(run_dir):
        if not build_missing:
            raise SystemExit(f"{stage}: no checkpoint ({run_dir}); pass --{stage} RUN_DIR or --build-missing")
        run_dir = out / "models" / stage / "run"
        if not has_weights(run_dir):
            print(f"[bench] {stage}: building a random-head MiniLM classifier in {run_dir}", flush=True)
            build_random_head(stage, run_dir)
        info["checkpoint"] = "random-head offline:minilm (training.models.build_model)"
    else:
        info["checkpoint"] = str(run_dir)
    random_head = info["checkpoint"].startswith("random-head")
    if export:
        # A given export is timed as it is, never rewritten: its int8 file is there only if training.export's
        # agreement check shipped it, and the runtime's default precision uses exactly that.
        export_dir = Path(export)
        if not (export_dir / "model.onnx").is_file():
            raise SystemExit(f"--{stage}-export {export_dir}: no model.onnx; export it with "
                             f"`python -m training.export --model {run_dir} --out {export_dir} --quantize int8`")
    else:
        export_dir = out / "models" / stage / "export"
        if not (export_dir / "model.onnx").is_file():
            print(f"[bench] {stage}: exporting {run_dir} -> {export_dir} (fp32 + int8 if it passes)", flush=True)
            # a random head has no answers worth keeping: its int8 is always written, so that int8 can be timed
            export_model(run_dir, export_dir, quantize="int8", overwrite=True,
                         **({"agreement_floor": 0.0, "samples": 32} if random_head else {}))
    report = export_dir / "export_report.json"
    if report.is_file():
        data = json.loads(report.read_text())
        parity = data.get("parity", {})
        info["int8_label_agreement"] = (parity.get("int8") or data.get("refused", {}).get("int8") or {}).get(
            "label_agreement")
        info["int8_shipped"] = (export_dir / "model_quantized.onnx").is_file()
        info["fp32_max_abs_diff"] = parity.get("fp32", {}).get("max_abs_diff")
    info.update(run=str(run_dir), export=str(export_dir))
    return info


# ---- inputs ------------------------------------------------------------------------------------------------

def passage(rng: random.Random) -> str:
    out = []
    for _ in range(4):
        out.append(f"The {rng.choice(THINGS)} in {rng.choice(CITIES)} opened in {rng.randint(1850, 2020)} and "
                   f"received {rng.randint(2, 900)} thousand visitors in {rng.randint(1990, 2023)}, "
                   f"according to the city's {rng.choice(['annual', 'quarterly', 'tourism'])} report.")
    return " ".join(out)


def make_input(tokenizer, target_tokens: int, seed: int) -> dict:
    """Passages making `target_tokens` Detector tokens of context (the last one cut to fit), the evidence
    passage at a random place."""
    rng = random.Random(seed)

    def count(docs):
        return len(tokenizer.encode(join_documents(docs), add_special_tokens=False).ids)

    passages = [EVIDENCE]
    while True:
        extra = passage(rng)
        if count(passages + [extra]) > target_tokens:
            words = extra.split()
            lo, hi = 0, len(words)
            while lo < hi:  # the longest prefix of the next passage that still fits
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if count(passages + [" ".join(words[:mid])]) <= target_tokens else (lo, mid - 1)
            if lo:
                passages.append(" ".join(words[:lo]))
            break
        passages.append(extra)
    evidence = passages.pop(0)
    passages.insert(rng.randint(0, len(passages)), evidence)
    return {"context": passages, "question": QUESTION, "answer": ANSWERS[seed % len(ANSWERS)]}


# ---- timing ------------------------------------------------------------------------------------------------

def pct(values: list[float]) -> dict:
    arr = np.asarray(values, dtype=float)
    return {"p50": round(float(np.percentile(arr, 50)), 2), "p99": round(float(np.percentile(arr, 99)), 2),
            "n": len(values)}


def ratio_interval(theirs: list[float], ours: list[float], n_boot: int = 2000, seed: int = 0) -> list[float]:
    """95% bootstrap interval of p50(theirs) / p50(ours). The repetitions alternate (one of theirs, then one of
    ours), so a repetition's pair shares the machine's state and is resampled as a pair: the interval says how
    far the one-run ratio could move with another draw of the same number of repetitions, not across machines."""
    a, b = np.asarray(theirs, dtype=float), np.asarray(ours, dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(a), size=(n_boot, len(a)))
    ratios = np.median(a[idx], axis=1) / np.median(b[idx], axis=1)
    return [round(float(v), 2) for v in np.percentile(ratios, [2.5, 97.5])]


def interleaved(first, second, reps: int, max_seconds: float) -> tuple[tuple[list[float], object], ...]:
    """Call `first` and `second` in turn `reps` times (or until `max_seconds`): both see the same machine state.
    Returns (milliseconds, last result) for each."""
    times: tuple[list[float], list[float]] = ([], [])
    last: list = [None, None]
    started = time.perf_counter()
    for _ in range(reps):
        for k, call in enumerate((first, second)):
            t = time.perf_counter()
            last[k] = call()
            times[k].append((time.perf_counter() - t) * 1000)
        if time.perf_counter() - started > max_seconds:
            break
    return (times[0], last[0]), (times[1], last[1])


def char_jaccard(a: list, b: list) -> float:
    """Overlap of the flagged answer characters of two span lists (1.0: the same characters, or none in both)."""
    ca = {i for s, e in a for i in range(s, e)}
    cb = {i for s, e in b for i in range(s, e)}
    return 1.0 if not ca and not cb else round(len(ca & cb) / len(ca | cb), 3)


def spans_of(result) -> list[tuple[int, int]]:
    return [(s.start, s.end) for s in result.spans]


def bench_backend(name: str, models: dict, inputs: dict, args,
                  variant: tuple[str, list[str]] = ("", [])) -> list[dict]:
    backend, precision = BACKENDS[name]
    label, extra = variant
    refused = [stage for stage, m in models.items() if m.get("int8_shipped") is False]
    if precision == "int8" and refused:
        print(f"[bench] {name}: skipped, the export refused int8 for {', '.join(refused)} (onnx-auto runs them in "
              "fp32, as the runtime does)", flush=True)
        return []
    key = "export" if backend == "onnx" else "run"
    gate = HaluGate.from_dirs(
        detector=models["detector"][key], sentinel=models["sentinel"][key], explainer=models["explainer"][key],
        backend=backend, precision=precision,
        overrides=["hallucination_mitigation.fact_check_model.threshold=0.0", *window_overrides(args),
                   *([] if args.detector_threshold is None else [
                       "hallucination_mitigation.hallucination_model.use_model_calibration=false",
                       f"hallucination_mitigation.hallucination_model.threshold={args.detector_threshold}"]),
                   f"hallucination_mitigation.hallucination_model.min_span_confidence={args.min_span_confidence}",
                   f"hallucination_mitigation.num_threads={args.threads}", *args.set, *extra])
    name = f"{name}+{label}" if label else name
    if gate.load_errors:
        raise SystemExit(f"{name}: {gate.load_errors}")
    precisions = {stage: r.precision for stage, r in gate.runners.items() if r is not None}
    # why each stage runs its file (precision: auto times fp32 against int8 on this CPU: inference.precision)
    decisions = {stage: r.precision_decision.as_dict() for stage, r in gate.runners.items()
                 if getattr(r, "precision_decision", None) is not None}
    for stage, d in decisions.items():
        print(f"[bench] {name} {stage}: {d['precision']} ({d['file']}, {d['source']}) {d['reason']}"
              + (f"; fp32 {d['fp32_ms']} ms, int8 {d['int8_ms']} ms" if d.get("fp32_ms") else ""), flush=True)
    # the file each stage ran (a variant's onnx_file overrides the backend's precision: say so in the report)
    files = {stage: getattr(getattr(r, "onnx_path", None), "name", "torch") for stage, r in gate.runners.items()
             if r is not None}
    gate.detect_batch(inputs[min(inputs)][:1])  # warm-up: sessions, allocator, caches
    rows = []
    for length in args.lengths:
        for batch in args.batches:
            items = inputs[length][:batch]
            # int8 with an fp32 fallback (inference.runners): the share of a stage's inputs fp32 answered
            fallback = {s: r for s, r in gate.runners.items() if getattr(r, "fallback_margin", None) is not None}
            for r in fallback.values():
                r.rows_run = r.rows_fallback = 0
            stage_times = {s: [] for s in STAGES}
            started = time.perf_counter()
            results = None
            for rep in range(args.reps):
                results = gate.detect_batch(items)
                for s in STAGES:
                    stage_times[s].append(results[0].timings_ms[s])
                if time.perf_counter() - started > args.max_cell_seconds:
                    break
            row = {"backend": name, "precisions": precisions, "files": files, "precision_decisions": decisions,
                   "context_tokens": length, "batch": batch,
                   "measured_context_tokens": results[0].context_tokens,
                   "windows_per_input": results[0].detector_windows,
                   "spans_per_input": round(statistics.mean(len(r.spans) for r in results), 2),
                   "spans_first": spans_of(results[0]),
                   **{s: pct(v) for s, v in stage_times.items()}}
            row["nli_labels_first"] = [s.nli_label for s in results[0].spans]  # variants must explain alike
            row["fp32_fallback_share"] = {s: round(r.rows_fallback / max(1, r.rows_run), 3) for s, r in fallback.items()}
            rows.append(row)
            print(f"[bench] {name:9s} ctx={length:5d} batch={batch} windows={row['windows_per_input']:3d} "
                  f"total p50={row['total']['p50']:9.1f} ms (n={row['total']['n']}) "
                  f"detector p50={row['detector']['p50']:9.1f} explainer p50={row['explainer']['p50']:8.1f}"
                  + "".join(f" {s} fp32 fallback {v:.0%}" for s, v in row["fp32_fallback_share"].items()),
                  flush=True)
    return rows


def bench_lettucedetect(models: dict, inputs: dict, args) -> dict:
    try:
        import lettucedetect
        from lettucedetect.detectors.prompt_utils import PromptUtils
        from lettucedetect.models.inference import HallucinationDetector
    except ImportError as exc:
        return {"error": f"lettucedetect not installed ({exc}); pip install --no-deps lettucedetect==0.2.3"}
    run_dir = models["detector"]["run"]
    ld = HallucinationDetector(method="transformer", model_path=run_dir, max_length=512, device="cpu")
    same_decision = ["hallucination_mitigation.hallucination_model.use_model_calibration=false",
                     "hallucination_mitigation.hallucination_model.threshold=0.5",  # lettucedetect's argmax
                     "hallucination_mitigation.hallucination_model.min_span_confidence=0.0",
                     "hallucination_mitigation.hallucination_model.min_span_length=1",
                     "hallucination_mitigation.hallucination_model.span_extension=1.0",  # argmax: no extension
                     f"hallucination_mitigation.num_threads={args.threads}"]
    ours = HaluGate.from_dirs(detector=models["detector"]["export"], precision=args.precision,
                              overrides=[*same_decision, *window_overrides(args), *args.set])
    ours_fp32 = HaluGate.from_dirs(detector=models["detector"]["export"], precision="fp32",
                                   overrides=[*same_decision, *window_overrides(args), *args.set])
    out = {"version": lettucedetect.__version__, "long_context": [], "identical_input": None,
           "our_precision": ours.runners["detector"].precision}
    x0 = inputs[min(inputs)][0]
    ld.predict(context=x0["context"], question=x0["question"], answer=x0["answer"], output_format="spans")
    ours.detect(**x0)
    for length in args.lengths:
        x = inputs[length][0]
        (t_ld, ld_spans), (t_ours, r) = interleaved(
            lambda x=x: ld.predict(context=x["context"], question=x["question"], answer=x["answer"],
                                   output_format="spans"),
            lambda x=x: ours.detect(**x), args.reps, args.max_cell_seconds)
        groups = ld.detector._group_passages_into_chunks(x["context"], x["question"], x["answer"])
        a, b = pct(t_ld), pct(t_ours)
        row = {"context_tokens": length, "lettucedetect_ms": a, "ours_ms": b,
               "token_agreement_vs_fp32": token_agreement(ours, ours_fp32, x),
               "ratio_p50": round(a["p50"] / b["p50"], 2), "ratio_p50_ci95": ratio_interval(t_ld, t_ours),
               "lettucedetect_chunks": len(groups),
               "our_windows": r.detector_windows,
               "lettucedetect_spans": [(s["start"], s["end"]) for s in ld_spans], "our_spans": spans_of(r)}
        row["same_spans"] = row["lettucedetect_spans"] == row["our_spans"]
        row["span_char_jaccard"] = char_jaccard(row["lettucedetect_spans"], row["our_spans"])
        out["long_context"].append(row)
        print(f"[bench] lettucedetect ctx={length:5d} p50={a['p50']:9.1f} ms vs ours {b['p50']:9.1f} ms "
              f"ratio={row['ratio_p50']:.2f} (95% {row['ratio_p50_ci95'][0]:.2f}-{row['ratio_p50_ci95'][1]:.2f}) "
              f"chunks={len(groups)} windows={r.detector_windows} "
              f"same_spans={row['same_spans']} agreement_vs_fp32={row['token_agreement_vs_fp32']}", flush=True)

    # (b) identical tokens: lettucedetect's own prompt and pair encoding, run by both.
    runner = ours.runners["detector"]
    passages = []
    for p in x0["context"]:
        prompt = PromptUtils.format_context(passages + [p], x0["question"], "en")
        if len(runner.tokenizer.encode(prompt, x0["answer"]).ids) > 512:
            break
        passages.append(p)
    prompt = PromptUtils.format_context(passages, x0["question"], "en")
    answer = x0["answer"]
    t_ld, t_ours = [], []
    for rep in range(max(args.reps, 5)):
        t = time.perf_counter()
        ld_tokens = ld.predict_prompt(prompt, answer, output_format="tokens")
        t_ld.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        enc = runner.tokenizer.encode(prompt, answer)
        # lettucedetect feeds only input_ids and attention_mask (token_type_ids dropped): do the same here.
        probs = runner.probabilities([Features(list(enc.ids), [0] * len(enc.ids))])[0][:, 1]
        answer_pos = [i for i, (ty, tid) in enumerate(zip(enc.type_ids, enc.ids)) if ty == 1 and tid != runner.tok.sep_id]
        p_answer = probs[answer_pos]
        token_probs_to_spans(answer, [enc.offsets[i] for i in answer_pos], p_answer, threshold=0.5)
        t_ours.append((time.perf_counter() - t) * 1000)
    # lettucedetect's token list also scores the final [SEP] (its labels are 0 from the answer start to the end).
    ld_tokens = ld_tokens[:len(p_answer)]
    ld_pred = [t["pred"] for t in ld_tokens]
    ours_pred = [int(p > 0.5) for p in p_answer]
    ld_prob = np.array([t["prob"] for t in ld_tokens])
    a, b = pct(t_ld), pct(t_ours)
    out["identical_input"] = {
        "tokens": len(enc.ids), "lettucedetect_ms": a, "ours_ms": b, "ratio_p50": round(a["p50"] / b["p50"], 2),
        "answer_tokens": len(ld_pred), "token_agreement": float(np.mean(np.array(ld_pred) == np.array(ours_pred)))
        if len(ld_pred) == len(ours_pred) else None,
        "max_abs_prob_diff": float(np.abs(ld_prob - p_answer).max()) if len(ld_prob) == len(p_answer) else None,
    }
    print(f"[bench] identical input ({len(enc.ids)} tokens): lettucedetect p50={a['p50']:.1f} ms, ours "
          f"p50={b['p50']:.1f} ms, ratio={out['identical_input']['ratio_p50']:.2f}, token agreement="
          f"{out['identical_input']['token_agreement']}, max |dprob|={out['identical_input']['max_abs_prob_diff']}",
          flush=True)
    return out


def window_overrides(args) -> list[str]:
    return [f"hallucination_mitigation.hallucination_model.{k}={v}" for k, v in
            (("window_overlap", args.window_overlap), ("max_windows", args.max_windows),
             ("window_aggregation", args.window_aggregation)) if v is not None]


def token_agreement(gate: HaluGate, reference: HaluGate, x: dict) -> float:
    """Share of answer tokens on which two gates (e.g. int8 and fp32) take the same decision at the Detector
    threshold in effect, on identical windows."""
    a, b = (g.score_tokens(g.prepare([x]))[0] for g in (gate, reference))
    t = gate.settings.hallucination_mitigation.hallucination_model.threshold
    return round(float(np.mean((a.probs >= t) == (b.probs >= t))), 4) if len(a.probs) else 1.0


def check_idle(allow_busy: bool) -> list[float]:
    """Refuse to time a busy machine (1-minute load average over MAX_LOAD_PER_CORE per physical core)."""
    load = [round(x, 2) for x in os.getloadavg()]
    cores = physical_cores()
    if load[0] > MAX_LOAD_PER_CORE * cores:
        message = (f"load average {load[0]} over {MAX_LOAD_PER_CORE} x {cores} physical cores: other work is "
                   "running, so these timings would measure it too")
        if not allow_busy:
            raise SystemExit(f"error: {message}; wait for an idle machine (or pass --allow-busy to time anyway)")
        print(f"[bench] WARNING: {message}. The report is marked busy.", file=sys.stderr, flush=True)
    return load


# ---- report ------------------------------------------------------------------------------------------------

def environment() -> dict:
    """The machine and the package versions behind the figures (training.hardware names the CPU)."""
    cpu = cpu_name()
    import importlib.metadata as md

    versions = {}
    for pkg in ("onnxruntime", "torch", "transformers", "tokenizers", "numpy", "lettucedetect"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    info = cpu_info()
    return {"cpu": cpu, "cpu_class": info.cpu_class, "isa": list(info.isa), "cpu_description": info.describe(),
            "physical_cores": info.physical_cores,
            "cores": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(), "versions": versions}


def _interval(ci: list[float] | None) -> str:
    return f" ({ci[0]:.2f}-{ci[1]:.2f})" if ci else ""


def markdown(report: dict) -> str:
    hw = report["hardware"]
    cpu = hw.get("cpu_description") or f"{hw['cpu']}, {hw['cores']} cores"  # model, CPU class, features, cores
    lines = [f"Hardware: {cpu}, load average at start "
             f"{hw['load_average_start']}, at end {hw['load_average']}{' (BUSY machine)' if report['busy'] else ''}; " +
             ", ".join(f"{k} {v}" for k, v in hw["versions"].items()),
             "", "Models: " + "; ".join(f"{m['stage']}: {m['checkpoint']}" for m in report["models"]), "",
             ("| backend | context tokens | batch | windows | sentinel p50/p99 | context p50/p99 | detector p50/p99 "
             "| explainer p50/p99 | total p50/p99 | n |"),
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        cells = " | ".join(f"{r[s]['p50']:.1f} / {r[s]['p99']:.1f}" for s in STAGES)
        lines.append(f"| {r['backend']} | {r['measured_context_tokens']} | {r['batch']} | {r['windows_per_input']} | {cells} "
                     f"| {r['total']['n']} |")
    files = {r["backend"]: r.get("files") for r in report["rows"] if r.get("files")}
    if files:
        lines += ["", "Files run: " + "; ".join(
            f"{backend}: " + ", ".join(f"{stage} `{f}`" for stage, f in stage_files.items())
            for backend, stage_files in files.items())]
    auto = next((r.get("precision_decisions") for r in report["rows"] if r["backend"] == "onnx-auto"), None)
    if auto:
        lines += ["", "precision: auto on this CPU: " + "; ".join(
            f"{stage} {d['precision']} ({d['source']}" + (f", fp32 {d['fp32_ms']} ms / int8 {d['int8_ms']} ms on "
                                                          f"{d['shape']}" if d.get("fp32_ms") else "") + ")"
            for stage, d in auto.items())]
    ld = report.get("lettucedetect") or {}
    if ld.get("long_context"):
        lines += ["", (f"lettucedetect {ld['version']} on the same Detector checkpoint against ours at "
                       f"{ld['our_precision']} (batch 1, ms; threshold 0.5 on both):"), "",
                  ("| context tokens | lettucedetect p50 / p99 | ours p50 / p99 | ratio p50 (95% bootstrap) | lettucedetect chunks "
                   "| our windows | same spans | flagged-char Jaccard | token agreement vs our fp32 |"),
                  "|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
        for r in ld["long_context"]:
            lines.append(f"| {r['context_tokens']} | {r['lettucedetect_ms']['p50']:.1f} / "
                         f"{r['lettucedetect_ms']['p99']:.1f} | {r['ours_ms']['p50']:.1f} / {r['ours_ms']['p99']:.1f} "
                         f"| {r['ratio_p50']:.2f}{_interval(r.get('ratio_p50_ci95'))} | {r['lettucedetect_chunks']} | {r['our_windows']} | "
                         f"{r['same_spans']} | {r.get('span_char_jaccard')} | {r['token_agreement_vs_fp32']} |")
        ii = ld["identical_input"]
        lines += ["", (f"Identical input ({ii['tokens']} tokens, lettucedetect's prompt): lettucedetect "
                      f"{ii['lettucedetect_ms']['p50']:.1f} ms vs ours {ii['ours_ms']['p50']:.1f} ms p50, "
                      f"ratio {ii['ratio_p50']:.2f}; per-token prediction agreement {ii['token_agreement']}, "
                      f"max |P difference| {ii['max_abs_prob_diff']}")]
    elif ld.get("error"):
        lines += ["", f"lettucedetect: {ld['error']}"]
    return "\n".join(lines) + "\n"


# ---- a published architecture at its real shape (--arch) -----------------------------------------------------

ARCHS = {"modernbert-base": "ModernBERT-base's config (transformers ModernBertConfig defaults: 22 layers, hidden 768, "
                            "8192 positions, vocabulary 50368), random weights"}
LETTUCE_CONFIG = REPO / "configs" / "inference.lettucedetect.yaml"
HALUGATE_CONFIG = REPO / "configs" / "inference.halugate.yaml"


def build_arch(arch: str, task: str, labels: list[str] | None, out: Path, classifier_scale: float = 1.0) -> dict:
    """A classifier of `arch`'s shape with random weights, built from its config (no download), saved with a BERT
    WordPiece tokenizer available offline (MiniLM's: ModernBERT's own tokenizer is on the Hub only; its ids stay
    inside ModernBERT's vocabulary). `labels` None: LABEL_0 / LABEL_1, a LettuceDetect checkpoint's."""
    import torch
    from transformers import (
        AutoTokenizer,
        ModernBertConfig,
        ModernBertForSequenceClassification,
        ModernBertForTokenClassification,
    )

    if arch not in ARCHS:
        raise SystemExit(f"--arch {arch!r}: one of {', '.join(ARCHS)}")
    tok = AutoTokenizer.from_pretrained(resolve_base_model("offline:minilm"))
    tok.model_input_names = ["input_ids", "attention_mask"]
    names = labels or ["LABEL_0", "LABEL_1"]
    cfg = ModernBertConfig(num_labels=len(names), id2label=dict(enumerate(names)),
                           label2id={n: i for i, n in enumerate(names)}, pad_token_id=tok.pad_token_id,
                           bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id, cls_token_id=tok.cls_token_id,
                           sep_token_id=tok.sep_token_id)
    cls = ModernBertForTokenClassification if task == "token" else ModernBertForSequenceClassification
    if not has_weights(out):
        print(f"[bench] building a random {arch} {task} classifier in {out}", flush=True)
        torch.manual_seed(0)
        model = cls(cfg).eval()
        with torch.no_grad():  # random heads sit at P ~ 0.5: spread them so that some tokens are flagged
            model.classifier.weight.mul_(classifier_scale)
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out, safe_serialization=True)
        tok.save_pretrained(out)
        if labels:
            (out / "label_map.json").write_text(json.dumps({"labels": labels, "id2label": dict(enumerate(labels))}))
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), framework="np") as f:
        params = sum(int(np.prod(f.get_slice(k).get_shape())) for k in f.keys())  # noqa: SIM118
    return {"run": str(out), "parameters": params, "checkpoint": f"random {arch} ({ARCHS[arch]})"}


def export_arch(info: dict, out: Path, input_format: str | None, int8: bool) -> str:
    if not (out / "model.onnx").is_file():
        print(f"[bench] exporting {info['run']} -> {out}" + (" (+ int8 if it keeps 0.99)" if int8 else " (fp32)"),
              flush=True)
        export_model(info["run"], out, exporter="torch", samples=8, overwrite=True, input_format=input_format,
                     quantize="int8" if int8 else None)
    return str(out)


def bench_arch(args, out: Path) -> dict:
    """Our runtime (configs/inference.lettucedetect.yaml) against lettucedetect 0.2.3 on the same random
    `args.arch` checkpoint at each length, alternating calls; then the HaluGate-defaults stack
    (configs/inference.halugate.yaml: Sentinel + Detector + Explainer of that shape) against the Detector alone
    at `args.stack_length`."""
    import torch
    from lettucedetect.models.inference import HallucinationDetector

    threads = args.threads or physical_cores()
    torch.set_num_threads(threads)  # lettucedetect (torch) and ONNX Runtime on the same cores
    root = out / "models" / args.arch
    det = build_arch(args.arch, "token", None, root / "detector", classifier_scale=args.classifier_scale)
    det["export"] = export_arch(det, root / "detector-export", "lettucedetect", args.arch_int8)
    common = [f"hallucination_mitigation.hallucination_model.max_length={args.lettuce_max_length}",
              f"hallucination_mitigation.num_threads={threads}", f"hallucination_mitigation.precision={args.precision}"]
    ours = HaluGate.from_config(LETTUCE_CONFIG, [f"hallucination_mitigation.hallucination_model.model_id={det['export']}",
                                                 *common])
    if ours.load_errors:
        raise SystemExit(f"ours: {ours.load_errors}")
    ld = HallucinationDetector(method="transformer", model_path=det["run"], max_length=args.lettuce_max_length,
                               device="cpu")
    tok = ours.runners["detector"].tokenizer
    report = {"arch": args.arch, "detector": det, "threads": threads, "lettuce_max_length": args.lettuce_max_length,
              "our_precision": ours.runners["detector"].precision, "lettucedetect": [], "stack": None}
    for length in args.lengths:
        x = make_input(tok, length, 0)
        ld.predict(x["context"], x["answer"], x["question"], output_format="spans")  # warm-up, both
        ours.detect(**x)
        (t_ld, ld_spans), (t_ours, r) = interleaved(
            lambda x=x: ld.predict(x["context"], x["answer"], x["question"], output_format="spans"),
            lambda x=x: ours.detect(**x), args.reps, args.max_cell_seconds)
        a, b = pct(t_ld), pct(t_ours)
        row = {"context_tokens": length, "measured_context_tokens": r.context_tokens, "chunks": r.detector_windows,
               "lettucedetect_ms": a, "ours_ms": b, "ratio_p50": round(a["p50"] / b["p50"], 2),
               "ratio_p50_ci95": ratio_interval(t_ld, t_ours),
               "same_spans": [(s["start"], s["end"]) for s in ld_spans] == spans_of(r), "spans": len(r.spans)}
        report["lettucedetect"].append(row)
        print(f"[bench] {args.arch} ctx={length:5d} chunks={row['chunks']} lettucedetect p50={a['p50']:9.1f} ms "
              f"ours p50={b['p50']:9.1f} ms ratio={row['ratio_p50']:.2f} (95% {row['ratio_p50_ci95'][0]:.2f}-"
              f"{row['ratio_p50_ci95'][1]:.2f}, n={a['n']}) same_spans={row['same_spans']}", flush=True)
    if args.stack_length:
        del ours, ld  # their 4K / 8K buffers: the stack below holds four more sessions
        import gc

        gc.collect()
        sen = build_arch(args.arch, "sequence", SENTINEL_LABELS, root / "sentinel")
        exp = build_arch(args.arch, "sequence", EXPLAINER_LABELS, root / "explainer", classifier_scale=20.0)
        sen["export"] = export_arch(sen, root / "sentinel-export", None, args.arch_int8)
        exp["export"] = export_arch(exp, root / "explainer-export", None, args.arch_int8)
        models = [f"hallucination_mitigation.hallucination_model.model_id={det['export']}",
                  "hallucination_mitigation.fact_check_model.threshold=0.0", *common[1:]]  # every input verified
        stack = HaluGate.from_config(HALUGATE_CONFIG, [
            *models, f"hallucination_mitigation.fact_check_model.model_id={sen['export']}",
            f"hallucination_mitigation.nli_model.model_id={exp['export']}"])
        # the same Detector session in both (one 4K arena in memory, and no difference between two sessions)
        alone = HaluGate.from_config(HALUGATE_CONFIG, [*models, "hallucination_mitigation.fact_check_model.model_id=",
                                                       "hallucination_mitigation.nli_model.model_id="],
                                     detector=stack.runners["detector"])
        for g in (stack, alone):
            if g.load_errors:
                raise SystemExit(f"stack: {g.load_errors}")
        x = make_input(tok, args.stack_length, 0)
        stack.detect(**x)
        alone.detect(**x)
        (t_stack, rs), (t_alone, ra) = interleaved(lambda: stack.detect(**x), lambda: alone.detect(**x),
                                                   args.reps, args.max_cell_seconds)
        a, b = pct(t_stack), pct(t_alone)
        report["stack"] = {
            "context_tokens": args.stack_length, "stack_ms": a, "detector_alone_ms": b,
            "ratio_p50": round(a["p50"] / b["p50"], 2), "ratio_p50_ci95": ratio_interval(t_stack, t_alone),
            "detector_spans": len(ra.spans), "spans_after_explainer": len(rs.spans),
            "stage_ms": {s: round(rs.timings_ms[s], 1) for s in STAGES},
            "models": {"sentinel": sen, "explainer": exp}}
        print(f"[bench] HaluGate-defaults stack at {args.stack_length}: {a['p50']:.1f} ms vs Detector alone "
              f"{b['p50']:.1f} ms p50, ratio {report['stack']['ratio_p50']:.2f} (Detector spans "
              f"{len(ra.spans)}, after the Explainer {len(rs.spans)}; stages {report['stack']['stage_ms']})",
              flush=True)
    return report


def arch_markdown(report: dict, hardware: dict, busy: bool) -> str:
    det = report["detector"]
    lines = [f"Hardware: {hardware.get('cpu_description') or hardware['cpu']}, {report['threads']} threads for both; "
             f"load average at start {hardware['load_average_start']}, at end {hardware['load_average']}"
             f"{' (BUSY machine)' if busy else ''}; " + ", ".join(f"{k} {v}" for k, v in hardware["versions"].items()),
             "", (f"Model: {det['checkpoint']}, {det['parameters'] / 1e6:.0f}M parameters; ours: ONNX Runtime "
             f"{report['our_precision']} with configs/inference.lettucedetect.yaml; lettucedetect: PyTorch; "
             f"max_length {report['lettuce_max_length']} on both (passage chunks beyond it)."), "",
             ("| context tokens | chunks | lettucedetect p50 / p99 ms | ours p50 / p99 ms | ratio p50 (95% bootstrap) "
             "| n | same spans |"), "|---:|---:|---:|---:|---:|---:|---|"]
    for r in report["lettucedetect"]:
        lines.append(f"| {r['measured_context_tokens']} | {r['chunks']} | {r['lettucedetect_ms']['p50']:.0f} / "
                     f"{r['lettucedetect_ms']['p99']:.0f} | {r['ours_ms']['p50']:.0f} / {r['ours_ms']['p99']:.0f} | "
                     f"{r['ratio_p50']:.2f}{_interval(r['ratio_p50_ci95'])} | {r['ours_ms']['n']} | {r['same_spans']} |")
    st = report.get("stack")
    if st:
        lines += ["", (f"HaluGate-defaults stack (configs/inference.halugate.yaml, Sentinel threshold 0 so every "
                       f"input is verified) at {st['context_tokens']} tokens: {st['stack_ms']['p50']:.0f} ms against "
                       f"the Detector alone {st['detector_alone_ms']['p50']:.0f} ms p50, ratio {st['ratio_p50']:.2f}"
                       f"{_interval(st['ratio_p50_ci95'])}; Detector spans {st['detector_spans']}, after the "
                       f"Explainer {st['spans_after_explainer']}; stage ms {st['stage_ms']}")]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for stage in STAGE_SPECS:
        p.add_argument(f"--{stage}", help=f"{stage} run dir (merged model); exported when it has no --{stage}-export")
        p.add_argument(f"--{stage}-export", help=f"{stage} export dir (model.onnx + model_quantized.onnx)")
    p.add_argument("--build-missing", action="store_true", help="random-head MiniLM for stages without a checkpoint")
    p.add_argument("--out", default="runs/bench", help="output dir (models/, latency.json, latency.md)")
    p.add_argument("--lengths", default="512,2048,4096,8192", help="context lengths in Detector tokens")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--backends", default="onnx-auto,onnx-fp32,onnx-int8,torch",
                   help="comma-separated (onnx-auto: the default precision, int8 where the export shipped it), or none")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "int8"],
                   help="our precision in the lettucedetect comparison (default: the runtime default)")
    p.add_argument("--window-overlap", type=int, help="Detector window overlap (default: the runtime default)")
    p.add_argument("--max-windows", type=int, help="Detector windows per answer (default: the runtime default)")
    p.add_argument("--window-aggregation", choices=["min", "max"],
                   help="with --detector-threshold (which sets the model's calibration aside): the aggregation of "
                        "the shipped calibration, so that the same windows run (under max only with max_windows_under: any, the default)")
    p.add_argument("--reps", type=int, default=10, help="repetitions per cell (after one warm-up call)")
    p.add_argument("--max-cell-seconds", type=float, default=60.0, help="stop repeating a cell after this long")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0: the physical cores)")
    p.add_argument("--allow-busy", action="store_true",
                   help=f"time even when the load average is over {MAX_LOAD_PER_CORE} per core (report marked busy)")
    p.add_argument("--detector-threshold", type=float,
                   help="fixed Detector threshold instead of the model's calibration (e.g. low enough that a "
                        "trained Detector flags the benchmark answers, so that the Explainer stage is timed)")
    p.add_argument("--min-span-confidence", type=float, default=0.6,
                   help="0 with a random-head Detector (probabilities near 0.5) so that the Explainer stage runs")
    p.add_argument("--no-lettucedetect", action="store_true")
    p.add_argument("--arch", choices=list(ARCHS),
                   help="instead of the stack above: a published architecture at its real shape, random weights "
                        "(no download), exported with --input-format lettucedetect; ours vs lettucedetect 0.2.3 at "
                        "--lengths, then the HaluGate-defaults stack at --stack-length")
    p.add_argument("--arch-int8", action="store_true", help="--arch: also export int8 (shipped only at >= 0.99 "
                                                             "agreement; the default precision then runs it)")
    p.add_argument("--stack-length", type=int, default=4096, help="--arch: context tokens of the stack run (0: none)")
    p.add_argument("--lettuce-max-length", type=int, default=4096,
                   help="--arch: max_length of both (lettucedetect's default 4096; longer contexts are chunked)")
    p.add_argument("--classifier-scale", type=float, default=20.0,
                   help="--arch: the random Detector head's weights x this, so that some tokens are flagged")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="an inference setting for every run (inference.config override), repeatable")
    p.add_argument("--variant", action="append", nargs="+", default=[], metavar=("NAME", "KEY=VALUE"),
                   help="also time each backend with these settings, right after its default run (rows "
                        "'BACKEND+NAME'): side by side in one run; repeatable")
    args = p.parse_args(argv)
    args.lengths = [int(x) for x in args.lengths.split(",")]
    args.batches = [int(x) for x in args.batches.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load_start = check_idle(args.allow_busy)
    print(f"[bench] CPU: {cpu_info().describe()}; load average {load_start}", flush=True)
    if args.arch:
        report = bench_arch(args, out)
        hardware = {**environment(), "load_average_start": load_start}
        busy = load_start[0] > MAX_LOAD_PER_CORE * physical_cores()
        report = {"command": " ".join(sys.argv), "hardware": hardware, "busy": busy, **report}
        (out / "latency_arch.json").write_text(json.dumps(report, indent=2) + "\n")
        md = arch_markdown(report, hardware, busy)
        (out / "latency_arch.md").write_text(md)
        print(md)
        return 0

    models = {stage: prepare(stage, getattr(args, stage), getattr(args, f"{stage}_export"), out, args.build_missing)
              for stage in STAGE_SPECS}
    tok = HaluGate.from_dirs(detector=models["detector"]["export"]).runners["detector"].tokenizer
    inputs = {n: [make_input(tok, n, seed) for seed in range(max(args.batches))] for n in args.lengths}
    rows = []
    for name in [b for b in args.backends.split(",") if b and b != "none"]:
        if name not in BACKENDS:
            raise SystemExit(f"--backends: unknown {name!r} (known: {', '.join(BACKENDS)}, none)")
        for variant in [("", []), *((v[0], v[1:]) for v in args.variant)]:
            rows += bench_backend(name, models, inputs, args, variant)
    ld = None if args.no_lettucedetect else bench_lettucedetect(models, inputs, args)
    hardware = {**environment(), "load_average_start": load_start}
    # the load before the first timing: at the end it includes the benchmark's own work on every core
    busy = load_start[0] > MAX_LOAD_PER_CORE * physical_cores()
    report = {"command": " ".join(sys.argv), "hardware": hardware, "busy": busy,
              "models": list(models.values()), "settings": {"detector_threshold": args.detector_threshold,
                                                            "min_span_confidence": args.min_span_confidence,
                                                            "sentinel_threshold": 0.0, "reps": args.reps,
                                                            "max_cell_seconds": args.max_cell_seconds,
                                                            "set": args.set, "variants": args.variant},
              "rows": rows, "lettucedetect": ld}
    (out / "latency.json").write_text(json.dumps(report, indent=2) + "\n")
    md = markdown(report)
    (out / "latency.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
