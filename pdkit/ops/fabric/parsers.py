"""Parsers for what the validation Jobs print, in each tool's own output format.

- nccl-tests (NVIDIA/nccl-tests v2.19, src/util.cu): the result table (size, count, type, redop,
  root, then time/algbw/busbw/#wrong out-of-place and in-place), `# Out of bounds values : N OK`,
  `# Avg bus bandwidth : X`, plus NCCL's own INFO lines: `NET/OFI Selected provider is efa, fabric is
  efa (found 16 nics)` (aws-ofi-nccl), `Using network Libfabric` or `Using network Socket`.
- fi_pingpong (libfabric util/pingpong.c `show_perf`): `bytes #sent #ack total time MB/sec
  usec/xfer Mxfers/sec` rows such as `64  1k  =1k  125k  0.02s  6.48  9.88  0.10`.
- UCCL-EP `ep/bench/test_low_latency.py`: `[rank N] Dispatch + combine bandwidth: X GB/s, avg_t=Y
  us, ...`, `[rank N] Dispatch bandwidth: X GB/s, avg_t=Y us | Combine bandwidth: ...` and
  `All correctness tests passed!`.
- The node-image pod (pdkit/render/fabric.py `node_image_script`): `KEY=VALUE` lines of
  /etc/pdkit/node-image.env or `absent`; `nvidia-smi --query-gpu=driver_version,name --format=csv,noheader`
  rows (`580.95.05, NVIDIA H200`); the `Fabric` block of `nvidia-smi -q` under each `GPU 00000000:..`
  header (`State : Completed`, `Status : Success`); the /proc/modules lines of efa and efa_nv_peermem.
- The kit's own probe lines (`pdkit-probe key=value ...`, `pdkit-exit ...`) from the Job scripts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


# --- nccl-tests ----------------------------------------------------------------------------------


# Launchers prefix every line they forward: Open MPI `mpirun --tag-output` `[1,0]<stdout>:` (what AWS's EFA
# guides show), Slurm `srun --label` `0: `, `kubectl logs --prefix` `[pod/NAME/CONTAINER] `.
_LAUNCHER_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:\s?|\d+:\s|\[pod/[^\]\s]+\]\s)")


def strip_launcher(line: str) -> str:
    """A line without the launcher's tag, so every parser reads what the tool itself printed."""
    return _LAUNCHER_PREFIX.sub("", line, count=1)


@dataclass(frozen=True)
class NcclRow:
    size: int
    count: int
    dtype: str
    redop: str
    root: int
    oop_time_us: float
    oop_algbw: float
    oop_busbw: float
    oop_wrong: int | None
    ip_time_us: float
    ip_algbw: float
    ip_busbw: float
    ip_wrong: int | None

    @property
    def busbw(self) -> float:
        return max(self.oop_busbw, self.ip_busbw)


# One half of a row, out-of-place or in-place: time (us), algbw, busbw, #wrong (NcclRow's field order).
_Half = tuple[float, float, float, int | None]


@dataclass(frozen=True)
class NcclResult:
    test: str | None
    rows: tuple[NcclRow, ...]
    avg_busbw: float | None
    out_of_bounds: int | None
    providers: tuple[str, ...]
    fabrics: tuple[str, ...]
    nics: int | None
    networks: tuple[str, ...]
    socket_fallback: bool
    warnings: tuple[str, ...] = field(default=())
    # Which column layout the header line announced ("v2.13", "v2.13 per-iteration", "pre-2.13", "json"),
    # and the header line itself when it matched none: then no row is read, and the check must FAIL.
    layout: str | None = None
    unknown_header: str | None = None

    def large_message_busbw(self, min_bytes: int) -> tuple[int, float] | None:
        """(size, busbw) of the best row at or above `min_bytes`, else of the largest size measured."""
        if not self.rows:
            return None
        large = [r for r in self.rows if r.size >= min_bytes] or [max(self.rows, key=lambda r: r.size)]
        best = max(large, key=lambda r: r.busbw)
        return best.size, best.busbw

    @property
    def wrong(self) -> int:
        return sum((r.oop_wrong or 0) + (r.ip_wrong or 0) for r in self.rows)


