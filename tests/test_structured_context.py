"""inference.structured: a JSON context as "key: value" lines (hand cases), the Detector recipe's switch
(data.structured_context) and the runtime following what the Detector was trained on (detector.json)."""

from __future__ import annotations

import json

import pytest

from inference.structured import as_structured_text, key_words, render_structured, structured_lines

ROW = {"name": "Our Daily Bread", "business_stars": 3.5,
       "hours": {"Monday": "6:0-17:30", "Saturday": "7:0-16:0"},
       "attributes": {"BusinessParking": {"garage": False, "street": True}, "OutdoorSeating": True,
                      "WiFi": None, "RestaurantsTakeOut": None},
       "review_info": [{"review_stars": 5.0, "review_text": "Great salads."}],
       "categories": ["Bakeries", "Food"]}


def test_key_words_split_identifiers_only():
    assert key_words("OutdoorSeating") == "Outdoor Seating"
    assert key_words("business_stars") == "business stars"
    assert key_words("RestaurantsTakeOut") == "Restaurants Take Out"
    assert key_words("WiFi") == "Wi Fi"
    assert key_words("name") == "name" and key_words("URL") == "URL" and key_words("Monday") == "Monday"


def test_a_row_becomes_key_value_lines_without_its_empty_fields():
    lines = structured_lines(ROW)
    assert lines == [
        "name: Our Daily Bread",
        "business stars: 3.5",
        "hours: Monday 6:0-17:30, Saturday 7:0-16:0",
        "attributes:",
        "  Business Parking: garage no, street yes",
        "  Outdoor Seating: yes",
        "review info:",
        "  - review stars: 5.0; review text: Great salads.",
        "categories: Bakeries, Food",
    ]
    text = render_structured(ROW, "text")
    assert "WiFi" not in text and "Wi Fi" not in text and "Take Out" not in text  # not stated: left out
    assert json.loads(render_structured(ROW, "json")) == ROW  # the rendering RAGTruth-trained models saw
    with pytest.raises(ValueError, match="structured_context"):
        render_structured(ROW, "yaml")


def test_only_json_objects_and_arrays_are_rendered():
    assert as_structured_text(json.dumps(ROW)).startswith("name: Our Daily Bread\nbusiness stars: 3.5")
    assert as_structured_text('[{"a": 1}, {"a": 2}]') == "- a: 1\n- a: 2"
    for prose in ("The tower is 330 m tall.", "{not json", "42", '"a string"', "", "[1, 2"):
        assert as_structured_text(prose) is None


def test_the_recipe_switch_renders_json_contexts_of_the_mixture(tmp_path):
    from training.data.spans import SpanDataReport
    from training.detector import DetectorConfig, load_mixture

    rows = [{"id": "1", "source_id": "s1", "task_type": "Data2txt", "reference": ROW,
             "response": "Our Daily Bread offers outdoor seating.", "labels": [], "question": None},
            {"id": "2", "source_id": "s2", "task_type": "Summary", "reference": "The tower is 330 m tall.",
             "response": "The tower is 330 m tall.", "labels": [], "question": None}]
    folder = tmp_path / "ragtruth_test_subset"
    folder.mkdir()
    (folder / "test_balanced.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (folder / "gpt_baseline_predictions.jsonl").write_text("")

    def contexts(style):
        from inference.config import from_dict

        cfg = from_dict(DetectorConfig, {"data": {"sources": [{"name": "ragtruth_test_subset"}],
                                                  "structured_context": style}}, "<test>")
        records, _ = load_mixture(cfg, tmp_path, SpanDataReport())
        return {r.id: r.context for r in records}

    as_json, as_text = contexts("json"), contexts("text")
    assert json.loads(as_json["ragtruth-1"]) == ROW
    assert as_text["ragtruth-1"] == render_structured(ROW, "text")
    assert as_text["ragtruth-2"] == as_json["ragtruth-2"] == "The tower is 330 m tall."  # prose unchanged


def test_the_runtime_reads_json_contexts_as_the_detector_was_trained(minilm_dir, tmp_path):
    from detect_helpers import make_run_dir

    from inference.config import apply_overrides, from_dict
    from inference.detect import HaluGate
    from inference.settings import InferenceSettings

    run = make_run_dir(tmp_path / "det", "token", ["SUPPORTED", "HALLUCINATED"], minilm_dir)

    def gate():
        over = ["hallucination_mitigation.backend=torch", f"hallucination_mitigation.hallucination_model.model_id={run}",
                "hallucination_mitigation.fact_check_model.model_id=", "hallucination_mitigation.nli_model.model_id="]
        return HaluGate(from_dict(InferenceSettings, apply_overrides({}, over), "<test>"))

    x = {"context": [json.dumps(ROW), "A review: lovely bread."], "answer": "It offers outdoor seating."}
    assert gate().prepare([x])[0].context.startswith('{"name": "Our Daily Bread"')  # models that do not say
    (run / "detector.json").write_text(json.dumps({"structured_context": "text"}))
    g = gate()
    assert g.detector_structured_context == "text"
    assert g.prepare([x])[0].context == render_structured(ROW, "text") + "\n\nA review: lovely bread."
    assert g.detect(**x).status == "ok"
    (run / "detector.json").write_text(json.dumps({"structured_context": "xml"}))
    assert "structured_context must be one of" in gate().load_errors["detector"]
