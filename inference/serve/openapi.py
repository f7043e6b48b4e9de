"""The service's own OpenAPI 3.1 description, served at `GET /openapi.json`.

Written by hand from the constants the code validates with (roles, content part types, result fields, statuses,
reasons), so that it says what the service accepts and answers: /v1/detect, /healthz, /readyz, /metrics, and the
chat completions body as far as the proxy reads it (`messages`, `stream`; every other field goes upstream as
it is). JSON Schema cannot say everything the parser checks (a conversation needs an assistant answer; a tool
result may not follow the last one); those requests get the same 400 error naming the field. Every 4xx and 5xx
the service itself answers is an `Error` (OpenAI's error shape): `error.param` names the field, header or part of
the request at fault. tests/test_serve_schema.py runs schemathesis against this description.
"""

from __future__ import annotations

from typing import Any

from inference.messages import DOCUMENT_PARTS, KNOWN_ROLES, NON_TEXT_PARTS, TEXT_PARTS
from inference.result import MAX_SPANS_HEADER_CHARS, REASONS, SCHEMA, STAGES, STATUSES

OPENAPI_VERSION = "3.1.0"
REF = "#/components/schemas/"


def _ref(name: str) -> dict:
    return {"$ref": REF + name}


def _nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


def _json(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict:
    return _json(_ref("Error"), description)


NUMBER_01 = {"type": "number", "minimum": 0, "maximum": 1}
HEADER_VALUE = {"type": "string", "pattern": "^[\\x20-\\x7e]*$", "maxLength": MAX_SPANS_HEADER_CHARS}

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object", "required": ["error"], "additionalProperties": False,
        "properties": {"error": {
            "type": "object", "required": ["message", "type", "param", "code"], "additionalProperties": False,
            "properties": {
                "message": {"type": "string", "minLength": 1},
                "type": {"type": "string", "minLength": 1},
                "param": {"type": ["string", "null"],
                          "description": "the field at fault, as a path: answer, [1].messages[0].content, body, "
                                         "authorization, path, method"},
                "code": {"type": ["integer", "string", "null"]},
            }}},
    },
    # ---- what is checked ----------------------------------------------------------------------------------
    "ContentPart": {
        "anyOf": [
            {"type": "string"},
            {"type": "object", "properties": {
                "type": {"enum": [*TEXT_PARTS, *DOCUMENT_PARTS], "default": "text"},
                "text": _ref("Content"), "content": _ref("Content")}},
            {"type": "object", "required": ["type"], "properties": {"type": {"enum": list(NON_TEXT_PARTS)}}},
        ],
    },
    "Content": {
        "description": "a string, null, or a list of content parts (image / audio / file parts carry no text "
                       "and are skipped); text must be valid Unicode (no lone surrogates)",
        "anyOf": [{"type": "string"}, {"type": "null"}, {"type": "array", "items": _ref("ContentPart")}],
    },
    "Documents": {
        "description": "retrieved documents: a string, an object with text or content, or a list of those",
        "anyOf": [
            {"type": "null"}, {"type": "string"},
            {"type": "object", "properties": {"text": _ref("Content"), "content": _ref("Content")}},
            {"type": "array", "items": {"anyOf": [
                {"type": "string"},
                {"type": "object", "required": ["text"], "properties": {"text": _ref("Content")}},
                {"type": "object", "required": ["content"], "properties": {"content": _ref("Content")}}]}},
        ],
    },
    "Message": {
        "type": "object", "required": ["role"],
        "description": "an OpenAI chat message; tool / function / ipython results are context, the last user "
                       "message before the answer is the question; other fields (tool_calls, name, ...) are "
                       "not read",
        "properties": {"role": {"enum": list(KNOWN_ROLES)}, "content": _ref("Content"),
                       "documents": _ref("Documents"), "context": _ref("Documents")},
    },
    "DetectFields": {
        "type": "object", "required": ["answer"], "additionalProperties": False,
        "properties": {
            "context": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}},
                                  {"type": "null"}]},
            "question": {"type": ["string", "null"]},
            "answer": {"type": "string", "description": "the text to check"},
            "task_type": {"type": ["string", "null"],
                          "description": "QA, Summary or Data2txt (or an alias: qa, summarization, data-to-text, "
                                         "...); default QA with a question, Summary without"},
            "documents": {"type": "null", "description": "only with messages"},
            "id": {"description": "any value; not read"},
        },
    },
    "DetectMessages": {
        "type": "object", "required": ["messages"], "additionalProperties": False,
        "properties": {
            "messages": {"type": "array", "minItems": 1, "items": _ref("Message"),
                         "description": "the last assistant message is the answer, unless `answer` is given"},
            "answer": {"type": ["string", "null"],
                       "description": "the answer to check, appended to messages as an assistant message"},
            "documents": _ref("Documents"),
            "context": {"type": "null"}, "question": {"type": "null"},
            "task_type": {"description": "not read with messages"},
            "id": {"description": "any value; not read"},
        },
    },
    "DetectInput": {"anyOf": [_ref("DetectFields"), _ref("DetectMessages")]},
    # ---- the result (inference.result.Result.to_dict) -----------------------------------------------------
    "Evidence": {
        "type": "object", "additionalProperties": False,
        "required": ["text", "start", "end", "kind", "probabilities"],
        "properties": {
            "text": {"type": "string"}, "start": {"type": "integer", "minimum": 0},
            "end": {"type": "integer", "minimum": 0}, "kind": {"enum": ["sentence", "window"]},
            "probabilities": {"type": "object", "additionalProperties": _nullable(NUMBER_01)},
        },
    },
    "Span": {
        "type": "object", "additionalProperties": False,
        "required": ["start", "end", "text", "confidence", "nli_label", "nli_confidence", "severity",
                     "explanation", "evidence", "premise_coverage", "ungrounded"],
        "properties": {
            "start": {"type": "integer", "minimum": 0, "description": "answer[start:end] == text (characters)"},
            "end": {"type": "integer", "minimum": 1},
            "text": {"type": "string", "minLength": 1},
            "confidence": _nullable(NUMBER_01),
            "nli_label": {"type": ["string", "null"]},
            "nli_confidence": _nullable(NUMBER_01),
            "severity": {"type": "integer", "minimum": 0, "maximum": 4},
            "explanation": {"type": "string"},
            "evidence": _nullable(_ref("Evidence")),
            "premise_coverage": _nullable(NUMBER_01),
            "ungrounded": {"type": "array", "items": {"type": "string"}},
        },
    },
    "Result": {
        "type": "object", "additionalProperties": False,
        "required": ["schema", "status", "reason", "fact_check_needed", "fact_check_confidence",
                     "hallucination_detected", "hallucination_score", "hallucination_threshold",
                     "unverified_factual", "max_severity", "spans", "action", "blocked", "answer", "warning",
                     "headers", "decision", "errors", "context_tokens", "detector_windows",
                     "detector_context_coverage", "timings_ms", "context_truncated_for_nli"],
        "properties": {
            "schema": {"const": SCHEMA},
            "status": {"enum": list(STATUSES)},
            "reason": {"enum": list(REASONS)},
            "fact_check_needed": {"type": ["boolean", "null"]},
            "fact_check_confidence": _nullable(NUMBER_01),
            "hallucination_detected": {"type": ["boolean", "null"],
                                       "description": "null when not checked: never false without a check"},
            "hallucination_score": _nullable(NUMBER_01),
            "hallucination_threshold": _nullable(NUMBER_01),
            "unverified_factual": {"type": "boolean"},
            "max_severity": {"type": "integer", "minimum": 0, "maximum": 4},
            "spans": {"type": "array", "items": _ref("Span")},
            "action": {"enum": ["none", "header", "body", "block"]},
            "blocked": {"type": "boolean"},
            "answer": {"type": ["string", "null"]},
            "warning": {"type": ["string", "null"]},
            "headers": {"type": "object", "additionalProperties": HEADER_VALUE},
            "decision": {"type": ["string", "null"]},
            "errors": {"type": "array", "items": {
                "type": "object", "required": ["stage", "message"], "additionalProperties": False,
                "properties": {"stage": {"type": "string"}, "message": {"type": "string"}}}},
            "context_tokens": {"type": "integer", "minimum": 0},
            "detector_windows": {"type": "integer", "minimum": 0},
            "detector_context_coverage": _nullable(NUMBER_01),
            "timings_ms": {"type": "object", "required": list(STAGES), "additionalProperties": False,
                           "properties": {s: {"type": "number", "minimum": 0} for s in STAGES}},
            "context_truncated_for_nli": {"type": ["boolean", "null"]},
        },
    },
    # ---- the proxy ------------------------------------------------------------------------------------------
    "ChatCompletionRequest": {
        "type": "object", "required": ["messages"],
        "description": "an OpenAI chat completion request; only messages and stream are read here, the body is "
                       "forwarded upstream unchanged",
        "properties": {"messages": {"type": "array", "minItems": 1, "items": _ref("Message")},
                       "stream": {"type": ["boolean", "null"]}},
    },
    "ChatCompletion": {
        "type": "object", "description": "the upstream's answer; checked choices may carry a `halugate` result",
        "properties": {"choices": {"type": "array"}, "halugate": _ref("Result")},
    },
}

