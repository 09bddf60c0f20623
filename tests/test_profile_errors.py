"""Every impossible deployment is refused with one line: the field, the value and the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from pdkit.errors import KitError, ProfileError
from pdkit.model import plan, profile_files

CASES = [
    # (id, changes, field named, words the problem or fix must contain)
    ("az-not-in-region", ("aws.availability_zone", "eu-west-1a"), "aws.availability_zone", "not an Availability Zone of eu-south-2"),
    ("unknown-region", ("aws.region", "xx-nowhere-1"), "aws.region", "set aws.availability_zones"),
    (
        "experts-not-divisible-by-ep",
        (
            "roles.prefill.nodes_per_replica",
            3,
            "roles.prefill.parallelism",
            {"tp": 24, "moe_a2a_backend": "uccl-ep", "deepep_mode": "normal"},
        ),
        "roles.prefill.parallelism.tp",
        "does not divide the model's 256 experts",
    ),
    ("nodes-not-instance-count", ("capacity.instance_count", 6), "capacity.instance_count", "roles need 4 nodes"),
    ("unknown-instance-type", ("capacity.instance_type", "p4d.24xlarge"), "capacity.instance_type", "use one of p5en.48xlarge"),
    ("malformed-reservation", ("capacity.reservation_id", "cr-123"), "capacity.reservation_id", "17 lowercase hex digits"),
    (
        "prefill-cp-across-nodes",
        ("roles.prefill.parallelism", {"tp": 16, "attn_cp": 8, "deepep_mode": "normal"}),
        "roles.prefill.parallelism.attn_cp",
        "SGLang refuses cross-node CP",
    ),
    (
        "tp-pp-not-replica-gpus",
        ("roles.decode.parallelism.tp", 8),
        "roles.decode.parallelism.tp",
        "one replica has 2 node(s) x 8 GPUs = 16",
    ),
    (
        "weights-overflow-gpu",
        ("capacity.instance_type", "p5.48xlarge"),
        "roles.prefill.mem_fraction_static",
        "weights need ~60.9 GB per GPU",
    ),
    ("missing-field", ("capacity.reservation_id", None), "capacity.reservation_id", "required field is missing"),
    ("wrong-type", ("capacity.instance_count", "four"), "capacity.instance_count", "expected a whole number"),
    ("typo-field", ("capacity.instance_cout", 4), "capacity.instance_cout", "did you mean 'instance_count'"),
    (
        "pp-more-than-nodes",
        ("roles.decode.parallelism", {"tp": 4, "pp": 4, "deepep_mode": "low_latency"}),
        "roles.decode.parallelism.pp",
        "more pipeline stages than nodes",
    ),
    ("attn-dp-not-divisor", ("roles.decode.parallelism.attn_dp", 6), "roles.decode.parallelism.attn_dp", "does not divide tp (16)"),
    (
        # Each divides tp 8 but their product 16 does not: attention TP would be 0, which the memory model divides by.
        "attn-cp-times-dp-over-tp",
        ("roles.prefill.parallelism.attn_dp", 2),
        "roles.prefill.parallelism.attn_dp",
        "attn_cp x attn_dp = 16 does not divide tp (8)",
    ),
    (
        "cp-on-decode",
        ("roles.decode.parallelism.attn_dp", 1, "roles.decode.parallelism.attn_cp", 2),
        "roles.decode.parallelism.attn_cp",
        "prefill feature",
    ),
    (
        "deepep-mode-unpinned",
        ("roles.decode.parallelism.deepep_mode", None),
        "roles.decode.parallelism.deepep_mode",
        "set deepep_mode: low_latency",
    ),
    ("ep-not-tp-with-deepep", ("roles.decode.parallelism.ep", 8), "roles.decode.parallelism.ep", "forces ep = tp (16)"),
    ("kv-cannot-hold-context", ("roles.decode.mem_fraction_static", 0.55), "roles.decode.context_length", "cannot hold one request"),
    ("context-over-model", ("roles.decode.context_length", 300000), "roles.decode.context_length", "longer than the model's 202752"),
    (
        "public-endpoint-without-allow-list",
        ("cluster.endpoint_access", "public_and_private"),
        "cluster.public_access_cidrs",
        "needs an allow-list",
    ),
    ("cidrs-with-private-endpoint", ("cluster.public_access_cidrs", ["10.1.0.0/16"]), "cluster.public_access_cidrs", "endpoint is private"),
    (
        "api-open-to-internet",
        ("cluster.endpoint_access", "public_and_private", "cluster.public_access_cidrs", ["0.0.0.0/0"]),
        "cluster.public_access_cidrs",
        "whole internet",
    ),
    (
        "api-open-to-more-than-a-slash-8",
        ("cluster.endpoint_access", "public_and_private", "cluster.public_access_cidrs", ["10.0.0.0/8", "11.0.0.0/16"]),
        "cluster.public_access_cidrs",
        "more than a /8",
    ),
    (
        "drain-lead-beyond-block",
        ("observability.block_end_warning_minutes", 48 * 60),
        "observability.block_end_warning_minutes",
        "when the block does",
    ),
    (
        "drain-lead-eats-minimum-serving",
        ("observability.block_end_warning_minutes", 46 * 60),
        "observability.block_end_warning_minutes",
        "use at most 2640 minutes",
    ),
    ("serving-in-kube-system", ("serving.namespace", "kube-system"), "serving.namespace", "Kubernetes system namespace"),
    ("serving-in-an-addon-namespace", ("serving.namespace", "lws-system"), "serving.namespace", "where the kit's cluster add-ons run"),
    ("revision-wildcard", ("model.revision", "*"), "model.revision", "every revision"),
    (
        # SGLang 0.5.23 srt/environ.py: SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK = EnvInt(128), the low-latency
        # buffer's tokens per rank (srt/layers/moe/token_dispatcher/deepep.py); nothing in its resolution checks it.
        "ll-dispatch-over-buffer",
        ("roles.decode.max_running_requests", 4112),
        "roles.decode.max_running_requests",
        "257 requests per attention-DP rank x 1 token(s) each = 257 tokens per low-latency dispatch",
    ),
    ("more-efa-than-instance", ("capacity.efa_devices", 32), "capacity.efa_devices", "has 16 EFA devices"),
    ("old-kubernetes", ("cluster.kubernetes_version", "1.29"), "cluster.kubernetes_version", "use one of 1.36"),
    ("bad-block-duration", ("capacity.duration_hours", 30), "capacity.duration_hours", "multiple of 24"),
    ("bad-placement-group", ("capacity.placement_group", "spread"), "capacity.placement_group", "'cluster' or 'none'"),
    ("bad-log-retention", ("network.flow_log_retention_days", 100), "network.flow_log_retention_days", "e.g. 90"),
    ("nat-more-than-azs", ("network.nat_gateways", 4), "network.nat_gateways", "use 1..3"),
    ("bad-admin-arn", ("cluster.admin_principal_arns", ["alice"]), "cluster.admin_principal_arns", "not an IAM role or user ARN"),
    ("unknown-model", ("model.id", "zai-org/GLM-4"), "model.id", "not in the kit's model table"),
    ("name-too-long-for-weights-bucket", ("name", "a" * 32), "name", "exceed S3's 63 characters"),
    (
        "mtp-on-decode-only",
        ("roles.decode.mtp", {"enabled": True}),
        "roles.prefill.mtp.enabled",
        "set roles.prefill.mtp to the decode settings",
    ),
]

# Another spelling of a refusal CASES already holds: the same guard must fire, so these cannot stand in CASES,
# whose every row is a distinct guard.
DODGES = [
    (
        "api-open-to-internet-in-halves",
        ("cluster.endpoint_access", "public_and_private", "cluster.public_access_cidrs", ["0.0.0.0/1", "128.0.0.0/1"]),
        "cluster.public_access_cidrs",
        "4,294,967,296 addresses (the whole internet)",
    ),
    ("serving-in-default", ("serving.namespace", "default"), "serving.namespace", "Kubernetes system namespace"),
    ("revision-not-a-ref", ("model.revision", "main..dev"), "model.revision", "git refuses such a ref name"),
]


def _error(raw: dict) -> ProfileError:
    with pytest.raises(ProfileError) as info:
        plan.build(profile_files.parse(raw, source="t.yaml"))
    return info.value


@pytest.mark.parametrize(("changes", "field", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_profile_is_refused_with_field_value_and_fix(raw_with, changes, field, words):
    """Each guard fires, and its message names the field, carries a fix, and fits on one line."""
    message = str(_error(raw_with(*changes)))
    assert f"{field} = " in message
    assert words in message
    assert "Fix: " in message
    assert "\n" not in message


@pytest.mark.parametrize(("changes", "field", "words"), [c[1:] for c in DODGES], ids=[c[0] for c in DODGES])
def test_a_refusal_is_not_dodged_by_another_spelling(raw_with, changes, field, words):
    """0.0.0.0/0 split in halves, `default` beside kube-*, `..` beside `*`: each reaches its guard all the same."""
    err = _error(raw_with(*changes))
    assert err.field == field
    assert words in str(err)


def test_the_cases_reach_at_least_ten_distinct_guards(raw_with):
    """Counted from what the plan raises, not from this table: ten cases naming one field would pass a table count."""
    fired = {(e.field, e.problem) for e in (_error(raw_with(*c[1])) for c in CASES)}
    assert len({field for field, _ in fired}) >= 10
    assert len(fired) == len(CASES), "two cases hit the same guard with the same problem"


def test_default_profiles_are_valid():
    """The shipped profiles themselves pass every check (the error cases above start from the default)."""
    for name in profile_files.available_profiles():
        prof, path = profile_files.load(name)
        assert plan.build(prof, profile_path=path).name == prof.name


def _run(args: list[str], **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, check=False, **kw)


def test_cli_prints_one_line_and_no_traceback(tmp_path, raw_with):
    """An operator sees one line naming the problem and exit code 2, not a Python traceback."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw_with("capacity.instance_count", 6)))
    result = _run(["-m", "pdkit", "plan", "--profile", str(bad)])
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1
    assert "capacity.instance_count = 6" in result.stderr


