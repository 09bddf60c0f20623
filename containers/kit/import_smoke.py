#!/usr/bin/env python3
"""Import smoke test: import what the image ships, as serving or a validation Job would, without a GPU.

    python3 /opt/kit/import_smoke.py                     # profile from /opt/kit/expected.json
    python3 /opt/kit/import_smoke.py --profile serving

selftest.py reads metadata and ELF files; this imports. It matters because SGLang hides a broken
deep_ep: sglang/srt/layers/moe/token_dispatcher/deepep.py wraps `from deep_ep import Buffer, Config` in a
try/except, sets `use_deepep = False` and raises only when the dispatcher is built, at model start-up
inside the Capacity Block. Here the dispatcher module must report `use_deepep` True.

containers/build.sh runs it as `docker run` of the built image before the push, not as a RUN step:
torch's oneMKL initialization fails inside BuildKit (AWS's UCCL-EP recipe, awslabs/awsome-distributed-ai
3.test_cases/pytorch/sglang/dsr1-deepep-efa/Dockerfile.uccl). Without a GPU there is no driver
libcuda.so.1; libraries that link it get the CUDA toolkit's stub (lib64/stubs/libcuda.so, whose soname is
libcuda.so.1 and whose calls return CUDA_ERROR_STUB_LIBRARY), which loads but drives no device.

Each import runs in its own interpreter, so one crash cannot hide the others. Standard library only.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

EXPECTED_FILE = Path("/opt/kit/expected.json")
DRIVER_LIBRARY = "libcuda.so.1"
STUB_LIBRARY = Path("lib64/stubs/libcuda.so")
TIMEOUT_SECONDS = 600


@dataclass(frozen=True)
class Probe:
    name: str
    code: str


TORCH = Probe("torch", "import torch; print(torch.__version__)")
UCCL_EP = Probe("uccl.ep (UCCL-EP kernels and EFA proxies)", "import uccl.ep")
DEEP_EP = Probe(
    "deep_ep is UCCL-EP's wrapper",
    "from deep_ep import Buffer, Config; import deep_ep, pathlib; "
    "assert 'uccl' in pathlib.Path(deep_ep.__file__).read_text(), deep_ep.__file__ + ' is not UCCL-EP deep_ep_wrapper'",
)
# The sglang-deepep image: deep_ep must be the module the sgl-deep-ep distribution installed (its RECORD
# lists the very file Python imported), and UCCL must be absent, so a UCCL wrapper cannot pass for it.
DEEP_EP_UPSTREAM = Probe(
    "deep_ep is upstream DeepEP (sgl-deep-ep)",
    "from deep_ep import Buffer, Config; import deep_ep, importlib.metadata as md, pathlib; "
    "init = pathlib.Path(deep_ep.__file__).resolve(); dist = md.distribution('sgl-deep-ep'); "
    "owned = {pathlib.Path(dist.locate_file(f)).resolve() for f in dist.files or []}; "
    "assert init in owned, f'{init} is not a file of sgl-deep-ep'; "
    "assert 'uccl' not in init.read_text(), f'{init} is UCCL-EP deep_ep_wrapper'; print('sgl-deep-ep', dist.version)",
)
NO_UCCL = Probe(
    "UCCL-EP absent",
    "import importlib.util; assert importlib.util.find_spec('uccl') is None, 'uccl is installed: this is not upstream DeepEP'",
)
SGLANG_DISPATCHER = Probe(
    "SGLang's DeepEP dispatcher sees deep_ep",
    "import sglang.srt.layers.moe.token_dispatcher.deepep as dispatcher; "
    "assert dispatcher.use_deepep is True, 'use_deepep is False: SGLang could not import deep_ep (see the deep_ep row)'",
)
NIXL = Probe("NIXL", "from nixl._api import nixl_agent, nixl_agent_config")
MOONCAKE = Probe("Mooncake transfer engine", "from mooncake.engine import TransferEngine")
PROBES: dict[str, tuple[Probe, ...]] = {
    "serving": (TORCH, UCCL_EP, DEEP_EP, SGLANG_DISPATCHER, NIXL, MOONCAKE),
    "serving-deepep": (TORCH, NO_UCCL, DEEP_EP_UPSTREAM, SGLANG_DISPATCHER, NIXL, MOONCAKE),
    "validation": (
        TORCH,
        UCCL_EP,
        DEEP_EP,
        Probe("NVML bindings (nvidia-ml-py)", "import pynvml"),
    ),
}

Runner = Callable[[Sequence[str], Mapping[str, str]], subprocess.CompletedProcess[str]]


def _run(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), env=dict(env), capture_output=True, text=True, timeout=TIMEOUT_SECONDS, check=False)  # noqa: S603 - this interpreter and a fixed probe from PROBES, no shell


def driver_loadable() -> bool:
    try:
        ctypes.CDLL(DRIVER_LIBRARY)
    except OSError:
        return False
    return True


def stub_dir(cuda_home: Path, into: Path) -> Path:
    """A directory holding libcuda.so.1 -> the toolkit's stub, for LD_LIBRARY_PATH."""
    stub = cuda_home / STUB_LIBRARY
    if not stub.is_file():
        raise SystemExit(f"import_smoke: no {DRIVER_LIBRARY} and no CUDA stub at {stub}; set CUDA_HOME to the toolkit")
    (into / DRIVER_LIBRARY).symlink_to(stub)
    return into


