"""Detector metrics on hand-computed cases, the reference baselines and threshold scoring."""

import re

import numpy as np
import pytest

from eval.detector import baseline_items, grounding_rule_spans, lexical_spans, whole_answer_span
from inference.detector_stage import DetectorScores
from inference.settings import DetectorSettings
from training.data.records import SpanRecord
from training.detector_scoring import Prediction, scored_items
from training.span_metrics import Scored, detection_metrics, example_level, span_level, token_level


def _sp(a, b):
    return {"start": a, "end": b}


def test_example_level_hand_computed():
    items = [
        Scored("QA", [_sp(0, 5)], [_sp(1, 2)]),   # TP
        Scored("QA", [_sp(0, 5)], []),            # FN
        Scored("QA", [], [_sp(0, 3)]),            # FP
        Scored("QA", [], []),                     # TN
        Scored("QA", [_sp(3, 4)], [_sp(9, 12)]),  # TP at example level even though the spans miss
    ]
    m = example_level(items)
    assert m["precision"] == pytest.approx(2 / 3) and m["recall"] == pytest.approx(2 / 3)
    assert m["f1"] == pytest.approx(2 / 3) and m["n"] == 5 and m["gold_positive"] == 3 and m["pred_positive"] == 3


def test_span_level_character_overlap_hand_computed():
    items = [
        Scored(None, [_sp(0, 10)], [_sp(5, 15)]),           # overlap 5, predicted 10, gold 10
        Scored(None, [_sp(0, 4), _sp(10, 20)], [_sp(2, 12)]),  # overlap 2 + 2, predicted 10, gold 14
        Scored(None, [], [_sp(0, 6)]),                      # predicted 6
        Scored(None, [_sp(0, 6)], []),                      # gold 6
    ]
    m = span_level(items)
    assert (m["overlap_chars"], m["predicted_chars"], m["gold_chars"]) == (9, 26, 30)
    p, r = 9 / 26, 9 / 30
    assert m["precision"] == pytest.approx(p) and m["recall"] == pytest.approx(r)
    assert m["f1"] == pytest.approx(2 * p * r / (p + r))
    assert span_level([Scored(None, [], [])])["f1"] == 0.0


def test_token_level_hand_computed():
    items = [Scored(None, [], [], [1, 1, 0, 0], [1, 0, 1, 0]), Scored(None, [], [], [0, 1], [0, 1])]
    m = token_level(items)  # TP 2, FP 1, FN 1
    assert m["precision"] == pytest.approx(2 / 3) and m["recall"] == pytest.approx(2 / 3)
    assert m["tokens"] == 6 and m["gold_positive"] == 3


def test_detection_metrics_by_task_type():
    items = [Scored("QA", [_sp(0, 4)], [_sp(0, 4)], [1], [1]), Scored("Summary", [_sp(0, 4)], [], [1], [0])]
    m = detection_metrics(items)
    assert m["example"]["by_task_type"]["QA"]["f1"] == 1.0
    assert m["example"]["by_task_type"]["Summary"]["f1"] == 0.0
    assert m["example"]["overall"]["recall"] == 0.5
    assert set(m) == {"example", "span", "token"} and m["span"]["by_task_type"]["QA"]["precision"] == 1.0


def _record(answer, spans, context="The tower in Paris is 330 metres tall.", question=None, task="QA"):
    return SpanRecord(id=answer[:8], answer=answer, spans=spans, context=context, question=question,
                      task_type=task)


def _pred(offsets, probs, windows=1):
    return Prediction(DetectorScores(offsets, np.asarray(probs), np.asarray(probs), windows=windows), [])


def test_reference_baselines():
    rec = _record("The tower is 500 metres tall and painted gold.", [_sp(13, 23)])
    assert [s["text"] for s in lexical_spans(rec)] == ["500 metres", "painted gold"]
    assert [s["text"] for s in grounding_rule_spans(rec)] == ["500 metres"]
    assert whole_answer_span("  Some answer. ") == [{"start": 2, "end": 14, "text": "Some answer."}]
    assert whole_answer_span("   ") == []
    # questions count as known text for the lexical baseline
    assert lexical_spans(_record("It is gold.", [], context="x", question="Is it gold?")) == []
    offsets = [(0, 3), (4, 9), (10, 12), (13, 16), (17, 23), (24, 28), (29, 32), (33, 40), (41, 45), (45, 46)]
    preds = [_pred(offsets, np.zeros(len(offsets)))]
    everything = baseline_items([rec], preds, "flag_everything")[0]
    assert everything.pred_tokens == [1] * 10 and everything.pred_spans[0]["end"] == len(rec.answer)
    lex = baseline_items([rec], preds, "lexical")[0]
    assert lex.pred_tokens == [0, 0, 0, 1, 1, 0, 0, 1, 1, 0] and lex.gold_tokens == [0, 0, 0, 1, 1, 0, 0, 0, 0, 0]


