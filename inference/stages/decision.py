"""The decision step: which configured decision (and its plugin) applies to each answer, given the Sentinel's
verdict and whether there is context; it marks the answers the Detector will read."""

from __future__ import annotations

from inference.stages.base import Stage, register


@register
class DecisionStage(Stage):
    name = "decision"

    def run(self, gate, items) -> None:
        for it in items:
            self.decide(gate, it)

    @staticmethod
    def decide(gate, it) -> None:
        r = it.result
        has_context = bool(it.context)
        decision = gate.settings.select(r.fact_check_needed, has_context)
        plugin = decision.plugin() if decision else None
        r.decision = decision.name if decision else None
        if plugin is None or not plugin.enabled:
            r.status = "skipped"
            r.reason = "no_fact_check_needed" if r.fact_check_needed is False else (
                "no_decision" if decision is None else "plugin_disabled")
            return
        it.plugin = plugin
        if not has_context:
            r.status, r.reason = "skipped", "no_context"
            r.unverified_factual = r.fact_check_needed is not False
            return
        if gate.runners["detector"] is None:
            gate.fail(it, "detector", gate.stage_error("detector") or "no Detector")
            return
        it.run_detector = True
