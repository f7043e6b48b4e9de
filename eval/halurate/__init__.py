"""halurate: evaluate a model's answers with the detection stack.

Load (context, question) records, have the model under test answer them through eval.backends (or take
pre-recorded answers), run every (context, question, answer) through inference.detect.HaluGate, and aggregate
hallucination rate, spans, contradiction vs fabrication, severity, per category / task type, and the Sentinel's
skip rate. `python -m eval.halurate --help`; docs/halurate.md.
"""

from .data import EvalRecord, load_records
from .metrics import compute_metrics
from .runner import Runner, verdict_of

__all__ = ["EvalRecord", "Runner", "compute_metrics", "load_records", "verdict_of"]
