"""Two-stage claim fact-checking (the GPT-5 system card method, as packaged by Dingo's LLMFactCheckPublic).

    from eval.claims import ClaimChecker, NLIVerifier
    checker = ClaimChecker(verifier=NLIVerifier.from_dir("runs/explainer-offline", backend="torch"))
    result = checker.check("The Eiffel Tower is in Berlin.", context="The Eiffel Tower is in Paris.",
                           prompt="Where is the Eiffel Tower?")
    result.to_dict()   # {score, threshold, reason, claims, results: [{claim, answer, reasoning, evidence}],
                       #  metrics: {factual_ratio, true_count, false_count, unsure_count, total_claims}}
    result.passed      # score >= threshold

Score: factual_ratio = true / total claims; `unsure` counts against it (a claim the evidence does not support is
not verified). An answer without any factual claim ("I don't know") scores 1.0: nothing it asserts is false; the
reason says so. Multi-turn: `check_turns` checks every turn against its own context.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .contract import ContractStats
from .extract import Extraction, LLMClaimExtractor, SentenceClaimExtractor
from .verify import ClaimVerdict, EvidenceSource, LLMVerifier, Passage, Verifier

DEFAULT_THRESHOLD = 0.8
DEFAULT_BATCH_SIZE = 10


@dataclass
class FactCheckResult:
    score: float
    threshold: float
    reason: str
    claims: list[str]
    results: list[ClaimVerdict]
    extraction: Extraction | None = None

    @property
    def metrics(self) -> dict:
        counts = Counter(r.answer for r in self.results)
        total = len(self.results)
        return {"factual_ratio": round(self.score, 4), "true_count": counts["true"],
                "false_count": counts["false"], "unsure_count": counts["unsure"], "total_claims": total}

    @property
    def passed(self) -> bool:
        return self.score >= self.threshold

    def to_dict(self) -> dict[str, Any]:
        return {"score": round(self.score, 4), "threshold": self.threshold, "reason": self.reason,
                "claims": list(self.claims), "results": [r.to_dict() for r in self.results],
                "metrics": self.metrics}


def score_verdicts(claims: list[str], verdicts: list[ClaimVerdict], threshold: float,
                   extraction: Extraction | None = None) -> FactCheckResult:
    total = len(verdicts)
    counts = Counter(v.answer for v in verdicts)
    if total == 0:
        score, reason = 1.0, "No factual claims found: nothing to verify."
    else:
        score = counts["true"] / total
        verdict = "passed" if score >= threshold else "failed"
        reason = (f"Found {total} claims: {counts['true']} true, {counts['false']} false, {counts['unsure']} unsure. "
                  f"Factual ratio {score:.2%} {verdict} the {threshold:.0%} threshold.")
    if extraction is not None and extraction.method == "sentences_fallback":
        reason += f" Claims come from the sentence-splitting fallback (LLM extraction failed: {extraction.issue})."
    return FactCheckResult(score, threshold, reason, claims, verdicts, extraction)


@dataclass
class ConversationResult:
    """Per-turn results; the conversation's score pools every turn's claims, and it passes when every turn does."""

    turns: list[FactCheckResult]
    threshold: float

    @property
    def score(self) -> float:
        total = sum(len(t.results) for t in self.turns)
        true = sum(1 for t in self.turns for r in t.results if r.answer == "true")
        return true / total if total else 1.0

    @property
    def passed(self) -> bool:
        return all(t.passed for t in self.turns)

    def to_dict(self) -> dict:
        counts = Counter(r.answer for t in self.turns for r in t.results)
        total = sum(counts.values())
        return {"score": round(self.score, 4), "threshold": self.threshold, "passed": self.passed,
                "reason": f"{len(self.turns)} turns, {sum(not t.passed for t in self.turns)} failed; "
                          f"{total} claims, {counts['true']} true, {counts['false']} false, {counts['unsure']} unsure.",
                "metrics": {"factual_ratio": round(self.score, 4), "true_count": counts["true"],
                            "false_count": counts["false"], "unsure_count": counts["unsure"], "total_claims": total},
                "turns": [t.to_dict() for t in self.turns]}


@dataclass
class CheckerStats:
    responses: int = 0
    claims: int = 0
    extraction_methods: Counter = field(default_factory=Counter)
    verdicts: Counter = field(default_factory=Counter)
    dropped_sentences: int = 0

    def to_dict(self, extractor_stats: ContractStats | None = None, verifier_stats: ContractStats | None = None):
        out = {"responses": self.responses, "claims": self.claims,
               "extraction_methods": dict(self.extraction_methods), "verdicts": dict(self.verdicts),
               "sentences_dropped_by_rule": self.dropped_sentences}
        if extractor_stats is not None:
            out["llm_extraction"] = extractor_stats.to_dict()
        if verifier_stats is not None:
            out["llm_verification"] = verifier_stats.to_dict()
        return out


class ClaimChecker:
    """Stage 1 (extractor) + stage 2 (verifier) + score. Without an extractor the sentence splitter is used; a
    verifier is required (NLIVerifier or LLMVerifier)."""

    def __init__(self, extractor: LLMClaimExtractor | SentenceClaimExtractor | None = None,
                 verifier: Verifier | None = None, *, threshold: float = DEFAULT_THRESHOLD,
                 evidence_sources: Sequence[EvidenceSource] = (), evidence_k: int = 3):
        if verifier is None:
            raise ValueError("a verifier is needed: NLIVerifier (the Explainer) or LLMVerifier (an LLM backend)")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold: must be in [0, 1], got {threshold}")
        self.extractor = extractor or SentenceClaimExtractor()
        self.verifier = verifier
        self.threshold = threshold
        self.evidence_sources = list(evidence_sources)
        self.evidence_k = evidence_k
        self.stats = CheckerStats()

    def passages(self, claim: str, context: str | Sequence[str] | None) -> list[Passage]:
        docs = [context] if isinstance(context, str) else list(context or [])
        out = [Passage(d, "context") for d in docs if d and d.strip()]
        for source in self.evidence_sources:
            out.extend(source.search(claim, k=self.evidence_k))
        return out

    def check(self, content: str, context: str | Sequence[str] | None = None,
              prompt: str | None = None) -> FactCheckResult:
        extraction = self.extractor.extract(content or "", prompt)
        claims = extraction.claims
        verdicts = self.verifier.verify(claims, [self.passages(c, context) for c in claims],
                                        prompt=prompt, response=content) if claims else []
        self.stats.responses += 1
        self.stats.claims += len(claims)
        self.stats.extraction_methods[extraction.method] += 1
        self.stats.dropped_sentences += extraction.dropped
        self.stats.verdicts.update(v.answer for v in verdicts)
        return score_verdicts(claims, verdicts, self.threshold, extraction)

    def check_turns(self, turns: Sequence[dict]) -> ConversationResult:
        """turns: [{"prompt", "content", "context"?}, ...]; each is checked against its own context only."""
        results = []
        for i, turn in enumerate(turns):
            if not isinstance(turn, dict) or not isinstance(turn.get("content"), str):
                raise TypeError(f"turns[{i}].content: required (the assistant's reply to check)")
            results.append(self.check(turn["content"], turn.get("context"), turn.get("prompt")))
        return ConversationResult(results, self.threshold)

    def summary(self) -> dict:
        ext = getattr(self.extractor, "stats", None)
        ver = self.verifier.stats if isinstance(self.verifier, LLMVerifier) else None
        return self.stats.to_dict(ext, ver)
