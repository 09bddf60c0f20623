"""containers/kit/import_smoke.py against stand-in packages that behave like the real ones (no GPU, no image here).

What it encodes: SGLang 0.5.23's sglang/srt/layers/moe/token_dispatcher/deepep.py imports deep_ep inside
`try: from deep_ep import Buffer, Config ... use_deepep = True / except ...: use_deepep = False` and raises the
import error only when a dispatcher is built, so a broken UCCL-EP build passes `import sglang` and shows at model
start-up; SGLang imports NIXL as `from nixl._api import nixl_agent, nixl_agent_config` and Mooncake as
`from mooncake.engine import TransferEngine`. Without a GPU, libcuda.so.1 comes from the CUDA toolkit's stub,
lib64/stubs/libcuda.so (soname libcuda.so.1), found through LD_LIBRARY_PATH
(https://docs.nvidia.com/cuda/cuda-compiler-driver-nvcc/ "stubs"; ld.so(8) searches LD_LIBRARY_PATH by soname).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from container_paths import KIT_DIR, load_module

# The dispatcher module as SGLang writes it: the import of deep_ep is swallowed.
SGLANG_DISPATCHER = """
try:
    from deep_ep import Buffer, Config
    use_deepep = True
except Exception:
    use_deepep = False
"""
GOOD = {
    "torch/__init__.py": "__version__ = '2.14.1'\n",
    "uccl/__init__.py": "",
    "uccl/ep.py": "",
    "deep_ep/__init__.py": "from uccl.ep import *  # the UCCL-EP wrapper\nclass Buffer: ...\nclass Config: ...\n",
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/srt/layers/__init__.py": "",
    "sglang/srt/layers/moe/__init__.py": "",
    "sglang/srt/layers/moe/token_dispatcher/__init__.py": "",
    "sglang/srt/layers/moe/token_dispatcher/deepep.py": SGLANG_DISPATCHER,
    "nixl/__init__.py": "",
    "nixl/_api.py": "class nixl_agent: ...\nclass nixl_agent_config: ...\n",
    "mooncake/__init__.py": "",
    "mooncake/engine.py": "class TransferEngine: ...\n",
    "pynvml.py": "",
}


@pytest.fixture(scope="module")
def smoke() -> ModuleType:
    return load_module("import_smoke", KIT_DIR / "import_smoke.py")


def site(tmp_path: Path, overrides: Mapping[str, str] | None = None, *, files: Mapping[str, str] = GOOD) -> Path:
    """A stand-in site directory: `files` (the good image's by default) with `overrides` written over them."""
    root = tmp_path / "site"
    for name, text in {**files, **(overrides or {})}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def run_in(root: Path) -> Any:
    """A runner that imports from the stand-in site directory instead of the image's venv."""

    def runner(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env={**env, "PYTHONPATH": str(root)}, capture_output=True, text=True, check=False)

    return runner


def test_serving_imports_what_serving_uses(smoke: ModuleType) -> None:
    codes = " ".join(probe.code for probe in smoke.PROBES["serving"])
    for needed in (
        "import torch",
        "import uccl.ep",
        "from deep_ep import Buffer, Config",
        "sglang.srt.layers.moe.token_dispatcher.deepep",
        "use_deepep is True",
        "from nixl._api import nixl_agent",
        "from mooncake.engine import TransferEngine",
    ):
        assert needed in codes
    validation = " ".join(probe.code for probe in smoke.PROBES["validation"])
    assert "import uccl.ep" in validation
    assert "from deep_ep import Buffer, Config" in validation
    assert "sglang" not in validation


def test_a_good_image_passes(smoke: ModuleType, tmp_path: Path, capsys: Any) -> None:
    assert smoke.main(["--profile", "serving"], runner=run_in(site(tmp_path)), has_driver=lambda: True) == 0
    assert "all 6 imports ok" in capsys.readouterr().out


def test_a_broken_uccl_ep_fails_although_sglang_imports(smoke: ModuleType, tmp_path: Path, capsys: Any) -> None:
    """The failure SGLang hides: uccl.ep does not load (e.g. an undefined symbol), deep_ep fails, use_deepep turns False."""
    broken = site(tmp_path, {"uccl/ep.py": "raise ImportError('ep.abi3.so: undefined symbol: efadv_create_qp_ex')\n"})
    assert smoke.main(["--profile", "serving"], runner=run_in(broken), has_driver=lambda: True) == 1
    out = capsys.readouterr()
    failed = [line for line in out.out.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 3, out.out
    assert any("use_deepep is False" in line for line in failed)
    assert any("undefined symbol" in line for line in failed)
    assert "must not be pushed" in out.err


def test_sgl_deep_ep_in_place_of_the_wrapper_fails(smoke: ModuleType, tmp_path: Path) -> None:
    """deep_ep that is not UCCL-EP's wrapper (sgl-deep-ep's NVSHMEM DeepEP) imports, but is the wrong build."""
    other = site(tmp_path, {"deep_ep/__init__.py": "class Buffer: ...\nclass Config: ...\n"})
    assert smoke.main(["--profile", "validation"], runner=run_in(other), has_driver=lambda: True) == 1


def test_without_a_driver_the_cuda_stub_is_on_the_loader_path(smoke: ModuleType, tmp_path: Path, monkeypatch: Any) -> None:
    cuda = tmp_path / "cuda"
    (cuda / "lib64" / "stubs").mkdir(parents=True)
    stub = cuda / "lib64" / "stubs" / "libcuda.so"
    stub.write_text("stub")
    monkeypatch.setenv("CUDA_HOME", str(cuda))
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/amazon/efa/lib")
    seen: list[str] = []

    def runner(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
        first = env["LD_LIBRARY_PATH"].split(":")[0]
        seen.append(os.path.realpath(os.path.join(first, "libcuda.so.1")))
        assert env["LD_LIBRARY_PATH"].endswith(":/opt/amazon/efa/lib")
        return subprocess.CompletedProcess(argv, 0, "ok", "")

    assert smoke.main(["--profile", "validation"], runner=runner, has_driver=lambda: False) == 0
    assert seen
    assert set(seen) == {str(stub.resolve())}


def test_without_a_driver_or_stub_it_says_so(smoke: ModuleType, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    with pytest.raises(SystemExit, match="no CUDA stub"):
        smoke.main(["--profile", "serving"], runner=run_in(tmp_path), has_driver=lambda: False)


def test_profile_comes_from_what_the_build_recorded(smoke: ModuleType, tmp_path: Path) -> None:
    expected = tmp_path / "expected.json"
    expected.write_text(json.dumps({"profile": "validation"}))
    calls: list[str] = []

    def runner(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
        calls.append(argv[-1])
        return subprocess.CompletedProcess(argv, 0, "", "")

    assert smoke.main(["--expected", str(expected)], runner=runner, has_driver=lambda: True) == 0
    assert len(calls) == len(smoke.PROBES["validation"])


@pytest.mark.parametrize("image", ["sglang-efa", "validation"])
def test_every_image_carries_the_smoke_test(image: str, doc: dict[str, Any], versions: ModuleType) -> None:
    """The build runs /opt/kit/import_smoke.py in the built image (containers/build.sh), so each image must copy it there."""
    text = versions.dockerfile_path(doc, image).read_text()
    copies = [i for i in versions.dockerfile_instructions(text) if i.keyword == "COPY" and "import_smoke.py" in i.rest]
    assert copies, f"{image}: no COPY of import_smoke.py"
    assert copies[0].words[-1] == "/opt/kit/", copies
    assert "/opt/kit/import_smoke.py" in (KIT_DIR.parent / "build.sh").read_text()


# --- the sglang-deepep image (upstream DeepEP) ---------------------------------------------------------

UPSTREAM_INIT = "from ._C import Config\nfrom .buffers.legacy import Buffer\n__version__ = '2.1.0'\n"


def upstream_site(tmp_path: Path, *, deep_ep_init: str = UPSTREAM_INIT, with_uccl: bool = False) -> Path:
    """A stand-in venv laid out as the sgl-deep-ep 0.1.2.post1 wheel installs: deep_ep/ plus a dist-info whose RECORD lists it."""
    files = {k: v for k, v in GOOD.items() if not k.startswith("uccl/") or with_uccl} | {
        "deep_ep/__init__.py": deep_ep_init,
        "deep_ep/_C.py": "class Config: ...\n",
        "deep_ep/buffers/__init__.py": "",
        "deep_ep/buffers/legacy.py": "class Buffer: ...\n",
    }
    root = site(tmp_path, files=files)
    info = root / "sgl_deep_ep-0.1.2.post1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sgl-deep-ep\nVersion: 0.1.2.post1\n")
    record = [f"deep_ep/{name},," for name in ("__init__.py", "_C.py", "buffers/__init__.py", "buffers/legacy.py")]
    (info / "RECORD").write_text("\n".join(record) + "\n")
    return root


def test_deepep_image_with_upstream_deep_ep_passes(smoke: ModuleType, tmp_path: Path, capsys: Any) -> None:
    """The sglang-deepep image: deep_ep is the file sgl-deep-ep's RECORD installed (the wheel's layout:
    deep_ep/__init__.py importing ._C and .buffers.legacy, pypi.org/project/sgl-deep-ep/0.1.2.post1), uccl absent."""
    assert smoke.main(["--profile", "serving-deepep"], runner=run_in(upstream_site(tmp_path)), has_driver=lambda: True) == 0
    assert "all 6 imports ok" in capsys.readouterr().out


def test_deepep_image_with_uccl_wrapper_as_deep_ep_fails(smoke: ModuleType, tmp_path: Path, capsys: Any) -> None:
    """UCCL-EP's deep_ep_wrapper (ep/deep_ep_wrapper of uccl-project/uccl, installed as deep_ep) must not pass as upstream DeepEP,
    even where it sits in the files sgl-deep-ep's RECORD names."""
    root = upstream_site(tmp_path, deep_ep_init=GOOD["deep_ep/__init__.py"], with_uccl=True)
    assert smoke.main(["--profile", "serving-deepep"], runner=run_in(root), has_driver=lambda: True) == 1
    failed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
    assert any("UCCL-EP absent" in line for line in failed)
    assert any("upstream DeepEP" in line and "deep_ep_wrapper" in line for line in failed)


def test_deepep_image_with_a_stray_deep_ep_fails(smoke: ModuleType, tmp_path: Path, capsys: Any) -> None:
    """A deep_ep module that no sgl-deep-ep distribution installed (e.g. the serving image's, or a copy on PYTHONPATH) fails."""
    root = site(tmp_path, {"deep_ep/__init__.py": "class Buffer: ...\nclass Config: ...\n"})
    shutil.rmtree(root / "uccl")
    assert smoke.main(["--profile", "serving-deepep"], runner=run_in(root), has_driver=lambda: True) == 1
    failed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
    assert [line.split("  ")[1].strip() for line in failed] == ["deep_ep is upstream DeepEP (sgl-deep-ep)"], failed
