"""The MoE all-to-all backend is a per-role choice: UCCL-EP, upstream DeepEP (SGLang's sgl-deep-ep) or none.

The plan decides each role's image from it, the serving manifests run each role from that image, and the plan
refuses what the chosen image cannot run, in one line naming the field and the fix.
"""

from __future__ import annotations

import pytest
import yaml

from pdkit.errors import ProfileError
from pdkit.model import plan, profile_files
from pdkit.render.serving import inputs, manifests
from pdkit.render.serving.sglang_args import launch_argv

AB_PROFILE = "config/glm51-fp8-2p2d-deepep-prefill.yaml"


def _plan(ref: str | None) -> plan.Plan:
    prof, path = profile_files.load(ref)
    return plan.build(prof, profile_path=path)


def _error(raw: dict) -> str:
    with pytest.raises(ProfileError) as info:
        plan.build(profile_files.parse(raw, source="t.yaml"))
    message = str(info.value)
    assert "\n" not in message
    assert "Fix: " in message
    return message


def _images(objs: list[dict]) -> dict[str, set[str]]:
    out = {}
    for obj in objs:
        for role in obj["spec"]["roles"] if obj["kind"] == "DisaggregatedSet" else []:
            spec = role["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
            out[role["name"]] = {c["image"] for c in spec["initContainers"] + spec["containers"]}
    return out


def test_seed_runs_uccl_ep_on_both_roles():
    """The seed profile stays on UCCL-EP (the backend AWS ran DP-attention decode fastest with on p5en:
    awslabs/awsome-distributed-ai 3.test_cases/pytorch/sglang/dsr1-deepep-efa/benchmarks/RESULTS-2p2d.md)."""
    seed = _plan(None)
    assert {r.name: (r.a2a_backend, r.image) for r in seed.roles.values()} == {
        "prefill": ("uccl-ep", "sglang-efa"),
        "decode": ("uccl-ep", "sglang-efa"),
    }


def test_both_deepeps_are_sglangs_deepep_flag():
    """UCCL-EP installs itself as the `deep_ep` module SGLang imports, so both implementations run under SGLang's
    `--moe-a2a-backend deepep` (sglang/srt/server_args.py choices: none, deepep, mooncake, ...); only the image differs."""
    seen = set()
    for ref in (None, AB_PROFILE):
        the_plan = _plan(ref)
        for role in the_plan.roles.values():
            argv = launch_argv(the_plan, role.name)
            assert argv[argv.index("--moe-a2a-backend") + 1] == role.moe_a2a_backend == "deepep"
            seen.add(role.a2a_backend)
    assert seen == {"uccl-ep", "deepep"}


def test_ab_profile_runs_prefill_from_the_deepep_image():
    """The A/B partner profile: prefill's pods (staging init container and SGLang) run the sglang-deepep image,
    decode's the sglang-efa one; both tags come from the versions file."""
    ab = _plan(AB_PROFILE)
    assert (ab.prefill.a2a_backend, ab.prefill.image, ab.decode.a2a_backend, ab.decode.image) == (
        "deepep",
        "sglang-deepep",
        "uccl-ep",
        "sglang-efa",
    )
    registry = inputs.default_registry(ab)
    images = _images(manifests.render(ab, inputs.from_plan(ab)))
    assert images == {
        "prefill": {ab.images["sglang-deepep"].uri(registry)},
        "decode": {ab.images["sglang-efa"].uri(registry)},
    }
    assert _plan(None).name == ab.name, "the same deployment, so the A/B swaps the backend in place on one block"


def test_image_override_applies_to_every_role():
    """`pdkit render --image` (plain-YAML users) still means one image for all roles."""
    ab = _plan(AB_PROFILE)
    images = _images(manifests.render(ab, inputs.from_plan(ab, image="registry.example/x:1")))
    assert set().union(*images.values()) == {"registry.example/x:1"}


def test_deepep_mode_without_a_deepep_backend_is_refused(raw_with):
    """--deepep-mode only selects DeepEP kernels (sglang/srt/server_args.py); with moe_a2a_backend none it is a typo
    or a half-edited profile."""
    message = _error(raw_with("roles.decode.parallelism.moe_a2a_backend", "none"))
    assert "roles.decode.parallelism.deepep_mode = 'low_latency'" in message
    assert "remove deepep_mode" in message


def test_upstream_deepep_across_nodes_is_refused(raw_with):
    """sgl-deep-ep 0.1.2.post1's Buffer starts NVSHMEM when its group spans more than one NVLink domain
    (deep_ep/buffers/legacy.py: `if self.runtime.get_num_rdma_ranks() > 1 or low_latency_mode`), and AWS ran DeepEP
    across p5en nodes only with NVSHMEM rebuilt for libfabric plus an EFA patch (awslabs/awsome-distributed-ai
    3.test_cases/pytorch/sglang/dsr1-deepep-efa/Dockerfile), which the kit's image does not build."""
    message = _error(raw_with("roles.decode.parallelism.moe_a2a_backend", "deepep", "roles.decode.parallelism.deepep_mode", "normal"))
    assert "roles.decode.parallelism.moe_a2a_backend = 'deepep'" in message
    assert "NVSHMEM over libfabric" in message
    assert "use moe_a2a_backend: uccl-ep" in message


def test_upstream_deepep_low_latency_is_refused_even_in_one_node(raw_with):
    """Low-latency mode always starts NVSHMEM (the same line of deep_ep/buffers/legacy.py), even within one node."""
    message = _error(
        raw_with("roles.prefill.parallelism.moe_a2a_backend", "deepep", "roles.prefill.parallelism.deepep_mode", "low_latency")
    )
    assert "roles.prefill.parallelism.deepep_mode = 'low_latency'" in message
    assert "use deepep_mode: normal" in message


def test_a_versions_file_without_the_backends_image_is_refused(tmp_path):
    """A role whose backend needs an image the versions file does not define cannot be deployed: say which."""
    from pdkit.model.images import _versions_module

    versions = _versions_module()
    doc = versions.load(versions.VERSIONS_FILE)
    del doc["images"]["sglang-deepep"]
    alt = tmp_path / "versions.yaml"
    alt.write_text(yaml.safe_dump(doc, sort_keys=False))
    prof, _ = profile_files.load(AB_PROFILE)
    raw = prof.model_dump(mode="json", exclude_none=True)
    raw["images"]["versions_file"] = str(alt)
    message = _error(raw)
    assert "roles.prefill.parallelism.moe_a2a_backend = 'deepep'" in message
    assert "needs the sglang-deepep image" in message


def test_plan_shows_each_roles_backend_and_image():
    """`pdkit plan` names the backend and the image per role, so the operator sees which image a role will pull."""
    from pdkit.render import plan_report

    text = plan_report.as_text(_plan(AB_PROFILE))
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith(("  prefill ", "  decode "))}
    assert "deepep (sglang-deepep)" in rows["prefill"]
    assert "uccl-ep (sglang-efa)" in rows["decode"]
