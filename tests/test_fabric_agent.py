"""The rsh agent that lets mpirun start its daemons in the other pods, run for real on 127.0.0.1."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest

from pdkit.fabric import agent

TOKEN = "s3cr3t-token-for-this-test-only"  # noqa: S105 - a test value


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server():
    port = _free_port()
    result: dict[str, int] = {}
    thread = threading.Thread(
        target=lambda: result.setdefault("code", agent.serve(host="127.0.0.1", port=port, idle_timeout=30, token=TOKEN)), daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if agent.request("127.0.0.1", port, TOKEN, "ping", timeout=1) == 0:
                break
        except OSError:
            time.sleep(0.05)
    yield port, thread, result
    if thread.is_alive():
        agent.request("127.0.0.1", port, TOKEN, "stop", timeout=5)
        thread.join(5)


def _rsh(port: int, *command: str, token: str = TOKEN) -> subprocess.CompletedProcess[str]:
    env = {agent.TOKEN_ENV: token, agent.PORT_ENV: str(port), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, agent.__file__, "rsh", "127.0.0.1", *command], env=env, capture_output=True, text=True, timeout=30, check=False
    )


def test_rsh_runs_the_command_like_ssh_and_returns_its_exit_code(server):
    """mpirun passes the orted command as several words; ssh joins them for a shell: so does the agent."""
    port, _, _ = server
    done = _rsh(port, "echo", "hello;", "echo", "err", ">&2;", "exit", "3")
    assert done.returncode == 3
    assert "hello" in done.stdout
    assert "err" in done.stdout  # stderr is merged into the stream


def test_wrong_token_is_refused(server):
    port, _, _ = server
    done = _rsh(port, "echo", "should-not-run", token="x" * 32)
    assert done.returncode == agent.REFUSED
    assert "should-not-run" not in done.stdout


def test_short_token_refuses_to_start():
    env = {agent.TOKEN_ENV: "short", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, agent.__file__, "serve"], env=env, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode != 0
    assert "too short" in done.stderr


def test_stop_ends_the_server(server):
    port, thread, result = server
    assert agent.request("127.0.0.1", port, TOKEN, "stop", timeout=5) == 0
    thread.join(5)
    assert not thread.is_alive()
    assert result["code"] == 0


def test_serves_several_commands_until_stopped(server):
    """One mpirun per nccl test: the agent must take a second command."""
    port, _, _ = server
    assert _rsh(port, "true").returncode == 0
    assert _rsh(port, "exit 7").returncode == 7


def test_hang_up_kills_the_remote_command(server, tmp_path):
    """When mpirun aborts it kills its rsh agent; the daemon on the other pod must not linger."""
    port, _, _ = server
    marker = tmp_path / "survived"
    env = {agent.TOKEN_ENV: TOKEN, agent.PORT_ENV: str(port), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([sys.executable, agent.__file__, "rsh", "127.0.0.1", f"sleep 2 && touch {marker}"], env=env)
    time.sleep(0.5)
    proc.kill()
    proc.wait(5)
    time.sleep(2.5)
    assert not marker.exists()
    assert _rsh(port, "true").returncode == 0  # and the agent still serves


def test_wait_returns_when_every_agent_answers(server):
    port, _, _ = server
    assert agent.wait(["127.0.0.1"], port, TOKEN, timeout=5) == 0


def test_wait_times_out_on_a_silent_host():
    port = _free_port()
    assert agent.wait(["127.0.0.1"], port, TOKEN, timeout=0.2, interval=0.05) == 1


def test_idle_timeout_exits_so_the_job_can_finish():
    port = _free_port()
    started = time.monotonic()
    assert agent.serve(host="127.0.0.1", port=port, idle_timeout=1, token=TOKEN) == 3
    assert time.monotonic() - started < 10
