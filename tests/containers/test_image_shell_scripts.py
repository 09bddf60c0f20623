"""Shell scripts under containers/: shellcheck clean, strict mode, executable."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from container_paths import CONTAINERS_DIR, shell_scripts, tool

SCRIPTS = shell_scripts()


def shellcheck(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("shellcheck"), "--severity=style", "--external-sources", str(path)], capture_output=True, text=True, check=False
    )


def test_scripts_are_found() -> None:
    names = {path.name for path in SCRIPTS}
    assert {"install-efa-installer.sh", "build-uccl-ep.sh", "nccl-tests.sh", "efa-pingpong.sh", "uccl-ep-bench.sh"} <= names


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(CONTAINERS_DIR)))
def test_shellcheck_clean(path: Path) -> None:
    result = shellcheck(path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(CONTAINERS_DIR)))
def test_strict_mode_and_executable(path: Path) -> None:
    """Images run these directly (RUN /opt/kit/x.sh), so they need +x, and must stop at the first error."""
    text = path.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    assert os.access(path, os.X_OK), f"chmod +x {path}"


def test_shellcheck_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/usr/bin/env bash\nfor f in $(ls *.txt); do echo $f; done\ncd $1\n")
    result = shellcheck(bad)
    assert result.returncode != 0
    assert "SC2045" in result.stdout or "SC2086" in result.stdout


WRAPPER = CONTAINERS_DIR / "kit" / "bin" / "nccl-tests.sh"


def nccl_tests_output(net: str, footer_bw: str) -> str:
    """An all_reduce_perf run in nccl-tests v2.19.6's format (src/util.cu writeResultFooter), after NCCL's INIT/NET lines."""
    return (
        f"{net}"
        "# nccl-tests version 2.19.6 nccl-headers=23007 nccl-library=23007\n"
        "# Collective test starting: all_reduce_perf\n"
        "#\n"
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong \n"
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         \n"
        "  1073741824     268435456     float     sum      -1  5804.62  184.98  358.40       0  5833.79  184.06  356.61       0\n"
        " 17179869184    4294967296     float     sum      -1  92198.9  186.33  361.02       0  92662.2  185.40  359.22       0\n"
        "# Out of bounds values : 0 OK\n"
        f"# Avg bus bandwidth    : {footer_bw}\n"
        "#\n"
        "# Collective test concluded: all_reduce_perf\n"
    )


# aws-ofi-nccl's own lines (nccl_ofi_net.cpp "Selected provider is %s, fabric is %s (found %d nics)"; the
# NVIDIA plugin is named "Libfabric", "AWS Libfabric" only when NCCL_NET asks for that old name).
EFA = (
    "pod-0:61:61 [0] NCCL INFO NET/Plugin: Loaded net plugin Libfabric (v10)\n"
    "pod-0:61:61 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found 16 nics)\n"
    "pod-0:61:61 [0] NCCL INFO Using network Libfabric\n"
)
EFA_OLD_NAME = EFA.replace("Using network Libfabric", "Using network AWS Libfabric")
OFI_ON_TCP = EFA.replace("provider is efa, fabric is efa (found 16 nics)", "provider is tcp, fabric is 10.0.0.0/16 (found 1 nics)")
SOCKET = "pod-0:61:61 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.1.5<0>\npod-0:61:61 [0] NCCL INFO Using network Socket\n"


def wrapper(log: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(WRAPPER), *flags, "--", "printf", "%s", log], capture_output=True, text=True, check=False)


def test_nccl_tests_wrapper_gates_on_the_efa_provider() -> None:
    """Fails on sockets and on aws-ofi-nccl over tcp; passes on the efa provider with either plugin name."""
    assert wrapper(nccl_tests_output(SOCKET, "12.5 ")).returncode == 1
    assert wrapper(nccl_tests_output(SOCKET, "12.5 "), "--allow-socket").returncode == 0
    assert wrapper(nccl_tests_output(OFI_ON_TCP, "3.1 ")).returncode == 1, "aws-ofi-nccl on libfabric's tcp provider is not EFA"
    assert wrapper(nccl_tests_output("", "380.25 ")).returncode == 1, "no provider line at all"
    assert wrapper(nccl_tests_output(EFA.replace("provider is efa,", "provider is efab,"), "380.25 ")).returncode == 1
    for net in (EFA, EFA_OLD_NAME):
        passed = wrapper(nccl_tests_output(net, "380.25 "))
        assert passed.returncode == 0, passed.stderr
        assert "nccl-tests: PASS" in passed.stdout


@pytest.mark.parametrize(
    ("footer", "floor", "passes", "shown"),
    [
        ("380.25 ", "300", True, "380.25"),  # NCCL_TESTS_MIN_BW unset: "%g %s" with "" leaves a trailing space
        ("380.25 OK", "300", True, "380.25"),  # NCCL_TESTS_MIN_BW set and met: the old $NF read "OK"
        ("380.25 OK", "400", False, "380.25"),
        ("12.5 FAILED", "10", True, "12.5"),  # our floor is separate from NCCL_TESTS_MIN_BW's
        ("12.5 FAILED", "300", False, "12.5"),
        ("1.5e+02 OK", "100", True, "1.5e+02"),  # %g may print an exponent
        ("-nan ", "300", False, "unknown"),
    ],
)
def test_nccl_tests_wrapper_reads_the_bandwidth_not_the_verdict(footer: str, floor: str, passes: bool, shown: str) -> None:
    result = wrapper(nccl_tests_output(EFA, footer), "--min-busbw", floor)
    assert (result.returncode == 0) is passes, result.stdout[-300:] + result.stderr
    assert shown in (result.stdout if passes else result.stderr)


def test_nccl_tests_wrapper_reads_mpirun_tagged_output() -> None:
    """mpirun --tag-output prefixes every line with [job,rank]<stdout>: ; the footer still parses."""
    tagged = "".join(f"[1,0]<stdout>:{line}\n" for line in nccl_tests_output(EFA, "361.02 OK").splitlines())
    result = wrapper(tagged, "--min-busbw", "300")
    assert result.returncode == 0, result.stderr
    assert "average bus bandwidth 361.02 GB/s" in result.stdout


def test_nccl_tests_wrapper_fails_without_a_footer_when_a_floor_is_set() -> None:
    log = EFA + "# Out of bounds values : 0 OK\n"
    assert wrapper(log).returncode == 0
    failed = wrapper(log, "--min-busbw", "300")
    assert failed.returncode == 1
    assert "unknown" in failed.stderr
