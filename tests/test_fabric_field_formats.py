"""The fabric parsers read what the tools print in the field: launcher prefixes, every nccl-tests column layout
and its JSON output, each aws-ofi-nccl provider line, fi_pingpong through mpirun, UCCL-EP's split lines.

Fixtures in tests/fixtures/fabric/field/ are BUILT FROM SOURCE by synthesize.py there (invented numbers, the
tools' own format strings; sources in README.md beside them). Each test fails on the parsers before issue 18.
"""

from __future__ import annotations

import json

import pytest

from pdkit.ops.fabric import checks, parsers
from pdkit.ops.fabric.checks import FAIL, PASS
from pdkit.ops.kube import JobRun
from tests.fixtures.fabric.fakes import HERE

FIELD = HERE / "field"


def _read(name: str) -> str:
    return (FIELD / name).read_text()


def _as_kit_log(text: str, test: str = "all_reduce_perf", json_doc: str | None = None) -> str:
    """The launcher pod's log as pdkit/render/fabric.py nccl_script frames each test."""
    framed = f"pdkit-begin test={test}\n{text}pdkit-end test={test} status=0\n"
    if json_doc is not None:
        framed += f"pdkit-begin json={test}\n{json_doc}pdkit-end json={test} status=0\n"
    return framed


def _checks(plan, th, log: str) -> dict[str, checks.Check]:
    return {r.name: r for r in checks.nccl_checks(plan, th, JobRun(logs={0: log}, finished=True))}


def test_mpirun_tag_output_prefixes_are_stripped():
    """Open MPI `mpirun --tag-output` prefixes each line `[1,0]<stdout>:` (AWS's EFA guides run nccl-tests so);
    nccl-tests v2.19.6 src/util.cu rows behind it are read."""
    r = parsers.parse_nccl_tests(_read("nccl-tagged.log"))
    assert r.layout == "v2.13"
    assert len(r.rows) == 8
    assert r.rows[-1].size == 16 << 30
    assert r.rows[-1].oop_busbw == pytest.approx(362.0)
    assert r.providers == ("efa",)
    assert r.nics == 16
    assert r.out_of_bounds == 0


def test_pre_2_13_layout_is_read():
    """nccl-tests before v2.13 (v2.11.0 src/all_reduce.cu print_header): no root column, `error` columns."""
    r = parsers.parse_nccl_tests(_read("nccl-pre-2.13.log"))
    assert r.layout == "pre-2.13"
    assert len(r.rows) == 8
    assert (r.rows[0].redop, r.rows[0].root) == ("sum", -1)
    assert r.rows[-1].oop_busbw == pytest.approx(362.0)
    assert r.rows[-1].ip_busbw == pytest.approx(360.19)
    assert r.rows[-1].oop_wrong is None  # a deviation there, not a count


def test_per_iteration_columns_are_not_read_as_bandwidth():
    """`-I 1` (v2.19.6 writePerIterReport) adds i_min/i_max/i_p99/i_cv% after each group: the in-place
    bandwidth is column 15, not the i_p99 timing that sits where it used to be."""
    r = parsers.parse_nccl_tests(_read("nccl-per-iter.log"))
    assert r.layout == "v2.13 per-iteration"
    last = r.rows[-1]
    assert last.ip_time_us == pytest.approx(89431.3)
    assert last.ip_busbw == pytest.approx(360.19)
    assert last.busbw == pytest.approx(362.0)


def test_unknown_layout_fails_loudly(plan, th):
    """A header the kit does not know reads no row and names itself; the footer alone never makes a PASS."""
    r = parsers.parse_nccl_tests(_read("nccl-unknown-layout.log"))
    assert r.rows == ()
    assert "bw_x" in (r.unknown_header or "")
    rows = _checks(plan, th, _as_kit_log(_read("nccl-unknown-layout.log")))
    assert rows["all_reduce_perf bus bandwidth"].status == FAIL
    assert "unrecognised nccl-tests column header" in rows["all_reduce_perf bus bandwidth"].measured
    assert rows["all_reduce_perf data check"].status == FAIL
    assert "no result row was understood" in rows["all_reduce_perf data check"].measured


def test_tagged_and_pre_2_13_pass_the_checks(plan, th):
    for name in ("nccl-tagged.log", "nccl-pre-2.13.log"):
        rows = _checks(plan, th, _as_kit_log(_read(name)))
        assert rows["all_reduce_perf bus bandwidth"].status == PASS, name
        assert rows["all_reduce_perf bus bandwidth"].measured.startswith("362 GB/s at 16 GiB")
        assert rows["all_reduce_perf data check"].status == PASS


