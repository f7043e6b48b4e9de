"""Errors the service answers with (OpenAI's error shape), and which result speaks for a response."""

from __future__ import annotations

from inference.result import Result
from inference.serve.upstream import error_body


class HTTPError(Exception):
    def __init__(self, status: int, body: dict, headers: dict | None = None):
        super().__init__(body.get("error", {}).get("message", ""))
        self.status, self.body, self.headers = status, body, headers or {}


def bad_request(message: str, kind: str = "invalid_request_error") -> HTTPError:
    param = message.split(":", 1)[0] if ":" in message else None
    return HTTPError(400, error_body(message, kind, None, param))


def worst(results: dict[int, Result]) -> Result | None:
    """The result whose headers describe the response (n > 1: the most severe choice)."""
    if not results:
        return None
    return max(results.values(), key=lambda r: (r.blocked, r.hallucination_detected is True,
                                                r.status == "unavailable", r.max_severity, r.unverified_factual))
