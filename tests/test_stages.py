"""The stage interface: one registry, one order, one name per stage, and a stage added in one module."""

from __future__ import annotations

import pytest
from detect_helpers import fakes

from inference.detect import STAGE_MODELS, HaluGate, build_parser
from inference.result import STAGES
from inference.settings import InferenceSettings, MitigationSettings
from inference.stages import PIPELINE, Stage, pipeline, register

CONTEXT = "The Eiffel Tower was built 1887-1889. It is 330 meters tall and stands in Paris."
ANSWER = "The Eiffel Tower was built in 1950 and is 500 meters tall."


def test_pipeline_order_and_one_name_everywhere():
    stages = pipeline()
    assert [s.name for s in stages] == list(PIPELINE) == ["sentinel", "decision", "detector", "explainer"]
    model_stages = [s for s in stages if s.settings_key]
    assert STAGE_MODELS == {s.name: s.settings_key for s in model_stages}
    fields = MitigationSettings.__dataclass_fields__
    flags = {a.dest for a in build_parser()._actions}
    for s in model_stages:
        assert s.settings_key in fields  # config section
        assert s.name in STAGES  # timings key
        assert s.name in flags  # --<name> CLI flag
        assert s.task in ("sequence", "token") and s.labels


def test_unknown_or_duplicate_stage_is_an_error():
    with pytest.raises(ValueError, match="unknown pipeline stages"):
        pipeline(["sentinel", "nope"])

    class Other(Stage):
        name = "sentinel"

    with pytest.raises(ValueError, match="registered twice"):
        register(Other)


def test_a_new_stage_is_one_class(minilm_dir):
    seen = []

    @register
    class Audit(Stage):
        """A step without a model: sees every active item after the Detector."""

        name = "audit_test"

        def run(self, gate, items):
            seen.extend((it.run_detector, len(it.result.spans)) for it in items)

    gate = HaluGate(InferenceSettings(), **fakes(minilm_dir))
    gate.stages = pipeline(["sentinel", "decision", "detector", "audit_test", "explainer"])
    r = gate.detect(context=CONTEXT, question="When was it built?", answer=ANSWER)
    assert r.status == "ok" and r.hallucination_detected
    assert seen and seen[0][0] is True and seen[0][1] >= 1  # ran after the Detector, before the Explainer
