"""Two-stage claim fact-checking: JSON contract (valid / malformed / refusal through a loopback LLM endpoint),
the sentence fallback and its drop rule, NLI verification (rule-based runner and a real tiny model), scoring,
multi-turn, evidence sources, the CLI, and the Detector comparison."""

from __future__ import annotations

import json

import pytest

from eval.backends import make_backend
from eval.claims import (
    ClaimChecker,
    ContractError,
    LLMClaimExtractor,
    LLMVerifier,
    NLIVerifier,
    Passage,
    SentenceClaimExtractor,
    StaticEvidence,
    WebSearchEvidence,
    drop_reason,
    parse_json_reply,
    split_sentences,
)
from eval.claims.compare import agreement, compare_rows, run_comparison
from eval.claims.extract import validate_claims
from tests.halurate_fakes import FakeNLI, fake_gate
from tests.loopback import OpenAIEmulator, Reply
from training.data.records import SpanRecord

CONTEXT = ("The Eiffel Tower is in Paris. It was completed in 1889. Gustave Eiffel's company designed and built "
           "the tower.")


def openai_backend(server):
    return make_backend("openai", model="m", base_url=server.url + "/v1", max_retries=0, timeout_s=10)


# ---- stage 1: the JSON contract ----------------------------------------------------------------------------

def test_parse_json_reply_accepts_fenced_json_and_classifies_failures():
    assert parse_json_reply('```json\n["a b c."]\n```', validate_claims) == ["a b c."]
    assert parse_json_reply('{"claims": ["x y z."]}', validate_claims) == ["x y z."]
    with pytest.raises(ContractError) as exc:
        parse_json_reply('Claims: ["a"]', validate_claims)
    assert exc.value.kind == "malformed" and "not valid JSON" in str(exc.value)
    with pytest.raises(ContractError) as exc:
        parse_json_reply('[1, 2]', validate_claims)
    assert exc.value.kind == "malformed" and "item 0 is a int" in str(exc.value)
    with pytest.raises(ContractError) as exc:
        parse_json_reply("I'm sorry, but I can't help with that request.", validate_claims)
    assert exc.value.kind == "refusal"


def test_llm_extractor_valid_json_one_call():
    with OpenAIEmulator(['["The Eiffel Tower is in Paris.", "The Eiffel Tower was completed in 1889."]']) as srv:
        ext = LLMClaimExtractor(openai_backend(srv))
        res = ext.extract("It is in Paris and was finished in 1889.", "Where is the Eiffel Tower?")
    assert res.method == "llm"
    assert res.claims == ["The Eiffel Tower is in Paris.", "The Eiffel Tower was completed in 1889."]
    assert len(srv.requests) == 1
    assert "Where is the Eiffel Tower?" in srv.prompts[0] and "finished in 1889" in srv.prompts[0]
    assert ext.stats.to_dict()["outcomes"]["ok"] == 1


def test_llm_extractor_repairs_malformed_json_once():
    script = ['Here are the claims: ["The Eiffel Tower is in Paris."', '["The Eiffel Tower is in Paris."]']
    with OpenAIEmulator(script) as srv:
        ext = LLMClaimExtractor(openai_backend(srv))
        res = ext.extract("The Eiffel Tower is in Paris.")
    assert res.method == "llm_repaired" and res.claims == ["The Eiffel Tower is in Paris."]
    assert len(srv.requests) == 2
    repair = srv.prompts[1]
    assert "could not be used" in repair and "not valid JSON" in repair and "Here are the claims" in repair
    stats = ext.stats.to_dict()
    assert stats["outcomes"]["repaired"] == 1 and stats["first_attempt_problems"] == {"malformed": 1}