VERDICT_HEADERS = {
    "x-halugate-status": {"description": "the result's status (the most severe choice's)",
                          "schema": {"enum": list(STATUSES)}},
    "x-vsr-hallucination-spans": {
        "description": "span texts joined with '; ', each percent-encoded (UTF-8) outside visible ASCII and for "
                       "'%' and ';'; at most 1024 characters, a cut value ends with '...' and comes with "
                       "x-vsr-hallucination-spans-truncated: true (docs/robustness.md)",
        "schema": HEADER_VALUE},
}


def openapi_schema() -> dict[str, Any]:
    bad = _error("malformed request: error.param names the field, error.message says what is wrong")
    unauthorized = _error("auth is on and the service token is missing or wrong (error.param: authorization)")
    too_large = _error("request body over serve.max_body_bytes (error.param: body)")
    overloaded = _error("detection queue full, or no upstream configured (chat completions); Retry-After")
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": "halugate serve", "version": SCHEMA,
                 "description": "HaluGate as an HTTP service and an OpenAI-compatible proxy (docs/serve.md)."},
        "paths": {
            "/v1/detect": {"post": {
                "operationId": "detect",
                "summary": "check one answer, or a list of answers, against their context",
                "requestBody": {"required": True, "content": {"application/json": {"schema": {"anyOf": [
                    _ref("DetectInput"), {"type": "array", "minItems": 1, "items": _ref("DetectInput")}]}}}},
                "responses": {
                    "200": {**_json({"anyOf": [_ref("Result"), {"type": "array", "items": _ref("Result")}]},
                                    "the result (a list of results for a list)"), "headers": VERDICT_HEADERS},
                    "400": bad, "401": unauthorized, "413": too_large, "503": overloaded},
            }},
            "/v1/chat/completions": {"post": {
                "operationId": "chat_completions",
                "summary": "forwarded upstream; every choice's answer is checked and the decision's action applied",
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": _ref("ChatCompletionRequest")}}},
                "responses": {
                    "200": {"description": "the upstream's answer (JSON, or a stream ending with one result chunk "
                                           "per checked choice)",
                            "content": {"application/json": {"schema": _ref("ChatCompletion")},
                                        "text/event-stream": {"schema": {
                                            "description": "one server-sent event: data is a chunk's JSON or "
                                                           "[DONE]", "type": "object", "required": ["data"],
                                            "properties": {"data": {"type": "string"}}}}}},
                    "400": bad, "401": unauthorized, "413": too_large,
                    "502": _error("upstream unreachable, truncated or not the expected JSON / stream"),
                    "503": overloaded,
                    "504": _error("upstream timed out (serve.upstream_timeout_s)"),
                    "default": {"description": "an upstream error status, passed through with its body"}},
            }},
            "/healthz": {"get": {
                "operationId": "healthz", "summary": "alive",
                "responses": {"200": _json({"type": "object", "required": ["status"], "additionalProperties": False,
                                            "properties": {"status": {"const": "alive"}}}, "the process serves")},
            }},
            "/readyz": {"get": {
                "operationId": "readyz", "summary": "models loaded and a warm-up inference done",
                "responses": {
                    "200": _json({"type": "object", "required": ["ready", "batching", "upstream"],
                                  "properties": {"ready": {"const": True}, "batching": {"type": "boolean"},
                                                 "upstream": {"type": "boolean"}}}, "ready"),
                    "503": _json({"type": "object", "required": ["ready", "reason", "load_errors"],
                                  "properties": {"ready": {"const": False}, "reason": {"type": "string"},
                                                 "load_errors": {"type": "object",
                                                                 "additionalProperties": {"type": "string"}}}},
                                 "warming up, or a model failed to load / the warm-up was unavailable: reason "
                                 "and load_errors say which file and why")},
            }},
            "/metrics": {"get": {
                "operationId": "metrics", "summary": "Prometheus text exposition",
                "responses": {"200": {"description": "metrics",
                                      "content": {"text/plain": {"schema": {"type": "string"}}}},
                              "401": unauthorized},
            }},
        },
        "components": {"schemas": SCHEMAS},
    }
