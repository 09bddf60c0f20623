"""One streamed chat completion through the PD router, timed as a user feels it.

TTFT is the time to the first generated token (prefill + KV transfer + first decode step);
tokens/s is the decode rate after that token. The request is OpenAI-style with `stream: true`, and
`stream_options.include_usage` so the server reports the real token count at the end; when it does
not, content chunks are counted instead (SGLang sends one token per chunk by default).
Standard library only: the smoke test must not depend on the serving images' Python packages.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

from pdkit.errors import KitError

DEFAULT_URL = "http://127.0.0.1:8000"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# How long the router gets to accept a TCP connection: a router that is up accepts at once, however slow its answer,
# so a failure here says "unreachable" (refused, no route, wrong port-forward), and only a timeout after it "slow".
CONNECT_SECONDS = 10.0
# A first token slower than this gets a "waiting" line (a spinner on a terminal); a quick answer prints none.
WAIT_NOTICE_AFTER = 2.0


class _Notice:
    """`waiting(text)` once the wait passes `after` seconds, stopped at the first token or the end."""

    def __init__(self, waiting: Callable[[str], Any] | None, text: str, after: float) -> None:
        self._waiting, self._text, self._lock, self._shown = waiting, text, threading.Lock(), None
        self._timer = threading.Timer(after, self._show)
        self._timer.daemon = True
        if waiting is not None:
            self._timer.start()

    def _show(self) -> None:
        with self._lock:
            if self._waiting is not None:
                self._shown = self._waiting(self._text)

    def stop(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._waiting = None
            if self._shown is not None:
                self._shown.stop()
                self._shown = None


@dataclass(frozen=True)
class Result:
    model: str
    ttft_s: float
    total_s: float
    completion_tokens: int
    tokens_per_s: float | None
    tokens_counted_by: str
    text: str
    reasoning: str
    finish_reason: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def completions_url(base: str) -> str:
    base = base.rstrip("/")
    if urlsplit(base).scheme not in ("http", "https"):
        raise KitError(f"--url {base!r} is not an http(s) URL. Fix: e.g. --url {DEFAULT_URL}")
    return base if base.endswith("/v1/chat/completions") else f"{base}/v1/chat/completions"


def reachable(target: str, *, within: float) -> None:
    """Connect to the router's port once, or raise the one line that says it cannot be reached (nothing is sent)."""
    parts = urlsplit(target)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=within):
            pass
    except OSError as err:
        why = "no answer to the connection" if isinstance(err, TimeoutError) else (err.strerror or type(err).__name__)
        raise KitError(
            f"cannot reach the router at {target} ({why} within {within:g} s). Fix: forward it to this machine first "
            "(see `pdkit smoke --help`), or pass --url"
        ) from None


def chat(url: str, *, model: str, prompt: str, max_tokens: int, timeout: float, waiting: Callable[[str], Any] | None = None) -> Result:
    """`waiting(text)` is shown while no token has come yet (console.waiting: a spinner, or one line on stderr); it
    returns a thing to `.stop()` at the first token or the end."""
    import urllib.error
    import urllib.request

    target = completions_url(url)
    reachable(target, within=min(CONNECT_SECONDS, timeout))
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = urllib.request.Request(  # noqa: S310 - scheme checked in completions_url
        target, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", "Accept": "text/event-stream"}
    )
    # A port-forward lives on this machine: never send it through an HTTP(S)_PROXY.
    handlers = [urllib.request.ProxyHandler({})] if urlsplit(target).hostname in LOOPBACK else []
    opener = urllib.request.build_opener(*handlers)
    started = time.perf_counter()
    notice = _Notice(
        waiting,
        f"Waiting for the first token from {target} (up to {timeout:g} s; the first request after start-up is slow)",
        WAIT_NOTICE_AFTER,
    )
    first: float | None = None
    text: list[str] = []
    reasoning: list[str] = []
    chunks = 0
    usage_tokens: int | None = None
    finish: str | None = None
    served = model
    try:
        with opener.open(request, timeout=timeout) as response:
            for raw_line in response:
                line = raw_line.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                event = json.loads(payload)
                served = event.get("model", served)
                if event.get("usage"):
                    usage_tokens = event["usage"].get("completion_tokens", usage_tokens)
                for choice in event.get("choices", []):
                    delta = choice.get("delta", {})
                    piece = delta.get("content") or ""
                    thought = delta.get("reasoning_content") or ""
                    if piece or thought:
                        if first is None:
                            notice.stop()
                        first = first or time.perf_counter()
                        chunks += 1
                        text.append(piece)
                        reasoning.append(thought)
                    finish = choice.get("finish_reason") or finish
    except urllib.error.HTTPError as err:
        detail = err.read().decode("utf-8", "replace")[:200].replace("\n", " ")
        raise KitError(
            f"the router answered HTTP {err.code} at {target}: {detail}. Fix: check the served model name (--model) and `pdkit status`"
        ) from None
    except (TimeoutError, urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        if isinstance(reason, TimeoutError):
            # The connection was accepted (reachable() above): the router is there and has not answered in time.
            so_far = "before the first token" if first is None else f"after {len(text)} chunk(s)"
            raise KitError(
                f"the router at {target} accepted the connection but sent nothing for {timeout:g} s {so_far}: it is up but slow "
                "(the first request after start-up warms caches, or a role is still loading). Fix: `pdkit status` for the roles' "
                "readiness, then run smoke again with a larger --timeout"
            ) from None
        raise KitError(
            f"cannot reach the router at {target} ({reason}). Fix: forward it to this machine first "
            "(see `pdkit smoke --help`), or pass --url"
        ) from None
    except json.JSONDecodeError:
        raise KitError(f"the answer from {target} is not an OpenAI-style event stream. Fix: point --url at the PD router") from None
    finally:
        notice.stop()
    ended = time.perf_counter()
    if first is None:
        raise KitError(f"the router at {target} streamed no tokens (finish reason {finish}). Fix: look at the router and decode logs")
    tokens = usage_tokens if usage_tokens else chunks
    decode_s = ended - first
    return Result(
        model=served,
        ttft_s=first - started,
        total_s=ended - started,
        completion_tokens=tokens,
        tokens_per_s=(tokens - 1) / decode_s if tokens > 1 and decode_s > 0 else None,
        tokens_counted_by="usage" if usage_tokens else "chunks",
        text="".join(text),
        reasoning="".join(reasoning),
        finish_reason=finish,
    )