def probe_env(env: Mapping[str, str], stubs: Path | None) -> dict[str, str]:
    out = dict(env)
    if stubs is not None:
        out["LD_LIBRARY_PATH"] = ":".join(part for part in (str(stubs), env.get("LD_LIBRARY_PATH", "")) if part)
    return out


def run_probes(probes: Sequence[Probe], env: Mapping[str, str], runner: Runner = _run) -> list[tuple[Probe, bool, str]]:
    results = []
    for probe in probes:
        try:
            done = runner([sys.executable, "-c", probe.code], env)
        except subprocess.TimeoutExpired:
            results.append((probe, False, f"timed out after {TIMEOUT_SECONDS} s"))
            continue
        output = (done.stdout + done.stderr).strip().splitlines()
        results.append((probe, done.returncode == 0, output[-1] if output else f"exit {done.returncode}"))
    return results


def profile_of(expected: Path) -> str:
    try:
        return str(json.loads(expected.read_text())["profile"])
    except (OSError, ValueError, KeyError) as exc:
        raise SystemExit(f"import_smoke: cannot read the profile from {expected} ({exc}); pass --profile") from None


def main(argv: Sequence[str] | None = None, *, runner: Runner = _run, has_driver: Callable[[], bool] = driver_loadable) -> int:
    parser = argparse.ArgumentParser(description="Import what the image ships, without a GPU.")
    parser.add_argument("--profile", choices=sorted(PROBES))
    parser.add_argument("--expected", type=Path, default=EXPECTED_FILE, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    profile = args.profile or profile_of(args.expected)

    with tempfile.TemporaryDirectory(prefix="import-smoke-") as tmp:
        stubs = None if has_driver() else stub_dir(Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")), Path(tmp))
        results = run_probes(PROBES[profile], probe_env(os.environ, stubs), runner)
    width = max(len(probe.name) for probe, _, _ in results)
    for probe, ok, detail in results:
        print(f"{'ok  ' if ok else 'FAIL'}  {probe.name:<{width}}  {detail}")
    failed = [probe.name for probe, ok, _ in results if not ok]
    if failed:
        print(f"import_smoke: {len(failed)} of {len(results)} imports failed ({profile}); the image must not be pushed", file=sys.stderr)
        return 1
    print(f"import_smoke: {profile}: all {len(results)} imports ok{' (CUDA driver stub)' if stubs else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
