"""The report of a batch output: report.json, report.md and plots/*.png, read from the shards one at a time.

Counts come from `inference.aggregate` (the same Tally halurate reports with): the hallucination rate over
checked answers and the shares of skipped / unavailable / invalid rows over all rows, each with a 95% Wilson
interval, overall and per value of every --group-by column; the score histogram of checked answers (flagged
and clean apart), spans per checked answer, and the most confident flagged answers with their spans marked.
Memory: one shard's columns at a time, plus the top-k list.
"""

from __future__ import annotations

import heapq
import html
import json
from collections import Counter, defaultdict
from pathlib import Path

from inference.aggregate import CHECKED, Tally, highlight, verdict_of_result
from inference.batch.io import BatchError, need, shard_paths

BINS = 20  # score histogram bins over [0, 1]
MAX_SPANS_BIN = 10  # spans per answer: 0 .. 9 and "10+"
MAX_GROUPS_SHOWN = 30  # per group column in report.md and its plot (report.json has all)
COLUMNS = ["row", "id", "status", "reason", "hallucination_detected", "hallucination_score", "max_severity",
           "spans", "checked_answer"]


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _ci(ci) -> str:
    return "" if not ci else f"{_pct(ci[0])} to {_pct(ci[1])}"


def _reason_key(reason: str) -> str:
    """Invalid reasons grouped by their field (the text before the first colon), so they aggregate."""
    return (reason or "").split(":", 1)[0][:80] or "(none)"


def collect(out_dir: Path, group_by: list[str], top_k: int = 10) -> dict:
    """Every figure of the report, from the shards under out_dir."""
    pq = need("pyarrow.parquet")
    paths = shard_paths(out_dir)
    if not paths:
        raise BatchError(f"{out_dir}: no shards to report (expected {out_dir}/shards/part-*.parquet)")
    overall = Tally()
    groups: dict[str, dict[str, Tally]] = {g: defaultdict(Tally) for g in group_by}
    hist = {"hallucinated": [0] * BINS, "clean": [0] * BINS}
    spans_hist: Counter = Counter()
    skip_reasons: Counter = Counter()
    invalid_reasons: Counter = Counter()
    top: list = []  # min-heap of (score, max span confidence, -row, item)
    ids: set[str] = set()
    duplicate_ids = 0
    for path in paths:
        available = pq.read_schema(path).names
        missing = [g for g in group_by if g not in available]
        if missing:
            raise BatchError(f"--group-by {missing[0]}: not a column of {path} (group columns are carried from "
                             "the input when the run is made with --group-by)")
        table = pq.read_table(path, columns=COLUMNS + group_by)
        for rec in table.to_pylist():
            verdict = verdict_of_result(rec["status"], rec["hallucination_detected"])
            spans = rec["spans"] or []
            overall.add(verdict, len(spans))
            for g in group_by:
                groups[g][rec[g] if rec[g] is not None else "(none)"].add(verdict, len(spans))
            if rec["id"] in ids:
                duplicate_ids += 1
            ids.add(rec["id"])
            if verdict == "skipped":
                skip_reasons[rec["reason"] or "(none)"] += 1
            elif verdict == "invalid":
                invalid_reasons[_reason_key(rec["reason"])] += 1
            if verdict in CHECKED:
                spans_hist[min(len(spans), MAX_SPANS_BIN)] += 1
                score = rec["hallucination_score"]
                if score is not None:
                    hist[verdict][min(int(score * BINS), BINS - 1)] += 1
            if verdict == "hallucinated":
                conf = max((s["confidence"] or 0.0 for s in spans), default=0.0)
                item = (rec["hallucination_score"] or 0.0, conf, -rec["row"],
                        {"row": rec["row"], "id": rec["id"], "hallucination_score": rec["hallucination_score"],
                         "max_severity": rec["max_severity"], "answer": rec["checked_answer"] or "",
                         "groups": {g: rec[g] for g in group_by},
                         "spans": [{k: s[k] for k in ("start", "end", "text", "confidence", "nli_label",
                                                      "severity")} for s in spans]})
                if len(top) < top_k:
                    heapq.heappush(top, item)
                elif top_k:
                    heapq.heappushpop(top, item)
    flagged = [it[3] for it in sorted(top, key=lambda t: t[:3], reverse=True)]
    return {
        "shards": len(paths),
        "rows": overall.n,
        "distinct_ids": len(ids),
        "duplicate_ids": duplicate_ids,
        "overall": overall.summary_with_intervals(),
        "verdicts": dict(sorted(overall.verdicts.items())),
        "skip_reasons": dict(skip_reasons.most_common()),
        "invalid_reasons": dict(invalid_reasons.most_common()),
        "groups": {g: {k: t.summary_with_intervals() for k, t in sorted(v.items(), key=lambda kv: -kv[1].n)}
                   for g, v in groups.items()},
        "score_histogram": {"edges": [round(i / BINS, 4) for i in range(BINS + 1)], **hist},
        "spans_per_answer": {(str(k) if k < MAX_SPANS_BIN else f"{MAX_SPANS_BIN}+"): spans_hist.get(k, 0)
                             for k in range(MAX_SPANS_BIN + 1)},
        "most_confident_flagged": flagged,
    }