def test_scored_items_apply_the_threshold_and_skip_unscored():
    rec = _record("The tower is 500 metres tall.", [_sp(13, 23)])
    offsets = [(0, 3), (4, 9), (10, 12), (13, 16), (17, 23), (24, 28), (28, 29)]
    probs = np.array([0.1, 0.1, 0.2, 0.9, 0.6, 0.3, 0.1])
    settings = DetectorSettings(min_span_length=1, min_span_confidence=0.0, span_extension=1.0)
    preds = [_pred(offsets, probs, 2), Prediction(None, [], "too long")]
    items = scored_items([rec, rec], preds, threshold=0.5, settings=settings)
    assert len(items) == 1 and items[0].pred_spans[0]["text"] == "500 metres"
    # the default span extension (0.5 x the threshold) grows the span over "tall" (0.3 >= 0.25), and the
    # token-level prediction stays the threshold's
    grown = scored_items([rec], preds[:1], threshold=0.5, settings=DetectorSettings(min_span_length=1))[0]
    assert grown.pred_spans[0]["text"] == "500 metres tall" and grown.pred_tokens == [0, 0, 0, 1, 1, 0, 0]
    m = detection_metrics(items)
    assert m["span"]["overall"]["f1"] == 1.0 and m["token"]["overall"]["f1"] == 1.0
    recall = [token_level(scored_items([rec], preds[:1], threshold=t, settings=settings))["recall"]
              for t in (0.5, 0.7, 0.95)]
    assert recall == [1.0, 0.5, 0.0]
    assert example_level(scored_items([rec], preds[:1], threshold=0.95, settings=settings))["f1"] == 0.0


def test_a_task_type_gets_its_own_threshold_only_with_enough_of_both_classes():
    """Per-task thresholds fitted on ~2 hallucinated QA answers swung from 0.15 to 0.6 between folds: a task type
    needs MIN_TASK_CLASS_RECORDS hallucinated and as many faithful calibration responses."""
    from training.detector_scoring import MIN_TASK_CLASS_RECORDS as n
    from training.detector_scoring import tasks_with_own_threshold

    def recs(task, positive, negative):
        return ([SpanRecord(context="c", answer="a", task_type=task, spans=[_sp(0, 1)])] * positive
                + [SpanRecord(context="c", answer="a", task_type=task, spans=[])] * negative)

    records = (recs("Data2txt", n, n) + recs("QA", n - 1, 5 * n) + recs("Summary", 5 * n, n - 1)
               + recs(None, n, n))
    chosen = tasks_with_own_threshold(records)
    assert list(chosen) == ["Data2txt"]
    assert [records[i].task_type for i in chosen["Data2txt"]] == ["Data2txt"] * (2 * n)


@pytest.mark.parametrize("value", [0.0, -0.5, 1.5])
def test_span_extension_outside_its_range_names_the_setting(value):
    with pytest.raises(ValueError, match="span_extension"):
        DetectorSettings(span_extension=value).validate()


def test_ungrounded_terms_are_spans_below_the_threshold_unless_switched_off():
    from inference.detector_stage import scores_to_spans
    from inference.grounding import unsupported_spans

    context = "The Eiffel Tower in Paris was built from 1887 to 1889. The tower is 330 meters tall."
    answer = "The tower was built in 1950 and is 500 meters tall. It is in Paris."
    offsets = [(m.start(), m.end()) for m in re.finditer(r"\w+|[^\w\s]", answer)]
    probs = np.full(len(offsets), 0.1)
    probs[next(i for i, (s, _) in enumerate(offsets) if answer[s:].startswith("500"))] = 0.9  # the model sees "500"
    scores = DetectorScores(offsets, probs, probs, ungrounded=unsupported_spans(answer, context))
    settings = DetectorSettings(min_span_length=1, min_span_confidence=0.0, span_extension=1.0)
    spans = scores_to_spans(answer, scores, settings, threshold=0.5)
    # "500" from the model (not doubled by its term "500 meters"), "1950" from the exact check at the model's 0.1
    assert [(s["text"], round(s["confidence"], 2)) for s in spans] == [("1950", 0.1), ("500", 0.9)]
    settings.flag_ungrounded = False
    assert [s["text"] for s in scores_to_spans(answer, scores, settings, threshold=0.5)] == ["500"]


def test_the_example_score_counts_the_terms_the_context_lacks_up_to_three():
    offsets = [(0, 3), (4, 8)]
    probs = np.array([0.2, 0.45])
    terms = [{"start": 0, "end": 3, "text": "x"}] * 5
    assert DetectorScores(offsets, probs, probs).score == pytest.approx(0.45 / 2)
    assert DetectorScores(offsets, probs, probs, ungrounded=terms[:2]).score == pytest.approx(0.65 / 2)
    assert DetectorScores(offsets, probs, probs, ungrounded=terms).score == pytest.approx(0.75 / 2)  # at most three
    # the model's part is capped at 1, and the word share is a share: the score stays a [0, 1] scale
    assert DetectorScores(offsets, probs * 2, probs * 2, ungrounded=terms, unsupported_share=1.0).score == 1.0
    assert DetectorScores(offsets, probs, probs, unsupported_share=0.5).score == pytest.approx((0.45 + 0.5) / 2)
    assert DetectorScores([], np.zeros(0), np.zeros(0)).score == 0.0


def test_the_word_share_counts_content_words_the_context_lacks():
    from inference.grounding import ContextIndex, word_signals
    from inference.grounding import unsupported_word_share as word_share

    index = ContextIndex("The Eiffel Tower in Paris was built from 1887 to 1889 and is 330 meters tall.")

    def unsupported_word_share(answer, index):
        return word_share(word_signals(answer, index, copy=False))

    assert unsupported_word_share("The tower was built in Paris.", index) == 0.0  # stopwords do not count
    # content words: eiffel, tower, built, 1950, designed, gustave, eiffel -> "designed" and "Gustave" are new
    # words; "1950" is a number, which the number signal (and the check's terms) judge, not the word share
    share = unsupported_word_share("The Eiffel Tower was built in 1950, designed by Gustave Eiffel.", index)
    assert share == pytest.approx(2 / 7)
    # the copy signals play no part
    assert word_share(word_signals("The Eiffel Tower was built in 1950, designed by Gustave Eiffel.", index,
                                   copy=True)) == pytest.approx(2 / 7)
    assert unsupported_word_share("", index) == 0.0 and unsupported_word_share("It is.", index) == 0.0
