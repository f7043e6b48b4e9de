"""Stage 2: verify each claim as `true` / `false` / `unsure`, with reasoning and evidence.

Evidence comes from passages: the given context (always, when there is one) plus any pluggable EvidenceSource
(web search is such a source; none is configured by default and none in this package calls the network).

- `NLIVerifier`: the NLI Explainer (any 3-way entailment / neutral / contradiction classifier behind
  inference.runners' runner interface). Premises per claim: the `candidates` passage sentences sharing the most
  content words with the claim, those sentences joined (facts that span two sentences), and each whole passage;
  the last two only when (premise, claim) fits `max_pair_tokens` (default: the length the model was trained at,
  else its limit). Verdicts combine as in the Explainer (inference.explain.combine_nli: entailed by a
  premise at probability >= 0.5 -> entailment, else contradicted by one at >= 0.5 -> contradiction, else neutral) and map entailment -> true,
  contradiction -> false, neutral -> unsure; a true / false under `min_confidence` becomes unsure. Evidence: the
  candidate sentence with the highest probability of the verdict's label (for unsure: of entailment, the closest
  support). Claims are verified `batch_size` at a time: one classifier call per batch.
- `LLMVerifier`: an LLM backend judges a batch of `batch_size` claims against the passages under a JSON
  contract (eval.claims.contract): one repair round; a batch whose reply stays invalid is `unsure` (counted).
"""

from __future__ import annotations

import abc
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from eval.backends import Backend
from inference.explain import combine_nli
from inference.formatting import nli_pair
from inference.labels import EXPLAINER_LABELS
from inference.stages.explainer import pair_tokens
from inference.windowing import rank_premises

from .contract import ContractStats, ask_json
from .extract import split_sentences

VERDICTS = ("true", "false", "unsure")
NLI_TO_VERDICT = {"entailment": "true", "contradiction": "false", "neutral": "unsure"}


@dataclass
class Passage:
    """A piece of evidence: its text and where it comes from ("context", a URL, a corpus id ...)."""

    text: str
    source: str = "context"


@dataclass
class ClaimVerdict:
    claim: str
    answer: str          # true | false | unsure
    reasoning: str
    evidence: str        # the best evidence passage / sentence ("" when there is none)
    evidence_source: str = ""
    confidence: float | None = None

    def to_dict(self) -> dict:
        """The issue's result shape: {claim, answer, reasoning, evidence}."""
        return {"claim": self.claim, "answer": self.answer, "reasoning": self.reasoning, "evidence": self.evidence}


class EvidenceSource(abc.ABC):
    """Where evidence for a claim comes from besides the given context (web search, a document store ...).

    Implement `search`; pass instances as ClaimChecker(evidence_sources=[...]). Off by default: without sources a
    claim is checked against its context only."""

    name = "evidence"

    @abc.abstractmethod
    def search(self, claim: str, *, k: int = 3) -> list[Passage]:
        """Up to k passages relevant to `claim`."""


class StaticEvidence(EvidenceSource):
    """A fixed list of passages (an offline corpus, tests): the k sharing most content words with the claim."""

    name = "static"

    def __init__(self, passages: Sequence[Passage | str]):
        self.passages = [p if isinstance(p, Passage) else Passage(p, self.name) for p in passages]

    def search(self, claim: str, *, k: int = 3) -> list[Passage]:
        texts = rank_premises([p.text for p in self.passages], claim, k)
        by_text = {p.text: p for p in self.passages}
        return [by_text[t] for t in texts]


class WebSearchEvidence(EvidenceSource):
    """The interface a web search source implements (a search API client returning snippets with their URLs).

    Deliberately not implemented here: this project runs offline and ships nothing that calls the network.
    Subclass it and implement `search` to return Passage(snippet, source=url)."""

    name = "web"

    def search(self, claim: str, *, k: int = 3) -> list[Passage]:
        raise NotImplementedError("WebSearchEvidence is an interface: subclass it with a search API client")


class Verifier(abc.ABC):
    name = "verifier"

    @abc.abstractmethod
    def verify(self, claims: Sequence[str], passages: Sequence[Sequence[Passage]], *, prompt: str | None = None,
               response: str | None = None) -> list[ClaimVerdict]:
        """One verdict per claim; passages[i] is the evidence for claims[i]."""


def _no_evidence(claim: str) -> ClaimVerdict:
    return ClaimVerdict(claim, "unsure", "No context or evidence to verify it against.", "")


# ---- NLI ----------------------------------------------------------------------------------------------------

@dataclass
class _Premise:
    text: str
    source: str
    sentence: bool  # a single candidate sentence (an evidence candidate)