# aws-ofi-nccl names the libfabric provider it bound (prov_name: "efa", "tcp;ofi_rxm", ...) in three shapes:
# "Selected Provider is %s" (oldest), "Selected Provider is %s (found %d nics)", and
# "Selected provider is %s, fabric is %s (found %d nics)" (current).
_PROVIDER = re.compile(
    r"NET/OFI Selected [Pp]rovider is (?P<prov>[^\s,]+)(?:,? fabric is (?P<fabric>\S+))?(?: \(found (?P<nics>\d+) nics\))?"
)
_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$")
_AVG_BUSBW = re.compile(rf"^#\s*Avg bus bandwidth\s*:\s*({_NUM})")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_TEST_START = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_NCCL_WARN = re.compile(r"NCCL WARN (.+)$")
_GROUP = ("algbw", "busbw")
_PER_ITER = ("i_min", "i_max", "i_p99", "i_cv%")


@dataclass(frozen=True)
class _Layout:
    """Column positions of one nccl-tests table, from its header line."""

    name: str
    redop: int | None
    root: int | None
    oop: int  # index of the out-of-place time column
    ip: int  # index of the in-place time column
    width: int  # columns every data row has (a timestamp may follow)


def _layout(header: list[str]) -> _Layout | None:
    """The header's columns (NVIDIA/nccl-tests: src/util.cu writeResultHeader since v2.13 with redop and
    root always present, `#wrong`, and with -I four i_* columns after each group; before v2.13 each test's
    print_header with only the columns it used and `error`). None for anything else."""
    if header[:3] != ["size", "count", "type"]:
        return None
    i = 3
    redop = root = None
    if i < len(header) and header[i] == "redop":
        redop, i = i, i + 1
    if i < len(header) and header[i] == "root":
        root, i = i, i + 1
    starts = []
    per_iter = False
    for _ in range(2):
        if header[i : i + 1] not in (["time"], ["cputime"]) or tuple(header[i + 1 : i + 3]) != _GROUP:
            return None
        if i + 3 >= len(header) or header[i + 3] not in ("#wrong", "error"):
            return None
        starts.append(i)
        i += 4
        if tuple(header[i : i + 4]) == _PER_ITER:
            per_iter, i = True, i + 4
    if header[i:] not in ([], ["timestamp"]):
        return None
    old = header[starts[0] + 3] == "error"
    name = "pre-2.13" if old else "v2.13 per-iteration" if per_iter else "v2.13"
    return _Layout(name, redop, root, starts[0], starts[1], i)


def parse_nccl_tests(text: str) -> NcclResult:
    rows: list[NcclRow] = []
    providers: list[str] = []
    fabrics: list[str] = []
    networks: list[str] = []
    warnings: list[str] = []
    nics: int | None = None
    avg: float | None = None
    oob: int | None = None
    test: str | None = None
    socket = False
    layout: _Layout | None = None
    unknown: str | None = None
    for raw in text.splitlines():
        line = strip_launcher(raw.rstrip())
        if m := _PROVIDER.search(line):
            providers.append(m.group("prov"))
            if m.group("fabric"):
                fabrics.append(m.group("fabric"))
            if m.group("nics"):
                nics = int(m.group("nics"))
            continue
        if m := _NETWORK.search(line):
            networks.append(m.group(1))
            socket = socket or m.group(1) == "Socket"
            continue
        if "NET/Socket" in line and "NCCL INFO" in line:
            socket = True
            continue
        if m := _NCCL_WARN.search(line):
            warnings.append(m.group(1).strip())
            continue
        stripped = line.strip()
        if m := _AVG_BUSBW.match(stripped):
            avg = float(m.group(1))
            continue
        if m := _OOB.match(stripped):
            oob = int(m.group(1))
            continue
        if m := _TEST_START.match(stripped):
            test = m.group(1)
            continue
        if stripped.startswith("#"):
            header = stripped.lstrip("#").split()
            if header[:1] == ["size"]:
                layout = _layout(header)
                unknown = None if layout else stripped
            continue
        if layout is not None and (row := _nccl_row(stripped.split(), layout)) is not None:
            rows.append(row)
    return NcclResult(
        test=test,
        rows=tuple(rows),
        avg_busbw=avg,
        out_of_bounds=oob,
        providers=tuple(dict.fromkeys(providers)),
        fabrics=tuple(dict.fromkeys(fabrics)),
        nics=nics,
        networks=tuple(dict.fromkeys(networks)),
        socket_fallback=socket,
        warnings=tuple(dict.fromkeys(warnings)),
        layout=layout.name if layout else None,
        unknown_header=unknown,
    )


