"""The served model over HTTP for the benchmark: /v1/models, /tokenize, /version, /metrics and streamed chats.

Straight to the server, never through a proxy (a proxy would receive the API key and skew the timing).
A streamed chat is timed as `vllm bench serve` times it: TTFT at the first chunk with choices, an ITL for
every later one, the end at the last token chunk, output tokens from the final usage chunk (the stream's
reading, its tool calls included, is launcher/bench/stream.py).

Every reply is checked before it is used: a JSON answer of the wrong shape is a one-line error (exit 2),
a stream chunk of the wrong shape or an impossible usage (negative, not a count, more tokens than asked)
fails that request with its kind. What one answer may buffer is bounded, and a stream is cut at its
deadline however the server keeps it alive (chunks, SSE pings).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from launcher.bench.stats import RequestResult
from launcher.bench.stream import Answer, BadReply, count, read
from launcher.errors import EXIT_CODES, Outcome
from launcher.vllm import api

Message = Mapping[str, Any]  # a chat message: role, content (None beside tool_calls), tool_calls, tool_call_id
Tools = Sequence[Mapping[str, Any]] | None  # the request's `tools` (None: the key is left out)
TOOLS_REFUSED = "tools_refused"  # the error kind of vLLM's 400 for tool_choice auto without a tool-call parser

MAX_BODY = api.MAX_BODY_BYTES  # a JSON answer or /metrics page larger than this is not vLLM's
class ServerError(Exception):
    """The server cannot be benchmarked as asked: the message names the cause and the fix. `settled`: a
    failure to start that the profile and its flags decided (the ladder tried every rung it allows), not one
    a later try may not meet, though both exit 75."""

    def __init__(self, message: str, outcome: Outcome, *, settled: bool = False) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.settled = settled or outcome is Outcome.CONFIG

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]


@dataclass(frozen=True, slots=True)
class Served:
    model: str
    max_model_len: int | None


class Server:
    def __init__(self, base_url: str, api_key: str | None, timeout_s: float = 600.0, *,
                 ca_file: str | None = None) -> None:
        url = urllib.parse.urlsplit(base_url.rstrip("/").removesuffix("/v1"))
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ServerError(f"{base_url}: not an http(s) URL; give e.g. http://127.0.0.1:8000", Outcome.USAGE)
        self.base_url = f"{url.scheme}://{url.netloc}"
        self.https = url.scheme == "https"
        self.host, self.port = url.hostname, url.port or (443 if self.https else 80)
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.ca_file = ca_file  # https: the CA the server's certificate is checked against (api.tls_context)
        self._kept = threading.local()  # each user thread's open connection

    def _connection(self, deadline: float) -> http.client.HTTPConnection:
        return api.open_connection(self.https, self.host, self.port, deadline, ca_file=self.ca_file)

    def _headers(self, body: bool) -> dict[str, str]:
        return api.headers(self.api_key, body)

    def call(self, method: str, path: str, body: Mapping[str, Any] | None = None, timeout: float = 30.0
             ) -> tuple[int, bytes]:
        """(status, body), all of it within `timeout`; ServerError (exit 2) when nothing (or not all) answers."""
        try:
            status, data = api.request(f"{self.base_url}{path}", timeout, api_key=self.api_key, body=body,
                                       method=method, limit=MAX_BODY + 1, ca_file=self.ca_file)
        except (OSError, http.client.HTTPException) as exc:
            raise ServerError(f"{self.base_url}{path}: no answer ({exc}); is the server up? "
                              "(`vllm-launch status`)", Outcome.USAGE) from None
        if len(data) > MAX_BODY:
            raise ServerError(f"{self.base_url}{path}: answered more than {MAX_BODY // 2**20} MiB; "
                              "is this a vLLM server?", Outcome.USAGE)
        return status, data

    def served(self, model: str | None) -> Served:
        """The model to send requests to, checked against /v1/models (401 → the key; absent → the names)."""
        status, body = self.call("GET", "/v1/models")
        if status == 401:
            raise ServerError(f"{self.base_url}/v1/models: 401 Unauthorized; set VLLM_API_KEY to the server's key "
                              "(with a PROFILE: the profile's api_key)", Outcome.CONFIG)
        if status != 200:
            raise ServerError(f"{self.base_url}/v1/models: HTTP {status}; is this a vLLM server?", Outcome.USAGE)
        try:
            listed = {m["id"]: m for m in json.loads(body)["data"]}
            if not all(isinstance(name, str) for name in listed):
                raise TypeError
        except (ValueError, KeyError, TypeError, RecursionError):
            raise ServerError(f"{self.base_url}/v1/models: not an OpenAI model list; is this a vLLM server?",
                              Outcome.USAGE) from None
        if model is None:
            if not listed:
                raise ServerError(f"{self.base_url}/v1/models lists no model", Outcome.USAGE)
            model = next(iter(listed))
        if model not in listed:
            raise ServerError(f"model {model!r} is not served at {self.base_url} (it serves "
                              f"{', '.join(sorted(listed))}); pass --model with one of those", Outcome.CONFIG)
        length = listed[model].get("max_model_len") if isinstance(listed[model], dict) else None
        return Served(model, count(length) or None)

    def version(self) -> str | None:
        try:
            status, body = self.call("GET", "/version", timeout=5)
            version = json.loads(body).get("version") if status == 200 else None
        except (ServerError, ValueError, AttributeError, RecursionError):
            return None
        return version if isinstance(version, str) and 0 < len(version) <= 64 else None

    def metrics_text(self) -> str:
        try:
            status, body = self.call("GET", "/metrics", timeout=5)
        except ServerError:
            return ""
        return body.decode(errors="replace") if status == 200 else ""

    def count_tokens(self, model: str, messages: Sequence[Message] | None = None, text: str | None = None,
                     tools: Tools = None) -> int:
        """Tokens as the server counts them (/tokenize); a chat counts with its template and generation prompt,
        and its `tools` as the template renders them (vLLM 0.32's TokenizeChatRequest takes them; a template
        that ignores tools counts none)."""
        body: dict[str, Any] = {"model": model}
        if messages is not None:
            body.update(messages=list(map(dict, messages)), add_generation_prompt=True)
            if tools:
                body["tools"] = list(map(dict, tools))
        else:
            body.update(prompt=text or "", add_special_tokens=False)
        status, data = self.call("POST", "/tokenize", body)
        if status != 200:
            raise ServerError(f"{self.base_url}/tokenize: HTTP {status} ({data[:200]!r}); the benchmark sizes its "
                              "prompts with the server's own tokenizer", Outcome.USAGE)
        try:
            answer = json.loads(data)
        except (ValueError, RecursionError):  # a JSON nested thousands deep is no answer either
            answer = None
        tokens = count(answer.get("count")) if isinstance(answer, dict) else None
        if tokens is None:
            raise ServerError(f"{self.base_url}/tokenize: answered {data[:80]!r}, not {{\"count\": N}} with N a token "
                              "count; the benchmark sizes its prompts with the server's own tokenizer: is this a "
                              "vLLM server?", Outcome.USAGE)
        return tokens

    def chat(self, model: str, messages: Sequence[Message], *, max_tokens: int, ignore_eos: bool = False,
             temperature: float = 0.0, deadline: float | None = None, tools: Tools = None
             ) -> tuple[RequestResult, Answer]:
        """One streamed chat completion, timed; never raises (a failure is a result with its error kind).
        With `tools`, they go with `tool_choice: auto`, as an agent sends them; a server that refuses auto tool
        choice fails the request as TOOLS_REFUSED.
        It ends by `deadline` (time.perf_counter) at the latest (error `deadline`), and by `timeout_s` after
        it started (error `timeout`), however the server keeps the stream going or trickles its headers, its
        chunk-size lines or an error body: the deadline bounds the whole exchange, not each read."""
        body: dict[str, Any] = {"model": model, "messages": list(map(dict, messages)), "max_completion_tokens": max_tokens,
                                "stream": True, "stream_options": {"include_usage": True}, "temperature": temperature}
        if ignore_eos:
            body["ignore_eos"] = True
        if tools:
            body.update(tools=list(map(dict, tools)), tool_choice="auto")
        conn: http.client.HTTPConnection | None = getattr(self._kept, "conn", None)
        self._kept.conn = None
        start = time.perf_counter()
        limit = start + self.timeout_s if deadline is None else min(start + self.timeout_s, deadline)
        late = "deadline" if deadline is not None and deadline < start + self.timeout_s else "timeout"
        try:
            if limit <= start:
                return RequestResult(False, error=late), Answer()
            ends = time.monotonic() + (limit - start)  # the api's clock
            if conn is None or conn.sock is None:  # none kept, or the server ended the kept one (Connection: close)
                conn = self._connection(ends)  # the connect and TLS handshake count against the request
            reader = _Reader(conn, ends)
            conn.request("POST", "/v1/chat/completions", json.dumps(body).encode(), self._headers(True))
            response = conn.getresponse()
            if response.status != 200:
                error = response.read(MAX_BODY)
                conn.close()
                refused = response.status == 400 and b"tool choice requires" in error
                return RequestResult(False, error=TOOLS_REFUSED if refused else f"http_{response.status}"), Answer()
            result = read(response, reader.read, start, max_tokens)
            # the rest of the body, so the connection can carry the user's next request; the answer stands
            with contextlib.suppress(OSError, http.client.HTTPException):
                if reader.drained(response):
                    self._kept.conn = conn  # keep-alive per user thread, as an HTTP client session would
            return result
        except TimeoutError:
            return RequestResult(False, error=late), Answer()
        except BadReply as exc:
            return RequestResult(False, error=exc.kind), Answer()
        except (OSError, http.client.HTTPException):
            return RequestResult(False, error="connection"), Answer()
        except (ValueError, KeyError, TypeError, IndexError, RecursionError):
            return RequestResult(False, error="bad_stream"), Answer()
        finally:
            if conn is not None and self._kept.conn is not conn:
                conn.close()


class _Reader:
    """The stream's reads; the connection's socket bounds each one by what is left before the exchange's
    deadline (api.rearm), so pings, an endless stream or a trickled chunk-size line end there."""

    def __init__(self, conn: http.client.HTTPConnection, deadline: float) -> None:
        self.conn = conn
        self.deadline = deadline
        api.rearm(conn, deadline)

    def read(self, response: http.client.HTTPResponse) -> bytes:
        return response.read1(65536)

    def drained(self, response: http.client.HTTPResponse, most: int = 65536, within_s: float = 1.0) -> bool:
        """Reads what follows the stream's end, up to `most` bytes within `within_s` (vLLM ends the body at
        once); False when more comes (then the connection is not kept)."""
        self.deadline = min(self.deadline, time.monotonic() + within_s)
        api.rearm(self.conn, self.deadline)
        taken = 0
        while taken <= most:
            data = self.read(response)
            if not data:
                return True
            taken += len(data)
        return False