@pytest.mark.parametrize(
    "case", ["api-open-to-more-than-a-slash-8", "drain-lead-beyond-block", "serving-in-kube-system", "revision-wildcard"]
)
def test_cli_answers_each_new_refusal_in_one_line(tmp_path, raw_with, capsys, case):
    """Through the real CLI entry point (in-process): one line on stderr naming the field, exit 2."""
    from pdkit.cli.main import main

    changes, field, words = next(c[1:] for c in CASES if c[0] == case)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw_with(*changes)))
    assert main(["plan", "--profile", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert field in err
    assert words in err


def test_cdk_app_prints_one_line_and_no_traceback(tmp_path, raw_with):
    """`cdk synth -c profile=bad.yaml` fails the same way before any construct is built."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw_with("capacity.reservation_id", "cr-123")))
    env = {"CDK_CONTEXT_JSON": f'{{"profile": "{bad}"}}', "CDK_OUTDIR": str(tmp_path / "out"), "PATH": os.environ["PATH"]}
    result = _run(["app.py"], env=env, cwd=profile_files.ROOT)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "capacity.reservation_id = 'cr-123'" in result.stderr
    assert not list((tmp_path / "out").glob("*.template.json")), "nothing is synthesized from a bad profile"


def test_unknown_profile_name_suggests_the_closest(capsys):
    from pdkit.cli.main import main

    assert main(["plan", "--profile", "glm51-fp8-2p2"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'glm51-fp8-2p2d'" in err


def test_invalid_yaml_names_the_line(tmp_path, capsys):
    from pdkit.cli.main import main

    bad = tmp_path / "broken.yaml"
    bad.write_text("name: x\naws:\n  region: [unclosed\n")
    assert main(["plan", "--profile", str(bad)]) == 2
    assert "not valid YAML at line" in capsys.readouterr().err


# Broken files, as an operator hands them to `pdkit plan --profile FILE`: (id, how to make it, words the line must contain).
# A value of `bytes`/`str` is written to bad.yaml; a callable makes the path itself (directory, pipe).
DEFAULT_TEXT = (profile_files.CONFIG_DIR / "glm51-fp8-2p2d.yaml").read_text()
LAST_LINE = len(DEFAULT_TEXT.splitlines())


def _line(start: str) -> int:
    """Line number of the default profile's first line starting with `start`."""
    return next(n for n, line in enumerate(DEFAULT_TEXT.splitlines(), 1) if line.startswith(start))


BOMB = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 9)).replace("*l0", '"lol"')


