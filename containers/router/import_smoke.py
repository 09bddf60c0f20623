#!/usr/bin/env python3
"""Import smoke test of the router image (containers/build.sh runs it with `docker run`, no network).

The router Deployment runs `python3 -m smg.launch_router`; this imports that module and the Rust core
it loads, and prints the installed smg version (the build already refused a lock without versions.yaml's
pin). Standard library only.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys

PACKAGE = "smg"
MODULES = ("smg.launch_router", "smg.smg_rs")


def main() -> int:
    failed = 0
    for name in MODULES:
        try:
            importlib.import_module(name)
            print(f"ok   import {name}")
        except Exception as exc:  # every failing import is reported, not only the first
            print(f"FAIL import {name}: {exc}")
            failed += 1
    print(f"info {PACKAGE} {importlib.metadata.version(PACKAGE)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
