"""The served model over HTTP for the benchmark: /v1/models, /tokenize, /version, /metrics and streamed chats.

Straight to the server, never through a proxy (a proxy would receive the API key and skew the timing).
A streamed chat is timed as `vllm bench serve` times it: TTFT at the first chunk with choices, an ITL for
every later one, the end at the last token chunk, output tokens from the final usage chunk.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from launcher.bench.stats import RequestResult

Message = Mapping[str, str]


class ServerError(Exception):
    """The server cannot be benchmarked as asked: the message names the cause and the fix."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True, slots=True)
class Served:
    model: str
    max_model_len: int | None


class Server:
    def __init__(self, base_url: str, api_key: str | None, timeout_s: float = 600.0) -> None:
        url = urllib.parse.urlsplit(base_url.rstrip("/").removesuffix("/v1"))
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ServerError(f"{base_url}: not an http(s) URL; give e.g. http://127.0.0.1:8000", 2)
        self.base_url = f"{url.scheme}://{url.netloc}"
        self.https = url.scheme == "https"
        self.host, self.port = url.hostname, url.port or (443 if self.https else 80)
        self.api_key = api_key
        self.timeout_s = timeout_s
        self._kept = threading.local()  # each user thread's open connection

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return kind(self.host, self.port, timeout=timeout)

    def _headers(self, body: bool) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if body:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def call(self, method: str, path: str, body: Mapping[str, Any] | None = None, timeout: float = 30.0
             ) -> tuple[int, bytes]:
        """(status, body); ServerError (exit 2) when nothing answers."""
        conn = self._connection(timeout)
        try:
            conn.request(method, path, json.dumps(body).encode() if body is not None else None,
                         self._headers(body is not None))
            response = conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise ServerError(f"{self.base_url}{path}: no answer ({exc}); is the server up? "
                              "(`vllm-launch status`)", 2) from None
        finally:
            conn.close()

    def served(self, model: str | None) -> Served:
        """The model to send requests to, checked against /v1/models (401 → the key; absent → the names)."""
        status, body = self.call("GET", "/v1/models")
        if status == 401:
            raise ServerError(f"{self.base_url}/v1/models: 401 Unauthorized; set VLLM_API_KEY to the server's key "
                              "(with a PROFILE: the profile's api_key)", 78)
        if status != 200:
            raise ServerError(f"{self.base_url}/v1/models: HTTP {status}; is this a vLLM server?", 2)
        try:
            listed = {m["id"]: m for m in json.loads(body)["data"]}
        except (ValueError, KeyError, TypeError):
            raise ServerError(f"{self.base_url}/v1/models: not an OpenAI model list; is this a vLLM server?", 2) from None
        if model is None:
            if not listed:
                raise ServerError(f"{self.base_url}/v1/models lists no model", 2)
            model = next(iter(listed))
        if model not in listed:
            raise ServerError(f"model {model!r} is not served at {self.base_url} (it serves "
                              f"{', '.join(sorted(listed))}); pass --model with one of those", 78)
        length = listed[model].get("max_model_len")
        return Served(model, length if isinstance(length, int) else None)

    def version(self) -> str | None:
        try:
            status, body = self.call("GET", "/version", timeout=5)
            return str(json.loads(body).get("version")) if status == 200 else None
        except (ServerError, ValueError, AttributeError):
            return None

    def metrics_text(self) -> str:
        try:
            status, body = self.call("GET", "/metrics", timeout=5)
        except ServerError:
            return ""
        return body.decode(errors="replace") if status == 200 else ""

    def count_tokens(self, model: str, messages: Sequence[Message] | None = None, text: str | None = None) -> int:
        """Tokens as the server counts them (/tokenize); a chat counts with its template and generation prompt."""
        body: dict[str, Any] = {"model": model}
        if messages is not None:
            body.update(messages=list(map(dict, messages)), add_generation_prompt=True)
        else:
            body.update(prompt=text or "", add_special_tokens=False)
        status, data = self.call("POST", "/tokenize", body)
        if status != 200:
            raise ServerError(f"{self.base_url}/tokenize: HTTP {status} ({data[:200]!r}); the benchmark sizes its "
                              "prompts with the server's own tokenizer", 2)
        return int(json.loads(data)["count"])

    def chat(self, model: str, messages: Sequence[Message], *, max_tokens: int, ignore_eos: bool = False,
             temperature: float = 0.0) -> tuple[RequestResult, str]:
        """One streamed chat completion, timed; never raises (a failure is a result with its error kind)."""
        body: dict[str, Any] = {"model": model, "messages": list(map(dict, messages)), "max_completion_tokens": max_tokens,
                                "stream": True, "stream_options": {"include_usage": True}, "temperature": temperature}
        if ignore_eos:
            body["ignore_eos"] = True
        conn = self._kept.conn if getattr(self._kept, "conn", None) is not None else self._connection(self.timeout_s)
        self._kept.conn = None
        start = time.perf_counter()
        try:
            conn.request("POST", "/v1/chat/completions", json.dumps(body).encode(), self._headers(True))
            response = conn.getresponse()
            if response.status != 200:
                response.read()
                conn.close()
                return RequestResult(False, error=f"http_{response.status}"), ""
            result = _read_stream(response, start)
            response.read()  # the rest of the body, so the connection can carry the user's next request
            self._kept.conn = conn  # keep-alive per user thread, as an HTTP client session would
            return result
        except TimeoutError:
            return RequestResult(False, error="timeout"), ""
        except (OSError, http.client.HTTPException):
            return RequestResult(False, error="connection"), ""
        except (ValueError, KeyError, TypeError, IndexError):
            return RequestResult(False, error="bad_stream"), ""
        finally:
            if self._kept.conn is not conn:
                conn.close()


def _read_stream(response: http.client.HTTPResponse, start: float) -> tuple[RequestResult, str]:
    """Server-sent events as they arrive: each read takes what the socket holds (never waiting for a full
    buffer), and every message in it is stamped with the time it arrived."""
    first = False
    ttft = 0.0
    last = start
    gaps: list[float] = []
    text: list[str] = []
    output_tokens = input_tokens = 0
    cached: int | None = None
    pending = b""
    finished = False
    while not finished and (data := response.read1(65536)):
        now = time.perf_counter()
        lines = (pending + data).split(b"\n")
        pending = lines.pop()
        for line in lines:
            message = line.decode("utf-8", errors="replace").strip()
            if not message.startswith("data:"):
                continue  # blank separators, SSE comments (": ping")
            chunk = message.removeprefix("data:").strip()
            if chunk == "[DONE]":
                finished = True
                break
            event = json.loads(chunk)
            if choices := event.get("choices"):
                if not first:
                    first, ttft = True, now - start
                else:
                    gaps.append(now - last)
                text.append(choices[0].get("delta", {}).get("content") or "")
                last = now
            elif usage := event.get("usage"):
                output_tokens = int(usage.get("completion_tokens") or 0)
                input_tokens = int(usage.get("prompt_tokens") or 0)
                details = usage.get("prompt_tokens_details") or {}
                cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if not first:
        return RequestResult(False, error="no_tokens"), ""
    return RequestResult(True, ttft_s=ttft, latency_s=last - start, itl_s=tuple(gaps), input_tokens=input_tokens,
                         output_tokens=output_tokens, cached_tokens=cached), "".join(text)