def test_json_output_is_read():
    """nccl-tests' `-J FILE` document (v2.19.6 src/util.cu, JSON_FILE_VERSION 3)."""
    r = parsers.parse_nccl_tests_json(_read("nccl-all_reduce.json"))
    assert r.layout == "json"
    assert r.test == "all_reduce_perf"
    assert len(r.rows) == 8
    assert r.rows[-1].oop_busbw == pytest.approx(362.0)
    assert r.avg_busbw == pytest.approx(198.404)
    assert r.out_of_bounds == 0


def test_json_is_preferred_in_the_kits_runs(plan, th):
    """With the -J document beside the text (the kit's own runs: pdkit/render/fabric.py nccl_script), the
    table comes from the JSON; the provider still comes from the NCCL log, which the JSON does not hold."""
    doc = json.loads(_read("nccl-all_reduce.json"))
    doc["results"][-1]["out_of_place"]["bus_bw"] = 300.5  # differs from the text table's 362
    log = _as_kit_log(_read("nccl-tagged.log"), json_doc=json.dumps(doc) + "\n")
    rows = _checks(plan, th, log)
    assert rows["all_reduce_perf bus bandwidth"].status == PASS
    assert rows["all_reduce_perf bus bandwidth"].measured.startswith("360.19 GB/s at 16 GiB")
    assert rows["all_reduce_perf network"].measured == "provider efa (fabric efa), 16 nics; network Libfabric"


@pytest.mark.parametrize(
    ("text", "provider", "nics"),
    [
        (_read("provider-oldest.log"), "efa", None),
        (_read("provider-tcp.log"), "tcp;ofi_rxm", 1),
        ("host:1:1 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)", "efa", 4),
        ("host:1:1 [0] NCCL INFO NET/OFI Selected provider is tcp, fabric is 10.0.0.0/16 (found 1 nics)", "tcp", 1),
    ],
)
def test_every_aws_ofi_nccl_provider_line(text, provider, nics):
    """aws-ofi-nccl: "Selected Provider is %s" (oldest), "... (found %d nics)" (before 1.9; in nccl-pre-2.13.log
    here too), "Selected provider is %s, fabric is %s (found %d nics)"; prov_name may be a layered "tcp;ofi_rxm",
    and a provider other than efa is read as such."""
    r = parsers.parse_nccl_tests(text)
    assert r.providers == (provider,)
    assert r.nics == nics


def test_tcp_provider_points_at_the_efa_provider_runbook(plan, th):
    """aws-ofi-nccl loaded but bound libfabric's tcp: not NCCL's socket fallback, another runbook section."""
    text = _read("nccl-tagged.log").replace(
        "Selected provider is efa, fabric is efa (found 16 nics)", "Selected Provider is tcp;ofi_rxm (found 1 nics)"
    )
    network = _checks(plan, th, _as_kit_log(text))["all_reduce_perf network"]
    assert network.status == FAIL
    assert network.measured.startswith("provider tcp;ofi_rxm, 1 nics")
    assert "#fi_pingpong-fails" in network.next_step


def test_fi_pingpong_rows_behind_a_rank_prefix(plan, th):
    """libfabric util/pingpong.c rows forwarded by mpirun --tag-output (`[1,1]<stdout>:`)."""
    r = parsers.parse_fi_pingpong(_read("pingpong-tagged.log"))
    assert [row.size for row in r.rows] == [64, 256, 1024]
    assert r.latency_us(64) == pytest.approx(14.61)
    assert checks._pingpong(th, "a <-> b", _read("pingpong-tagged.log")).status == PASS


def test_uccl_split_dispatch_and_combine_lines(plan, th):
    """Dispatch and combine each on their own `[rank N]` line with min_t/max_t, no combined line: the
    timing is their sum, and the reason never says correctness when correctness passed."""
    r = parsers.parse_uccl_low_latency(_read("uccl-split-lines.log"))
    assert [(x.rank, x.dispatch_us, x.combine_us) for x in r.ranks] == [(0, 121.37, 160.52), (1, 123.05, 158.9)]
    assert r.worst_dispatch_combine_us == pytest.approx(281.95)
    rows = checks.uccl_checks(plan, th, "uccl-decode", JobRun(logs={0: _read("uccl-split-lines.log")}, finished=True))
    assert [x.status for x in rows] == [PASS, PASS]
    assert "summed: no combined line printed" in rows[1].measured
