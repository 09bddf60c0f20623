"""Carry bench_serving's JSONL out of the benchmark pod through its log (standard library only).

bench_serving appends one JSON object per run to `--output-file`; with `--output-details` it holds
every request's inter-token latencies, which the report needs for the ITL distribution and the true
max ITL (the JSONL has no max_itl_ms field; only the printed summary does). The pod has no volume
pdkit can read, so after each concurrency level it prints the records, minus the generated texts and
with latencies rounded to the microsecond, gzip'd and base64'd between two marker lines.
`pdkit bench` decodes them from the log as they appear.

Mounted into the benchmark pod from a ConfigMap (`python3 compact.py FILE CONCURRENCY STATUS`);
`decode_blocks` is what pdkit uses on the other side.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BEGIN = "pdkit-bench-result-begin"
END = "pdkit-bench-result-end"
LINE = 4096
# Dropped: the generated texts are the bulk of the file and the report does not use them.
DROPPED = ("generated_texts",)
_MARKER = re.compile(rf"^({BEGIN}|{END}) concurrency=(\d+)(?: status=(-?\d+))?$")


def _slim(record: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in record.items() if k not in DROPPED}
    if isinstance(out.get("itls"), list):
        out["itls"] = [[round(x, 6) for x in request] if isinstance(request, list) else request for request in out["itls"]]
    return out


def encode_block(records: Sequence[dict[str, Any]], concurrency: int, status: int) -> str:
    payload = "\n".join(json.dumps(_slim(r), separators=(",", ":")) for r in records).encode()
    blob = base64.b64encode(gzip.compress(payload, mtime=0)).decode()
    lines = [f"{BEGIN} concurrency={concurrency} status={status}"]
    lines += [blob[i : i + LINE] for i in range(0, len(blob), LINE)]
    lines.append(f"{END} concurrency={concurrency}")
    return "\n".join(lines)


def decode_blocks(text: str) -> dict[int, tuple[int, list[dict[str, Any]]]]:
    """Complete blocks in a log: concurrency -> (bench_serving's exit status, its JSONL records)."""
    out: dict[int, tuple[int, list[dict[str, Any]]]] = {}
    current: tuple[int, int] | None = None
    chunks: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        m = _MARKER.match(line)
        if m and m.group(1) == BEGIN:
            current = (int(m.group(2)), int(m.group(3) or 0))
            chunks = []
        elif m and current is not None and int(m.group(2)) == current[0]:
            blob = "".join(chunks)
            payload = gzip.decompress(base64.b64decode(blob)).decode() if blob else ""
            out[current[0]] = (current[1], [json.loads(x) for x in payload.splitlines() if x.strip()])
            current = None
        elif current is not None:
            chunks.append(line)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3:
        print("usage: compact.py RESULTS.jsonl CONCURRENCY STATUS", file=sys.stderr)
        return 2
    path, concurrency, status = Path(args[0]), int(args[1]), int(args[2])
    records = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []
    print(encode_block(records, concurrency, status), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
