"""A one-run remote shell for Open MPI inside the validation Job (standard library only).

nccl-tests need MPI to span nodes, and Open MPI's launcher starts its daemon (`orted`) on every other
node through an rsh agent, normally ssh. The validation image has Open MPI but no sshd, and the kit
adds neither sshd nor an MPI operator to the cluster. Instead, each worker pod runs `agent.py serve`
and the launcher pod gives mpirun `--mca plm_rsh_agent "python3 agent.py rsh"`: mpirun calls it as
ssh (`rsh HOST COMMAND...`), it sends the command to HOST's agent, streams the output back and exits
with the command's exit code. Both sides hold a random token that `pdkit validate` puts in a Secret
for this run only; a request without it is refused. The agent serves until `agent.py stop` or its
idle timeout, then exits, so the Job completes.

Mounted into the pods from a ConfigMap; also imported by the tests, which run it on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

PORT_ENV = "PDKIT_AGENT_PORT"
TOKEN_ENV = "PDKIT_AGENT_TOKEN"  # noqa: S105 - the name of the variable, not a secret
DEFAULT_PORT = 47600
OUTPUT, EXIT = b"o", b"x"
REFUSED = 255
_HEADER = struct.Struct("!cI")


def _token() -> str:
    token = os.environ.get(TOKEN_ENV, "")
    if len(token) < 16:
        raise SystemExit(f"agent: {TOKEN_ENV} is unset or too short; it comes from the run's Secret")
    return token


def _port() -> int:
    return int(os.environ.get(PORT_ENV, str(DEFAULT_PORT)))


def _send(conn: socket.socket, kind: bytes, payload: bytes) -> None:
    conn.sendall(_HEADER.pack(kind, len(payload)) + payload)


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data


def _read_request(conn: socket.socket) -> dict[str, str]:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            raise ConnectionError("connection closed before the request")
        buf += chunk
        if len(buf) > 1 << 20:
            raise ConnectionError("request too large")
    request: dict[str, str] = json.loads(buf)
    return request


def _run(conn: socket.socket, command: str) -> int:
    # The command is what mpirun would have given ssh; like sshd, run it through a shell.
    proc = subprocess.Popen(  # noqa: S603 - authenticated by the run's token, the whole point of an rsh agent
        ["/bin/sh", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )

    def hang_up_watch() -> None:
        # mpirun kills its rsh agent when it aborts: the connection closes and the daemon must go too.
        with contextlib.suppress(OSError):
            while conn.recv(1):
                pass
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)

    threading.Thread(target=hang_up_watch, daemon=True).start()
    stdout = proc.stdout
    assert stdout is not None
    try:
        # os.read returns what the pipe holds now, so output streams as the daemon writes it.
        for chunk in iter(lambda: os.read(stdout.fileno(), 65536), b""):
            _send(conn, OUTPUT, chunk)
    except OSError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    code = proc.wait()
    with contextlib.suppress(OSError):
        _send(conn, EXIT, struct.pack("!i", code))
    return code


def serve(*, host: str, port: int, idle_timeout: float, token: str) -> int:
    """Run commands for holders of `token` until asked to stop; 0 on stop, 3 on idle timeout."""
    with socket.create_server((host, port), reuse_port=False) as server:
        server.settimeout(1.0)
        print(f"agent: listening on {host}:{port}", flush=True)
        last = time.monotonic()
        while True:
            try:
                conn, peer = server.accept()
            except TimeoutError:
                if time.monotonic() - last > idle_timeout:
                    print(f"agent: nothing asked for {idle_timeout:.0f} s; exiting", flush=True)
                    return 3
                continue
            last = time.monotonic()
            with conn:
                conn.settimeout(None)
                try:
                    request = _read_request(conn)
                except (ConnectionError, ValueError, OSError) as err:
                    print(f"agent: bad request from {peer[0]}: {err}", flush=True)
                    continue
                if not hmac.compare_digest(str(request.get("token", "")), token):
                    print(f"agent: refused {peer[0]} (wrong token)", flush=True)
                    with contextlib.suppress(OSError):
                        _send(conn, EXIT, struct.pack("!i", REFUSED))
                    continue
                op = request.get("op")
                if op == "ping":
                    _send(conn, EXIT, struct.pack("!i", 0))
                elif op == "stop":
                    _send(conn, EXIT, struct.pack("!i", 0))
                    print("agent: stop requested", flush=True)
                    return 0
                elif op == "exec":
                    command = request.get("command", "")
                    print(f"agent: {peer[0]} runs: {command[:200]}", flush=True)
                    code = _run(conn, command)
                    print(f"agent: command exited {code}", flush=True)
                last = time.monotonic()


def request(host: str, port: int, token: str, op: str, command: str = "", *, timeout: float | None = None) -> int:
    """Send one request; stream any output to stdout; return the remote exit code."""
    with socket.create_connection((host, port), timeout=timeout) as conn:
        conn.settimeout(None)
        conn.sendall(json.dumps({"token": token, "op": op, "command": command}).encode() + b"\n")
        out = sys.stdout.buffer
        while True:
            kind, size = _HEADER.unpack(_recv_exact(conn, _HEADER.size))
            payload = _recv_exact(conn, size)
            if kind == OUTPUT:
                out.write(payload)
                out.flush()
            else:
                code: int = struct.unpack("!i", payload)[0]
                return code


def wait(hosts: Sequence[str], port: int, token: str, *, timeout: float, interval: float = 2.0) -> int:
    """Block until every host's agent answers a ping; 0 when all do, 1 at the timeout."""
    deadline = time.monotonic() + timeout
    pending = list(hosts)
    while pending:
        for host in list(pending):
            with contextlib.suppress(OSError, ConnectionError):
                if request(host, port, token, "ping", timeout=5) == 0:
                    pending.remove(host)
        if pending and time.monotonic() > deadline:
            print(f"agent: no answer from {', '.join(pending)} after {timeout:.0f} s", file=sys.stderr, flush=True)
            return 1
        if pending:
            time.sleep(interval)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agent.py", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="op", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--bind", default="0.0.0.0")  # noqa: S104 - the pod's own address; the token gates every request
    s.add_argument("--idle-timeout", type=float, default=1800)
    r = sub.add_parser("rsh", help="called by mpirun as its ssh: rsh HOST COMMAND...")
    r.add_argument("host")
    r.add_argument("command", nargs=argparse.REMAINDER)
    w = sub.add_parser("wait")
    w.add_argument("--timeout", type=float, default=600)
    w.add_argument("hosts", nargs="+")
    t = sub.add_parser("stop")
    t.add_argument("hosts", nargs="+")
    args = parser.parse_args(argv)
    token, port = _token(), _port()
    if args.op == "serve":
        return serve(host=args.bind, port=port, idle_timeout=args.idle_timeout, token=token)
    if args.op == "rsh":
        # ssh joins its arguments with spaces into one remote command line; so does this agent.
        try:
            return request(args.host, port, token, "exec", " ".join(args.command))
        except (OSError, ConnectionError) as err:
            print(f"agent: cannot run on {args.host}: {err}", file=sys.stderr, flush=True)
            return REFUSED
    if args.op == "wait":
        return wait(args.hosts, port, token, timeout=args.timeout)
    code = 0
    for host in args.hosts:
        try:
            code = max(code, request(host, port, token, "stop", timeout=10))
        except (OSError, ConnectionError) as err:
            print(f"agent: {host} did not take the stop: {err}", file=sys.stderr, flush=True)
            code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
