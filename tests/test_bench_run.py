"""`pdkit bench` against a fake cluster: each level saved from the pod log as it appears, failures kept, the CLI."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
import yaml

from pdkit.cli.main import main
from pdkit.model import plan as plan_mod
from pdkit.model import profile_files
from pdkit.ops import kube
from pdkit.ops.bench import results
from pdkit.ops.bench import run as bench_run
from tests.fixtures.fabric import fakes
from tests.fixtures.fabric.fakes import Clock, FakeCluster, bench_pod_log

IMAGE = "registry.example/sglang-efa:v1"


def test_saves_each_level_and_the_metadata(plan, tmp_path):
    cluster = FakeCluster(logs={"bench": {0: bench_pod_log()}})
    result = bench_run.run(plan, cluster, image=IMAGE, out_dir=tmp_path, levels=(1, 4), waiting=fakes.waiting(Clock()), run_id="r1")
    assert result.ok
    assert sorted(result.saved) == [1, 4]
    saved = json.loads((tmp_path / "bench-c4.jsonl").read_text())
    assert saved["max_concurrency"] == 4
    assert "generated_texts" not in saved
    meta = json.loads((tmp_path / "run.json").read_text())
    assert meta["plan"] == plan.name
    assert meta["levels"] == [1, 4]
    assert meta["image"] == IMAGE
    assert "--pd-separated" in meta["command"]
    assert (tmp_path / "bench.log").read_text().startswith("pdkit-bench-level concurrency=1")
    assert json.loads((tmp_path / "failed.json").read_text()) == {}
    # and `pdkit report` can read the directory
    assert [lv.concurrency for lv in results.load_dir(tmp_path).levels] == [1, 4]
    kinds = [o["kind"] for o in cluster.created]
    assert kinds == ["ConfigMap", "Job"]
    assert [o["kind"] for o in cluster.deleted] == ["Job", "ConfigMap"]


def test_failed_and_missing_levels_are_reported(plan, tmp_path):
    cluster = FakeCluster(
        logs={"bench": {0: bench_pod_log(levels=(1,), failed=(4,))}},
        failure={"bench": "BackoffLimitExceeded: Job has reached the specified backoff limit"},
    )
    result = bench_run.run(plan, cluster, image=IMAGE, out_dir=tmp_path, levels=(1, 4, 16), waiting=fakes.waiting(Clock()), run_id="r1")
    assert not result.ok
    assert sorted(result.saved) == [1]
    assert result.failed[4].startswith("bench_serving exited 1: Server at")
    assert "BackoffLimitExceeded" in result.failed[16]
    failed = json.loads((tmp_path / "failed.json").read_text())
    assert set(failed) == {"4", "16"}
    assert results.load_dir(tmp_path).failed[4].startswith("bench_serving exited 1")


def test_levels_are_harvested_while_the_job_runs(plan, tmp_path):
    """A level is saved when its block appears, not only at the end (a later crash loses nothing)."""
    reads = {"n": 0}

    def growing():
        reads["n"] += 1
        return {0: bench_pod_log(levels=(1,)) if reads["n"] == 1 else bench_pod_log(levels=(1, 4))}

    said = []
    cluster = FakeCluster(logs={"bench": growing})
    bench_run.run(plan, cluster, image=IMAGE, out_dir=tmp_path, levels=(1, 4), waiting=fakes.waiting(Clock()), run_id="r1", say=said.append)
    assert said[0].startswith("c=1: 16 requests")
    assert said[1].startswith("c=4:")
    assert len(said) == 2  # each level announced once


def test_deadline_seconds_grows_with_prompts(plan, raw_with):
    bigger = plan_mod.build(profile_files.parse(raw_with("bench.prompts_per_level", 400)))
    assert bench_run.deadline_seconds(bigger, (1,)) > bench_run.deadline_seconds(plan, (1,))


def test_cli_render(capsys, plan):
    """`pdkit bench --render` prints the Job of the asked levels, every object valid for the plan's Kubernetes version."""
    assert main(["bench", "--render", "--concurrency", "2,8", "--registry", "123456789012.dkr.ecr.eu-south-2.amazonaws.com"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    for doc in docs:
        kubernetes_validate.validate(doc, f"{plan.kubernetes_version}.0", strict=True)
    script = docs[1]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "--max-concurrency 2 " in script
    assert "--max-concurrency 8 " in script


def test_cli_rejects_bad_levels(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--render", "--concurrency", "1,x"])
    assert "not a comma-separated list of integers" in capsys.readouterr().err


def test_cli_runs_and_saves(monkeypatch, capsys, tmp_path):

    monkeypatch.setattr(kube, "connect", lambda context: FakeCluster(logs={"bench": {0: bench_pod_log()}}))
    assert main(["bench", "--out", str(tmp_path), "--concurrency", "1,4", "--image", IMAGE]) == 0
    out = capsys.readouterr().out
    assert f"Next: pdkit report --bench {tmp_path}" in out
    assert (tmp_path / "bench-c1.jsonl").is_file()
