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


def test_nccl_tests_wrapper_rejects_socket_fallback(tmp_path: Path) -> None:
    """nccl-tests.sh fails on sockets and on aws-ofi-nccl over tcp; passes on the efa provider above the floor."""
    wrapper = CONTAINERS_DIR / "kit" / "bin" / "nccl-tests.sh"
    socket_log = "NCCL INFO NET/Socket : Using [0]eth0\nNCCL INFO Using network Socket\n#  Avg bus bandwidth    : 12.5\n"
    ofi_log = "NCCL INFO NET/OFI Selected Provider is efa (found 16 nics)\nNCCL INFO Using network AWS Libfabric\n#  Avg bus bandwidth    : 380.25\n"
    ofi_on_tcp_log = (
        "NCCL INFO NET/OFI Selected Provider is tcp (found 1 nics)\nNCCL INFO Using network AWS Libfabric\n#  Avg bus bandwidth    : 3.1\n"
    )

    def run(log: str, *flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(wrapper), *flags, "--", "printf", "%s", log], capture_output=True, text=True, check=False)

    assert run(socket_log).returncode == 1
    assert run(socket_log, "--allow-socket").returncode == 0
    passed = run(ofi_log, "--min-busbw", "300")
    assert passed.returncode == 0, passed.stderr
    assert "PASS" in passed.stdout
    assert "380.25" in passed.stdout
    assert run(ofi_log, "--min-busbw", "400").returncode == 1
    assert run("no net line\n").returncode == 1
    assert run(ofi_on_tcp_log).returncode == 1, "aws-ofi-nccl on libfabric's tcp provider is not EFA"
