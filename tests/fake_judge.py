"""A deterministic LLM judge on a real loopback HTTP server (stdlib ``ThreadingHTTPServer`` in a thread).

It speaks enough of the OpenAI API for the official client (``GET /v1/models``, ``POST /v1/chat/completions``),
reads the pair out of the judge template's last message, answers through ``decide(prefix, a, b)``, counts
every request, records their headers, paths and bodies, and injects faults on demand: a queue for the next
requests, and a rule that can fail chosen pairs every time.

``decide`` returns either a text reply or :class:`Scripted` (a text plus the ``top_logprobs`` of its first
token), which the server returns as the chat API's ``logprobs`` when the request asks for them and
``logprobs="supported"``; with ``"ignored"`` it never returns them (as ``transformers serve`` and many proxies),
with ``"refused"`` a request that asks for them gets HTTP 400. ``echo=True`` makes every reply, every
log-probability alternative and every error message repeat the request's Authorization header and path, as a
hostile or careless server could.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

QUESTION = re.compile(r"Text: (.*)\nContinuation A: (.*)\nContinuation B: (.*)\nBetter continuation:\Z", re.DOTALL)


@dataclass(frozen=True)
class Scripted:
    """A reply with scripted verdict probabilities: ``top`` are (token, probability) alternatives."""

    text: str
    top: tuple[tuple[str, float], ...]


def probabilities(p_a: float, p_b: float, p_tie: float = 0.0, other: float = 0.1) -> Scripted:
    """A reply whose first token has these verdict probabilities (plus an unrelated alternative, "The", that the
    verdict reading must ignore); the text is the most likely verdict."""
    top = [("A", p_a), (" B", p_b), ("tie", p_tie), ("The", other)]
    text = max((("A", p_a), ("B", p_b), ("tie", p_tie)), key=lambda t: t[1])[0]
    return Scripted(text, tuple((t, p) for t, p in top if p > 0))


class FakeJudge:
    def __init__(self, decide: Callable[[str, str, str], str | Scripted], timeout_delay: float = 1.0,
                 logprobs: str = "supported", echo: bool = False):
        assert logprobs in ("supported", "ignored", "refused")
        self.decide = decide
        self.timeout_delay = timeout_delay
        self.logprobs = logprobs
        self.echo = echo
        self.queue: list[str | None] = []  # faults for the next chat requests, in order
        self.always: Callable[[str, str, str], str | None] = lambda p, a, b: None  # a fault for some pairs
        self.chat_requests = 0
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
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
                headers = {k.lower(): v for k, v in self.headers.items()}
                with judge._lock:
                    judge.chat_requests += 1
                    judge.headers.append(headers)
                    judge.paths.append(self.path)
                    judge.bodies.append(body)
                    fault = judge.queue.pop(0) if judge.queue else None
                echo = f" [auth {headers.get('authorization', '')} path {self.path}]" if judge.echo else ""
                match = QUESTION.match(body["messages"][-1]["content"])
                if match is None:  # not a pairwise question (the interpretability prompt): answer plainly
                    return judge._reply(self, body, "DISENTANGLEMENT: 5\nCOVERAGE: 5\nTHEMES: 1" + echo, None, echo)
                prefix, a, b = match.groups()
                fault = fault or judge.always(prefix, a, b)
                judge._answer(self, fault, body, prefix, a, b, echo)

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

    def _answer(self, h, fault: str | None, body: dict, prefix: str, a: str, b: str, echo: str) -> None:
        error = {"error": {"message": f"injected {fault}{echo}", "type": "test"}}
        if fault == "429":
            return self._send(h, 429, error, {"retry-after": "0"})
        if fault in ("500", "401", "400"):
            return self._send(h, int(fault), error)
        if fault == "503":
            return self._send(h, 503, error, {"retry-after": "0"})
        if fault == "malformed":
            return self._send(h, 200, None, raw=b'{"id": "x", "choices": [{"message": ')
        if fault == "no_choices":
            return self._send(h, 200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                                       "choices": []})
        if fault == "timeout":
            time.sleep(self.timeout_delay)
        if body.get("logprobs") and self.logprobs == "refused":
            return self._send(h, 400, {"error": {"message": f"logprobs is not supported{echo}", "type": "invalid"}})
        decided = Scripted("I cannot decide between them.", ()) if fault == "text" else self.decide(prefix, a, b)
        if isinstance(decided, str):
            decided = Scripted(decided, ((decided, 1.0),))
        self._reply(h, body, decided.text + echo, decided.top, echo)

    def _reply(self, h, body: dict, content: str, top, echo: str) -> None:
        choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        if body.get("logprobs") and self.logprobs == "supported" and top:
            alternatives = [{"token": t, "logprob": math.log(p), "bytes": None} for t, p in top]
            if echo:
                alternatives.append({"token": echo, "logprob": -20.0, "bytes": None})
            alternatives = alternatives[: body.get("top_logprobs") or len(alternatives)]
            first = max(alternatives, key=lambda t: t["logprob"])
            choice["logprobs"] = {"content": [{**first, "top_logprobs": alternatives}], "refusal": None}
        self._send(h, 200, {
            "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [choice], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })
