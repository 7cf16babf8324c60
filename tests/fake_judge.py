"""A deterministic LLM judge on a real loopback HTTP server (stdlib ``ThreadingHTTPServer`` in a thread).

It speaks enough of the OpenAI API for the official client (``GET /v1/models``, ``POST /v1/chat/completions``),
reads the pair out of the judge template's last message, answers through ``decide(prefix, a, b)``, counts
every request, records their headers, and injects faults on demand: a queue for the next requests, and a rule
that can fail chosen pairs every time.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

QUESTION = re.compile(r"Text: (.*)\nContinuation A: (.*)\nContinuation B: (.*)\nBetter continuation:\Z", re.DOTALL)


class FakeJudge:
    def __init__(self, decide: Callable[[str, str, str], str], timeout_delay: float = 1.0):
        self.decide = decide
        self.timeout_delay = timeout_delay
        self.queue: list[str] = []  # faults for the next chat requests, in order
        self.always: Callable[[str, str, str], str | None] = lambda p, a, b: None  # a fault for some pairs
        self.chat_requests = 0
        self.headers: list[dict[str, str]] = []
        self.bodies: list[dict] = []
        self._lock = threading.Lock()
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_GET(self):
                judge._send(self, 200, {"object": "list", "data": [{"id": "fake-judge", "object": "model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                with judge._lock:
                    judge.chat_requests += 1
                    judge.headers.append({k.lower(): v for k, v in self.headers.items()})
                    judge.bodies.append(body)
                    fault = judge.queue.pop(0) if judge.queue else None
                prefix, a, b = QUESTION.match(body["messages"][-1]["content"]).groups()
                fault = fault or judge.always(prefix, a, b)
                judge._answer(self, fault, body, prefix, a, b)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, address: None  # a client that timed out closed its socket
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "FakeJudge":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    @staticmethod
    def _send(handler, status: int, payload, headers: dict[str, str] | None = None, raw: bytes | None = None):
        data = raw if raw is not None else json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            handler.send_header(k, v)
        handler.end_headers()
        handler.wfile.write(data)

    def _answer(self, h, fault: str | None, body: dict, prefix: str, a: str, b: str) -> None:
        error = {"error": {"message": f"injected {fault}", "type": "test"}}
        if fault == "429":
            return self._send(h, 429, error, {"retry-after": "0"})
        if fault == "500":
            return self._send(h, 500, error)
        if fault == "401":
            return self._send(h, 401, error)
        if fault == "503":
            return self._send(h, 503, error, {"retry-after": "0"})
        if fault == "malformed":
            return self._send(h, 200, None, raw=b'{"id": "x", "choices": [{"message": ')
        if fault == "no_choices":
            return self._send(h, 200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                                       "choices": []})
        if fault == "timeout":
            time.sleep(self.timeout_delay)
        content = "I cannot decide between them." if fault == "text" else self.decide(prefix, a, b)
        self._send(h, 200, {
            "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })
