"""Write a run's outputs: metrics.json, plots/*.png and report.md (the worst examples with their spans marked)."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path

from inference.aggregate import highlight

__all__ = ["highlight", "render_report", "worst", "write_plots", "write_reports"]

SEVERITY_NAMES = {1: "1 low", 2: "2 fabrication", 3: "3", 4: "4 contradiction"}


def _fmt(x, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _ci(ci) -> str:
    return "" if not ci else f"; 95% CI {_pct(ci[0])} to {_pct(ci[1])}"


# ---- plots ---------------------------------------------------------------------------------------------------

def write_plots(metrics: dict, out_dir: Path) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), dpi=110)
    sev = metrics["severity_histogram"]
    axes[0].bar(list(sev), list(sev.values()), color="tab:red")
    axes[0].set_title("spans by severity")
    axes[0].set_xlabel("severity")
    axes[0].set_ylabel("spans")
    mx = metrics["max_severity_histogram"]
    axes[1].bar(list(mx), list(mx.values()), color="tab:purple")
    axes[1].set_title("checked answers by max severity (0 = no span)")
    axes[1].set_xlabel("max severity")
    axes[1].set_ylabel("answers")
    fig.tight_layout()
    paths["severity"] = out_dir / "severity.png"
    fig.savefig(paths["severity"])
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=110)
    labels = metrics["nli_labels"]
    ax.bar(["contradiction", "fabrication\n(neutral)", "entailment\n(kept)", "unexplained"], list(labels.values()),
           color=["tab:red", "tab:orange", "tab:green", "tab:gray"])
    ax.set_title("spans by Explainer label")
    ax.set_ylabel("spans")
    fig.tight_layout()
    paths["nli_labels"] = out_dir / "nli_labels.png"
    fig.savefig(paths["nli_labels"])
    plt.close(fig)

    groups = [(f"task: {k}", v) for k, v in metrics["by_task_type"].items()] + \
             [(f"cat: {k}", v) for k, v in metrics["by_category"].items() if k != "(none)"]
    groups = [(k, v) for k, v in groups if v["hallucination_rate"] is not None]
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.4 * max(1, len(groups))), dpi=110)
    if groups:
        ax.barh([k for k, _ in groups][::-1], [v["hallucination_rate"] for _, v in groups][::-1], color="tab:blue")
        ax.set_xlim(0, 1)
    else:
        ax.text(0.5, 0.5, "no checked answers", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("hallucination rate (answers with a span / checked answers)")
    fig.tight_layout()
    paths["by_group"] = out_dir / "by_group.png"
    fig.savefig(paths["by_group"])
    plt.close(fig)
    return paths


# ---- report --------------------------------------------------------------------------------------------------

def worst(entries: Sequence[dict], k: int) -> list[dict]:
    flagged = [e for e in entries if e["verdict"] == "hallucinated"]
    return sorted(flagged, key=lambda e: (-e["detection"]["max_severity"], -len(e["detection"]["spans"]),
                                          -max(s["confidence"] for s in e["detection"]["spans"]), e["id"]))[:k]


def _clip(text: str, n: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[:n] + " …"


def _group_table(title: str, groups: dict) -> list[str]:
    if not groups or list(groups) == ["(none)"]:
        return []
    lines = [f"### By {title}", "",
             "| group | n | checked | hallucinated | rate | spans / answer | skipped | unavailable |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for k, g in groups.items():
        lines.append(f"| {k} | {g['n']} | {g['checked']} | {g['hallucinated']} | {_pct(g['hallucination_rate'])} | "
                     f"{_fmt(g['spans_per_response'], 2)} | {g['skipped']} | {g['unavailable']} |")
    return lines + [""]


def render_report(entries: Sequence[dict], metrics: dict, meta: dict, plots: dict, *, worst_k: int = 10,
                  context_chars: int = 700) -> str:
    m = metrics
    cvf = m["contradiction_vs_fabrication"]
    L = [f"# halurate report: {meta.get('title', '')}", ""]
    for key in ("command", "mode", "data", "model", "detection", "hardware", "seconds"):
        if meta.get(key):
            L.append(f"- **{key}**: {meta[key]}")
    L += ["", "## Summary", "", "| metric | value |", "|---|---|",
          f"| records | {m['n_records']} (answered {m['answered']}) |",
          f"| checked by the Detector | {m['checked']} |",
          (f"| **hallucination rate** (answers with any span / checked) | **{_pct(m['hallucination_rate'])}** "
           f"({m['hallucinated']}/{m['checked']}{_ci(m.get('hallucination_rate_ci95'))}) |"),
          (f"| hallucination rate, skipped answers counted as not flagged | {_pct(m['hallucination_rate_scored'])} "
           f"({m['hallucinated']}/{m['scored']}) |"),
          f"| spans per checked answer | {_fmt(m['spans_per_response'], 2)} |",
          f"| spans per hallucinated answer | {_fmt(m['spans_per_hallucinated_response'], 2)} |",
          (f"| contradiction : fabrication spans | {cvf['contradiction']} : {cvf['fabrication']} "
           f"(contradiction share {_pct(cvf['contradiction_share'])}) |"),
          (f"| Sentinel skip rate | {_pct(m['sentinel']['skip_rate'])} ({m['sentinel']['skipped']}/"
           f"{m['sentinel']['asked']} asked) |"),
          f"| unavailable (never counted as clean) | {m['unavailable']} |",
          (f"| generation time per answer (mean) / all answers | {_fmt(m['timing']['generation_s_mean'], 2)} s / "
           f"{_fmt(m['timing']['generation_s_total'], 1)} s |"), ""]
    L += ["## Verdicts", "", "| verdict | answers |", "|---|---:|"]
    L += [f"| {k} | {v} |" for k, v in m["verdicts"].items() if v]
    if m["skip_reasons"]:
        L += ["", "Skipped because: " + ", ".join(f"{k} ({v})" for k, v in m["skip_reasons"].items())]
    L += [""]
    L += ["## Breakdown", ""] + _group_table("task type", m["by_task_type"]) + _group_table("category", m["by_category"])
    L += ["## Spans", "", "| Explainer label | spans |", "|---|---:|"]
    L += [f"| {k} | {v} |" for k, v in m["nli_labels"].items()]
    L += ["", "| severity | spans |", "|---|---:|"] + [f"| {k} | {v} |" for k, v in m["severity_histogram"].items()]
    L += [""]
    if "reference_answer" in m:
        r = m["reference_answer"]
        L += ["## Sanity check against the known right answer", "",
              ("Answers that contain the dataset's right answer (normalised substring match, a rough proxy for "
               "correctness) vs answers that do not. The Detector checks faithfulness to the context, not "
               "correctness: a faithful answer can miss the question, so this is a sanity check, not an accuracy."),
              "",
              "| answers | checked | flagged | rate |", "|---|---:|---:|---:|"]
        for name, g in r.items():
            L.append(f"| {name.replace('_', ' ')} | {g['checked']} | {g['hallucinated']} | "
                     f"{_pct(g['hallucination_rate'])} |")
        L += [""]
    if "gold" in m:
        g = m["gold"]
        L += ["## Against gold labels (response level)", "",
              (f"{g['n']} checked answers with gold spans ({g['gold_hallucinated']} hallucinated): precision "
               f"{_fmt(g['precision'])}, recall {_fmt(g['recall'])}, F1 {_fmt(g['f1'])}, "
               f"accuracy {_fmt(g['accuracy'])}."),
              ""]
    if plots:
        L += ["## Plots", ""] + [f"![{name}]({path})" for name, path in plots.items()] + [""]
    top = worst(entries, worst_k)
    L += [f"## Worst examples ({len(top)} of {m['hallucinated']} flagged)", "",
          ("Highest max severity first, then most spans. Marked text is what the Detector flagged; the label "
           "is the Explainer's (fabrication = the context does not say it)."), ""]
    for i, e in enumerate(top, 1):
        d = e["detection"]
        L += [f"### {i}. `{e['id']}`: max severity {d['max_severity']}, {len(d['spans'])} span(s)", ""]
        if e.get("question"):
            L.append(f"**Question:** {html.escape(e['question'])}  ")
        L.append(f"**Context:** {html.escape(_clip(e['context'], context_chars))}  ")
        if e.get("reference_answer"):
            L.append(f"**Reference answer:** {html.escape(e['reference_answer'])}  ")
        L += [f"**Answer:** {highlight(e['answer'], d['spans'])}", "",
              "| span | Detector conf. | NLI | severity | explanation |", "|---|---:|---|---:|---|"]
        for s in d["spans"]:
            L.append(f"| {html.escape(s['text'])} | {_fmt(s['confidence'], 2)} | {s['nli_label'] or '-'} "
                     f"{'' if s['nli_confidence'] is None else _fmt(s['nli_confidence'], 2)} | {s['severity']} | "
                     f"{html.escape(_clip(s['explanation'], 220)).replace('|', '/')} |")
        L.append("")
    problems = [e for e in entries if e["verdict"] in ("unavailable", "input_error", "generation_error")]
    if problems:
        L += ["## Not checked", ""]
        for e in problems[:30]:
            why = e.get("detection_error") or (e.get("generation") or {}).get("error") or "; ".join(
                f"{x['stage']}: {x['message']}" for x in (e.get("detection") or {}).get("errors", []))
            L.append(f"- `{e['id']}` {e['verdict']}: {html.escape(_clip(why, 300))}")
        if len(problems) > 30:
            L.append(f"- … and {len(problems) - 30} more (see results.jsonl)")
        L.append("")
    return "\n".join(L)


def write_reports(out_dir: str | Path, entries: Sequence[dict], metrics: dict, meta: dict, *, worst_k: int = 10,
                  context_chars: int = 700) -> dict[str, Path]:
    out_dir = Path(out_dir)
    (out_dir / "metrics.json").write_text(json.dumps({"meta": meta, **metrics}, indent=2, ensure_ascii=False) + "\n",
                                          encoding="utf-8")
    plots = write_plots(metrics, out_dir / "plots")
    rel = {k: str(p.relative_to(out_dir)) for k, p in plots.items()}
    (out_dir / "report.md").write_text(render_report(entries, metrics, meta, rel, worst_k=worst_k,
                                                     context_chars=context_chars), encoding="utf-8")
    return {"metrics": out_dir / "metrics.json", "report": out_dir / "report.md", **plots}
