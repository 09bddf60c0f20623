"""Append the `# no-deps:` packages of requirements-sglang.in, with their hashes, to the compiled lock.

`make lock-sglang` runs pip-compile on requirements-sglang.in first (their dependencies stay out of
the lock on purpose, see that file), then this:

    python conformance/lock_nodeps.py conformance/requirements-sglang.in conformance/requirements-sglang.txt

Hashes are of the wheels pip downloads for this machine's platform (sglang is pure Python; smg has
one wheel per platform, so the lock installs on x86_64 Linux, as CI does).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

MARK = "# no-deps:"
HEADER = "# Installed with --no-deps (their dependency trees are GPU kernels the check never imports):\n"


def no_deps_specs(source: Path) -> list[str]:
    return [line[len(MARK) :].strip() for line in source.read_text().splitlines() if line.startswith(MARK)]


def hashes(spec: str) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(  # noqa: S603 - pip, with a spec read from the repository's own .in file
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--dest", tmp, spec],
            check=True,
        )
        return sorted(hashlib.sha256(p.read_bytes()).hexdigest() for p in Path(tmp).iterdir())


def main(argv: list[str]) -> int:
    source, lock = Path(argv[0]), Path(argv[1])
    text = lock.read_text()
    if HEADER in text:
        text = text[: text.index(HEADER)]
    lines = [HEADER]
    for spec in no_deps_specs(source):
        digests = hashes(spec)
        lines.append(f"{spec} \\\n" + " \\\n".join(f"    --hash=sha256:{d}" for d in digests) + "\n")
    lock.write_text(text.rstrip("\n") + "\n\n" + "".join(lines))
    print(f"{lock}: appended {', '.join(no_deps_specs(source))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