def _mkdir(path):
    path.mkdir()
    return path


def _fifo(path):
    os.mkfifo(path)
    return path


FILE_CASES = [
    ("duplicate-top-level-key", DEFAULT_TEXT + "name: other-name\n", f"duplicate key 'name' at lines {_line('name:')} and {LAST_LINE + 1}"),
    (
        "duplicate-nested-key-undoing-placement-fix",
        DEFAULT_TEXT.replace("  placement_group: none", "  placement_group: cluster\n  placement_group: none"),
        f"duplicate key 'placement_group' at lines {_line('  placement_group:')} and {_line('  placement_group:') + 1}",
    ),
    (
        "duplicate-key-in-flow-mapping",
        DEFAULT_TEXT.replace("mtp", "x") + "bench: {input_len: 1, input_len: 2}\n",
        "duplicate key 'input_len'",
    ),
    ("binary-file", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "a binary file, not YAML text"),
    (
        "latin-1-file",
        DEFAULT_TEXT.replace("Mooncake", "Mooncaké").encode("latin-1"),
        f"not UTF-8 text (byte 0xe9 at line {_line('description:')})",
    ),
    ("utf-16-file", DEFAULT_TEXT.encode("utf-16"), "UTF-16 text. Fix: save it as UTF-8"),
    ("over-1-mib", DEFAULT_TEXT + "#" * (1 << 20) + "\n", "a profile is a few KB (limit 1048576)"),
    ("directory", _mkdir, "is a directory. Fix: pass the .yaml file inside it"),
    ("named-pipe", _fifo, "is not a regular file"),
    ("missing-file", lambda path: path, "does not exist"),
    (
        "alias-bomb-under-description",
        DEFAULT_TEXT.replace("description: GLM", "x: GLM") + BOMB + "description: *l8\n",
        "expands to more than 5000",
    ),
    ("alias-inside-its-anchor", DEFAULT_TEXT + "bench: &b {concurrency: *b}\n", "alias *b is used inside its own anchor"),
    ("undefined-alias", DEFAULT_TEXT + "bench: *nowhere\n", "found undefined alias"),
    ("nested-2000-deep", DEFAULT_TEXT + "bench: " + "[" * 2000 + "]" * 2000 + "\n", "exceeded maximum nesting depth"),
    ("nested-40-deep", DEFAULT_TEXT + "bench: " + "[" * 40 + "]" * 40 + "\n", "nested deeper than 32 levels"),
    (
        "impossible-date",
        DEFAULT_TEXT.replace("  duration_hours: 48", "  duration_hours: 48\n  expected_start: 2026-13-45"),
        "month must be in 1..12",
    ),
    (
        "integer-over-4300-digits",
        DEFAULT_TEXT.replace("instance_count: 4", "instance_count: " + "4" * 5000),
        "Exceeds the limit (4300 digits)",
    ),
    ("python-tag", DEFAULT_TEXT + "bench: !!python/object/apply:os.system [true]\n", "could not determine a constructor"),
    ("two-documents", DEFAULT_TEXT + "---\n" + DEFAULT_TEXT, "keep one document per file"),
    (
        "control-character-after-non-ascii",
        DEFAULT_TEXT.replace("(2P2D)", "(2P2D) é").replace("eu-south-2a ", "eu-south-2a\x07 "),
        f"control character U+0007 at line {_line('  availability_zone:')}",
    ),
    (
        "tab-indentation",
        DEFAULT_TEXT.replace("  region: eu-south-2", "\tregion: eu-south-2"),
        f"not valid YAML at line {_line('  region:')}",
    ),
    ("empty-file", "", "a profile is a YAML mapping"),
    ("list-document", "- name: x\n", "a profile is a YAML mapping"),
    ("key-with-newline", DEFAULT_TEXT + '"bench\\nmark": 1\n', "'bench\\nmark' = 1: unknown field"),
    ("pasted-blob-as-name", DEFAULT_TEXT.replace("name: glm51-2p2d", "name: " + "x" * 100_000), "name = 'xxxxxxxx"),
    ("six-thousand-item-list", DEFAULT_TEXT + "bench: {concurrency: [" + ", ".join(["1"] * 6_000) + "]}\n", "expands to more than 5000"),
    (
        "billion-nodes-per-replica",
        DEFAULT_TEXT.replace(
            "nodes_per_replica: 2\n    parallelism:        # attention DP16",
            "nodes_per_replica: 1000000000\n    parallelism:        # attention DP16",
        ),
        "roles.decode.parallelism.tp = 16: tp x pp = 16 x 1 = 16, but one replica has 1000000000 node(s)",
    ),
    (
        "range-mem-fraction",
        DEFAULT_TEXT.replace("max_running_requests: 512", "max_running_requests: 512\n    mem_fraction_static: 1.5"),
        "must be in (0.3, 0.96)",
    ),
    ("range-warning-minutes", DEFAULT_TEXT + "observability: {block_end_warning_minutes: 30}\n", "use a value >= 45"),
    ("section-is-a-string", DEFAULT_TEXT.replace("serving:\n  kv_transfer: mooncake", "serving: mooncake"), "serving = 'mooncake'"),
    ("unquoted-kubernetes-version", DEFAULT_TEXT.replace('"1.36"', "1.36"), "cluster.kubernetes_version = 1.36"),
    ("yes-as-placement-group", DEFAULT_TEXT.replace("placement_group: none", "placement_group: no"), "capacity.placement_group = False"),
]