# ---- plots -------------------------------------------------------------------------------------------------

def write_plots(rep: dict, plot_dir: Path) -> dict[str, Path]:
    matplotlib = need("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}

    h = rep["score_histogram"]
    edges = h["edges"]
    width = edges[1] - edges[0]
    fig, ax = plt.subplots(figsize=(6.5, 3.6), dpi=110)
    ax.bar(edges[:-1], h["clean"], width=width, align="edge", color="tab:green", label="clean")
    ax.bar(edges[:-1], h["hallucinated"], width=width, align="edge", bottom=h["clean"], color="tab:red",
           label="flagged")
    ax.set_xlabel("hallucination_score (checked answers)")
    ax.set_ylabel("answers")
    ax.set_xlim(0, 1)
    ax.legend()
    fig.tight_layout()
    paths["score_histogram"] = plot_dir / "score_histogram.png"
    fig.savefig(paths["score_histogram"])
    plt.close(fig)

    s = rep["spans_per_answer"]
    fig, ax = plt.subplots(figsize=(6.5, 3.4), dpi=110)
    ax.bar(list(s), list(s.values()), color="tab:purple")
    ax.set_xlabel("spans per checked answer")
    ax.set_ylabel("answers")
    fig.tight_layout()
    paths["spans_per_answer"] = plot_dir / "spans_per_answer.png"
    fig.savefig(paths["spans_per_answer"])
    plt.close(fig)

    for g, values in rep["groups"].items():
        rows = [(k, v) for k, v in list(values.items())[:MAX_GROUPS_SHOWN] if v["hallucination_rate"] is not None]
        fig, ax = plt.subplots(figsize=(7, 0.8 + 0.35 * max(1, len(rows))), dpi=110)
        if rows:
            names = [str(k) for k, _ in rows][::-1]
            rates = [v["hallucination_rate"] for _, v in rows][::-1]
            lo = [v["hallucination_rate"] - v["hallucination_rate_ci95"][0] for _, v in rows][::-1]
            hi = [v["hallucination_rate_ci95"][1] - v["hallucination_rate"] for _, v in rows][::-1]
            ax.barh(names, rates, xerr=[lo, hi], color="tab:blue", capsize=3)
            ax.set_xlim(0, 1)
        else:
            ax.text(0.5, 0.5, "no checked answers", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel(f"hallucination rate by {g} (95% CI)")
        fig.tight_layout()
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in g)
        paths[f"by_{safe}"] = plot_dir / f"by_{safe}.png"
        fig.savefig(paths[f"by_{safe}"])
        plt.close(fig)
    return paths


# ---- report.md -----------------------------------------------------------------------------------------------

def _share_rows(t: dict) -> list[str]:
    return [(f"| **hallucination rate** (flagged / checked) | **{_pct(t['hallucination_rate'])}** "
            f"({t['hallucinated']}/{t['checked']}) | {_ci(t['hallucination_rate_ci95'])} |"),
            *(f"| {name} (share of all rows) | {_pct(t[f'{name}_share'])} ({t[name]}/{t['n']}) | "
              f"{_ci(t[f'{name}_share_ci95'])} |" for name in ("skipped", "unavailable", "invalid")),
            (f"| spans per checked answer | {t['spans_per_response'] if t['spans_per_response'] is not None else 'n/a'}"
            " | |")]


def render(rep: dict, meta: dict, plots: dict[str, str]) -> str:
    L = ["# HaluGate batch report", ""]
    for key in ("input", "rows", "command", "config", "engine", "seconds", "hardware"):
        if meta.get(key) not in (None, ""):
            L.append(f"- **{key}**: {meta[key]}")
    L += [f"- **shards**: {rep['shards']}, rows {rep['rows']}, distinct ids {rep['distinct_ids']}"
          + (f" (**{rep['duplicate_ids']} duplicate ids in the input**)" if rep["duplicate_ids"] else ""), "",
          "## Overall", "", "| measure | value | 95% CI (Wilson) |", "|---|---|---|", *_share_rows(rep["overall"]),
          "", ("Checked = the Detector ran (status ok). Unavailable (a model failed) and invalid (the row was "
          "refused) are never counted as clean; skipped rows had nothing to verify."), ""]
    L += ["| verdict | rows |", "|---|---:|"] + [f"| {k} | {v} |" for k, v in rep["verdicts"].items()] + [""]
    if rep["skip_reasons"]:
        L += ["Skipped because: " + ", ".join(f"{k} ({v})" for k, v in rep["skip_reasons"].items()), ""]
    if rep["invalid_reasons"]:
        L += ["Invalid rows, by field: " + ", ".join(f"`{html.escape(k)}` ({v})"
                                                     for k, v in rep["invalid_reasons"].items()), ""]
    for g, values in rep["groups"].items():
        L += [f"## By {g}", "", "| " + g + " | rows | checked | flagged | rate | 95% CI | unavailable | invalid |",
              "|---|---:|---:|---:|---:|---|---:|---:|"]
        for k, t in list(values.items())[:MAX_GROUPS_SHOWN]:
            L.append(f"| {html.escape(str(k))} | {t['n']} | {t['checked']} | {t['hallucinated']} | "
                     f"{_pct(t['hallucination_rate'])} | {_ci(t['hallucination_rate_ci95'])} | "
                     f"{_pct(t['unavailable_share'])} | {_pct(t['invalid_share'])} |")
        if len(values) > MAX_GROUPS_SHOWN:
            L.append(f"| … {len(values) - MAX_GROUPS_SHOWN} more groups in report.json | | | | | | | |")
        L.append("")
    if plots:
        L += ["## Plots", ""] + [f"![{name}]({path})" for name, path in plots.items()] + [""]
    top = rep["most_confident_flagged"]
    L += [f"## Most confident flagged answers ({len(top)})", "",
          ("Highest hallucination_score first; marked text is a flagged span, with the Explainer's label "
          "(fabrication: the context does not say it) and the severity."), ""]
    for i, e in enumerate(top, 1):
        groups = ", ".join(f"{k}={v}" for k, v in e["groups"].items())
        L += [(f"### {i}. `{html.escape(e['id'])}` (row {e['row']}): score {e['hallucination_score']}, "
              f"max severity {e['max_severity']}, {len(e['spans'])} span(s){'; ' + groups if groups else ''}"), "",
              highlight(e["answer"], e["spans"]), ""]
    return "\n".join(L)


def write_report(out_dir: str | Path, group_by: list[str] | None = None, meta: dict | None = None,
                 top_k: int = 10) -> dict[str, Path]:
    out_dir = Path(out_dir)
    rep = collect(out_dir, list(group_by or []), top_k)
    meta = dict(meta or {})
    plots = write_plots(rep, out_dir / "plots")
    rel = {k: str(p.relative_to(out_dir)) for k, p in plots.items()}
    (out_dir / "report.json").write_text(json.dumps({"meta": meta, **rep, "plots": rel}, indent=2,
                                                    ensure_ascii=False) + "\n", encoding="utf-8")
    (out_dir / "report.md").write_text(render(rep, meta, rel), encoding="utf-8")
    return {"report_json": out_dir / "report.json", "report_md": out_dir / "report.md", **plots}