class NLIVerifier(Verifier):
    """Claims against their passages with a 3-way NLI classifier (the Explainer)."""

    name = "nli"

    def __init__(self, runner, *, batch_size: int = 10, candidates: int = 3, min_confidence: float = 0.5,
                 max_pair_tokens: int | None = None):
        labels = [x.lower() for x in runner.labels]
        missing = [x for x in EXPLAINER_LABELS if x not in labels]
        if missing:
            raise ValueError(f"NLI model {getattr(runner, 'model_dir', runner)}: labels {runner.labels} lack "
                             f"{missing}; an entailment / neutral / contradiction classifier is needed")
        if batch_size < 1 or candidates < 1:
            raise ValueError("batch_size and candidates must be >= 1")
        self.runner = runner
        self.batch_size = batch_size
        self.candidates = candidates
        self.min_confidence = min_confidence
        # Joined sentences and whole passages are only used when (premise, claim) fits this many tokens: by default
        # the Explainer's training max_length, so that premises stay in the length range it has seen.
        self.max_pair_tokens = pair_tokens(runner, max_pair_tokens)
        self.calls = 0   # classifier calls (one per batch)
        self.pairs = 0   # premise/claim pairs classified

    @classmethod
    def from_dir(cls, model_dir: str, *, backend: str = "onnx", **kwargs) -> NLIVerifier:
        from inference.runners import load_runner  # tests patch inference.runners.load_runner

        return cls(load_runner(model_dir, "sequence", backend), **kwargs)

    def _fits(self, premise: str, claim: str) -> bool:
        tok = getattr(self.runner, "tokenizer", None)
        if tok is None:
            return True
        return len(tok.encode(premise, claim).ids) <= self.max_pair_tokens

    def premises(self, claim: str, passages: Sequence[Passage]) -> list[_Premise]:
        sents: list[tuple[str, str]] = []
        for p in passages:
            sents.extend((s, p.source) for s in split_sentences(p.text))
        source_of = {}
        for s, src in sents:
            source_of.setdefault(s, src)
        best = rank_premises([s for s, _ in sents], claim, self.candidates)
        out = [_Premise(s, source_of[s], True) for s in dict.fromkeys(best)]
        seen = {p.text for p in out}
        extra = []
        joined = " ".join(p.text for p in out)
        if len(out) > 1 and self._fits(joined, claim):
            extra.append(_Premise(joined, out[0].source, False))
        for p in passages:
            if p.text.strip() and self._fits(p.text, claim):
                extra.append(_Premise(p.text.strip(), p.source, False))
        for p in extra:
            if p.text not in seen:
                seen.add(p.text)
                out.append(p)
        return out

    def verify(self, claims, passages, *, prompt=None, response=None) -> list[ClaimVerdict]:
        if len(claims) != len(passages):
            raise ValueError(f"{len(claims)} claims but {len(passages)} passage lists")
        out: list[ClaimVerdict] = []
        for start in range(0, len(claims), self.batch_size):
            out.extend(self._verify_batch(claims[start:start + self.batch_size],
                                          passages[start:start + self.batch_size]))
        return out

    def _verify_batch(self, claims, passages) -> list[ClaimVerdict]:
        jobs = [self.premises(c, ps) for c, ps in zip(claims, passages)]
        pairs = [nli_pair(p.text, c) for c, prem in zip(claims, jobs) for p in prem]
        probs = self.runner.classify(pairs) if pairs else np.zeros((0, len(self.runner.labels)))
        if pairs:
            self.calls += 1
            self.pairs += len(pairs)
        index = {name.lower(): i for i, name in enumerate(self.runner.labels)}
        out, pos = [], 0
        for claim, prem in zip(claims, jobs):
            if not prem:
                out.append(_no_evidence(claim))
                continue
            p = probs[pos:pos + len(prem)]
            pos += len(prem)
            label, conf = combine_nli(list(p), self.runner.labels)
            answer = NLI_TO_VERDICT[label]
            low = answer != "unsure" and conf < self.min_confidence
            if low:
                answer = "unsure"
            key = index["entailment"] if answer == "unsure" else index[label]
            cands = [i for i, x in enumerate(prem) if x.sentence] or list(range(len(prem)))
            best = max(cands, key=lambda i: (p[i][key], -i))
            ev = prem[best]
            where = "the context" if ev.source == "context" else f"evidence from {ev.source}"
            if low:
                reasoning = (f"NLI {label} {conf:.2f} is under the {self.min_confidence:.2f} confidence floor, so "
                             f"{where} does not settle it.")
            elif answer == "true":
                reasoning = f"Supported by {where} (NLI entailment {conf:.2f})."
            elif answer == "false":
                reasoning = f"Contradicted by {where} (NLI contradiction {conf:.2f})."
            else:
                reasoning = (f"Neither supported nor contradicted by {where} (NLI neutral {conf:.2f}); the closest "
                             f"sentence is given as evidence.")
            out.append(ClaimVerdict(claim, answer, reasoning, ev.text, ev.source, round(float(conf), 4)))
        return out


# ---- LLM ----------------------------------------------------------------------------------------------------

