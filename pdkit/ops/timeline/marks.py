"""Timestamps read out of the captured objects and log lines.

Log lines are matched on the exact text their programs print (tests/fixtures/timeline/README.md
cites each source line):
- the weights stager, pdkit/pods/staging.py: "staging N files (...)", "already staged: ...",
  "staged N files (X GB) in S s; ...";
- the compile-cache step, pdkit/pods/compile_cache.py: "cold compile cache: running the DeepGEMM
  precompile ...", "DeepGEMM precompile finished in ...", "... is warm on this node; skipping ...";
- SGLang 0.5.23: "Load weight begin." / "Load weight end." (srt/model_executor/model_runner.py),
  "Capture <role> <kind> CUDA graph begin." / "... end." (model_runner_components/cuda_graph_setup.py;
  older releases print "Capture cuda graph begin."), "Try DeepGEMM JIT Compiling for ..."
  (layers/deep_gemm_wrapper/compile_utils.py), "The server is fired up and ready to roll!"
  (entrypoints/http_server.py);
- the smg 1.13.0 router: "Registered worker <url> (model: ...) with ID ..." (strings of smg_rs).
The time of a line is the one Kubernetes recorded (`timestamps=true`), not the program's own, so
lines of different programs and nodes compare on one clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FRACTION = re.compile(r"\.(\d+)")
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("stage_begin", re.compile(r"\bstaging \d+ files \(")),
    ("stage_skip", re.compile(r"\balready staged: \d+ files")),
    ("stage_end", re.compile(r"\bstaged \d+ files \([\d.]+ GB\) in \d+ s")),
    ("precompile_begin", re.compile(r"\bcold compile cache: running the DeepGEMM precompile")),
    ("precompile_end", re.compile(r"\bDeepGEMM precompile finished in |\bthe DeepGEMM precompile (?:timed out|exited -?\d+) after ")),
    ("precompile_skip", re.compile(r"\bis warm on this node; skipping the DeepGEMM precompile")),
    ("load_begin", re.compile(r"\bLoad weight begin\.")),
    ("load_end", re.compile(r"\bLoad weight end\.")),
    ("graph_begin", re.compile(r"\bCapture (?:[\w ]+ )?(?:cuda|CUDA) graph begin\.")),
    ("graph_end", re.compile(r"\bCapture (?:[\w ]+ )?(?:cuda|CUDA) graph end\.")),
    ("deepgemm", re.compile(r"\bTry DeepGEMM JIT Compiling for ")),
    ("ready", re.compile(r"The server is fired up and ready to roll!")),
    ("registered", re.compile(r"\bRegistered worker (\S+)")),
)


@dataclass(frozen=True)
class Mark:
    kind: str
    at: datetime
    detail: str = ""


def parse_time(value: Any) -> datetime | None:
    """RFC 3339 / ISO 8601 as the Kubernetes API, the log endpoint and EC2 write it (up to nanoseconds, Z or offset)."""
    if not isinstance(value, str) or not value:
        return None
    text = _FRACTION.sub(lambda m: "." + m.group(1)[:6].ljust(6, "0"), value.strip(), count=1).replace("Z", "+00:00")
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def log_marks(lines: Iterable[str]) -> list[Mark]:
    found = []
    for raw in lines:
        stamp, _, message = _ANSI.sub("", raw).partition(" ")
        at = parse_time(stamp)
        if at is None:
            continue
        for kind, pattern in _PATTERNS:
            match = pattern.search(message)
            if match:
                found.append(Mark(kind, at, match.group(1) if match.groups() else message[match.start() :].strip()[:200]))
                break
    return found


def condition(obj: dict[str, Any], kind: str) -> datetime | None:
    """When a node's or pod's condition `kind` last became True."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return parse_time(c.get("lastTransitionTime"))
    return None


def event_time(event: dict[str, Any]) -> datetime | None:
    """core/v1 events from the legacy recorder carry firstTimestamp; events.k8s.io ones only eventTime."""
    return (
        parse_time(event.get("firstTimestamp"))
        or parse_time(event.get("eventTime"))
        or parse_time(event.get("metadata", {}).get("creationTimestamp"))
    )


def event_last_time(event: dict[str, Any]) -> datetime | None:
    series = event.get("series") or {}
    return parse_time(event.get("lastTimestamp")) or parse_time(series.get("lastObservedTime")) or event_time(event)
