"""Dataset-level aggregation of detection results: verdicts, rates with 95% confidence intervals, groups.

One implementation for every report over many results: `python -m inference.batch` (its report) and
`eval.halurate` (an LLM judged by HaluGate) both count with `Tally` and mark spans with `highlight`.

Verdict of one result (what a rate counts):
- `hallucinated` / `clean`: the Detector ran (status ok) and flagged a span / flagged none;
- `skipped`: nothing to verify (the Sentinel judged the prompt not fact-seeking, no context, empty answer, ...);
- `unavailable`: a model failed to load or run (never counted as clean);
- `invalid`: the input row was refused (missing answer, wrong types, over the context limit);
- callers may add their own (halurate: `input_error`, `generation_error`, `pending`).

Rates: hallucination_rate = hallucinated / checked (checked = hallucinated + clean); shares of skipped /
unavailable / invalid are over all rows. Confidence intervals are Wilson score intervals (scipy's
`binomtest(...).proportion_ci(method="wilson")`), which stay inside [0, 1] and behave at 0 and n.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

CHECKED = ("hallucinated", "clean")


def rate(num: int, den: int, digits: int = 4) -> float | None:
    """num / den rounded, None when den is 0 (an undefined rate is never shown as 0)."""
    return round(num / den, digits) if den else None


def wilson_interval(num: int, den: int, confidence: float = 0.95, digits: int = 4) -> list[float] | None:
    """The Wilson score interval [low, high] of the proportion num / den; None when den is 0."""
    if not den:
        return None
    try:
        from scipy.stats import binomtest
    except ImportError as exc:  # pragma: no cover - scipy comes with the batch and eval extras
        raise ImportError("confidence intervals need scipy: pip install 'halugate[batch]'") from exc
    ci = binomtest(int(num), int(den)).proportion_ci(confidence_level=confidence, method="wilson")
    return [round(float(ci.low), digits), round(float(ci.high), digits)]


def verdict_of_result(status: str, hallucination_detected: bool | None) -> str:
    """The verdict of one detection result (its `status` and `hallucination_detected` fields)."""
    if status == "ok":
        return "hallucinated" if hallucination_detected else "clean"
    return status  # skipped | unavailable | invalid


@dataclass
class Tally:
    """Counts over results, fed one at a time (constant memory): verdicts and spans of checked answers."""

    verdicts: Counter = field(default_factory=Counter)
    spans: int = 0  # spans of checked answers

    def add(self, verdict: str, n_spans: int = 0) -> None:
        self.verdicts[verdict] += 1
        if verdict in CHECKED:
            self.spans += int(n_spans)

    @classmethod
    def of(cls, rows: Iterable[tuple[str, int]]) -> Tally:
        t = cls()
        for verdict, n_spans in rows:
            t.add(verdict, n_spans)
        return t

    @property
    def n(self) -> int:
        return sum(self.verdicts.values())

    @property
    def checked(self) -> int:
        return sum(self.verdicts[v] for v in CHECKED)

    def summary(self) -> dict:
        """The group row halurate reports: n, checked, hallucinated, skipped, unavailable, rate, spans/answer."""
        v = self.verdicts
        return {"n": self.n, "checked": self.checked, "hallucinated": v["hallucinated"], "skipped": v["skipped"],
                "unavailable": v["unavailable"], "hallucination_rate": rate(v["hallucinated"], self.checked),
                "spans_per_response": rate(self.spans, self.checked)}

    def summary_with_intervals(self, extra_shares: Sequence[str] = ("skipped", "unavailable", "invalid")) -> dict:
        """summary() plus 95% intervals: the hallucination rate over checked answers and the share of each
        verdict in `extra_shares` over all rows."""
        v = self.verdicts
        out = self.summary()
        out["invalid"] = v["invalid"]
        out["hallucination_rate_ci95"] = wilson_interval(v["hallucinated"], self.checked)
        for name in extra_shares:
            out[f"{name}_share"] = rate(v[name], self.n)
            out[f"{name}_share_ci95"] = wilson_interval(v[name], self.n)
        return out


def highlight(answer: str, spans: Sequence[dict]) -> str:
    """The answer as HTML-escaped text with each span in <mark> and its label and severity after it."""
    out, pos = [], 0
    for s in sorted(spans, key=lambda s: s["start"]):
        if s["start"] < pos:
            continue
        out.append(html.escape(answer[pos:s["start"]]))
        label = {"contradiction": "contradiction", "neutral": "fabrication"}.get(s.get("nli_label") or "",
                                                                              s.get("nli_label") or "unexplained")
        out.append(f"<mark>{html.escape(answer[s['start']:s['end']])}</mark><sup>[{label}, sev {s['severity']}]</sup>")
        pos = s["end"]
    out.append(html.escape(answer[pos:]))
    return "".join(out).replace("\n", "<br>")