VERIFY_PROMPT = """You fact-check claims taken from an assistant's response.

{evidence_rule}

For each claim decide:
- "true": the evidence states or clearly implies it;
- "false": the evidence contradicts it;
- "unsure": the evidence does not settle it (not mentioned, ambiguous, or only partly covered).

Output format: ONLY a JSON array with exactly one object per claim, in the order of the claims, nothing before or after it:
[{{"claim": "<the claim>", "answer": "true" | "false" | "unsure", "reasoning": "<one or two sentences>", "evidence": "<a short quote from the evidence, or an empty string>"}}]

Prompt given to the assistant:
{prompt}

Assistant's response:
{response}

Evidence:
{evidence}

Claims:
{claims}"""

EVIDENCE_RULE = "Judge every claim ONLY against the evidence passages below, not against your own knowledge."
NO_EVIDENCE_RULE = ("No evidence passages are given: judge from well-established knowledge, and answer \"unsure\" "
                    "whenever you are not certain.")
VERIFY_FORMAT_RULE = ('Reply with ONLY a JSON array with one object per claim, in order: '
                      '[{"claim": "...", "answer": "true" | "false" | "unsure", "reasoning": "...", '
                      '"evidence": "..."}].')


def claims_validator(n: int):
    def validate(value) -> list[dict]:
        if not isinstance(value, list):
            raise TypeError(f"expected a JSON array of {n} objects, got a JSON {type(value).__name__}")
        if len(value) != n:
            raise ValueError(f"expected {n} objects (one per claim), got {len(value)}")
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise TypeError(f"item {i} is a {type(item).__name__}, expected an object")
            answer = item.get("answer")
            if isinstance(answer, bool):
                answer = "true" if answer else "false"
            if not isinstance(answer, str) or answer.strip().lower() not in VERDICTS:
                raise ValueError(f"item {i}: answer must be \"true\", \"false\" or \"unsure\", got {answer!r}")
            reasoning = item.get("reasoning")
            if not isinstance(reasoning, str):
                raise TypeError(f"item {i}: reasoning must be a string")
            evidence = item.get("evidence", "")
            if isinstance(evidence, list) and all(isinstance(e, str) for e in evidence):
                evidence = " ".join(evidence)
            if evidence is None:
                evidence = ""
            if not isinstance(evidence, str):
                raise TypeError(f"item {i}: evidence must be a string")
            out.append({"answer": answer.strip().lower(), "reasoning": reasoning.strip(), "evidence": evidence.strip()})
        return out
    return validate


class LLMVerifier(Verifier):
    """Claims judged by an LLM backend, `batch_size` per prompt, under the JSON contract."""

    name = "llm"

    def __init__(self, backend: Backend, *, batch_size: int = 10, max_output_tokens: int = 2048,
                 temperature: float = 0.0, seed: int | None = 1234, max_evidence_chars: int = 12000,
                 stats: ContractStats | None = None):
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.backend = backend
        self.batch_size = batch_size
        self.gen_kwargs = {"max_output_tokens": max_output_tokens, "temperature": temperature, "seed": seed}
        self.max_evidence_chars = max_evidence_chars
        self.stats = stats or ContractStats()

    def verify(self, claims, passages, *, prompt=None, response=None) -> list[ClaimVerdict]:
        if len(claims) != len(passages):
            raise ValueError(f"{len(claims)} claims but {len(passages)} passage lists")
        out: list[ClaimVerdict] = []
        for start in range(0, len(claims), self.batch_size):
            out.extend(self._verify_batch(list(claims[start:start + self.batch_size]),
                                          passages[start:start + self.batch_size], prompt, response))
        return out

    def _verify_batch(self, claims, passages, prompt, response) -> list[ClaimVerdict]:
        unique: dict[str, Passage] = {}
        for ps in passages:
            for p in ps:
                unique.setdefault(p.text.strip(), p)
        evidence = "\n\n".join(f"[{i + 1}] ({p.source}) {text}" for i, (text, p) in enumerate(unique.items()) if text)
        evidence = evidence[: self.max_evidence_chars]
        task = VERIFY_PROMPT.format(
            evidence_rule=EVIDENCE_RULE if evidence else NO_EVIDENCE_RULE, prompt=(prompt or "(not given)").strip(),
            response=(response or "(not given)").strip(), evidence=evidence or "(none)",
            claims="\n".join(f"{i + 1}. {c}" for i, c in enumerate(claims)))
        reply = ask_json(self.backend, task, claims_validator(len(claims)), format_rule=VERIFY_FORMAT_RULE,
                         gen_kwargs=self.gen_kwargs, stats=self.stats)
        if reply.outcome not in ("ok", "repaired"):
            why = f"The LLM verifier's reply was unusable ({reply.outcome}: {reply.problem}); not verified."
            return [ClaimVerdict(c, "unsure", why, "") for c in claims]
        out = []
        for claim, item, ps in zip(claims, reply.value, passages):
            source = _source_of(item["evidence"], ps)
            out.append(ClaimVerdict(claim, item["answer"], item["reasoning"], item["evidence"], source))
        return out


_WS = re.compile(r"\s+")


def _source_of(quote: str, passages: Sequence[Passage]) -> str:
    q = _WS.sub(" ", quote).strip().lower()
    if not q:
        return ""
    for p in passages:
        if q in _WS.sub(" ", p.text).lower():
            return p.source
    return "llm"
