#!/usr/bin/env python3
"""Resolve requirements.in (next to this file) into requirements.lock: the serving image's Python set, hash-locked.

    make lock-images                                  # = python containers/sglang-efa/lock.py
    python containers/sglang-efa/lock.py --upgrade    # re-resolve every unpinned package to its newest release

uv resolves for the image's interpreter and platform, not this machine's: CPython `components.python.version`
of containers/versions.yaml on x86_64 manylinux with glibc 2.39 (Ubuntu 24.04's, the distribution of the
CUDA base image), without installing anything. Pins already in requirements.lock are kept unless --upgrade.

`uv pip compile --generate-hashes` lists the hash of every file of a release, for every platform and
interpreter (https://github.com/astral-sh/uv/issues/3516), which makes a lock of this set ~400 kB. Its
pylock.toml output (PEP 751) lists only the files that install on the target platform, so this script
runs both and keeps, per package, only the hashes of those wheels; the image installs them with
--only-binary=:all:, so no source distribution is ever built.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import versions

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "requirements.in"
LOCK = HERE / "requirements.lock"
# Ubuntu 24.04 (noble) ships glibc 2.39; SGLang's wheel is manylinux_2_34 and Mooncake's manylinux_2_35, so
# the manylinux_2_28 of older recipes cannot resolve this set at all.
PLATFORM = "x86_64-manylinux_2_39"
# Required by SGLang, replaced in the image by UCCL-EP's deep_ep (versions.yaml, not_installed).
NOT_EMITTED = ("sgl-deep-ep",)
COMMAND = "make lock-images"
HASH_PREFIX = "--hash=sha256:"


class LockError(RuntimeError):
    """The resolution cannot become a lock; the message says what to do."""


def python_version(doc: dict[str, object]) -> str:
    components = doc["components"]
    assert isinstance(components, dict)
    return str(components["python"]["version"])


def platform_hashes(pylock: str) -> dict[str, tuple[str, set[str]]]:
    """name -> (version, sha256 of each wheel that installs on the target platform), from uv's pylock.toml."""
    out: dict[str, tuple[str, set[str]]] = {}
    for package in tomllib.loads(pylock).get("packages", []):
        wheels = {wheel["hashes"]["sha256"] for wheel in package.get("wheels", [])}
        if not wheels:
            raise LockError(
                f"{package['name']}=={package['version']} has no wheel for {PLATFORM}: pin a version that has one in requirements.in"
            )
        out[package["name"]] = (package["version"], wheels)
    return out


def keep_platform_hashes(requirements: str, wheels: dict[str, tuple[str, set[str]]]) -> str:
    """uv's requirements.txt (header, `name==version`, hash lines, `# via` lines) with only the platform's wheel hashes."""
    blocks: list[list[str]] = [[]]
    for line in requirements.splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            blocks.append([])
        blocks[-1].append(line)
    header, entries = blocks[0], blocks[1:]
    out = list(header)
    seen: set[str] = set()
    for entry in entries:
        spec = entry[0].removesuffix("\\").strip()
        name, _, version = spec.partition("==")
        name = name.split("[")[0].lower()
        if name not in wheels or wheels[name][0] != version:
            raise LockError(f"{spec}: the two resolutions disagree ({wheels.get(name, ('absent',))[0]}); run `{COMMAND}` again")
        seen.add(name)
        hashes = [line.strip() for line in entry[1:] if line.strip().startswith(HASH_PREFIX)]
        kept = [h.removesuffix("\\").strip() for h in hashes if h.removesuffix("\\").strip().removeprefix(HASH_PREFIX) in wheels[name][1]]
        if not kept:
            raise LockError(f"{spec}: none of its hashes is a {PLATFORM} wheel")
        lines = [spec, *(f"    {h}" for h in kept)]
        out += [line + " \\" for line in lines[:-1]] + [lines[-1]]
        out += [line for line in entry[1:] if not line.strip().startswith(HASH_PREFIX)]
    missing = sorted(set(wheels) - seen)
    if missing:
        raise LockError(f"pylock.toml resolved packages the requirements output lacks: {', '.join(missing)}")
    return "\n".join(out).rstrip("\n") + "\n"


def uv_compile(uv: str, python: str, output: Path, *, upgrade: bool, extra: list[str]) -> None:
    command = [
        uv,
        "--no-config",
        "pip",
        "compile",
        SOURCE.relative_to(versions.REPO_ROOT).as_posix(),  # relative, so the lock's `# via -r` lines are too
        "--quiet",
        "--python-version",
        python,
        "--python-platform",
        PLATFORM,
        "--no-python-downloads",
        "--custom-compile-command",
        COMMAND,
        *(arg for package in NOT_EMITTED for arg in ("--no-emit-package", package)),
        *(["--upgrade"] if upgrade else []),
        *extra,
        "--output-file",
        str(output),
    ]
    result = subprocess.run(  # noqa: S603 - uv with arguments built here
        command, capture_output=True, text=True, check=False, cwd=versions.REPO_ROOT
    )
    if result.returncode != 0:
        raise LockError(f"uv could not resolve {SOURCE.name}:\n{result.stderr.strip()}")


def lock(*, upgrade: bool) -> str:
    uv = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
    if not uv:
        raise LockError("uv not found: run `make setup` (requirements-dev.txt pins it)")
    python = python_version(versions.load())
    with tempfile.TemporaryDirectory() as tmp:
        requirements, pylock = Path(tmp) / "requirements.txt", Path(tmp) / "pylock.toml"
        if LOCK.is_file():  # uv keeps the pins of an existing output file (unless --upgrade)
            shutil.copy(LOCK, requirements)
        uv_compile(uv, python, requirements, upgrade=upgrade, extra=["--generate-hashes"])
        uv_compile(uv, python, pylock, upgrade=False, extra=["--format", "pylock.toml", "--constraints", str(requirements)])
        text = keep_platform_hashes(requirements.read_text(), platform_hashes(pylock.read_text()))
    note = f"# Target: CPython {python}, {PLATFORM}; only that platform's wheel hashes are kept (containers/sglang-efa/lock.py).\n"
    return note + text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--upgrade", action="store_true", help="re-resolve every package instead of keeping the current pins")
    args = parser.parse_args(argv)
    try:
        text = lock(upgrade=args.upgrade)
    except (LockError, versions.VersionsError) as exc:
        print(f"lock: {exc}", file=sys.stderr)
        return 1
    LOCK.write_text(text)
    packages = sum(1 for line in text.splitlines() if line and not line[0].isspace() and not line.startswith("#"))
    print(f"lock: {LOCK.relative_to(versions.REPO_ROOT)}: {packages} packages for CPython {python_version(versions.load())}, {PLATFORM}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
