"""Feed every exported command line to SGLang 0.5.23 and the pinned router, in one process.

Runs in .venv-sglang (conformance/requirements-sglang.txt), which has SGLang and the router but
not pdkit: `python conformance/check_sglang.py CASES_JSON`.

For an SGLang case, every node rank of the group is parsed by SGLang's own `prepare_server_args`
and resolved by `ServerArgs.resolve_once()` (the pipeline a real launch runs), on the CPU:
- `--model-path` points at conformance/models/<model>/config.json (the architecture; no weights);
- `$(LWS_*)` are replaced the way LeaderWorkerSet fills them in;
- torch.cuda's device queries are stubbed to the plan's GPU (capability, memory, SMs), while
  `torch.cuda.is_available()` stays False so SGLang never loads its CUDA kernels;
- the ConfigMap and role environment is set for the resolution and restored after it.
Resolved values that the plan also decides (tp, pp, ep, attention CP/DP, DeepEP mode, ...) must
match the plan. A router case is parsed and validated by the router's own launcher and built into
its Rust config. Cases marked `expect_reject` must be rejected, at the stage and with the message
given: the proof that this check can fail.

Also: `python conformance/check_sglang.py --write-help DIR` regenerates the --help texts kept in
conformance/help/ (the weaker, offline check in tests/test_serving_flags.py reads them).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import logging
import os
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

SGLANG_PREFIX = ["python3", "-m", "sglang.launch_server"]
ROUTER_PREFIX = ["python3", "-m", "smg.launch_router"]


class Failed(Exception):
    pass


def stub_gpu(device: dict[str, Any]) -> None:
    import torch

    props = collections.namedtuple("props", "name major minor total_memory multi_processor_count")
    major, minor = device["capability"]
    info = props(device["name"], major, minor, device["total_memory"], device["multi_processor_count"])
    torch.cuda.get_device_capability = lambda *a, **k: (major, minor)
    torch.cuda.get_device_properties = lambda *a, **k: info
    torch.cuda.get_device_name = lambda *a, **k: device["name"]
    torch.cuda.mem_get_info = lambda *a, **k: (int(device["total_memory"] * 0.98), device["total_memory"])
    torch.cuda.current_device = lambda: 0


def substitute(case: dict[str, Any], rank: int) -> list[str]:
    argv = list(case["argv"])
    if argv[:3] != SGLANG_PREFIX:
        raise Failed(f"does not start with {' '.join(SGLANG_PREFIX)}")
    args = argv[3:]
    args[args.index("--model-path") + 1] = case["model_config_dir"]
    lws = case["lws"]
    values = {
        "$(LWS_LEADER_ADDRESS)": lws["leader_address"],
        "$(LWS_GROUP_SIZE)": str(lws["group_size"]),
        "$(LWS_WORKER_INDEX)": str(rank),
    }
    out = []
    for arg in args:
        for var, value in values.items():
            arg = arg.replace(var, value)
        if "$(" in arg:
            raise Failed(f"unexpanded variable in {arg!r}")
        out.append(arg)
    return out


@contextlib.contextmanager
def environment(env: dict[str, str]):
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def captured_logs():
    """SGLang logs every decision at INFO; keep them, and print them only for a failing case."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logging.Formatter("    | %(message)s"))
    root = logging.getLogger()
    with contextlib.redirect_stderr(buffer):
        try:
            yield buffer, handler
        finally:
            root.removeHandler(handler)


def resolve(args: list[str], env: dict[str, str]) -> tuple[str, Any, str]:
    """('ok', resolved view, logs) or ('parse'|'resolve', error message, logs)."""
    from sglang.srt.arg_groups.model_override_base import resolved_view
    from sglang.srt.server_args import prepare_server_args

    with environment(env), captured_logs() as (buffer, handler):
        try:
            server_args = prepare_server_args(args)
        except SystemExit:
            return "parse", buffer.getvalue().strip().splitlines()[-1], buffer.getvalue()
        # prepare_server_args re-configures the root logger: route it into the buffer.
        root = logging.getLogger()
        root.handlers = [handler]
        root.setLevel(logging.INFO)
        try:
            server_args.resolve_once()
        except BaseException as exc:  # SGLang validates with assert as well as ValueError
            return "resolve", f"{type(exc).__name__}: {exc}", buffer.getvalue()
        return "ok", resolved_view(server_args), buffer.getvalue()


def resolved(view: Any, dotted: str) -> Any:
    """A resolved field, or one inside a resolved config object (`cuda_graph_config.decode.bs`)."""
    value = view
    for part in dotted.split("."):
        value = value.get(part, "<missing>") if isinstance(value, dict) else getattr(value, part, "<missing>")
    return list(value) if isinstance(value, tuple) else value


_SGLANG_SOURCE: list[str] = []


def unread_sglang_variables(env: dict[str, str]) -> list[str]:
    """The SGLANG_* variables of `env` that no file of the installed SGLang names: a variable nothing reads is a decision
    that does nothing (SGLANG_ENABLE_SPEC_V2, from public GLM-5 recipes, is read nowhere in 0.5.23)."""
    names = [name for name in env if name.startswith("SGLANG_")]
    if not names:
        return []
    if not _SGLANG_SOURCE:
        import sglang

        root = Path(sglang.__file__).parent
        _SGLANG_SOURCE.append("\n".join(f.read_text(errors="replace") for f in root.rglob("*.py")))
    return sorted(name for name in names if name not in _SGLANG_SOURCE[0])


