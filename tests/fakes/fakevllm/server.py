"""The API server's HTTP side: vLLM's routes, uvicorn's access log and vLLM's request log.

Threaded, like uvicorn's event loop it never blocks /health on a slow request: a wedged engine
(`wedged` set) leaves completions hanging while /health still answers 200. A dead engine (`dead`
set) answers /health 503 and every POST 500, as vLLM does between EngineDeadError and its exit.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fakevllm.common import emit

COMPLETIONS = ("/v1/completions", "/v1/chat/completions")


def access_line(pid: int, client: tuple[str, int], method: str, path: str, version: str, status: int) -> str:
    """uvicorn's access record as vLLM 0.32 prints it: the client's address and port, the raw target as sent."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f'(APIServer pid={pid}) INFO:     {client[0]}:{client[1]} - "{method} {path} {version}" {status} {phrase}'


def chat_prompt(messages: object) -> str:
    """The prompt a chat template makes of the messages (ChatML, as the logs' Qwen models show)."""
    parts = []
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict):
            parts.append(f"<|im_start|>{message.get('role', 'user')}\n{message.get('content', '')}<|im_end|>\n")
    return "".join(parts) + "<|im_start|>assistant\n"


def request_line(pid: int, path: str, body: dict[str, Any]) -> str:
    """vLLM's request log record (--enable-log-requests): the prompt is the client's text, as repr() shows it."""
    if path == "/v1/chat/completions":
        request_id, prompt = f"chatcmpl-{uuid.uuid4().hex}", chat_prompt(body.get("messages"))
    else:
        raw = body.get("prompt", "")
        request_id, prompt = f"cmpl-{uuid.uuid4().hex}", raw if isinstance(raw, str) else json.dumps(raw)
    max_tokens = body.get("max_tokens") if isinstance(body.get("max_tokens"), int) else 16
    stamp = time.strftime("%m-%d %H:%M:%S")
    return (f"(APIServer pid={pid}) INFO {stamp} [logger.py:39] Received request {request_id}: prompt: {prompt!r}, "
            f"params: SamplingParams(max_tokens={max_tokens}), prompt_token_ids: None, lora_request: None.")


class FakeServer:
    """vLLM's OpenAI-compatible server, as far as a supervisor and its probes can tell."""

    def __init__(self, host: str, port: int, served: str, max_model_len: int, log_requests: bool) -> None:
        self.dead = threading.Event()
        self.wedged = threading.Event()
        self.closing = threading.Event()  # never set while the process lives: a wedged request waits on it
        self.served = served
        self.max_model_len = max_model_len
        self.log_requests = log_requests
        self.api_key = os.environ.get("VLLM_API_KEY")
        self.httpd = ThreadingHTTPServer((host, port), self._handler())
        self.httpd.daemon_threads = True
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
                    name = owner.served
                    text = (f'vllm:kv_cache_usage_perc{{model_name="{name}"}} 0.25\n'
                            f'vllm:num_requests_running{{model_name="{name}"}} 1.0\n'
                            f'vllm:num_requests_waiting{{model_name="{name}"}} 0.0\n')
                    return self.reply(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")
                if route == "/version":
                    return self.reply(200, {"version": "0.32.0"})
                return self.reply(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                route = self.route()
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if not self.authorized():
                    return self.reply(401, {"error": "Unauthorized"})
                if route not in COMPLETIONS:
                    return self.reply(404, {"detail": "Not Found"})
                if owner.dead.is_set():
                    return self.reply(500, {"error": "EngineCore encountered an issue. See stack trace for the root cause."})
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    return self.reply(400, {"error": "invalid JSON body"})
                body = body if isinstance(body, dict) else {}
                if owner.log_requests:
                    emit(request_line(os.getpid(), route, body))
                if owner.wedged.is_set():
                    owner.closing.wait()  # the engine never answers; only the process's end ends this request
                    return None
                return self.reply(200, self.completion(route))

            def completion(self, route: str) -> dict[str, Any]:
                usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
                if route == "/v1/chat/completions":
                    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "model": owner.served,
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                         "finish_reason": "length"}], "usage": usage}
                return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "model": owner.served,
                        "choices": [{"index": 0, "text": "ok", "finish_reason": "length"}], "usage": usage}

        return Handler
