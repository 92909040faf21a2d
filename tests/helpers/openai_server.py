"""A small server that answers as vLLM's OpenAI API does, for the benchmark client's tests: /v1/models,
/tokenize (a word a token) and a chat completion streamed in timed chunks, behind a bearer key."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler

KEY = "k-123"
# (delay before the chunk, the chunk): a role chunk, three tokens 50 ms apart, then usage.
STREAM = [(0.10, {"choices": [{"delta": {"role": "assistant", "content": ""}}]}),
          (0.00, {"choices": [{"delta": {"content": "a"}}]}),
          (0.05, {"choices": [{"delta": {"content": "b"}}]}),
          (0.05, {"choices": [{"delta": {"content": "c"}}]}),
          (0.00, {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3,
                                           "prompt_tokens_details": {"cached_tokens": 8}}})]


class Handler(BaseHTTPRequestHandler):
    """Answers with KEY only; streams STREAM, then [DONE], in HTTP/1.1 chunks."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def send(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            return self.send(401, {"error": "Unauthorized"})
        if self.path == "/v1/models":
            return self.send(200, {"data": [{"id": "tiny", "max_model_len": 2048}]})
        return self.send(404, {})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            text = body.get("prompt") or " ".join(m["content"] for m in body["messages"])
            return self.send(200, {"count": len(text.split())})
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for delay, chunk in [*STREAM, (0.0, "[DONE]")]:
            time.sleep(delay)
            data = f"data: {chunk if isinstance(chunk, str) else json.dumps(chunk)}\n\n".encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        return None
