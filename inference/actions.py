"""What happens to the answer: the hallucination plugin's actions, and fail_mode when a model is unavailable.

- `hallucination_action` (when spans were found): `header` adds the x-vsr-* headers; `body` also appends a
  warning to the answer; `block` withholds the answer (`answer` is null, `blocked` true; the reference router
  silently demoted `block` to `header`, this one does not); `none` changes nothing and sends no headers.
- `unverified_factual_action` (fact-seeking request, no context): `header` | `body` | `none`.
- `include_hallucination_details`: the warning lists each span with its severity, NLI label and confidence.
- `fail_mode` (status unavailable: a model failed to load or run): `open` passes the answer, with the
  x-vsr-verification-status: unavailable header; `closed` withholds it like `block`.
Precedence: block (hallucination or fail-closed) > body > header > none.
"""

from __future__ import annotations

from inference.result import Result, detection_headers
from inference.settings import HallucinationPlugin

HALLUCINATION_WARNING = ("Warning: this response may contain statements that are not supported by the "
                         "provided context.")
UNVERIFIED_WARNING = ("Note: this response makes factual claims that could not be verified: no source "
                      "context was provided.")
BLOCK_MESSAGE = ("The response was withheld: it contains statements that contradict or are not supported "
                 "by the provided context.")
UNAVAILABLE_BLOCK_MESSAGE = ("The response was withheld: hallucination verification is unavailable "
                             "(fail_mode: closed).")


def span_details(result: Result) -> str:
    lines = []
    for s in result.spans:
        label = f"{s.nli_label} {s.nli_confidence:.2f}" if s.nli_label else "not explained"
        lines.append(f'- "{s.text}" (severity {s.severity}, {label}, detector {s.confidence:.2f})')
    return "\n".join(lines)


def apply_actions(result: Result, answer: str, plugin: HallucinationPlugin | None, fail_mode: str) -> Result:
    """Fill result.action / blocked / answer / warning / headers from the plugin config and fail_mode."""
    hallucinated = result.hallucination_detected is True
    unverified = result.unverified_factual
    h_action = plugin.hallucination_action if plugin else "none"
    u_action = plugin.unverified_factual_action if plugin else "none"
    details = plugin.include_hallucination_details if plugin else False

    detail = "\n" + span_details(result) if details and result.spans else ""
    block_msgs, body_msgs = [], []
    if result.status == "unavailable" and fail_mode == "closed":
        block_msgs.append(UNAVAILABLE_BLOCK_MESSAGE)
    if hallucinated and h_action == "block":
        block_msgs.append(BLOCK_MESSAGE + detail)
    if hallucinated and h_action == "body":
        body_msgs.append(HALLUCINATION_WARNING + detail)
    if unverified and u_action == "body":
        body_msgs.append(UNVERIFIED_WARNING)

    send_h = h_action != "none" and result.hallucination_detected is not None
    send_u = unverified and u_action != "none"
    result.headers = detection_headers(result, hallucination_headers=send_h, unverified_headers=send_u)
    if block_msgs:
        result.action, result.blocked, result.answer = "block", True, None
        result.warning = "\n".join(block_msgs)
    elif body_msgs:
        result.action, result.blocked = "body", False
        result.warning = "\n".join(body_msgs)
        result.answer = f"{answer}\n\n---\n{result.warning}"
    else:
        result.action = "header" if (hallucinated and h_action == "header") or (unverified and u_action == "header") \
            else "none"
        result.blocked, result.answer, result.warning = False, answer, None
    return result