@pytest.mark.parametrize("replies,kind", [
    (["not json at all", '{"facts": "nope"}'], "malformed"),
    (["I'm sorry, I can't help with that.", "I cannot assist with this request."], "refusal"),
])
def test_llm_extractor_falls_back_to_sentences_after_one_repair(replies, kind):
    answer = "The Eiffel Tower is in Paris. I think it is lovely. It was completed in 1889."
    with OpenAIEmulator(replies) as srv:
        ext = LLMClaimExtractor(openai_backend(srv))
        res = ext.extract(answer)
    assert len(srv.requests) == 2  # the first try and one repair, never more
    assert res.method == "sentences_fallback" and res.issue.startswith(kind)
    assert res.claims == ["The Eiffel Tower is in Paris.", "The Eiffel Tower was completed in 1889."]
    assert ext.stats.to_dict()["outcomes"][kind] == 1


def test_llm_extractor_backend_error_falls_back_without_repair():
    with OpenAIEmulator([Reply.server_error(500)]) as srv:
        ext = LLMClaimExtractor(openai_backend(srv))
        res = ext.extract("The Eiffel Tower is in Paris.")
    assert res.method == "sentences_fallback" and res.issue.startswith("backend_error")
    assert ext.stats.to_dict()["outcomes"]["backend_error"] == 1


def test_empty_claim_list_is_valid():
    with OpenAIEmulator(["[]"]) as srv:
        res = LLMClaimExtractor(openai_backend(srv)).extract("Hello! How can I help?")
    assert res.method == "llm" and res.claims == []


# ---- stage 1: the sentence fallback ------------------------------------------------------------------------

def test_split_sentences_keeps_abbreviations_and_initials():
    text = "Dr. Smith met J. K. Rowling in the U.S. in 2001. They talked.\n- A bullet point here.\n2. Numbered item."
    assert split_sentences(text) == ["Dr. Smith met J. K. Rowling in the U.S. in 2001.", "They talked.",
                                     "A bullet point here.", "Numbered item."]


@pytest.mark.parametrize("sentence,reason", [
    ("What else do you want to know?", "question"),
    ("Sure thing!", "too_short"),
    ("Here is a summary of the text.", "meta"),
    ("I think the tower is the best monument.", "subjective"),
    ("In my opinion the museum is overrated.", "subjective"),
    ("The tower might be the most visited monument.", "speculative"),
    ("It was probably built by Italian workers.", "speculative"),
    ("The tower opened in May 1889.", None),          # May the month, not the hedge
    ("Paris is the capital of France.", None),
])
def test_drop_rule(sentence, reason):
    assert drop_reason(sentence) == reason


def test_sentence_extractor_resolves_leading_pronouns():
    res = SentenceClaimExtractor().extract(
        "Sure! The Eiffel Tower was completed in 1889. It is 330 metres tall. Its architect was Stephen Sauvestre.")
    assert res.claims == ["The Eiffel Tower was completed in 1889.", "The Eiffel Tower is 330 metres tall.",
                          "The Eiffel Tower's architect was Stephen Sauvestre."]
    assert res.dropped == 1


# ---- stage 2: NLI verification -----------------------------------------------------------------------------

def test_nli_verifier_maps_labels_and_picks_evidence(minilm_dir):
    runner = FakeNLI(minilm_dir)
    v = NLIVerifier(runner)
    claims = ["The Eiffel Tower is in Paris.", "The Eiffel Tower is in Berlin.", "The Eiffel Tower is painted red."]
    out = v.verify(claims, [[Passage(CONTEXT)]] * 3)
    assert [x.answer for x in out] == ["true", "false", "unsure"]
    assert out[0].evidence == "The Eiffel Tower is in Paris."
    assert "Supported by the context" in out[0].reasoning and "0.90" in out[0].reasoning
    assert out[1].evidence in split_sentences(CONTEXT) and "Contradicted" in out[1].reasoning
    assert out[2].evidence in split_sentences(CONTEXT)
    assert runner.calls == 1  # one classifier call for the batch


