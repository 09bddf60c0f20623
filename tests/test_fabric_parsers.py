"""The log parsers read each tool's real output format (fixtures: SYNTHETIC numbers, real formats)."""

from __future__ import annotations

import pytest

from pdkit.ops.fabric import parsers
from tests.fixtures.fabric.fakes import fixture


def _section(name: str, test: str) -> str:
    return parsers.sections(fixture(name), "pdkit-begin", "pdkit-end", "test")[test][0]


def test_nccl_table_rows_and_footer():
    """Every size row, both halves (out-of-place, in-place), and the summary footer."""
    r = parsers.parse_nccl_tests(_section("nccl-efa.log", "all_reduce_perf"))
    assert r.test == "all_reduce_perf"
    assert len(r.rows) == 32  # 8 B .. 16 GiB doubling
    first, last = r.rows[0], r.rows[-1]
    assert (first.size, first.count, first.dtype, first.redop, first.root) == (8, 2, "float", "sum", -1)
    assert last.size == 16 << 30
    assert last.oop_busbw == pytest.approx(361.02)
    assert last.ip_busbw == pytest.approx(359.22)
    assert r.out_of_bounds == 0
    assert r.avg_busbw == pytest.approx(129.811)
    assert r.wrong == 0


def test_nccl_large_message_busbw_uses_large_sizes_not_the_average():
    """The average over sizes is dominated by tiny messages; the check reads >= 1 GiB rows."""
    r = parsers.parse_nccl_tests(_section("nccl-efa.log", "all_reduce_perf"))
    size, busbw = r.large_message_busbw(1 << 30)
    assert size == 16 << 30
    assert busbw == pytest.approx(361.02)
    assert busbw > 2 * (r.avg_busbw or 0)


def test_nccl_large_message_falls_back_to_the_largest_size_measured():
    text = _section("nccl-efa.log", "alltoall_perf")
    small = "\n".join(
        line for line in text.splitlines() if not line.strip() or line.startswith(("#", "nccl")) or int(line.split()[0]) < 1 << 20
    )
    size, _ = parsers.parse_nccl_tests(small).large_message_busbw(1 << 30)
    assert size == 1 << 19


def test_nccl_efa_provider_and_network():
    r = parsers.parse_nccl_tests(_section("nccl-efa.log", "alltoall_perf"))
    assert r.providers == ("efa",)
    assert r.fabrics == ("efa",)
    assert r.nics == 16
    assert r.networks == ("Libfabric",)
    assert not r.socket_fallback
    assert r.rows[0].redop == "none"


def test_nccl_socket_fallback_is_detected():
    """The silent fallback: 'Using network Socket' and NET/Socket, no NET/OFI provider."""
    r = parsers.parse_nccl_tests(_section("nccl-socket.log", "all_reduce_perf"))
    assert r.socket_fallback
    assert r.providers == ()
    assert r.networks == ("Socket",)


def test_nccl_wrong_values_and_na():
    text = "\n".join(
        [
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong",
            "     1048576        262144     float     sum      -1    50.62   20.71   40.13       3    50.88   20.61   39.93     N/A",
            "# Out of bounds values : 3 FAILED",
        ]
    )
    r = parsers.parse_nccl_tests(text)
    assert r.rows[0].oop_wrong == 3
    assert r.rows[0].ip_wrong is None
    assert r.wrong == 3
    assert r.out_of_bounds == 3


def test_nccl_footer_with_min_bw_check():
    """With NCCL_TESTS_MIN_BW set the footer ends in OK/FAILED; the number is still read."""
    r = parsers.parse_nccl_tests("# Avg bus bandwidth    : 12.5 FAILED")
    assert r.avg_busbw == 12.5


def test_fi_pingpong_rows_and_units():
    r = parsers.parse_fi_pingpong(fixture("efa-ok-1.log"))
    assert [row.size for row in r.rows] == [64, 256, 1024, 4096, 65536, 1048576]
    assert r.latency_us(64) == pytest.approx(14.21)
    assert r.rows[0].sent == r.rows[0].acked == 10000
    assert r.rows[-1].mb_per_s == pytest.approx(10866.07)
    assert r.errors == ()


def test_fi_pingpong_unacked_messages():
    r = parsers.parse_fi_pingpong("64      1k      +5       125k      0.03s      4.23      15.12       0.07")
    assert r.rows[0].sent == 1000
    assert r.rows[0].acked == 995


def test_fi_pingpong_errors():
    text = "fi_getinfo(): util/pingpong.c:1492, ret=-61 (No data available)\n"
    r = parsers.parse_fi_pingpong(text + fixture("efa-broken-1.log"))
    assert r.rows == ()
    assert r.latency_us(64) is None
    assert any("fi_getinfo" in e for e in r.errors)
    assert any("no efa provider" in e for e in r.errors)


def test_uccl_low_latency_per_rank():
    r = parsers.parse_uccl_low_latency(fixture("uccl-ok-0.log") + fixture("uccl-ok-1.log"))
    assert [x.rank for x in r.ranks] == list(range(16))
    assert r.correctness_passed
    assert r.ranks[0].dispatch_combine_us == pytest.approx(298.5)
    assert r.ranks[0].dispatch_us == pytest.approx(139.2)
    assert r.ranks[0].combine_us == pytest.approx(151.3)
    assert r.worst_dispatch_combine_us == max(x.dispatch_combine_us or 0 for x in r.ranks)


def test_uccl_failure_has_no_result():
    r = parsers.parse_uccl_low_latency(fixture("uccl-broken-0.log"))
    assert not r.correctness_passed
    assert r.worst_dispatch_combine_us is None
    assert r.errors[0].startswith("Traceback")


def test_markers_and_sections():
    assert parsers.marker_lines(fixture("efa-ok-0.log"), "pdkit-probe")[0]["uverbs"] == "16"
    found = parsers.sections(fixture("nccl-efa.log"), "pdkit-begin", "pdkit-end", "test")
    assert set(found) == {"all_reduce_perf", "alltoall_perf"}
    assert found["alltoall_perf"][1] == {"test": "alltoall_perf", "status": "0"}
    assert "Collective test starting: all_reduce_perf" in found["all_reduce_perf"][0]
    assert "alltoall" not in found["all_reduce_perf"][0]


def test_unterminated_section_is_kept():
    found = parsers.sections("pdkit-begin test=x\nline", "pdkit-begin", "pdkit-end", "test")
    assert found == {"x": ("line", {})}
