"""What the serving image must carry for the objects the kit renders from it.

- The router Deployment runs `python3 -m <module>`: that module belongs to the router package pinned in
  versions.yaml, which is the smg the conformance run (`make conformance`) checks the command line with.
- The weights-staging init container runs `python3 -m pdkit.pods.staging` from the serving image:
  the Dockerfile copies that module and every pdkit module it imports (and nothing imports more of
  pdkit), and the third-party packages it needs are pinned components of the image.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from container_paths import REPO_ROOT, canonical

from pdkit.model.plan import Plan
from pdkit.render.serving import inputs, manifests, router_args

Doc = dict[str, Any]
CONFORMANCE_VENV = REPO_ROOT / ".venv-sglang"
STAGING_INIT_CONTAINER = "stage-weights"


@pytest.fixture(scope="module")
def rendered(plan: Plan) -> list[dict[str, Any]]:
    return manifests.render(plan, inputs.from_plan(plan))


def module_after_dash_m(command: list[str]) -> str:
    assert command[:2] == ["python3", "-m"], command
    return command[2]


# --------------------------------------------------------------------------------------------------
# Router
# --------------------------------------------------------------------------------------------------


def test_router_deployment_runs_a_module_of_the_pinned_router(doc: Doc, plan: Plan) -> None:
    """`python3 -m smg.launch_router`: the module is versions.yaml's and its top-level package is the pinned distribution's.
    versions.yaml's router is router_args' pin, which tests/test_serving_conformance.py checks the conformance lock and
    requirements-sglang.in hold: the smg in the image is the smg `make conformance` runs the command line through."""
    router = doc["components"]["router"]
    deployment = manifests.router_deployment(plan, inputs.from_plan(plan))
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    module = module_after_dash_m(container["command"])
    assert module == router["module"]
    assert module.split(".")[0] == canonical(router["package"]).replace("-", "_")
    assert (
        router["package"],
        router["version"],
        router["module"],
    ) == (router_args.ROUTER_PACKAGE, router_args.ROUTER_VERSION, router_args.ROUTER_MODULE)
    # Issue 14 item 9: the router runs from its own slim image (a Python base and smg), not the serving image.
    assert container["image"] == plan.images["router"].uri(inputs.default_registry(plan)) != inputs.from_plan(plan).image
    assert doc["images"]["router"]["components"] == ["python_slim_base", "router"]


@pytest.mark.skipif(
    not list(CONFORMANCE_VENV.glob("lib/python*/site-packages/smg-*.dist-info")),
    reason="no .venv-sglang: `make unit` (and `make conformance`) builds it",
)
def test_router_module_is_in_the_pinned_wheel(doc: Doc) -> None:
    """Where the conformance venv exists, the real smg wheel's RECORD ships the module the Deployment runs."""
    router = doc["components"]["router"]
    (dist_info,) = CONFORMANCE_VENV.glob(f"lib/python*/site-packages/{router['package']}-*.dist-info")
    metadata = dict(line.split(": ", 1) for line in (dist_info / "METADATA").read_text().splitlines() if ": " in line)
    assert (canonical(metadata["Name"]), metadata["Version"]) == (canonical(router["package"]), router["version"])
    record = {line.split(",", 1)[0] for line in (dist_info / "RECORD").read_text().splitlines()}
    assert router["module"].replace(".", "/") + ".py" in record


# --------------------------------------------------------------------------------------------------
# Weights staging
# --------------------------------------------------------------------------------------------------


def pod_specs(node: Any) -> list[dict[str, Any]]:
    """Every pod spec in the rendered objects, whatever wraps it (DisaggregatedSet roles, Deployments, Jobs)."""
    if isinstance(node, list):
        return [spec for item in node for spec in pod_specs(item)]
    if not isinstance(node, dict):
        return []
    own = [node] if "containers" in node else []
    return own + [spec for value in node.values() for spec in pod_specs(value)]


def staging_container(rendered: list[dict[str, Any]]) -> dict[str, Any]:
    found = [
        container
        for spec in pod_specs(rendered)
        for container in spec.get("initContainers", [])
        if container["name"] == STAGING_INIT_CONTAINER
    ]
    assert found, "no weights-staging init container rendered"
    return found[0]


def module_file(module: str) -> str:
    return module.replace(".", "/") + ".py"