def test_nli_verifier_batches_and_confidence_floor(minilm_dir):
    runner = FakeNLI(minilm_dir)
    v = NLIVerifier(runner, batch_size=5)
    out = v.verify(["The Eiffel Tower is in Paris."] * 12, [[Passage(CONTEXT)]] * 12)
    assert runner.calls == 3 and v.calls == 3 and len(out) == 12
    # entailment 0.55 decides "entailment" (>= 0.5), but under a 0.6 floor the answer is unsure
    weak = NLIVerifier(FakeNLI(minilm_dir, confidence=0.55), min_confidence=0.6)
    res = weak.verify(["The Eiffel Tower is in Paris."], [[Passage(CONTEXT)]])[0]
    assert res.answer == "unsure" and "confidence floor" in res.reasoning
    # at 0.45 no candidate decides: neutral, so unsure without the floor
    res = NLIVerifier(FakeNLI(minilm_dir, confidence=0.45)).verify(["The Eiffel Tower is in Paris."],
                                                                   [[Passage(CONTEXT)]])[0]
    assert res.answer == "unsure" and "Neither supported nor contradicted" in res.reasoning


def test_nli_verifier_without_evidence_is_unsure(minilm_dir):
    out = NLIVerifier(FakeNLI(minilm_dir)).verify(["The Eiffel Tower is in Paris."], [[]])
    assert out[0].answer == "unsure" and out[0].evidence == ""


def test_nli_verifier_rejects_a_non_nli_model(minilm_dir):
    from tests.halurate_fakes import FakeSentinel

    with pytest.raises(ValueError, match="entailment"):
        NLIVerifier(FakeSentinel(minilm_dir))


# ---- scoring, multi-turn, evidence sources -----------------------------------------------------------------

def test_check_result_shape_and_threshold(minilm_dir):
    checker = ClaimChecker(SentenceClaimExtractor(), NLIVerifier(FakeNLI(minilm_dir)))
    res = checker.check("The Eiffel Tower is in Paris. The Eiffel Tower is in Berlin. It was completed in 1889. "
                        "The Eiffel Tower is in Paris, France.", CONTEXT, "Where is it?")
    d = res.to_dict()
    assert list(d) == ["score", "threshold", "reason", "claims", "results", "metrics"]
    assert list(d["results"][0]) == ["claim", "answer", "reasoning", "evidence"]
    assert d["metrics"] == {"factual_ratio": 0.5, "true_count": 2, "false_count": 1, "unsure_count": 1,
                            "total_claims": 4}
    assert d["score"] == 0.5 and d["threshold"] == 0.8 and not res.passed
    assert "2 true, 1 false, 1 unsure" in d["reason"]
    lenient = ClaimChecker(SentenceClaimExtractor(), NLIVerifier(FakeNLI(minilm_dir)), threshold=0.5)
    assert lenient.check("The Eiffel Tower is in Paris. The Eiffel Tower is in Berlin.", CONTEXT).passed


def test_no_claims_scores_one(minilm_dir):
    res = ClaimChecker(SentenceClaimExtractor(), NLIVerifier(FakeNLI(minilm_dir))).check("I don't know.", CONTEXT)
    assert res.score == 1.0 and res.passed and res.metrics["total_claims"] == 0
    assert "No factual claims" in res.reason


def test_multi_turn_checks_each_turn_against_its_own_context(minilm_dir):
    checker = ClaimChecker(SentenceClaimExtractor(), NLIVerifier(FakeNLI(minilm_dir)))
    conv = checker.check_turns([
        {"prompt": "Where is the tower?", "content": "The Eiffel Tower is in Paris.", "context": CONTEXT},
        {"prompt": "And the gate?", "content": "The Brandenburg Gate is in Paris.",
         "context": "The Brandenburg Gate is a monument in Berlin."},
    ])
    d = conv.to_dict()
    assert [t["results"][0]["answer"] for t in d["turns"]] == ["true", "unsure"]  # not the first turn's context
    assert d["metrics"]["total_claims"] == 2 and d["score"] == 0.5 and d["passed"] is False


