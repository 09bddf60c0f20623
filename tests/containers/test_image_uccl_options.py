"""UCCL-EP build options: decided in versions.yaml, passed by build args, applied and checked by build-uccl-ep.sh.

What it encodes: UCCL's ep/setup.py at the pinned commit (da914a2054c29725464803e379bb3b98de90dfa1) reads
`int(os.getenv("PER_EXPERT_BATCHING", "0"))` (adds -DPER_EXPERT_BATCHING to the CXX and NVCC flags) and
`int(os.getenv("USE_DMABUF", "0"))` (prints "Building with DMA-BUF GPU memory registration (USE_DMABUF)" or
"Building without DMA-BUF GPU memory registration"), then a build summary with " > EFA Support: Yes" and
" > CXX Flags: [...]". The stand-in `python setup.py build` below prints what that setup.py prints for the
variables it is given; everything else the script calls (git, readelf, nm, pip) is a stand-in too.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from container_paths import KIT_DIR

SCRIPT = KIT_DIR / "build-uccl-ep.sh"
COMMIT = "da914a2054c29725464803e379bb3b98de90dfa1"

FAKE_SETUP = """#!/usr/bin/env bash
# python setup.py build, as UCCL's ep/setup.py reports it.
env | grep -E '^(PER_EXPERT_BATCHING|USE_DMABUF)=' >>"$CALLS"
batching="${PER_EXPERT_BATCHING:-0}"; dmabuf="${USE_DMABUF:-0}"
if [[ -n "${IGNORE_OPTIONS:-}" ]]; then batching=0; dmabuf=0; fi
flags="'-O3', '-DEFA'"
if [[ "$dmabuf" == 1 ]]; then echo "Building with DMA-BUF GPU memory registration (USE_DMABUF)"; flags="$flags, '-DUSE_DMABUF'";
else echo "Building without DMA-BUF GPU memory registration"; fi
[[ "$batching" == 1 ]] && flags="$flags, '-DPER_EXPERT_BATCHING'"
echo " > EFA Support: Yes"
echo " > CXX Flags: [$flags]"
mkdir -p build/lib && touch build/lib/ep.abi3.so
"""
FAKE_GIT = """#!/usr/bin/env bash
case "$1" in
  init) mkdir -p "$3/ep/deep_ep_wrapper" "$3/uccl" ;;
  -C) [[ "$3" == rev-parse ]] && echo "$UCCL_COMMIT" ;;
esac
exit 0
"""


def run_script(
    tmp_path: Path, *, batching: str, dmabuf: str, ignore_options: bool = False
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tools = {
        "python": FAKE_SETUP,
        "git": FAKE_GIT,
        "readelf": "#!/usr/bin/env bash\necho ' 0x1 (NEEDED) Shared library: [libefa.so.1]'\n",
        "nm": "#!/usr/bin/env bash\necho '  U efadv_create_qp_ex'\n",
        "pip": "#!/usr/bin/env bash\nexit 0\n",
    }
    for name, text in tools.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    efa = tmp_path / "efa"
    efa.mkdir(exist_ok=True)
    (tmp_path / "include" / "infiniband").mkdir(parents=True, exist_ok=True)
    (tmp_path / "include" / "infiniband" / "efadv.h").write_text("")
    calls = tmp_path / "calls"
    calls.write_text("")
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "CALLS": str(calls),
        "EFA_HOME": str(efa),
        "RDMA_INCLUDE": str(tmp_path / "include"),
        "UCCL_SRC": str(tmp_path / f"src-{batching}{dmabuf}{int(ignore_options)}"),
        "UCCL_REPO": "https://github.com/uccl-project/uccl",
        "UCCL_COMMIT": COMMIT,
        "TORCH_CUDA_ARCH_LIST": "9.0",
        "UCCL_PER_EXPERT_BATCHING": batching,
        "UCCL_USE_DMABUF": dmabuf,
        **({"IGNORE_OPTIONS": "1"} if ignore_options else {}),
    }
    out = tmp_path / "wheels"
    result = subprocess.run(["bash", str(SCRIPT), str(out)], env=env, capture_output=True, text=True, check=False)
    return result, calls.read_text().split()


def test_the_decision_is_recorded_with_its_sources(doc: dict[str, Any], versions: ModuleType) -> None:
    """versions.yaml decides both switches, and both images get them as build args (the same UCCL-EP build)."""
    uccl = doc["components"]["uccl"]
    assert set(uccl["build_options"]) == {"per_expert_batching", "use_dmabuf"}
    assert set(uccl["build_options"].values()) <= {"0", "1"}
    text = versions.VERSIONS_FILE.read_text()
    block = text[text.index("    build_options:") : text.index("      UCCL_PER_EXPERT_BATCHING")]
    for source in ("ep/setup.py", "ep/deep_ep_wrapper/README.md", "ep/README.md", "dsr1-deepep-efa/Dockerfile.uccl"):
        assert source in block, f"the decision names its source {source}"
    for image in ("sglang-efa", "validation"):
        args = versions.build_args(doc, image)
        assert args["UCCL_PER_EXPERT_BATCHING"] == uccl["build_options"]["per_expert_batching"]
        assert args["UCCL_USE_DMABUF"] == uccl["build_options"]["use_dmabuf"]


@pytest.mark.parametrize(("batching", "dmabuf"), [("0", "0"), ("1", "0"), ("0", "1")])
def test_the_options_reach_setup_py_and_the_build_record(tmp_path: Path, batching: str, dmabuf: str) -> None:
    result, calls = run_script(tmp_path, batching=batching, dmabuf=dmabuf)
    assert result.returncode == 0, result.stderr
    assert sorted(calls) == sorted([f"PER_EXPERT_BATCHING={batching}", f"USE_DMABUF={dmabuf}"])
    record = json.loads((tmp_path / "wheels" / "uccl-build.json").read_text())
    assert (record["per_expert_batching"], record["use_dmabuf"]) == (batching, dmabuf)


@pytest.mark.parametrize(("batching", "dmabuf"), [("1", "0"), ("0", "1")])
def test_a_build_that_ignored_an_option_fails(tmp_path: Path, batching: str, dmabuf: str) -> None:
    """A UCCL bump that renames or drops a switch must not silently build the other path."""
    result, _ = run_script(tmp_path, batching=batching, dmabuf=dmabuf, ignore_options=True)
    assert result.returncode != 0
    assert "DMA-BUF" in result.stderr if dmabuf == "1" else "PER_EXPERT_BATCHING" in result.stderr, result.stderr


def test_options_are_zero_or_one(tmp_path: Path) -> None:
    result, calls = run_script(tmp_path, batching="yes", dmabuf="0")
    assert result.returncode != 0
    assert "0 or 1" in result.stderr
    assert not calls
