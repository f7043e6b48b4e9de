"""Write a run's outputs: results.csv, metrics.json, behavior.json, rc_curve.png and report.md."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

from .prompt import format_number

RESULT_COLUMNS = ["id", "t", "question", "gold", "unknown_ok", "pred", "abstained", "correct", "score",
                  "category", "error"]

# Which confidence target suits which deployment (the threshold-to-policy table).
POLICIES = [
    (0.5, "Drafting and triage with human review: answer freely, a person checks everything."),
    (0.75, "Assistive answers: the user sees the answer as a suggestion and can verify it."),
    (0.9, "Self-serve replies: answers go to users without review; IDK routes to a fallback."),
    (0.95, "High-stakes: answer only when very sure; below the threshold hand off to a human."),
]


def write_results_csv(records: Sequence[dict], path: Path) -> None:
    extra_cols: list[str] = []
    for rec in records:
        for key in rec.get("extra") or {}:
            if key not in extra_cols and key not in RESULT_COLUMNS:
                extra_cols.append(key)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=RESULT_COLUMNS + extra_cols)
        writer.writeheader()
        for rec in records:
            row = {c: rec.get(c) for c in RESULT_COLUMNS}
            row["unknown_ok"] = int(bool(rec["unknown_ok"]))
            for c in ("abstained", "correct"):
                row[c] = "" if rec.get(c) is None else int(bool(rec[c]))
            row["score"] = "" if rec.get("score") is None else format(rec["score"], ".6g")
            row["error"] = rec.get("error") or ""
            row.update({c: (rec.get("extra") or {}).get(c, "") for c in extra_cols})
            writer.writerow(row)


def plot_rc_curve(metrics: dict[str, dict], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [m for m in metrics.values() if m["coverage"] is not None and m["accuracy_conditioned_on_answering"] is not None]
    fig, ax = plt.subplots(figsize=(6, 4.5), dpi=120)
    for m in metrics.values():  # the accuracy each target asks for
        ax.axhline(m["t"], color="0.6", lw=0.8, ls=":")
        ax.text(0.01, m["t"], f" target t={format_number(m['t'])}", color="0.45", fontsize=7, va="bottom")
    if pts:
        xs = [m["coverage"] for m in pts]
        ys = [m["accuracy_conditioned_on_answering"] for m in pts]
        ax.plot(xs, ys, "-o", color="tab:blue", label="model")
        labels: dict[tuple[float, float], list[str]] = {}  # thresholds landing on the same point share a label
        for m, x, y in zip(pts, xs, ys, strict=True):
            labels.setdefault((round(x, 4), round(y, 4)), []).append(format_number(m["t"]))
        for i, ((x, y), ts) in enumerate(labels.items()):
            right = x > 0.8  # stagger labels vertically: neighbouring points often nearly coincide
            ax.annotate("t=" + ", ".join(ts), (x, y), textcoords="offset points",
                        xytext=(-8 if right else 8, 6 + 11 * (i % 4)), ha="right" if right else "left",
                        fontsize=9, arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.6})
    else:
        ax.text(0.5, 0.5, "no answered items at any threshold", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("coverage (fraction answered)")
    ax.set_ylabel("accuracy conditioned on answering")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def render_report(metrics: dict[str, dict], behavior: dict, meta: dict) -> str:
    lines = [f"# gemhall report: {meta.get('title', '')}", ""]
    keys = ("command", "backend", "model", "data", "items", "seed", "temperature", "judge", "hardware", "seconds")
    for key in keys:
        if meta.get(key) not in (None, ""):
            lines.append(f"- {key}: {meta[key]}")
    lines += ["", "## Metrics per confidence target", "",
              ("| t | penalty | n | answered | IDK | errors | coverage | cond. accuracy | hallucination rate "
               "| avg expected score | IDK rate (answerable) | IDK rate (unanswerable) |"),
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in metrics.values():
        lines.append(
            f"| {format_number(m['t'])} | {format_number(m['penalty'])} | {m['n']} | {m['answered']} | "
            f"{m['abstentions']} | {m['errors']} | {_fmt(m['coverage'])} | "
            f"{_fmt(m['accuracy_conditioned_on_answering'])} | {_fmt(m['hallucination_rate_among_answers'])} | "
            f"{_fmt(m['avg_expected_score'])} | {_fmt(m['abstention_rate_answerable'])} | "
            f"{_fmt(m['abstention_rate_unanswerable'])} |")
    mono, cal = behavior["coverage_monotonicity"], behavior["calibration"]
    lines += ["", "## Behaviour checks", ""]
    if mono["ok"]:
        lines.append("- Coverage monotonicity: OK (coverage never rises as t rises).")
    else:
        lines.append(f"- Coverage monotonicity: {len(mono['violations'])} violation(s):")
        lines += [f"  - t {format_number(v['from_t'])} -> {format_number(v['to_t'])}: coverage "
                  f"{v['coverage_from']:.3f} -> {v['coverage_to']:.3f} (+{v['increase']:.3f})"
                  for v in mono["violations"]]
    lines.append(f"- Calibration (conditional accuracy >= t; {int(cal['confidence'] * 100)}% "
                 f"{cal['method']} interval):")
    for r in cal["per_threshold"]:
        if r["accuracy"] is None:
            lines.append(f"  - t={format_number(r['t'])}: no answers, nothing to check")
            continue
        verdict = ("significantly below t" if r["significantly_below"]
                   else "below t (not significant)" if r["below_threshold"] else "meets t")
        lines.append(f"  - t={format_number(r['t'])}: accuracy {r['accuracy']:.3f} "
                     f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}] over {r['answered']} answers: {verdict}")
    lines += ["", "## Risk-coverage curve", "", "![coverage vs conditional accuracy](rc_curve.png)", "",
              "## Threshold-to-policy table", "",
              "| t | policy | penalty for a wrong answer | this run: coverage / cond. accuracy |",
              "|---|---|---|---|"]
    by_t = {round(m["t"], 6): m for m in metrics.values()}
    for t, policy in POLICIES:
        m = by_t.get(round(t, 6))
        seen = (f"{_fmt(m['coverage'])} / {_fmt(m['accuracy_conditioned_on_answering'])}" if m else "not run")
        lines.append(f"| {format_number(t)} | {policy} | -{format_number(t / (1 - t))} | {seen} |")
    lines += ["", ("Score per answer: +1 correct, -t/(1-t) wrong, 0 for IDK. Errors (calls that failed after "
                   "all retries) are excluded from every rate and counted in the errors column."), ""]
    return "\n".join(lines)


def write_reports(out_dir: str | Path, records: Sequence[dict], metrics: dict, behavior: dict, meta: dict) -> dict:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "results_csv": out / "results.csv",
        "metrics": out / "metrics.json",
        "behavior": out / "behavior.json",
        "plot": out / "rc_curve.png",
        "report": out / "report.md",
    }
    write_results_csv(records, paths["results_csv"])
    paths["metrics"].write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    paths["behavior"].write_text(json.dumps(behavior, indent=2) + "\n", encoding="utf-8")
    plot_rc_curve(metrics, paths["plot"], meta.get("title", "gemhall"))
    paths["report"].write_text(render_report(metrics, behavior, meta), encoding="utf-8")
    return paths