def test_evidence_sources_are_off_by_default_and_pluggable(minilm_dir):
    claim = "The Louvre is in Paris."
    plain = ClaimChecker(SentenceClaimExtractor(), NLIVerifier(FakeNLI(minilm_dir)))
    assert plain.evidence_sources == []
    assert plain.check(claim, CONTEXT).results[0].answer == "unsure"
    corpus = StaticEvidence([Passage("The Louvre is in Paris.", "https://example.org/louvre"),
                             Passage("Rome is in Italy.", "https://example.org/rome")])
    withsrc = ClaimChecker(SentenceClaimExtractor(), NLIVerifier(FakeNLI(minilm_dir)), evidence_sources=[corpus])
    r = withsrc.check(claim, CONTEXT).results[0]
    assert r.answer == "true" and r.evidence == "The Louvre is in Paris."
    assert "https://example.org/louvre" in r.reasoning
    with pytest.raises(NotImplementedError):
        WebSearchEvidence().search(claim)


# ---- stage 2: LLM verification -----------------------------------------------------------------------------

def test_llm_verifier_valid_and_invalid_replies():
    good = json.dumps([{"claim": "a", "answer": "true", "reasoning": "stated", "evidence": "in Paris"},
                       {"claim": "b", "answer": "FALSE", "reasoning": "contradicted", "evidence": ""}])
    with OpenAIEmulator([good, "nope", "still nope"]) as srv:
        v = LLMVerifier(openai_backend(srv), batch_size=2)
        out = v.verify(["The tower is in Paris.", "The tower is in Rome."], [[Passage(CONTEXT)]] * 2)
        assert [x.answer for x in out] == ["true", "false"]
        assert out[0].evidence_source == "context"
        assert "Judge every claim ONLY against the evidence" in srv.prompts[0]
        bad = v.verify(["x y z."], [[]])
    assert bad[0].answer == "unsure" and "unusable" in bad[0].reasoning
    assert "well-established knowledge" in srv.prompts[1]
    assert v.stats.to_dict()["outcomes"] == {"ok": 1, "repaired": 0, "malformed": 1, "refusal": 0,
                                              "backend_error": 0}


def test_llm_verifier_wrong_count_is_repaired():
    one = json.dumps([{"claim": "a", "answer": "true", "reasoning": "r"}])
    two = json.dumps([{"claim": "a", "answer": "true", "reasoning": "r"},
                      {"claim": "b", "answer": "unsure", "reasoning": "r", "evidence": None}])
    with OpenAIEmulator([one, two]) as srv:
        out = LLMVerifier(openai_backend(srv)).verify(["a b c.", "d e f."], [[], []])
    assert [x.answer for x in out] == ["true", "unsure"]
    assert "expected 2 objects" in srv.prompts[1]


def test_full_llm_pipeline_through_loopback():
    replies = ['["The Eiffel Tower is in Paris.", "The Eiffel Tower is in Berlin."]',
               json.dumps([{"claim": "1", "answer": "true", "reasoning": "ok", "evidence": "in Paris"},
                           {"claim": "2", "answer": "false", "reasoning": "no", "evidence": "in Paris"}])]
    with OpenAIEmulator(replies) as srv:
        b = openai_backend(srv)
        checker = ClaimChecker(LLMClaimExtractor(b), LLMVerifier(b))
        res = checker.check("It is in Paris, or Berlin.", CONTEXT, "Where is the Eiffel Tower?")
    assert res.metrics == {"factual_ratio": 0.5, "true_count": 1, "false_count": 1, "unsure_count": 0,
                           "total_claims": 2}
    s = checker.summary()
    assert s["llm_extraction"]["outcomes"]["ok"] == 1 and s["llm_verification"]["outcomes"]["ok"] == 1


# ---- a real tiny model -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_nli_dir(tmp_path_factory, tiny_bert_dir):
    from tests.test_halurate import make_classifier_dir

    return make_classifier_dir(tiny_bert_dir, "sequence", tmp_path_factory.mktemp("nli") / "nli")


