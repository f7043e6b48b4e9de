"""Two-stage claim fact-checking: claim extraction (LLM under a JSON contract, or sentence splitting) and
per-claim verification (the NLI Explainer against the context, or an LLM), scored as factual_ratio.

    python -m eval.claims check --input answers.jsonl --explainer runs/explainer-offline --out runs/claims
    python -m eval.claims compare --data ragtruth_test_subset --detector DIR --explainer DIR --out DIR
"""

from .checker import DEFAULT_BATCH_SIZE, DEFAULT_THRESHOLD, ClaimChecker, ConversationResult, FactCheckResult
from .contract import ContractError, ContractStats, parse_json_reply
from .extract import LLMClaimExtractor, SentenceClaimExtractor, drop_reason, split_sentences
from .verify import (
                     ClaimVerdict,
                     EvidenceSource,
                     LLMVerifier,
                     NLIVerifier,
                     Passage,
                     StaticEvidence,
                     Verifier,
                     WebSearchEvidence,
)

__all__ = [
    "DEFAULT_BATCH_SIZE", "DEFAULT_THRESHOLD", "ClaimChecker", "ClaimVerdict", "ContractError", "ContractStats",
    "ConversationResult", "EvidenceSource", "FactCheckResult", "LLMClaimExtractor", "LLMVerifier", "NLIVerifier",
    "Passage", "SentenceClaimExtractor", "StaticEvidence", "Verifier", "WebSearchEvidence", "drop_reason",
    "parse_json_reply", "split_sentences",
]
