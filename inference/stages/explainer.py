"""The Explainer stage: NLI of each flagged span's sentence against its best premises (windows and sentences of
the context, within the max_nli_pairs budget) -> label, confidence, evidence, severity; entailed spans are
dropped when enable_nli_filtering is on (sentence candidates are read first, and a span they entail with
confidence skips its windows: ExplainerStage.score)."""

from __future__ import annotations

import numpy as np

from inference import explain
from inference.formatting import nli_pair
from inference.labels import EXPLAINER_LABELS, LabelMapError, NliLabelMap
from inference.result import Evidence
from inference.spans import tokenize_segment
from inference.stages.base import Stage, register


@register
class ExplainerStage(Stage):
    name = "explainer"
    settings_key = "nli_model"
    task = "sequence"
    labels = tuple(EXPLAINER_LABELS)

    def check_labels(self, runner, settings) -> None:
        """entailment / neutral / contradiction by name in any order and case, or a two-way model."""
        try:
            NliLabelMap(runner.labels, f"explainer model {runner.model_dir}")
        except LabelMapError as exc:
            raise RuntimeError(str(exc)) from None

    def run(self, gate, items) -> None:
        items = [it for it in items if it.run_detector and it.result.spans]
        m = gate.settings.hallucination_mitigation
        runner = gate.runners["explainer"]
        wanted = [it for it in items if it.plugin.use_nli]
        for it in items:
            if not it.plugin.use_nli:
                for s in it.result.spans:
                    s.explanation = explain.explanation(None, None, s.confidence, "", "use_nli is off",
                                                        ungrounded=s.ungrounded)
        if not wanted:
            return
        if runner is None:
            if "explainer" in gate.load_errors:
                for it in wanted:
                    gate.fail(it, "explainer", gate.stage_error("explainer"))
            else:
                for it in wanted:
                    for s in it.result.spans:
                        s.explanation = explain.explanation(None, None, s.confidence, "", "no Explainer configured",
                                                            ungrounded=s.ungrounded)
            return
        runner = CanonicalNli(runner)  # its probabilities in EXPLAINER_LABELS order, whatever the model's order
        nm = m.nli_model
        hyp_of: list[list[str]] = []
        candidates: dict[tuple[int, str], explain.PremiseSet] = {}  # (item, hypothesis) -> ranked premises
        for k, it in enumerate(wanted):
            answer = it.data.answer
            hyps = []
            for s in it.result.spans:
                a, b = explain.widen(answer, s.start, s.end, nm.hypothesis)
                hyps.append(answer[a:b] or s.text)
            hyp_of.append(hyps)
            terms: dict[str, list[str]] = {}  # the ungrounded terms of each hypothesis's spans
            for s, hyp in zip(it.result.spans, hyps):
                terms.setdefault(hyp, []).extend(s.ungrounded or [])
            for hyp in dict.fromkeys(hyps):  # one NLI job per distinct hypothesis
                candidates[(k, hyp)] = premise_set(runner, nm, it.context, it.data.question or "", hyp,
                                                   terms[hyp])
        # The latency budget: at most max_nli_pairs Explainer pairs per request (per item of a batch).
        budget = {k: explain.fit_budget([ps for (j, _), ps in candidates.items() if j == k], nm.max_premise_windows,
                                        nm.max_premise_sentences, nm.max_nli_pairs) for k in range(len(wanted))}
        pairs: list[tuple[str, str]] = []
        jobs: dict[tuple[int, str], tuple[list[explain.Premise], int]] = {}  # -> (premises read, first pair)
        for (k, hyp), ranked in candidates.items():
            read = ranked.pick(*budget[k])
            question = wanted[k].data.question or ""
            jobs[(k, hyp)] = (read, len(pairs))
            pairs.extend(nli_pair(p.text + ("\n" + question if question else ""), hyp) for p in read)
        hm = m.hallucination_model
        # Hypotheses holding an ungrounded span are never settled (dropped) by an entailing sentence.
        guarded = {(k, hyp) for k, it in enumerate(wanted) for s, hyp in zip(it.result.spans, hyp_of[k])
                   if _guarded(hm, s)}
        try:
            probs, settled = self.score(runner, pairs, jobs, hm, guarded)
        except Exception as exc:  # noqa: BLE001
            for it in wanted:
                gate.fail(it, "explainer", f"run failed: {type(exc).__name__}: {exc}")
            return
        column = {name.lower(): i for i, name in enumerate(runner.labels)}
        for k, it in enumerate(wanted):
            kept = []
            for s, hyp in zip(it.result.spans, hyp_of[k]):
                read, first = jobs[(k, hyp)]
                s.premise_coverage = explain.coverage(it.context, read)
                if (k, hyp) in settled:  # entailed by a sentence with confidence: dropped whatever else is read
                    continue
                p = probs[first:first + len(read)]
                label, conf, decisive = explain.decide_nli(p, runner.labels)
                ungrounded = _guarded(hm, s)
                level = explain.severity(label, conf, entailment_threshold=hm.nli_entailment_threshold,
                                         low_confidence=nm.threshold, filter_entailed=hm.enable_nli_filtering,
                                         ungrounded=ungrounded)
                if level is None:
                    continue
                if ungrounded and label != "contradiction":  # overruled or neutral: show what the context
                    decisive = list(range(len(read)))      # says instead, else the passage nearest the span
                best = explain.pick_evidence(read, decisive, explain.span_words(it.data.answer, s.start, s.end),
                                             s.ungrounded or ())
                ev = read[best]
                s.evidence = Evidence(ev.text, ev.start, ev.end, ev.kind, runner.probabilities(p[best], column))
                s.nli_label, s.nli_confidence, s.severity = label, conf, level
                s.explanation = explain.explanation(label, conf, s.confidence, hyp, evidence=ev,
                                                    ungrounded=s.ungrounded, overrule=hm.keep_ungrounded)
                if runner.nli.two_way:
                    s.explanation += TWO_WAY_NOTE
                kept.append(s)
            # True when, for some span, the Explainer read less than the whole context.
            it.result.context_truncated_for_nli = any(s.premise_coverage < 1.0 for s in it.result.spans)
            it.result.spans = kept
            it.result.hallucination_detected = bool(kept)

    @staticmethod
    def score(runner, pairs, jobs, hm, guarded=frozenset()) -> tuple[np.ndarray, set]:
        """NLI probabilities of `pairs`, in two passes when entailed spans are dropped: the sentence candidates
        first (short, so cheap), then the windows of the hypotheses no sentence settled. A hypothesis that a
        sentence entails with confidence >= nli_entailment_threshold is dropped whatever its windows say
        (decide_nli puts entailment first and reports the highest entailment confidence), so its windows are
        not read: the result is the one-pass result, with less work when the Detector flags supported text.
        Jobs in `guarded` (hypotheses of ungrounded spans, which are never dropped) are never settled.
        Returns the probabilities (rows of unread pairs are NaN) and the settled jobs."""
        n = len(runner.labels)
        probs = np.full((len(pairs), n), np.nan, dtype=np.float32)
        if not hm.enable_nli_filtering:
            return (runner.classify(pairs) if pairs else probs), set()
        entail = [name.lower() for name in runner.labels].index("entailment")
        first_pass = [first + i for read, first in jobs.values() for i, p in enumerate(read) if p.kind == "sentence"]
        if first_pass:
            probs[first_pass] = runner.classify([pairs[i] for i in first_pass])
        settled = {job for job, (read, first) in jobs.items()
                   if job not in guarded and any(p.kind == "sentence" and r.argmax() == entail and r[entail] >= hm.nli_entailment_threshold
                          for r, p in zip(probs[first:first + len(read)], read))}
        second_pass = [first + i for job, (read, first) in jobs.items() if job not in settled
                       for i, p in enumerate(read) if p.kind != "sentence"]
        if second_pass:
            probs[second_pass] = runner.classify([pairs[i] for i in second_pass])
        return probs, settled


