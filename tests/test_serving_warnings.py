"""Known upstream breakage of a chosen serving layout is said before anything is paid for (`pdkit plan`).

sgl-project/sglang#18830 (open): "GLM5-FP8 enabling context parallel and MTP simultaneously causes error" in PD prefill
on H200 with TP8/EP8 DeepEP, "Using CP alone works fine". The tuned profile runs exactly that prefill.
"""

from __future__ import annotations

from pdkit.cli.main import main
from tests.conftest import plan_of


def test_the_tuned_profile_warns_of_prefill_cp_with_mtp_and_names_the_fallback():
    (warning,) = plan_of("glm51-fp8-2p2d-tuned").serving_warnings
    assert "sgl-project/sglang#18830" in warning
    assert "the seed profile (MTP off)" in warning
    assert "tp 16, attn_dp 16" in warning


def test_the_seed_profile_has_no_such_warning():
    assert plan_of("glm51-fp8-2p2d").serving_warnings == ()


def test_pdkit_plan_prints_it(capsys):
    assert main(["plan", "--profile", "glm51-fp8-2p2d-tuned"]) == 0
    assert "Warning: roles.prefill runs attention context parallelism (attn_cp 8) with MTP" in capsys.readouterr().out