@pytest.mark.parametrize(("make", "words"), [c[1:] for c in FILE_CASES], ids=[c[0] for c in FILE_CASES])
def test_broken_file_gets_one_line_fast(tmp_path, capsys, make, words):
    """Every kind of broken file ends `pdkit plan --profile FILE` with exit 2 and one line naming the
    file or the field and the fix, within 2 s and 64 MiB of Python allocations (tracemalloc peak).

    PyYAML's SafeLoader keeps the last of two equal keys (https://github.com/yaml/pyyaml/issues/165)
    although the spec requires unique keys (https://yaml.org/spec/1.2.2/#mapping); it shares aliased
    objects, which pydantic and repr() then walk once per use (the billion-laughs shape: 9^8 strings
    here); its reader refuses control characters with a ReaderError that has no line
    (yaml/reader.py, check_printable); and int() refuses over 4300 digits with a ValueError
    (https://docs.python.org/3/library/stdtypes.html#int-max-str-digits). The bounds are loose on
    purpose: the same files took seconds to minutes and gigabytes before (49 s and 2.5 GB for a bomb).
    """
    import time
    import tracemalloc

    from pdkit.cli.main import main

    path = tmp_path / "bad.yaml"
    if callable(make):
        path = make(path)
    else:
        path.write_bytes(make if isinstance(make, bytes) else make.encode())
    tracemalloc.start()
    started = time.monotonic()
    try:
        code = main(["plan", "--profile", str(path)])
    finally:
        elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    assert words in err
    assert "Fix: " in err
    assert str(path) in err
    assert len(err) < 400, "a value in the line is cut short"
    assert elapsed < 2.0
    assert peak < 64 << 20