def _nccl_row(f: list[str], layout: _Layout) -> NcclRow | None:
    if len(f) < layout.width or not f[0].isdigit() or not f[1].isdigit():
        return None

    def half(at: int) -> _Half:
        # Before v2.13 the column after busbw is `error`, the largest relative deviation (%5.0le), not a count.
        return float(f[at]), float(f[at + 1]), float(f[at + 2]), None if layout.name == "pre-2.13" else _wrong(f[at + 3])

    try:
        redop = f[layout.redop] if layout.redop is not None else "-"
        root = int(f[layout.root]) if layout.root is not None else -1
        return NcclRow(int(f[0]), int(f[1]), f[2], redop, root, *half(layout.oop), *half(layout.ip))
    except ValueError:
        return None


def _wrong(cell: str) -> int | None:
    return None if cell == "N/A" else int(float(cell))


def parse_nccl_tests_json(text: str, log: NcclResult | None = None) -> NcclResult:
    """nccl-tests' `-J FILE` document (src/util.cu, JSON_FILE_VERSION 3): `results` rows with `out_of_place` /
    `in_place` {time|cpu_time, alg_bw, bus_bw, nwrong}, `out_of_bounds.count`, `average_bus_bandwidth.bandwidth`.
    The JSON has no NCCL INFO lines: the provider and network come from `log`, the same run's text output.
    Raises ValueError when the text is not that document."""
    import json

    doc = json.loads(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise ValueError("not an nccl-tests -J document (no 'results' list)")

    def num(value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"not a number: {value!r}")
        return float(value)

    def half(h: dict[str, Any]) -> _Half:
        return (
            num(h.get("time", h.get("cpu_time"))),
            num(h["alg_bw"]),
            num(h["bus_bw"]),
            None if h.get("nwrong") is None else int(num(h["nwrong"])),
        )

    rows = []
    for r in doc["results"]:
        oop, ip = r.get("out_of_place"), r.get("in_place")
        if not isinstance(oop, dict) or not isinstance(ip, dict):
            continue  # trace replay writes in-place only
        size, count, dtype = int(r["size"]), int(r["count"]), str(r.get("type", ""))
        redop, root = str(r.get("redop", "")).strip(), int(str(r.get("root", "-1")).strip() or -1)
        rows.append(NcclRow(size, count, dtype, redop, root, *half(oop), *half(ip)))
    oob = doc.get("out_of_bounds")
    avg = doc.get("average_bus_bandwidth")
    args = doc.get("args")
    test = str(args[0]).rsplit("/", 1)[-1] if isinstance(args, list) and args else None
    base = log or parse_nccl_tests("")
    return replace(
        base,
        test=base.test or test,
        rows=tuple(rows),
        avg_busbw=num(avg["bandwidth"]) if isinstance(avg, dict) and "bandwidth" in avg else None,
        out_of_bounds=int(num(oob["count"])) if isinstance(oob, dict) and "count" in oob else None,
        layout="json",
        unknown_header=None,
    )


# --- fi_pingpong ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PingpongRow:
    size: int
    sent: int
    acked: int
    mb_per_s: float
    usec_per_xfer: float


@dataclass(frozen=True)
class PingpongResult:
    rows: tuple[PingpongRow, ...]
    errors: tuple[str, ...]

    def latency_us(self, size: int) -> float | None:
        return next((row.usec_per_xfer for row in self.rows if row.size == size), None)


_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_COUNT_UNITS = {"": 1, "k": 1000, "m": 1000**2, "b": 1000**3}
_PP_ROW = re.compile(rf"^(\d+(?:\.\d)?[kmg]?)\s+(\d+[kmb]?)\s+([=+-])(\d+[kmb]?)\s+\S+\s+({_NUM})s\s+({_NUM})\s+({_NUM})\s+({_NUM})$")
_PP_ERROR = re.compile(r"(\w+\(\): .*ret=-?\d+.*|\[error\].*|efa-pingpong: .*|.*timeout expired.*)")


def _scaled(token: str, units: dict[str, int]) -> int:
    suffix = token[-1] if token[-1].isalpha() else ""
    number = token[: -len(suffix)] if suffix else token
    return int(float(number) * units[suffix])


def parse_fi_pingpong(text: str) -> PingpongResult:
    rows: list[PingpongRow] = []
    errors: list[str] = []
    for raw in text.splitlines():
        line = strip_launcher(raw.strip()).strip()
        if m := _PP_ROW.match(line):
            sent = _scaled(m.group(2), _COUNT_UNITS)
            diff = _scaled(m.group(4), _COUNT_UNITS)
            acked = diff if m.group(3) == "=" else sent + diff if m.group(3) == "-" else sent - diff
            rows.append(
                PingpongRow(
                    size=_scaled(m.group(1), _SIZE_UNITS),
                    sent=sent,
                    acked=acked,
                    mb_per_s=float(m.group(6)),
                    usec_per_xfer=float(m.group(7)),
                )
            )
        elif _PP_ERROR.match(line):
            errors.append(line)
    return PingpongResult(rows=tuple(rows), errors=tuple(errors))


# --- UCCL-EP low-latency bench -------------------------------------------------------------------


@dataclass(frozen=True)
class UcclRank:
    rank: int
    dispatch_combine_us: float | None = None
    dispatch_combine_gbps: float | None = None
    dispatch_us: float | None = None
    combine_us: float | None = None


@dataclass(frozen=True)
class UcclResult:
    ranks: tuple[UcclRank, ...]
    correctness_passed: bool
    errors: tuple[str, ...]

    @property
    def worst_dispatch_combine_us(self) -> float | None:
        """The worst rank's `Dispatch + combine` time; from its separate dispatch and combine times when the
        output has no combined line (kineto-only runs print only those)."""
        values = [r.dispatch_combine_us for r in self.ranks if r.dispatch_combine_us is not None]
        if not values:
            values = [r.dispatch_us + r.combine_us for r in self.ranks if r.dispatch_us is not None and r.combine_us is not None]
        return max(values, default=None)

    @property
    def combined_printed(self) -> bool:
        return any(r.dispatch_combine_us is not None for r in self.ranks)

    @property
    def worst_dispatch_us(self) -> float | None:
        return max((r.dispatch_us for r in self.ranks if r.dispatch_us is not None), default=None)

    @property
    def worst_combine_us(self) -> float | None:
        return max((r.combine_us for r in self.ranks if r.combine_us is not None), default=None)


_UCCL_BOTH = re.compile(rf"\[rank (\d+)\] Dispatch \+ combine bandwidth: ({_NUM}) GB/s, avg_t=({_NUM}) us")
# Dispatch and combine alone: on one line joined by " | " (DeepEP's test_low_latency.py, which UCCL-EP's
# ep/bench keeps), with "(min=..., max=...)" or ", min_t=..., max_t=..." after avg_t in some forks, or each on
# its own `[rank N]` line.
_UCCL_DISPATCH = re.compile(rf"\[rank (\d+)\] Dispatch bandwidth: ({_NUM}) GB/s, avg_t=({_NUM}) us")
_UCCL_COMBINE = re.compile(rf"(?:\[rank (\d+)\] |\| )Combine bandwidth: ({_NUM}) GB/s, avg_t=({_NUM}) us")
_UCCL_ERROR = re.compile(r"(Traceback \(most recent call last\)|\w*Error: .*|AssertionError.*|.*CUDA error.*)")


def parse_uccl_low_latency(text: str) -> UcclResult:
    ranks: dict[int, UcclRank] = {}
    errors: list[str] = []
    passed = False
    for raw in text.splitlines():
        line = strip_launcher(raw.strip()).strip()
        if m := _UCCL_BOTH.search(line):
            rank = int(m.group(1))
            old = ranks.get(rank, UcclRank(rank))
            ranks[rank] = UcclRank(rank, float(m.group(3)), float(m.group(2)), old.dispatch_us, old.combine_us)
        elif (d := _UCCL_DISPATCH.search(line)) or _UCCL_COMBINE.search(line):
            c = _UCCL_COMBINE.search(line)
            rank = int(d.group(1) if d else c.group(1) if c and c.group(1) else -1)
            old = ranks.get(rank, UcclRank(rank))
            ranks[rank] = UcclRank(
                rank,
                old.dispatch_combine_us,
                old.dispatch_combine_gbps,
                float(d.group(3)) if d else old.dispatch_us,
                float(c.group(3)) if c else old.combine_us,
            )
        elif "All correctness tests passed" in line:
            passed = True
        elif _UCCL_ERROR.match(line):
            errors.append(line)
    return UcclResult(ranks=tuple(ranks[k] for k in sorted(ranks)), correctness_passed=passed, errors=tuple(dict.fromkeys(errors)))


# --- Mooncake: SGLang's engine initialization and transfer_engine_bench ---------------------------
# Every line below is one Mooncake prints at the pinned 0.3.13.post1 (tests/fixtures/fabric/README.md
# cites each); glog prefixes them with "I1201 15:42:12.123456 1234 file.cpp:123] ", hence search().
_MC_RESULT = re.compile(rf"Test completed: duration ({_NUM}), batch count (\d+), throughput ({_NUM}) (GB|GiB|Gb|MB|MiB|Mb|KB|KiB|Kb)/s")
# transfer_engine_bench.cpp RATE_UNIT_MP, as GB (10^9 bytes) per unit.
_MC_UNITS = {"GB": 1.0, "GiB": (1 << 30) / 1e9, "Gb": 1 / 8, "MB": 1e-3, "MiB": (1 << 20) / 1e9, "Mb": 1e-3 / 8}
_MC_UNITS |= {"KB": 1e-6, "KiB": 1024 / 1e9, "Kb": 1e-6 / 8}
_MC_DEVICE = re.compile(r"EFA device \(libfabric\): ([^,\s]+)")
_MC_REGISTER = re.compile(r"(fi_mr_reg\w* failed.*|Failed to register memory.*|Check failed: !rc.*)")
_MC_PERMISSION = re.compile(r".*Operation not permitted.*")
_MC_TRANSPORT = re.compile(
    r"(Failed to install (?:EFA )?transport.*|Unsupported protocol.*|Check failed: xport.*|EfaTransport: No available EFA devices.*"
    r"|EfaTransport: cannot .*)"
)
_MC_TRANSFER = re.compile(r"(EFA submitSlicesOnPeer: .*|EFA CQ error: .*|Unable to get target segment ID.*|\] FAILED$)")
_MC_PYTHON = re.compile(r"^(Traceback \(most recent call last\)|\w*Error: .*)")


@dataclass(frozen=True)
class MooncakeResult:
    role: str | None  # "target" or "initiator", from the kit's marker
    protocol: str | None  # MOONCAKE_PROTOCOL as SGLang would read it
    init_rc: int | None  # TransferEngine.initialize's return code (0 = ready)
    efa_installed: bool  # "EFA transport installed successfully"
    tcp_installed: bool  # "TCP transport installed successfully": the silent fallback
    devices: tuple[str, ...]
    gbps: float | None  # the bench's throughput, in GB/s (10^9 bytes)
    duration_s: float | None
    registration_errors: tuple[str, ...]
    permission_errors: tuple[str, ...]
    transport_errors: tuple[str, ...]
    transfer_errors: tuple[str, ...]
    errors: tuple[str, ...]  # anything else that stopped it (Python errors, the kit's own markers)
    exit_status: str | None


def parse_mooncake(text: str) -> MooncakeResult:
    found: dict[str, list[str]] = {k: [] for k in ("register", "permission", "transport", "transfer", "errors")}
    devices: list[str] = []
    role = protocol = status = None
    init_rc: int | None = None
    efa = tcp = False
    gbps = duration = None
    for raw in text.splitlines():
        line = strip_launcher(raw.strip()).strip()
        if line.startswith("pdkit-mooncake "):
            role = dict(_KV.findall(line)).get("role", role)
        elif line.startswith("pdkit-mooncake-init "):
            kv = dict(_KV.findall(line))
            protocol = kv.get("protocol")
            init_rc = int(kv["rc"]) if kv.get("rc", "").lstrip("-").isdigit() else None
        elif line.startswith("pdkit-mooncake-error "):
            found["errors"].append(line.removeprefix("pdkit-mooncake-error "))
        elif line.startswith("pdkit-exit "):
            status = dict(_KV.findall(line)).get("status")
        elif "EFA transport installed successfully" in line:
            efa = True
        elif "TCP transport installed successfully" in line:
            tcp = True
        elif m := _MC_RESULT.search(line):
            duration = float(m.group(1))
            gbps = float(m.group(3)) * _MC_UNITS[m.group(4)]
        elif m := _MC_DEVICE.search(line):
            devices.append(m.group(1))
        elif m := _MC_REGISTER.search(line):
            found["register"].append(m.group(1))
        elif _MC_PERMISSION.match(line):
            found["permission"].append(line)
        elif m := _MC_TRANSPORT.search(line):
            found["transport"].append(m.group(1))
        elif m := _MC_TRANSFER.search(line):
            found["transfer"].append(m.group(1).lstrip("] "))
        elif _MC_PYTHON.match(line):
            found["errors"].append(line)
    return MooncakeResult(
        role=role,
        protocol=protocol,
        init_rc=init_rc,
        efa_installed=efa,
        tcp_installed=tcp,
        devices=tuple(dict.fromkeys(devices)),
        gbps=gbps,
        duration_s=duration,
        registration_errors=tuple(dict.fromkeys(found["register"])),
        permission_errors=tuple(dict.fromkeys(found["permission"])),
        transport_errors=tuple(dict.fromkeys(found["transport"])),
        transfer_errors=tuple(dict.fromkeys(found["transfer"])),
        errors=tuple(dict.fromkeys(found["errors"])),
        exit_status=status,
    )


# --- the kit's own markers -----------------------------------------------------------------------

_KV = re.compile(r"(\w+)=(\S*)")


def marker_lines(text: str, marker: str) -> list[dict[str, str]]:
    """`marker key=value ...` lines as dicts, in order."""
    prefix = marker + " "
    return [dict(_KV.findall(line.strip()[len(prefix) :])) for line in text.splitlines() if line.strip().startswith(prefix)]


def sections(text: str, begin: str, end: str, key: str) -> dict[str, tuple[str, dict[str, str]]]:
    """Text between `begin key=K ...` and `end key=K ...` lines, by K, with the end line's fields."""
    out: dict[str, tuple[str, dict[str, str]]] = {}
    current: str | None = None
    buf: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(begin + " "):
            current = dict(_KV.findall(stripped[len(begin) + 1 :])).get(key)
            buf = []
        elif stripped.startswith(end + " ") and current is not None:
            fields = dict(_KV.findall(stripped[len(end) + 1 :]))
            out[current] = ("\n".join(buf), fields)
            current = None
        elif current is not None:
            buf.append(line)
    if current is not None:
        out[current] = ("\n".join(buf), {})
    return out


# --- the node-image pod ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FabricState:
    gpu: str
    state: str | None
    status: str | None


@dataclass(frozen=True)
class NodeImageReport:
    node: str | None
    env: dict[str, str] | None  # None: the file is absent (EKS-optimized AMI) or the section is missing
    env_absent: bool
    drivers: tuple[str, ...]  # one per GPU row
    gpu_names: tuple[str, ...]
    gpu_error: str | None
    fabric: tuple[FabricState, ...]
    modules: frozenset[str] | None  # None: /proc/modules could not be read
    sections: frozenset[str]


_FABRIC_FIELD = re.compile(r"^\s*(State|Status)\s*:\s*(.*?)\s*$")


def parse_node_image(text: str) -> NodeImageReport:
    found = sections(text, "pdkit-begin", "pdkit-end", "section")
    heads = marker_lines(text, "pdkit-node-image")
    node = heads[-1].get("node") if heads else None

    env: dict[str, str] | None = None
    absent = False
    if "env" in found:
        lines = [ln.strip() for ln in found["env"][0].splitlines() if ln.strip() and not ln.strip().startswith("#")]
        if lines == ["absent"]:
            absent = True
        else:
            env = dict(ln.split("=", 1) for ln in lines if "=" in ln)

    drivers: list[str] = []
    gpu_names: list[str] = []
    gpu_error: str | None = None
    if "gpus" in found:
        body, end = found["gpus"]
        for line in body.splitlines():
            cells = [c.strip() for c in line.split(",")]
            if len(cells) == 2 and re.fullmatch(r"\d+(?:\.\d+)+", cells[0]):
                drivers.append(cells[0])
                gpu_names.append(cells[1])
            elif line.strip():
                gpu_error = gpu_error or line.strip()
        if end.get("status", "0") != "0" and gpu_error is None:
            gpu_error = f"nvidia-smi exit status {end.get('status')}"

    fabric: list[FabricState] = []
    if "fabric" in found:
        gpu: str | None = None
        fields: dict[str, str] = {}
        in_fabric = False
        for line in found["fabric"][0].splitlines():
            if line.startswith("GPU "):
                if gpu is not None:
                    fabric.append(FabricState(gpu, fields.get("State"), fields.get("Status")))
                gpu, fields, in_fabric = line.split()[1], {}, False
            elif line.strip() == "Fabric":
                in_fabric = True
            elif in_fabric and (m := _FABRIC_FIELD.match(line)) and m.group(1) not in fields:
                fields[m.group(1)] = m.group(2)
        if gpu is not None:
            fabric.append(FabricState(gpu, fields.get("State"), fields.get("Status")))

    modules: frozenset[str] | None = None
    if "modules" in found:
        body, end = found["modules"]
        # grep: 0 found, 1 none found, 2 the file could not be read.
        if end.get("status") in ("0", "1"):
            modules = frozenset(line.split()[0] for line in body.splitlines() if line.strip())

    return NodeImageReport(
        node=node,
        env=env,
        env_absent=absent,
        drivers=tuple(drivers),
        gpu_names=tuple(gpu_names),
        gpu_error=gpu_error,
        fabric=tuple(fabric),
        modules=modules,
        sections=frozenset(found),
    )
