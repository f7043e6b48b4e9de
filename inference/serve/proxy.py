"""`POST /v1/chat/completions`: forward upstream, check each choice's answer, apply the decision's action.

Non-streaming: the JSON answer is read, checked, annotated (body / block) and returned with the x-vsr-* headers.
Streaming: passed through as it comes, the chunk with the finish reason held back for a `body` warning, then
one result chunk per checked choice (`choices: []`, `halugate`, `halugate_index`) and `[DONE]`; when an answer
may be blocked the stream is buffered, checked, and sent with its headers (blocked choices replaced by a
refusal chunk). Mixed into `inference.serve.app.Service`, whose state (client, batcher, metrics) it uses.
"""

from __future__ import annotations

import httpx
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from inference.messages import DetectInput, InputError, from_messages
from inference.result import Result
from inference.serve import upstream as up
from inference.serve.errors import bad_request
from inference.serve.upstream import JSONResponse

PLACEHOLDER = {"role": "assistant", "content": "(answer)"}


class ChatProxy:
    async def chat(self, request: Request) -> Response:
        consumed = self.authorize(request)
        raw = await self.read_body(request)
        payload = self.parse_json(raw)
        if not isinstance(payload, dict):
            raise bad_request("body: expected a JSON object (an OpenAI chat completion request)")
        messages = payload.get("messages")
        if not isinstance(messages, list) or not messages:
            raise bad_request("messages: required, a non-empty list of message objects")
        stream = payload.get("stream", False)
        if not isinstance(stream, bool) and stream is not None:
            raise bad_request("stream: expected true or false")
        try:  # validates every message now (400 naming the field) and extracts question + context
            base = from_messages([*messages, PLACEHOLDER])
        except InputError as exc:
            raise bad_request(str(exc)) from None
        client = self.require_upstream()
        if not self.batcher.has_room():
            raise self.overloaded()
        headers = self.upstream_headers(request, consumed)
        ticket = self.batcher.expecting()
        try:
            if stream:
                return await self._chat_stream(client, raw, headers, base, ticket)
            try:
                resp = await client.post("chat/completions", content=raw, headers=headers)
            except httpx.HTTPError as exc:
                raise self.upstream_failed(up.failure_from(exc)) from None
        except BaseException:
            ticket.release()  # a stream hands its ticket to the body generator only on success
            raise
        finally:
            if not stream:
                ticket.release()
        if resp.status_code >= 400:
            return self.pass_error(resp, resp.content)
        try:
            data = resp.json()
        except ValueError:
            raise self.upstream_failed(up.UpstreamFailure(502, "invalid_json", "upstream answered with invalid "
                                                          "JSON")) from None
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list):
            raise self.upstream_failed(up.UpstreamFailure(502, "invalid_json", "upstream answer has no choices"))
        answers: dict[int, str | None] = {}
        for pos, choice in enumerate(choices):
            msg = choice.get("message") if isinstance(choice, dict) else None
            content = msg.get("content") if isinstance(msg, dict) else None
            tools_only = isinstance(msg, dict) and msg.get("tool_calls") and not (content or "").strip()
            answers[choice.get("index", pos) if isinstance(choice, dict) else pos] = \
                content if isinstance(content, str) and not tools_only else None
        results = await self.detect_answers(base, answers)
        for pos, choice in enumerate(choices):
            result = results.get(choice.get("index", pos) if isinstance(choice, dict) else pos)
            if result is not None:
                self._annotate(choice, result)
        first = results.get(min(results)) if results else None
        if first is not None and first.action in ("body", "block"):
            data["halugate"] = first.to_dict()
        headers = {**up.response_headers(resp.headers), **self.result_headers(results)}
        return JSONResponse(data, status_code=resp.status_code, headers=headers)

    @staticmethod
    def _annotate(choice: dict, result: Result) -> None:
        msg = choice.setdefault("message", {})
        if result.blocked:
            msg["content"] = result.warning
            msg.pop("tool_calls", None)
            choice["finish_reason"] = "content_filter"
        elif result.action == "body":
            msg["content"] = result.answer
        if result.action in ("body", "block"):
            choice["halugate"] = result.to_dict()

    async def _chat_stream(self, client, raw, headers, base, ticket) -> Response:
        try:
            resp = await client.send(client.build_request("POST", "chat/completions", content=raw, headers=headers),
                                     stream=True)
        except httpx.HTTPError as exc:
            ticket.release()
            raise self.upstream_failed(up.failure_from(exc)) from None
        if resp.status_code >= 400 or "text/event-stream" not in resp.headers.get("content-type", ""):
            ticket.release()
            try:
                body = await resp.aread()
            except httpx.HTTPError as exc:
                raise self.upstream_failed(up.failure_from(exc)) from None
            finally:
                await resp.aclose()
            if resp.status_code >= 400:
                return self.pass_error(resp, body)
            raise self.upstream_failed(up.UpstreamFailure(502, "protocol", "upstream did not stream (content-type "
                                                          f"{resp.headers.get('content-type')!r})"))
        out_headers = up.response_headers(resp.headers)
        if self.may_block:
            return await self._buffered(resp, out_headers, base, ticket)
        return StreamingResponse(self._passthrough(resp, base, ticket), status_code=resp.status_code,
                                 headers={**out_headers, "x-halugate-stream": "passthrough"},
                                 media_type="text/event-stream")

    @staticmethod
    async def _events(resp: httpx.Response):
        parser = up.SSEParser()
        async for chunk in resp.aiter_bytes():
            for event in parser.feed(chunk):
                yield event
        if parser.leftover:
            yield up.parse_event(parser.leftover)

    def _tail(self, state: up.StreamState, answers: dict, results: dict[int, Result], held: list,
              drop: set[int]) -> list[bytes]:
        """After the answer: refusals of blocked choices, body warnings, the held finish chunks, the results."""
        out = []
        for i, r in sorted(results.items()):
            if r.blocked:
                out.append(up.sse(state.chunk([{"index": i, "delta": {"role": "assistant", "content": r.warning},
                                                "finish_reason": "content_filter"}])))
            elif r.action == "body" and r.answer is not None:
                suffix = r.answer[len(answers[i]):]
                out.append(up.sse(state.chunk([{"index": i, "delta": {"content": suffix}, "finish_reason": None}])))
        out.extend(b for b in (up.without_choices(ev, drop) for ev in held if not ev.done) if b is not None)
        out.extend(up.sse(state.chunk([], halugate=r.to_dict(), halugate_index=i)) for i, r in sorted(results.items()))
        out.append(up.DONE)
        return out

    async def _passthrough(self, resp: httpx.Response, base: DetectInput, ticket):
        state, held, failure = up.StreamState(), [], None
        try:
            async for event in self._events(resp):
                state.add(event)
                if event.done:
                    continue
                if held or up.has_finish(event):  # the finish chunk waits for a body warning
                    held.append(event)
                    continue
                yield event.encode()
            if state.error is not None:
                failure = up.UpstreamFailure(502, "stream_error", "upstream sent an error event")
            elif not state.complete:
                failure = up.UpstreamFailure(502, "protocol", "upstream stream ended early (truncated)")
        except httpx.HTTPError as exc:
            failure = up.failure_from(exc)
        finally:
            ticket.release()
            await resp.aclose()
        if failure is not None:
            self.metrics.upstream_errors.labels(failure.kind).inc()
            for event in held:
                yield event.encode()
            if failure.kind != "stream_error":  # the upstream's own error event already went through
                yield up.sse(failure.body())
            return
        answers = state.answers()
        results = await self.detect_answers(base, answers, overload="unavailable")
        for part in self._tail(state, answers, results, held, set()):
            yield part

    async def _buffered(self, resp: httpx.Response, out_headers: dict, base: DetectInput, ticket) -> Response:
        state, events = up.StreamState(), []
        try:
            async for event in self._events(resp):
                state.add(event)
                events.append(event)
        except httpx.HTTPError as exc:
            raise self.upstream_failed(up.failure_from(exc)) from None
        finally:
            ticket.release()
            await resp.aclose()
        if state.error is not None:
            self.metrics.upstream_errors.labels("stream_error").inc()
            return Response(b"".join(ev.encode() for ev in events), status_code=resp.status_code,
                            headers=out_headers, media_type="text/event-stream")
        if not state.complete:
            raise self.upstream_failed(up.UpstreamFailure(502, "protocol", "upstream stream ended early (truncated)"))
        answers = state.answers()
        results = await self.detect_answers(base, answers)
        drop = {i for i, r in results.items() if r.blocked}
        cut = next((k for k, ev in enumerate(events) if up.has_finish(ev)), len(events))
        head = [b for b in (up.without_choices(ev, drop) for ev in events[:cut] if not ev.done) if b is not None]
        body = b"".join(head + self._tail(state, answers, results, events[cut:], drop))
        headers = {**out_headers, **self.result_headers(results), "x-halugate-stream": "buffered"}
        return Response(body, status_code=resp.status_code, headers=headers, media_type="text/event-stream")
