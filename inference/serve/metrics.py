"""Prometheus metrics of one service instance (its own registry, so several apps can live in one process).

    halugate_requests_total{route, status}            requests answered, by route and HTTP status
    halugate_request_seconds{route}                   request latency (streams: until the last byte)
    halugate_stage_seconds{stage}                     per-batch stage latency (sentinel, context, detector,
                                                      explainer, total) as HaluGate measured it
    halugate_batch_size                               inputs per detection batch
    halugate_detections_total{status, action}         detection results (ok / skipped / unavailable; the action)
    halugate_hallucinations_total                     results with hallucination_detected true
    halugate_spans_total                              spans reported
    halugate_unavailable_total                        results with status unavailable (fail_mode applied)
    halugate_upstream_errors_total{kind}              upstream failures: status_4xx, status_5xx, timeout,
                                                      connect, protocol (truncated body, bad stream), invalid_json
    halugate_rejected_total                           503s because the detection queue was full
    halugate_queue_depth, halugate_in_flight          gauges
    halugate_model_precision_info{stage, ...}         the ONNX file each stage runs and why (precision, file,
                                                      source: measured / cached / forced / only-fp32, reason)
    halugate_precision_timing_ms{stage, precision}    the `precision: auto` timings behind that choice (median
                                                      ms per call on its timing input; inference.precision)
    halugate_cpu_info{model, cpu_class, isa, ...}     the CPU the service runs on (inference.hardware)
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("halugate_requests_total", "Requests answered", ["route", "status"], registry=r)
        self.request_seconds = Histogram("halugate_request_seconds", "Request latency", ["route"],
                                         buckets=LATENCY_BUCKETS, registry=r)
        self.stage_seconds = Histogram("halugate_stage_seconds", "Detection stage latency per batch", ["stage"],
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.batch_size = Histogram("halugate_batch_size", "Inputs per detection batch",
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128), registry=r)
        self.detections = Counter("halugate_detections_total", "Detection results", ["status", "action"],
                                  registry=r)
        self.hallucinations = Counter("halugate_hallucinations_total", "Results with hallucinations", registry=r)
        self.spans = Counter("halugate_spans_total", "Hallucinated spans reported", registry=r)
        self.unavailable = Counter("halugate_unavailable_total", "Results with status unavailable", registry=r)
        self.upstream_errors = Counter("halugate_upstream_errors_total", "Upstream failures", ["kind"], registry=r)
        self.rejected = Counter("halugate_rejected_total", "503: detection queue full", registry=r)
        self.queue_depth = Gauge("halugate_queue_depth", "Inputs waiting for detection", registry=r)
        self.in_flight = Gauge("halugate_in_flight", "Requests being served", registry=r)
        self.precision = Info("halugate_model_precision", "ONNX file each stage runs, and why", ["stage"],
                              registry=r)
        self.precision_ms = Gauge("halugate_precision_timing_ms", "precision: auto timings (median ms per call)",
                                  ["stage", "precision"], registry=r)
        self.cpu = Info("halugate_cpu", "CPU the service runs on", registry=r)

    def observe_models(self, runners: dict) -> None:
        """The CPU, and each loaded stage's precision decision (inference.precision) with its timings."""
        from inference.hardware import cpu_info

        cpu = cpu_info()
        self.cpu.info({"model": cpu.model, "cpu_class": cpu.cpu_class, "isa": " ".join(cpu.isa),
                       "physical_cores": str(cpu.physical_cores), "visible_cores": str(cpu.visible_cores)})
        for stage, runner in (runners or {}).items():
            decision = getattr(runner, "precision_decision", None)
            if decision is None:
                continue
            self.precision.labels(stage).info({"precision": decision.precision, "file": decision.file,
                                               "source": decision.source, "reason": decision.reason})
            for name, ms in (("fp32", decision.fp32_ms), ("int8", decision.int8_ms)):
                if ms is not None:
                    self.precision_ms.labels(stage, name).set(ms)

    def observe_batch(self, size: int, results: list, seconds: float) -> None:
        self.batch_size.observe(size)
        timed = next((r for r in results if hasattr(r, "timings_ms")), None)
        if timed is not None:
            for stage, ms in timed.timings_ms.items():
                self.stage_seconds.labels(stage).observe(ms / 1000.0)
        else:
            self.stage_seconds.labels("total").observe(seconds)

    def observe_result(self, result) -> None:
        self.detections.labels(result.status, result.action).inc()
        if result.hallucination_detected:
            self.hallucinations.inc()
        self.spans.inc(len(result.spans))
        if result.status == "unavailable":
            self.unavailable.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
