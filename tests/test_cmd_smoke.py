"""`pdkit smoke` against a tiny OpenAI-style streaming server on 127.0.0.1 (no network beyond loopback)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from pdkit.cli.main import main


class Router(BaseHTTPRequestHandler):
    """Streams `chunks` as SSE after `delay` seconds, like SGLang's router for /v1/chat/completions."""

    chunks: ClassVar[list[dict[str, object]]] = []
    delay = 0.0
    status = 200
    received: ClassVar[list[dict[str, object]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).received.append({"path": self.path, **body})
        if self.status != 200:
            self.send_response(self.status)
            self.end_headers()
            self.wfile.write(b'{"error": "model not found"}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        time.sleep(self.delay)
        for chunk in self.chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.01)
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args: object) -> None:
        pass


def delta(content: str = "", reasoning: str = "", finish: str | None = None) -> dict[str, object]:
    d = {"content": content} if content else {}
    if reasoning:
        d["reasoning_content"] = reasoning
    return {"model": "zai-org/GLM-5.1-FP8", "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


@pytest.fixture
def router() -> Iterator[type[Router]]:
    handler = type("TestRouter", (Router,), {"chunks": [], "delay": 0.0, "status": 200, "received": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    yield handler
    server.shutdown()
    server.server_close()


def test_prints_ttft_tokens_per_second_and_the_text(router, capsys):
    router.delay = 0.2
    router.chunks = [
        delta("Prefill"),
        delta(" runs"),
        delta(" apart."),
        delta(finish="stop"),
        {"choices": [], "usage": {"completion_tokens": 5}},
    ]
    assert main(["smoke", "--url", router.url]) == 0
    out = capsys.readouterr().out
    ttft_ms = int(out.split("TTFT ")[1].split(" ms")[0])
    assert 200 <= ttft_ms < 2000
    assert "5 tokens (usage)" in out
    assert "tokens/s after the first" in out
    assert "Answer: Prefill runs apart." in out
    sent = router.received[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["stream"] is True
    assert sent["model"] == "zai-org/GLM-5.1-FP8"
    assert sent["stream_options"] == {"include_usage": True}


def test_counts_chunks_without_usage_and_shows_reasoning(router, capsys):
    router.chunks = [delta(reasoning="Think."), delta("A"), delta("B", finish="length")]
    assert main(["smoke", "--url", router.url + "/", "--output", "json", "--model", "glm", "--max-tokens", "3"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["completion_tokens"] == 3
    assert data["tokens_counted_by"] == "chunks"
    assert data["reasoning"] == "Think."
    assert data["text"] == "AB"
    assert data["finish_reason"] == "length"
    assert data["tokens_per_s"] > 0
    assert router.received[0]["model"] == "glm"
    assert router.received[0]["max_tokens"] == 3


def test_http_error_is_one_line(router, capsys):
    router.status = 404
    assert main(["smoke", "--url", router.url]) == 2
    err = capsys.readouterr().err
    assert "the router answered HTTP 404" in err
    assert "model not found" in err
    assert err.count("\n") == 1


def test_no_tokens_is_an_error(router, capsys):
    router.chunks = [delta(finish="abort")]
    assert main(["smoke", "--url", router.url]) == 2
    assert "streamed no tokens (finish reason abort)" in capsys.readouterr().err


def test_nothing_listening_says_how_to_forward_the_router(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["smoke", "--url", f"http://127.0.0.1:{port}", "--timeout", "5"]) == 2
    err = capsys.readouterr().err
    assert f"cannot reach the router at http://127.0.0.1:{port}/v1/chat/completions" in err
    assert "pdkit smoke --help" in err


def test_help_shows_the_forwarding_commands(capsys):
    with pytest.raises(SystemExit):
        main(["smoke", "--help"])
    out = capsys.readouterr().out
    assert "AWS-StartPortForwardingSessionToRemoteHost" in out
    assert "AccessHostId" in out
    assert "localPortNumber=8000" in out


def test_rejects_a_non_http_url(capsys):
    assert main(["smoke", "--url", "file:///etc/passwd"]) == 2
    assert "is not an http(s) URL" in capsys.readouterr().err


def test_a_local_port_forward_bypasses_http_proxy(router, monkeypatch, capsys):
    """An operator's corporate HTTP(S)_PROXY must not swallow the request to the local port-forward."""
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    router.chunks = [delta("ok", finish="stop")]
    assert main(["smoke", "--url", router.url]) == 0
    assert "Answer: ok" in capsys.readouterr().out


def test_a_slow_router_is_told_from_an_unreachable_one(router, capsys, monkeypatch):
    """The router accepted the connection and sent no token within --timeout: it is up but slow, and the fix is
    `pdkit status` and a longer --timeout, not a port-forward (the message before blamed reachability)."""
    from pdkit.ops import smoke

    monkeypatch.setattr(smoke, "WAIT_NOTICE_AFTER", 0.1)
    router.delay = 2.0
    router.chunks = [delta("late", finish="stop")]
    assert main(["smoke", "--url", router.url, "--timeout", "0.5"]) == 2
    err = capsys.readouterr().err.splitlines()
    # Not a terminal: the wait is one line on stderr (console.waiting), then the error.
    assert err[0].startswith(f"Waiting for the first token from {router.url}/v1/chat/completions (up to 0.5 s")
    assert err[-1].startswith(f"pdkit: error: the router at {router.url}/v1/chat/completions accepted the connection but sent nothing")
    assert "it is up but slow" in err[-1]
    assert "cannot reach" not in err[-1]


def test_a_quick_answer_prints_no_waiting_line(router, capsys):
    router.chunks = [delta("ok", finish="stop")]
    assert main(["smoke", "--url", router.url]) == 0
    assert "Waiting" not in capsys.readouterr().err