def test_nli_verifier_with_a_real_tiny_model(tiny_nli_dir):
    v = NLIVerifier.from_dir(tiny_nli_dir, backend="torch", min_confidence=0.0)
    out = v.verify(["The Eiffel Tower is in Paris.", "The tower is 330 metres tall."], [[Passage(CONTEXT)]] * 2)
    assert [x.answer in ("true", "false", "unsure") for x in out] == [True, True]
    assert all(x.evidence in split_sentences(CONTEXT) for x in out)
    assert v.pairs >= 2 and v.calls == 1


# ---- CLI ---------------------------------------------------------------------------------------------------

def test_cli_check_writes_good_and_bad(tmp_path, tiny_nli_dir, minilm_dir, monkeypatch):
    from eval.claims import cli

    rows = [{"id": "a", "prompt": "Where?", "content": "The Eiffel Tower is in Paris.", "context": CONTEXT},
            {"id": "b", "prompt": "Where?", "content": "The Eiffel Tower is in Berlin.", "context": [CONTEXT]},
            {"id": "c", "turns": [{"prompt": "Where?", "content": "The Eiffel Tower is in Paris.",
                                   "context": CONTEXT}]}]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # The rule-based NLI runner behind the real CLI, so that good / bad are known.
    monkeypatch.setattr("inference.runners.load_runner", lambda *a, **k: FakeNLI(minilm_dir))
    out = tmp_path / "out"
    assert cli.main(["check", "--input", str(path), "--explainer", tiny_nli_dir, "--out", str(out)]) == 0
    good = [json.loads(x) for x in (out / "good.jsonl").read_text().splitlines()]
    bad = [json.loads(x) for x in (out / "bad.jsonl").read_text().splitlines()]
    assert [r["id"] for r in good] == ["a", "c"] and [r["id"] for r in bad] == ["b"]
    assert bad[0]["factcheck"]["metrics"]["false_count"] == 1
    assert "turns" in good[1]["factcheck"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["good"] == 2 and summary["bad"] == 1 and summary["claims"] == 3
    assert (out / "config.yaml").is_file()


def test_cli_check_real_tiny_model_and_input_errors(tmp_path, tiny_nli_dir, capsys):
    from eval.claims import cli

    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"content": "The Eiffel Tower is in Paris.", "context": CONTEXT}) + "\n")
    assert cli.main(["check", "--input", str(path), "--explainer", tiny_nli_dir, "--out", str(tmp_path / "o")]) == 0
    n = sum(1 for _ in (tmp_path / "o" / "good.jsonl").open()) + sum(1 for _ in (tmp_path / "o" / "bad.jsonl").open())
    assert n == 1
    path.write_text(json.dumps({"content": "ok"}) + "\n" + json.dumps({"prompt": "x"}) + "\n")
    assert cli.main(["check", "--input", str(path), "--explainer", tiny_nli_dir, "--out", str(tmp_path / "p")]) == 2
    assert f"{path}:2: field 'content'" in capsys.readouterr().err
    assert cli.main(["check", "--input", str(path), "--out", str(tmp_path / "q")]) == 2
    assert "--explainer DIR" in capsys.readouterr().err


# ---- comparison with the Detector --------------------------------------------------------------------------

