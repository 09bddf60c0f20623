"""The runbooks this issue owns stay in step with the code: anchors the CLI points at exist, numbers match the thresholds."""

from __future__ import annotations

import re
from pathlib import Path

from pdkit.ops.fabric import checks
from pdkit.render import bench as bench_manifests

ROOT = Path(__file__).resolve().parent.parent
RUNBOOKS = ROOT / "runbooks"


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation other than - and _ dropped, spaces to hyphens."""
    out = set()
    for line in path.read_text().splitlines():
        if m := re.match(r"^#{1,6}\s+(.*)$", line):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def test_every_next_step_anchor_exists():
    """A FAIL row's next step must land on a real section."""
    for step in checks.NEXT.values():
        for file, anchor in re.findall(r"(runbooks/[\w.-]+\.md)#([\w-]+)", step):
            assert anchor in _anchors(ROOT / file), f"{file}#{anchor}"


def test_the_anchor_check_can_fail():
    assert "no-such-section" not in _anchors(RUNBOOKS / "README.md")


def test_index_links_the_whole_path_and_the_playbooks():
    text = (RUNBOOKS / "README.md").read_text()
    for name in (
        "00-capacity-block.md",
        "01-cluster.md",
        "02-serve.md",
        "03-validate.md",
        "04-benchmark.md",
        "05-node-image.md",
        "06-observability.md",
    ):
        assert f"]({name}" in text, name
    anchors = _anchors(RUNBOOKS / "README.md")
    assert {"teardown", "node-not-joining", "wrong-efa-count", "nccl-on-sockets", "mooncake-on-tcp", "block-about-to-expire"} <= anchors


def test_validate_runbook_states_the_derived_thresholds(th):
    text = (RUNBOOKS / "03-validate.md").read_text()
    for value in (
        f"{th.allreduce_min_busbw_gbps:g} GB/s",
        f"{th.alltoall_min_busbw_gbps:g} GB/s",
        f"{th.alltoall_ceiling_busbw_gbps:g} GB/s",
        f"{th.pingpong_max_latency_us:g} us",
        f"{th.uccl_max_dispatch_combine_us:.0f} us",
        f"{th.uccl_num_tokens} tokens/rank",
    ):
        assert value in text, value


def test_benchmark_runbook_shows_the_flags_the_job_runs(plan):
    text = (RUNBOOKS / "04-benchmark.md").read_text()
    argv = bench_manifests.bench_argv(plan, concurrency=1, base_url="u", tokenizer="t")
    for flag in (a for a in argv if a.startswith("--")):
        assert flag in text, flag