TWO_WAY_NOTE = (" (two-way NLI model: entailment / not_entailment; not entailed is reported as neutral, never "
                "as contradiction)")


class CanonicalNli:
    """An Explainer runner seen with its labels in EXPLAINER_LABELS order (inference.labels.NliLabelMap: found
    by name in any order and case; a two-way model's not_entailment as neutral, contradiction 0). Everything
    else is the runner's own."""

    labels = tuple(EXPLAINER_LABELS)

    def __init__(self, runner):
        self.runner = runner
        self.nli = NliLabelMap(runner.labels, f"explainer model {runner.model_dir}")

    def classify(self, pairs):
        if not pairs:
            return np.zeros((0, len(EXPLAINER_LABELS)), dtype=np.float32)
        return self.nli.canonical(self.runner.classify(pairs))

    def probabilities(self, row, column: dict[str, int]) -> dict[str, float]:
        """The evidence's probabilities by label: a two-way model's as it gives them (entailment,
        not_entailment), so that the result shows what kind of model judged it."""
        if self.nli.two_way:
            return {"entailment": float(row[column["entailment"]]), "not_entailment": float(row[column["neutral"]])}
        return {lab: float(row[column[lab]]) for lab in EXPLAINER_LABELS}

    def __getattr__(self, name):
        return getattr(self.runner, name)


def _guarded(hm, span) -> bool:
    """An ungrounded span under keep_ungrounded: never dropped as entailed (the exact check outranks the NLI)."""
    return hm.keep_ungrounded and bool(span.ungrounded)


def pair_tokens(runner, requested: int | None = None) -> int:
    """Tokens per (premise, hypothesis) pair: `requested` (nli_model.max_pair_tokens; 0 / None: not set), else
    the length the Explainer was fine-tuned at (an NLI model trained on 256-token pairs is read on 256-token
    pairs, as eval.explainer scores it), else the model's position limit; never past that limit."""
    return min(requested or getattr(runner, "trained_length", None) or runner.max_length, runner.max_length)


def premise_set(runner, nm, context: str, question: str, hypothesis: str,
                terms: list[str] | tuple[str, ...] = ()) -> explain.PremiseSet:
    """Candidate premises (windows and sentences of the context, with offsets; the question is appended to each):
    windows of nm.premise_window_tokens that fit a pair of pair_tokens() with the hypothesis, ranked by the
    words they share with it; with the ungrounded `terms` of its spans, their counterpart sentences."""
    return premises_for(runner.tokenizer, pair_tokens(runner, nm.max_pair_tokens), nm, context, question,
                        hypothesis, terms)


def premises_for(tokenizer, pair_length: int, nm, context: str, question: str, hypothesis: str,
                 terms: list[str] | tuple[str, ...] = ()) -> explain.PremiseSet:
    """premise_set for any tokenizer (a runner's, or a transformers one: eval.explainer scores PyTorch models
    on the same candidates) and a pair of `pair_length` tokens."""
    fixed = len(tokenize_segment(tokenizer, hypothesis)[0]) + len(tokenize_segment(tokenizer, question)[0]) + 4
    return explain.premise_candidates(tokenizer, context, hypothesis,
                                      window_budget(pair_length - fixed, nm.premise_window_tokens),
                                      nm.max_premise_windows, nm.max_premise_sentences, terms)


def window_budget(fits: int, window_tokens: int) -> int:
    """Tokens of one premise window: nli_model.premise_window_tokens (0: all that `fits` the pair), never more
    than fits."""
    return min(fits, window_tokens) if window_tokens > 0 else fits