def test_agreement_and_compare_rows_exact():
    a = agreement([1, 1, 0, 0], [1, 0, 0, 1])
    assert a["agreement"] == 0.5 and a["both_flag"] == 1 and a["only_detector"] == 1 and a["only_claims"] == 1
    rows = [{"gold": 1, "detector": 1, "claims": 1, "claims_any_false": 1, "task_type": "QA"},
            {"gold": 1, "detector": 0, "claims": 1, "claims_any_false": 0, "task_type": "QA"},
            {"gold": 0, "detector": 0, "claims": 1, "claims_any_false": 0, "task_type": "Summary"},
            {"gold": 0, "detector": None, "claims": 0, "claims_any_false": 0, "task_type": "Summary"}]
    m = compare_rows(rows)
    assert m["not_checked_by_detector"] == 1 and m["overall"]["n"] == 3
    assert m["overall"]["detector_vs_gold"]["precision"] == 1.0 and m["overall"]["detector_vs_gold"]["recall"] == 0.5
    assert m["overall"]["claims_vs_gold"]["recall"] == 1.0 and m["overall"]["claims_vs_gold"]["precision"] == 0.6667
    assert m["overall"]["agreement"]["agreement"] == 0.3333
    assert set(m["by_task_type"]) == {"QA", "Summary"}


def test_run_comparison_with_rule_based_models(minilm_dir):
    gate = fake_gate(minilm_dir, sentinel=False)
    checker = ClaimChecker(SentenceClaimExtractor(), NLIVerifier(FakeNLI(minilm_dir)))
    recs = [
        SpanRecord(id="r1", context=CONTEXT, question="Where?", answer="The Eiffel Tower is in Berlin.",
                   spans=[{"start": 22, "end": 28}], task_type="QA"),
        SpanRecord(id="r2", context=CONTEXT, question="Where?", answer="The Eiffel Tower is in Paris.",
                   spans=[], task_type="QA"),
        SpanRecord(id="r3", context=CONTEXT, question=None, answer="The Eiffel Tower is painted red.",
                   spans=[{"start": 20, "end": 31}], task_type="Summary"),
    ]
    rows, m = run_comparison(recs, gate, checker, batch_size=2)
    assert [(r["detector"], r["claims"], r["gold"]) for r in rows] == [(1, 1, 1), (0, 0, 0), (0, 1, 1)]
    assert m["overall"]["detector_vs_gold"]["recall"] == 0.5 and m["overall"]["claims_vs_gold"]["f1"] == 1.0
    assert m["overall"]["agreement"]["only_claims"] == 1


@pytest.mark.data
def test_cli_compare_on_the_ragtruth_subset_with_tiny_models(tmp_path, data_dir, tiny_nli_dir, tiny_bert_dir):
    from eval.claims import cli
    from tests.test_halurate import make_classifier_dir

    detector = make_classifier_dir(tiny_bert_dir, "token", tmp_path / "detector")
    out = tmp_path / "cmp"
    assert cli.main(["compare", "--data", "ragtruth_test_subset", "--data-dir", str(data_dir), "--per-task", "2",
                     "--detector", detector, "--explainer", tiny_nli_dir, "--out", str(out)]) == 0
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and {r["task_type"] for r in rows} == {"QA", "Summary", "Data2txt"}
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["responses"] == 6 and set(metrics["by_task_type"]) <= {"QA", "Summary", "Data2txt"}
    assert "Claim-level checker vs span-level Detector" in (out / "report.md").read_text()


def test_nli_premises_respect_max_pair_tokens(minilm_dir):
    long_ctx = CONTEXT + " " + " ".join(f"Filler sentence number {i} says nothing." for i in range(40))
    full = NLIVerifier(FakeNLI(minilm_dir)).premises("The Eiffel Tower is in Paris.", [Passage(long_ctx)])
    short = NLIVerifier(FakeNLI(minilm_dir), max_pair_tokens=32).premises("The Eiffel Tower is in Paris.",
                                                                           [Passage(long_ctx)])
    assert long_ctx in [p.text for p in full]
    assert all(p.sentence for p in short) and len(short) == 3


def test_check_input_reads_halurate_results(tmp_path):
    from eval.claims.cli import read_input

    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({"id": "h1", "question": "Where?", "answer": "In Paris.", "context": CONTEXT,
                                "verdict": "clean"}) + "\n")
    row = read_input(str(path))[0]
    assert (row["id"], row["prompt"], row["content"], row["context"]) == ("h1", "Where?", "In Paris.", CONTEXT)