def check_sglang(case: dict[str, Any]) -> list[str]:
    stub_gpu(case["device"])
    unread = unread_sglang_variables(case.get("env", {}))
    if unread:
        raise Failed(f"sets {', '.join(unread)}, which the installed SGLang never reads: remove it from the renderer")
    notes = []
    for rank in range(case["lws"]["group_size"]):
        args = substitute(case, rank)
        outcome, value, logs = resolve(args, case.get("env", {}))
        where = f"node-rank {rank}"
        reject = case.get("expect_reject")
        if reject:
            if outcome == "ok":
                raise Failed(f"{where}: accepted, but SGLang should reject it at {reject['stage']} ({reject['message']})")
            if outcome != reject["stage"] or reject["message"] not in value:
                raise Failed(f"{where}: rejected at {outcome} with {value!r}; expected {reject['stage']} with {reject['message']!r}")
            notes.append(f"rejected at {outcome}: {value[:110]}")
            break
        if outcome != "ok":
            raise Failed(f"{where}: rejected at {outcome}: {value}\n{logs}")
        wrong = {k: (resolved(value, k), v) for k, v in case["expect"].items() if resolved(value, k) != v}
        if wrong:
            detail = ", ".join(f"{k}={got!r} (plan: {want!r})" for k, (got, want) in wrong.items())
            raise Failed(f"{where}: SGLang resolved {detail}\n{logs}")
    if not case.get("expect_reject"):
        notes.append(f"{case['lws']['group_size']} node rank(s) resolved; ep={case['expect']['ep_size']}")
    return notes


def check_router(case: dict[str, Any]) -> list[str]:
    from smg.launch_router import parse_router_args
    from smg.router import Router

    argv = list(case["argv"])
    if argv[:3] != ROUTER_PREFIX:
        raise Failed(f"does not start with {' '.join(ROUTER_PREFIX)}")
    reject = case.get("expect_reject")
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stderr(buffer):
            router_args = parse_router_args(argv[3:])
            router_args._validate_router_args()
            Router.from_args(router_args)
    except (SystemExit, ValueError) as exc:
        message = (buffer.getvalue().strip().splitlines() or [str(exc)])[-1]
        if reject and reject["message"] in message:
            return [f"rejected at parse: {message[:110]}"]
        raise Failed(f"router rejected it: {message}") from None
    if reject:
        raise Failed(f"accepted, but the router should reject it ({reject['message']})")
    expect = case["expect"]
    # Each expected field is the parsed argument of that name, but the policies: smg's rule is a per-role policy,
    # else the main --policy (RouterArgs._validate_router_args).
    got = {k: getattr(router_args, k) for k in expect} | {
        "prefill_policy": router_args.prefill_policy or router_args.policy,
        "decode_policy": router_args.decode_policy or router_args.policy,
    }
    wrong = {k: (got[k], v) for k, v in expect.items() if got[k] != v}
    if wrong:
        raise Failed("router parsed " + ", ".join(f"{k}={g!r} (plan: {w!r})" for k, (g, w) in wrong.items()))
    policies = f"prefill {got['prefill_policy']}, decode {got['decode_policy']}{' dp-aware' if got['dp_aware'] else ''}"
    return [f"workers discovered by label in {got['service_discovery_namespace']}; {policies}"]


def write_help(out: Path) -> None:
    from sglang.srt.server_args import ServerArgs
    from smg.launch_router import parse_router_args

    out.mkdir(parents=True, exist_ok=True)
    os.environ["COLUMNS"] = "120"  # argparse wraps to the terminal: keep the files stable
    sys.argv[0] = " ".join(ROUTER_PREFIX[:3])
    parser = argparse.ArgumentParser(prog=" ".join(SGLANG_PREFIX))
    ServerArgs.add_cli_args(parser)
    (out / "sglang-0.5.23-launch_server.txt").write_text(parser.format_help())
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.suppress(SystemExit):
        parse_router_args(["--help"])
    (out / "smg-1.13.0-launch_router.txt").write_text(buffer.getvalue())
    print(f"wrote {out}/sglang-0.5.23-launch_server.txt and {out}/smg-1.13.0-launch_router.txt")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="?", type=Path)
    parser.add_argument("--write-help", type=Path, metavar="DIR")
    args = parser.parse_args(argv)
    if args.write_help:
        write_help(args.write_help)
        return 0
    if not args.cases:
        parser.error("give the cases.json written by conformance/export_cases.py")
    started = time.monotonic()
    exported = json.loads(args.cases.read_text())
    installed = {name: metadata.version(name) for name in exported["pins"]}
    print("conformance: " + ", ".join(f"{name} {version}" for name, version in installed.items()))
    if installed != exported["pins"]:
        print(f"conformance: the kit renders for {exported['pins']} but .venv-sglang has {installed}: run `make lock-sglang`")
        return 1
    cases = exported["cases"]
    failures = 0
    for case in cases:
        check = check_router if case["kind"] == "router" else check_sglang
        try:
            notes = check(case)
        except Failed as exc:
            failures += 1
            print(f"FAIL {case['id']}: {exc}")
            continue
        print(f"ok   {case['id']}: {'; '.join(notes)}")
    print(f"conformance: {len(cases)} cases in {time.monotonic() - started:.0f} s")
    print(f"conformance: {len(cases) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