def pdkit_imports(path: Path) -> set[str]:
    """pdkit modules a file imports (anywhere in it, lazy imports included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "pdkit"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "pdkit":
            found.add(node.module)
            found |= {
                f"{node.module}.{alias.name}" for alias in node.names if (REPO_ROOT / module_file(f"{node.module}.{alias.name}")).is_file()
            }
    return found


def third_party_imports(path: Path) -> set[str]:
    tops: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            tops |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            tops.add(node.module.split(".")[0])
    return tops - set(sys.stdlib_module_names) - {"__future__", "pdkit"}


def needed_pdkit_files(module: str) -> set[str]:
    """The module, every pdkit module it imports (transitively), and the package __init__ files on their way."""
    todo, files = [module], set()
    while todo:
        current = todo.pop()
        path = module_file(current)
        if not (REPO_ROOT / path).is_file():
            path = current.replace(".", "/") + "/__init__.py"
        if path in files:
            continue
        files.add(path)
        parts = current.split(".")
        files |= {"/".join(parts[:i]) + "/__init__.py" for i in range(1, len(parts))}
        todo += sorted(pdkit_imports(REPO_ROOT / path))
    return files


def serving_pdkit_sources(doc: Doc, versions: ModuleType) -> set[str]:
    text = versions.dockerfile_path(doc, "sglang-efa").read_text()
    return {source for source in versions.context_sources(text) if source.startswith("pdkit/")}


def test_serving_image_copies_exactly_what_the_staging_init_container_imports(
    doc: Doc, versions: ModuleType, rendered: list[dict[str, Any]], plan: Plan
) -> None:
    container = staging_container(rendered)
    assert container["image"] == inputs.from_plan(plan).image, "staging runs from the serving image"
    module = module_after_dash_m(container["command"])
    needed = needed_pdkit_files(module)
    assert needed == {"pdkit/__init__.py", "pdkit/pods/__init__.py", "pdkit/pods/staging.py", "pdkit/pods/weights_manifest.py"}, (
        "the staging modules now import more of pdkit: copy it into the serving image (Dockerfile, Dockerfile.dockerignore, "
        "the images stack's source asset) or keep staging self-contained"
    )
    # The weights import Job (pdkit weights import) and the compile-cache init container / preStop hook
    # (pdkit/render/serving/compile_cache_objects.py) run from the same image: their modules are copied too.
    also = needed_pdkit_files("pdkit.pods.weights_import") | needed_pdkit_files("pdkit.pods.compile_cache")
    assert serving_pdkit_sources(doc, versions) == needed | also


def test_staging_third_party_imports_are_pinned_in_the_serving_image(doc: Doc, versions: ModuleType) -> None:
    """boto3 (and botocore, which boto3 pins) for staging; huggingface_hub (and httpx, its HTTP client, whose
    errors the import maps) for the weights import: all in the serving image's hash-locked set, and the
    kit's dev lock tests the import against the same huggingface_hub."""
    tops = set().union(*(third_party_imports(REPO_ROOT / path) for path in serving_pdkit_sources(doc, versions)))
    assert tops == {"boto3", "botocore", "huggingface_hub", "httpx"}
    assert "boto3" in doc["images"]["sglang-efa"]["components"]
    assert doc["components"]["boto3"]["package"] == "boto3"
    lock = (versions.dockerfile_path(doc, "sglang-efa").parent / "requirements.lock").read_text().splitlines()
    assert f"boto3=={doc['components']['boto3']['version']} \\" in lock
    assert any(line.startswith("awscrt==") for line in lock), "with the CRT extra (botocore[crt] requires awscrt)"
    dev = (REPO_ROOT / "requirements-dev.txt").read_text().splitlines()
    for package in ("huggingface-hub", "httpx"):
        (pin,) = [line for line in lock if line.startswith(f"{package}==")]
        assert pin in dev, f"requirements-dev.in must pin {package} at the serving image's version ({pin})"


def test_import_closure_can_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The closure follows lazy and `from pdkit.x import y` imports (so a new pdkit import would be caught)."""
    for folder in ("pods", "model"):
        (tmp_path / "pdkit" / folder).mkdir(parents=True)
    for name in ("pdkit/__init__.py", "pdkit/pods/__init__.py", "pdkit/model/__init__.py", "pdkit/model/plan.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "pdkit" / "pods" / "staging.py").write_text("def f():\n    from pdkit.model import plan\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO_ROOT", tmp_path)
    assert "pdkit/model/plan.py" in needed_pdkit_files("pdkit.pods.staging")


def test_staging_imports_from_the_copied_files_alone(doc: Doc, versions: ModuleType, selftest: ModuleType, tmp_path: Path) -> None:
    """The self-test's probe, run on a copy of only the files the serving image gets (no repository pdkit on the path)."""
    copy = tmp_path / "opt-pdkit"
    for source in serving_pdkit_sources(doc, versions):
        (copy / source).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO_ROOT / source, copy / source)
    site_packages = sysconfig.get_path("purelib")  # boto3 from this venv; -S keeps its editable pdkit install off the path
    code = f"import sys; sys.path[:0] = [{str(copy)!r}, {site_packages!r}]\n{selftest.STAGING_PROBE}"
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (marker,) = [line for line in result.stdout.splitlines() if line.startswith(selftest.STAGING_MARKER)]
    assert f"file={copy / 'pdkit' / 'pods' / 'staging.py'}" in marker
    assert re.search(r"crt=(True|False)", marker)