def _load_and_build(path: Path) -> None:
    loaded, where = profile_files.load(str(path))
    plan.build(loaded, profile_path=where)


def test_at_least_25_kinds_of_broken_file():
    """Counted from the distinct messages profile_files produces, not from the case names of this table."""
    messages = set()
    with tempfile.TemporaryDirectory() as tmp:
        for name, make, _ in FILE_CASES:
            path = Path(tmp) / f"{name}.yaml"
            if callable(make):
                path = make(path)
            else:
                path.write_bytes(make if isinstance(make, bytes) else make.encode())
            with pytest.raises(KitError) as info:
                _load_and_build(path)
            messages.add(str(info.value).removeprefix(str(path)))
    assert len(messages) >= 25


def test_cdk_app_refuses_a_duplicate_key_in_one_line(tmp_path):
    """`make synth PROFILE=FILE` runs `python3 app.py` (cdk.json "app"); the CDK CLI prints the app's
    stderr and then its own "Subprocess exited with error 2", so the app itself must print just the line."""
    bad = tmp_path / "dup.yaml"
    bad.write_text(DEFAULT_TEXT.replace("  placement_group: none", "  placement_group: cluster\n  placement_group: none"))
    env = {"CDK_CONTEXT_JSON": json.dumps({"profile": str(bad)}), "CDK_OUTDIR": str(tmp_path / "out"), "PATH": os.environ["PATH"]}
    result = _run(["app.py"], env=env, cwd=profile_files.ROOT)
    assert result.returncode == 2
    assert result.stderr == (
        f"error: {bad}: duplicate key 'placement_group' at lines {_line('  placement_group:')} and {_line('  placement_group:') + 1}"
        " (YAML keeps only the last). Fix: keep one of them\n"
    )
    assert not list((tmp_path / "out").glob("*.template.json"))


def test_the_tuned_profile_fills_the_low_latency_buffer_exactly_and_one_more_request_per_rank_is_refused():
    """Tuned decode: 512 requests / 16 DP ranks = 32 per rank, x 4 MTP draft tokens = 128, exactly DeepEP's low-latency
    buffer (SGLang 0.5.23 SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK = 128). One more request per rank fails inside
    the dispatch kernel at run time, after conformance passed; the plan refuses it with the largest count that fits."""
    raw = yaml.safe_load(profile_files.resolve("glm51-fp8-2p2d-tuned").read_text())
    plan.build(profile_files.parse(raw, source="tuned.yaml"))
    raw["roles"]["decode"]["max_running_requests"] = 528
    err = _error(raw)
    assert err.field == "roles.decode.max_running_requests"
    assert "33 requests per attention-DP rank x 4 token(s) each = 132 tokens" in str(err)
    assert "use at most 512 (or fewer mtp.draft_tokens)" in str(err)
