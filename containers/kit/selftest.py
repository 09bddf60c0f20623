#!/usr/bin/env python3
"""In-image self-test: proves this image carries the EFA-capable build of every piece, not a TCP fallback.

Runs as the last step of the image build (no GPU, no EFA device) and on demand in a pod:

    python3 /opt/kit/selftest.py                 # profile and expected versions from /opt/kit/expected.json
    python3 /opt/kit/selftest.py --json          # machine-readable, for `pdkit validate`

It only looks at what needs no hardware: package metadata, linked libraries (readelf -d), dynamic
symbols (nm -D), library resolution (ldd), files and environment. What needs GPUs and EFA devices
(fi_pingpong, nccl-tests, UCCL-EP benchmarks) runs in the validation image on the nodes.

Standard library only. Every check is a function of a `System` (the probes) and the expected versions,
so tests can hand it fakes of a good and of a broken (non-EFA) image.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

KIT_DIR = Path("/opt/kit")
EXPECTED_FILE = KIT_DIR / "expected.json"
UCCL_BUILD_FILE = KIT_DIR / "uccl-build.json"
EFA_HOME = Path("/opt/amazon/efa")
EFA_LIB_DIR = EFA_HOME / "lib"
FI_INFO = EFA_HOME / "bin" / "fi_info"
FI_PINGPONG = EFA_HOME / "bin" / "fi_pingpong"
EFA_INSTALLED_PACKAGES = Path("/opt/amazon/efa_installed_packages")
OFI_NCCL_LIB_DIR = Path("/opt/amazon/ofi-nccl/lib")
# NCCL_NET_PLUGIN=ofi makes NCCL dlopen("libnccl-net-ofi.so"), found through LD_LIBRARY_PATH.
OFI_NCCL_PLUGIN = OFI_NCCL_LIB_DIR / "libnccl-net-ofi.so"
NCCL_TESTS_DIR = Path("/opt/nccl-tests/bin")
FABTESTS_DIR = Path("/opt/fabtests/bin")
UCCL_EP_BENCH_DIR = Path("/opt/uccl-ep/bench")
# mpirun's rsh agent in the nccl phase (pdkit/render/fabric.py): kubectl exec through this script.
KUBECTL = Path("/usr/local/bin/kubectl")
KUBECTL_RSH = Path("/opt/kit/bin/kubectl-rsh.sh")

# serving: the sglang-efa image (UCCL-EP as deep_ep); serving-deepep: the sglang-deepep image (upstream DeepEP).
PROFILES = ("serving", "serving-deepep", "validation")
# Build arg (from containers/versions.yaml) -> key of expected.json. `record` writes these at build time.
EXPECTED_FROM_BUILD_ARGS = {
    "CUDA_VERSION": "cuda_version",
    "EFA_INSTALLER_VERSION": "efa_installer",
    "LIBFABRIC_VERSION": "libfabric",
    "AWS_OFI_NCCL_VERSION": "aws_ofi_nccl",
    "TORCH_VERSION": "torch",
    "NCCL_PACKAGE": "nccl_package",
    "NCCL_VERSION": "nccl",
    "UCCL_COMMIT": "uccl_commit",
    "MOONCAKE_PACKAGE": "mooncake_package",
    "MOONCAKE_VERSION": "mooncake",
    "NIXL_PACKAGE": "nixl_package",
    "NIXL_VERSION": "nixl",
    "SGLANG_VERSION": "sglang",
    "ROUTER_PACKAGE": "router_package",
    "ROUTER_VERSION": "router",
    "ROUTER_MODULE": "router_module",
    "BOTO3_VERSION": "boto3",
    "SGL_DEEP_EP_VERSION": "sgl_deep_ep",
    "NCCL_TESTS_COMMIT": "nccl_tests_commit",
    "KUBECTL_VERSION": "kubectl",
}
# Libraries a GPU-less build cannot resolve and a GPU pod gets anyway: the driver's (injected by the
# NVIDIA container toolkit) and the CUDA runtime, which torch loads from its wheels before these libraries.
RUNTIME_PROVIDED = re.compile(r"^(libcuda\.so\.\d+|libnvidia-ml\.so\.\d+|libcudart\.so\.\d+)$")
NON_EFA_MOONCAKE = "mooncake-transfer-engine"
# The weights-staging init container runs `python3 -m pdkit.pods.staging` from the serving image.
# The probe imports it (and what it imports lazily) with that same interpreter and reports whether
# botocore sees the AWS CRT (boto3[crt]), which S3 transfers use for parallel ranged GETs.
STAGING_MODULE = "pdkit.pods.staging"
STAGING_MARKER = "selftest-staging-import-ok"
STAGING_PROBE = (
    f"import {STAGING_MODULE}, boto3.s3.transfer, botocore.compat; "
    f"print('{STAGING_MARKER} crt=' + str(botocore.compat.HAS_CRT) + ' file=' + {STAGING_MODULE}.__file__)"
)
SGL_DEEP_EP = "sgl-deep-ep"

PASS, FAIL, WARN = "PASS", "FAIL", "WARN"


@dataclass(frozen=True)
class Result:
    name: str
    status: str
    detail: str

    @property
    def failed(self) -> bool:
        return self.status == FAIL


class System(Protocol):
    """What the checks may look at. RealSystem reads the image; tests pass fakes."""

    @property
    def env(self) -> Mapping[str, str]: ...

    def dist_version(self, name: str) -> str | None: ...
    def dist_files(self, name: str) -> list[Path]: ...
    def module_owners(self, top_level: str) -> list[str]: ...
    def read_text(self, path: Path) -> str | None: ...
    def exists(self, path: Path) -> bool: ...
    def readelf_dynamic(self, path: Path) -> str: ...
    def nm_dynamic(self, path: Path) -> str: ...
    def ldd(self, path: Path) -> str: ...
    def run(self, argv: Sequence[str]) -> str: ...


def normalize(name: str) -> str:
    """PEP 503 distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


class RealSystem:
    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(os.environ if env is None else env)
        self._owners: Mapping[str, list[str]] | None = None

    def _dist(self, name: str) -> metadata.Distribution | None:
        try:
            return metadata.distribution(name)
        except metadata.PackageNotFoundError:
            return None

    def dist_version(self, name: str) -> str | None:
        dist = self._dist(name)
        return dist.version if dist else None

    def dist_files(self, name: str) -> list[Path]:
        dist = self._dist(name)
        if dist is None or dist.files is None:
            return []
        return [Path(str(dist.locate_file(entry))).resolve() for entry in dist.files]

    def module_owners(self, top_level: str) -> list[str]:
        if self._owners is None:
            self._owners = metadata.packages_distributions()
        return sorted({normalize(name) for name in self._owners.get(top_level, [])})

    def read_text(self, path: Path) -> str | None:
        try:
            return path.read_text(errors="replace")
        except OSError:
            return None

    def exists(self, path: Path) -> bool:
        return path.exists()

    def _tool(self, argv: Sequence[str]) -> str:
        try:
            completed = subprocess.run(list(argv), capture_output=True, text=True, check=False, env=dict(self.env))  # noqa: S603 - fixed argv of the self-test (ldd, nm, python), no shell
        except OSError as exc:
            return f"<could not run {argv[0]}: {exc}>"
        return completed.stdout + completed.stderr

    def readelf_dynamic(self, path: Path) -> str:
        return self._tool(["readelf", "--dynamic", "--wide", str(path)])

    def nm_dynamic(self, path: Path) -> str:
        return self._tool(["nm", "--dynamic", str(path)])

    def ldd(self, path: Path) -> str:
        return self._tool(["ldd", str(path)])

    def run(self, argv: Sequence[str]) -> str:
        return self._tool(argv)


# --------------------------------------------------------------------------------------------------
# Parsers for tool output
# --------------------------------------------------------------------------------------------------


def needed_libraries(readelf_output: str) -> list[str]:
    """NEEDED entries of `readelf -d`."""
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", readelf_output)


def dynamic_symbols(nm_output: str) -> tuple[set[str], set[str]]:
    """(defined, undefined) symbol names from `nm -D` (version suffixes like @FABRIC_1.3 dropped)."""
    defined: set[str] = set()
    undefined: set[str] = set()
    for line in nm_output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in {"U", "w", "v"}:
            undefined.add(parts[1].split("@", 1)[0])
        elif len(parts) == 3 and len(parts[1]) == 1:
            (undefined if parts[1] in {"U", "w", "v"} else defined).add(parts[2].split("@", 1)[0])
    return defined, undefined


def resolved_libraries(ldd_output: str) -> dict[str, str | None]:
    """soname -> resolved path (None when `not found`) from `ldd`."""
    resolved: dict[str, str | None] = {}
    for line in ldd_output.splitlines():
        match = re.match(r"^\s*(\S+)\s+=>\s+(not found|(\S+))", line)
        if match:
            resolved[match.group(1)] = None if match.group(2) == "not found" else match.group(3)
    return resolved


def base_version(version: str) -> str:
    return version.split("+", 1)[0]


# --------------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------------


def _result(name: str, problems: list[str], ok_detail: str) -> Result:
    if problems:
        return Result(name, FAIL, "; ".join(problems))
    return Result(name, PASS, ok_detail)


def _package_version(system: System, name: str, dist: str, expected: str) -> Result:
    found = system.dist_version(dist)
    if found is None:
        return Result(name, FAIL, f"{dist} is not installed (expected {expected})")
    if base_version(found) != expected:
        return Result(name, FAIL, f"{dist} {found} installed, versions.yaml pins {expected}")
    return Result(name, PASS, f"{dist} {found}")


def check_sglang(system: System, expected: Mapping[str, str]) -> Result:
    """SGLang is the version versions.yaml pins (the kit renders flags for exactly this version)."""
    return _package_version(system, "sglang version", "sglang", expected["sglang"])


def check_router(system: System, expected: Mapping[str, str]) -> Result:
    """The PD router is the pinned package and ships the module the router Deployment runs (`python3 -m <module>`)."""
    name = "PD router version and module"
    dist = normalize(expected["router_package"])
    module = expected["router_module"]
    version = system.dist_version(dist)
    if version is None:
        return Result(name, FAIL, f"{dist} is not installed (expected {expected['router']})")
    problems: list[str] = []
    if base_version(version) != expected["router"]:
        problems.append(f"{dist} {version} installed, versions.yaml pins {expected['router']}")
    top_level = module.split(".")[0]
    owners = system.module_owners(top_level)
    if owners != [dist]:
        problems.append(f"module {top_level} comes from {owners or 'nothing'}, expected {dist}")
    module_file = "/" + module.replace(".", "/") + ".py"
    if not _find_file(system.dist_files(dist), re.escape(module_file) + "$"):
        problems.append(f"{dist} does not ship {module} ({module_file.lstrip('/')}), which the router Deployment runs")
    return _result(name, problems, f"{dist} {version}: python3 -m {module}")


def check_weights_staging(system: System, expected: Mapping[str, str]) -> Result:
    """`python3 -m pdkit.pods.staging` (the init container's command) imports, with boto3 on the AWS CRT."""
    name = "weights staging module"
    problems: list[str] = []
    version = system.dist_version("boto3")
    if version is None:
        problems.append("boto3 is not installed")
    elif base_version(version) != expected["boto3"]:
        problems.append(f"boto3 {version} installed, versions.yaml pins {expected['boto3']}")
    if system.dist_version("awscrt") is None:
        problems.append("awscrt is not installed (boto3 without the crt extra)")
    output = system.run(["python3", "-c", STAGING_PROBE])
    marker = next((line for line in output.splitlines() if line.startswith(STAGING_MARKER)), None)
    if marker is None:
        last_line = output.strip().splitlines()[-1] if output.strip() else "no output"
        problems.append(f"`python3 -c 'import {STAGING_MODULE}'` failed: {last_line[-240:]}")
    elif "crt=True" not in marker.split():
        problems.append("botocore does not see the AWS CRT (HAS_CRT is False): S3 staging would use the classic transfer")
    return _result(name, problems, f"{STAGING_MODULE} imports; boto3 {version} with awscrt {system.dist_version('awscrt')}")


def check_torch(system: System, expected: Mapping[str, str]) -> Result:
    """torch is SGLang's pin; UCCL-EP was compiled against it (C++ ABI)."""
    return _package_version(system, "torch version", "torch", expected["torch"])


def check_nccl(system: System, expected: Mapping[str, str]) -> Result:
    """The NCCL wheel torch loads is the pinned one (the OFI plugin and nccl-tests are matched to it)."""
    return _package_version(system, "NCCL version", expected["nccl_package"], expected["nccl"])


def _find_file(files: list[Path], pattern: str) -> list[Path]:
    regex = re.compile(pattern)
    return [path for path in files if regex.search(path.as_posix())]


def check_deep_ep_is_uccl_efa(system: System, expected: Mapping[str, str]) -> Result:
    """`import deep_ep` must give UCCL-EP built with EFA, not sgl-deep-ep (NVSHMEM/IBGDA, no EFA)."""
    name = "deep_ep is UCCL-EP (EFA)"
    problems: list[str] = []
    if system.dist_version(SGL_DEEP_EP) is not None:
        problems.append(f"{SGL_DEEP_EP} {system.dist_version(SGL_DEEP_EP)} is still installed")
    owners = system.module_owners("deep_ep")
    if owners != ["deep-ep"]:
        problems.append(f"module deep_ep comes from {owners or 'nothing'}, expected UCCL's deep_ep wrapper")
    wrapper_init = _find_file(system.dist_files("deep-ep"), r"/deep_ep/__init__\.py$")
    init_text = system.read_text(wrapper_init[0]) if wrapper_init else None
    if not init_text or "uccl.ep" not in init_text:
        problems.append("deep_ep/__init__.py does not import uccl.ep")
    if system.dist_version("uccl") is None:
        problems.append("uccl is not installed")
    ep_libs = _find_file(system.dist_files("uccl"), r"/uccl/ep[^/]*\.so$")
    if len(ep_libs) != 1:
        problems.append(f"expected one uccl/ep*.so, found {len(ep_libs)}")
    else:
        needed = needed_libraries(system.readelf_dynamic(ep_libs[0]))
        for lib in ("libefa.so.1", "libibverbs.so.1"):
            if lib not in needed:
                problems.append(f"{ep_libs[0].name} does not link {lib} (a non-EFA build, e.g. PyPI uccl)")
        _, undefined = dynamic_symbols(system.nm_dynamic(ep_libs[0]))
        if "efadv_create_qp_ex" not in undefined:
            problems.append(f"{ep_libs[0].name} never calls efadv_create_qp_ex (built without -DEFA)")
        resolved = resolved_libraries(system.ldd(ep_libs[0]))
        for lib in ("libefa.so.1", "libibverbs.so.1"):
            if lib in needed and resolved.get(lib) is None:
                problems.append(f"{lib} does not resolve for {ep_libs[0].name}")
    build_info = system.read_text(UCCL_BUILD_FILE)
    try:
        commit = json.loads(build_info)["commit"] if build_info else None
    except (ValueError, KeyError, TypeError):
        commit = None
    if commit != expected["uccl_commit"]:
        problems.append(f"UCCL built from {commit or 'unknown commit'}, versions.yaml pins {expected['uccl_commit']}")
    return _result(name, problems, f"uccl {system.dist_version('uccl')} @ {expected['uccl_commit'][:12]}, links libefa, sgl-deep-ep absent")


def check_deep_ep_is_upstream(system: System, expected: Mapping[str, str]) -> Result:
    """`import deep_ep` must give upstream DeepEP from SGLang's sgl-deep-ep wheel at the pinned version, not UCCL's wrapper."""
    name = "deep_ep is upstream DeepEP (sgl-deep-ep)"
    problems: list[str] = []
    version = system.dist_version(SGL_DEEP_EP)
    if version != expected["sgl_deep_ep"]:
        problems.append(f"{SGL_DEEP_EP} is {version or 'not installed'}, versions.yaml pins {expected['sgl_deep_ep']}")
    owners = system.module_owners("deep_ep")
    if owners != [SGL_DEEP_EP]:
        problems.append(f"module deep_ep comes from {owners or 'nothing'}, expected {SGL_DEEP_EP} alone")
    for dist in ("uccl", "deep-ep"):
        if system.dist_version(dist) is not None:
            problems.append(f"{dist} {system.dist_version(dist)} is installed (UCCL-EP belongs in the sglang-efa image)")
    init = _find_file(system.dist_files(SGL_DEEP_EP), r"/deep_ep/__init__\.py$")
    init_text = system.read_text(init[0]) if init else None
    if not init_text or "uccl" in init_text:
        problems.append("deep_ep/__init__.py is missing or is UCCL's wrapper")
    if not _find_file(system.dist_files(SGL_DEEP_EP), r"/deep_ep/_C[^/]*\.so$"):
        problems.append("deep_ep/_C*.so (DeepEP's kernels) is missing")
    return _result(name, problems, f"{SGL_DEEP_EP} {version}, uccl absent")


def _efa_libfabric(resolved: Mapping[str, str | None], what: str) -> list[str]:
    path = resolved.get("libfabric.so.1")
    if path is None:
        return [f"libfabric.so.1 does not resolve for {what}"]
    if not Path(path).as_posix().startswith(EFA_LIB_DIR.as_posix() + "/"):
        return [f"{what} loads libfabric from {path}, not the EFA installer's {EFA_LIB_DIR} (no EFA provider there)"]
    return []


def _unresolved(resolved: Mapping[str, str | None]) -> list[str]:
    return sorted(lib for lib, path in resolved.items() if path is None and not RUNTIME_PROVIDED.match(lib))


def check_mooncake_efa(system: System, expected: Mapping[str, str]) -> Result:
    """Mooncake must be the EFA build: the PyPI default has no EFA transport and silently uses TCP."""
    name = "Mooncake has the EFA transport"
    problems: list[str] = []
    dist = normalize(expected["mooncake_package"])
    if system.dist_version(NON_EFA_MOONCAKE) is not None:
        problems.append(f"{NON_EFA_MOONCAKE} (no EFA transport) is installed")
    version = system.dist_version(dist)
    if version is None:
        problems.append(f"{dist} is not installed")
    elif base_version(version) != expected["mooncake"]:
        problems.append(f"{dist} {version} installed, versions.yaml pins {expected['mooncake']}")
    owners = system.module_owners("mooncake")
    if owners != [dist]:
        problems.append(f"module mooncake comes from {owners or 'nothing'}, expected {dist}")
    # Inspect the engine that `import mooncake` loads, whichever distribution put it there.
    engines = sorted({path for owner in owners or [dist] for path in _find_file(system.dist_files(owner), r"/mooncake/engine[^/]*\.so$")})
    if len(engines) != 1:
        problems.append(f"expected one mooncake/engine*.so, found {len(engines)}")
    else:
        engine = engines[0]
        defined, _ = dynamic_symbols(system.nm_dynamic(engine))
        if not any(symbol.startswith("_ZN8mooncake12EfaTransport") for symbol in defined):
            problems.append(f"{engine.name} defines no mooncake::EfaTransport (built with USE_EFA=OFF)")
        needed = needed_libraries(system.readelf_dynamic(engine))
        if "libfabric.so.1" not in needed:
            problems.append(f"{engine.name} does not link libfabric.so.1")
        cuda_major = expected["cuda_version"].split(".")[0]
        cudart = [lib for lib in needed if lib.startswith("libcudart.so.")]
        if cudart != [f"libcudart.so.{cuda_major}"]:
            problems.append(f"{engine.name} links {cudart or 'no CUDA runtime'}, the image is CUDA {cuda_major}")
        resolved = resolved_libraries(system.ldd(engine))
        problems += _efa_libfabric(resolved, engine.name)
        missing = _unresolved(resolved)
        if missing:
            problems.append(f"{engine.name} cannot resolve {', '.join(missing)}")
    return _result(name, problems, f"{dist} {version}: EfaTransport, libfabric from {EFA_LIB_DIR}")


def check_nixl_libfabric(system: System, expected: Mapping[str, str]) -> Result:
    """NIXL (the alternative KV backend) must have its LIBFABRIC plugin on the EFA installer's libfabric."""
    name = "NIXL LIBFABRIC plugin on EFA libfabric"
    problems: list[str] = []
    dist = normalize(expected["nixl_package"])
    version = system.dist_version(dist)
    if version is None:
        return Result(name, FAIL, f"{dist} is not installed")
    if base_version(version) != expected["nixl"]:
        problems.append(f"{dist} {version} installed, versions.yaml pins {expected['nixl']}")
    plugins = _find_file(system.dist_files(dist), r"/libplugin_LIBFABRIC\.so$")
    if not plugins:
        problems.append(f"{dist} has no libplugin_LIBFABRIC.so")
    for plugin in plugins:
        if "libfabric.so.1" not in needed_libraries(system.readelf_dynamic(plugin)):
            problems.append(f"{plugin.name} does not link libfabric.so.1")
        problems += _efa_libfabric(resolved_libraries(system.ldd(plugin)), plugin.as_posix())
    return _result(name, problems, f"{dist} {version}: {len(plugins)} LIBFABRIC plugin(s) on {EFA_LIB_DIR}")


def _ld_library_path(env: Mapping[str, str]) -> list[str]:
    return [entry.rstrip("/") for entry in env.get("LD_LIBRARY_PATH", "").split(":") if entry]


def check_ofi_nccl_plugin(system: System, expected: Mapping[str, str]) -> Result:
    """NCCL must load aws-ofi-nccl; on SGLang/NGC-style images it otherwise uses sockets (~14 vs ~400 GB/s)."""
    name = "aws-ofi-nccl plugin selected"
    problems: list[str] = []
    selected = system.env.get("NCCL_NET_PLUGIN")
    if selected not in {"ofi", OFI_NCCL_PLUGIN.as_posix()}:
        problems.append(f"NCCL_NET_PLUGIN is {selected!r}; set it to 'ofi'")
    if selected == "ofi" and OFI_NCCL_LIB_DIR.as_posix() not in _ld_library_path(system.env):
        problems.append(f"{OFI_NCCL_LIB_DIR} is not on LD_LIBRARY_PATH, so NCCL_NET_PLUGIN=ofi finds nothing")
    if not system.exists(OFI_NCCL_PLUGIN):
        problems.append(f"{OFI_NCCL_PLUGIN} is missing")
    else:
        defined, _ = dynamic_symbols(system.nm_dynamic(OFI_NCCL_PLUGIN))
        if not any(re.fullmatch(r"ncclNetPlugin_v\d+", symbol) for symbol in defined):
            problems.append(f"{OFI_NCCL_PLUGIN.name} exports no ncclNetPlugin_vN symbol")
        resolved = resolved_libraries(system.ldd(OFI_NCCL_PLUGIN))
        problems += _efa_libfabric(resolved, OFI_NCCL_PLUGIN.name)
        missing = _unresolved(resolved)
        if missing:
            problems.append(f"{OFI_NCCL_PLUGIN.name} cannot resolve {', '.join(missing)}")
    return _result(name, problems, f"NCCL_NET_PLUGIN={selected} -> {OFI_NCCL_PLUGIN}")


def check_ofi_nccl_version(system: System, expected: Mapping[str, str]) -> Result:
    """Informational: the plugin carries the version the EFA installer's changelog promises."""
    name = "aws-ofi-nccl version"
    data = system.read_text(OFI_NCCL_PLUGIN)
    if data is None:
        return Result(name, WARN, f"cannot read {OFI_NCCL_PLUGIN}")
    if expected["aws_ofi_nccl"] not in data:
        return Result(name, WARN, f"no {expected['aws_ofi_nccl']!r} string in the plugin; update efa_installer.bundles")
    return Result(name, PASS, f"aws-ofi-nccl {expected['aws_ofi_nccl']}")


def check_efa_installer(system: System, expected: Mapping[str, str]) -> Result:
    """The EFA user space is the pinned installer with the libfabric its changelog lists."""
    name = "EFA installer and libfabric"
    problems: list[str] = []
    installed = system.read_text(EFA_INSTALLED_PACKAGES)
    wanted = f"# EFA installer version: {expected['efa_installer']}"
    if installed is None:
        problems.append(f"{EFA_INSTALLED_PACKAGES} is missing (EFA installer not run)")
    elif wanted not in installed.splitlines():
        problems.append(f"{EFA_INSTALLED_PACKAGES} does not say {wanted!r}")
    if not system.exists(FI_INFO):
        problems.append(f"{FI_INFO} is missing")
    else:
        output = system.run([FI_INFO.as_posix(), "--version"])
        if f"libfabric: {expected['libfabric']}" not in output:
            problems.append(f"fi_info --version does not report libfabric {expected['libfabric']}: {output.strip()[:120]!r}")
    return _result(name, problems, f"installer {expected['efa_installer']}, libfabric {expected['libfabric']}")


def check_efa_env(system: System, expected: Mapping[str, str], *, mooncake: bool = True) -> Result:
    """Environment defaults the EFA stack needs; a pod spec may override them, so this also runs in pods."""
    name = "EFA environment"
    env = system.env
    problems: list[str] = []
    wanted = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1", "NCCL_NET_PLUGIN": "ofi"}
    if mooncake:
        # Without it Mooncake installs its TCP transport, silently.
        wanted["MOONCAKE_PROTOCOL"] = "efa"
    for key, value in wanted.items():
        if env.get(key) != value:
            problems.append(f"{key}={env.get(key)!r}, want {value!r}")
    path = _ld_library_path(env)
    for directory in (EFA_LIB_DIR, OFI_NCCL_LIB_DIR):
        if directory.as_posix() not in path:
            problems.append(f"{directory} not on LD_LIBRARY_PATH")
    if mooncake and "expandable_segments:true" in env.get("PYTORCH_CUDA_ALLOC_CONF", "").replace(" ", "").lower():
        problems.append("PYTORCH_CUDA_ALLOC_CONF enables expandable_segments, which Mooncake over EFA refuses")
    return _result(name, problems, ", ".join(f"{key}={value}" for key, value in wanted.items()))


def check_efa_env_without_mooncake(system: System, expected: Mapping[str, str]) -> Result:
    return check_efa_env(system, expected, mooncake=False)


def check_nccl_tests(system: System, expected: Mapping[str, str]) -> Result:
    """nccl-tests exist and run on the same NCCL wheel as serving, not on some other libnccl."""
    name = "nccl-tests on the pinned NCCL"
    problems: list[str] = []
    binary = NCCL_TESTS_DIR / "all_reduce_perf"
    if not system.exists(binary):
        return Result(name, FAIL, f"{binary} is missing")
    if "libnccl.so.2" not in needed_libraries(system.readelf_dynamic(binary)):
        problems.append(f"{binary.name} does not link libnccl.so.2")
    nccl_lib = [path for path in system.dist_files(expected["nccl_package"]) if path.name == "libnccl.so.2"]
    resolved = resolved_libraries(system.ldd(binary)).get("libnccl.so.2")
    if not nccl_lib:
        problems.append(f"{expected['nccl_package']} ships no libnccl.so.2")
    elif resolved is None or Path(resolved).resolve() != nccl_lib[0]:
        problems.append(f"{binary.name} loads libnccl.so.2 from {resolved}, not {nccl_lib[0]}")
    return _result(name, problems, f"{binary} -> {nccl_lib[0] if nccl_lib else '?'}")


def check_fabtests(system: System, expected: Mapping[str, str]) -> Result:
    """fi_pingpong (libfabric utility) and fabtests built against the installer's libfabric."""
    name = "fi_pingpong and fabtests"
    problems: list[str] = []
    if not system.exists(FI_PINGPONG):
        problems.append(f"{FI_PINGPONG} is missing")
    rdm_pingpong = FABTESTS_DIR / "fi_rdm_pingpong"
    if not system.exists(rdm_pingpong):
        problems.append(f"{rdm_pingpong} is missing")
    else:
        problems += _efa_libfabric(resolved_libraries(system.ldd(rdm_pingpong)), rdm_pingpong.name)
    return _result(name, problems, f"{FI_PINGPONG}, {rdm_pingpong}")


def check_uccl_ep_bench(system: System, expected: Mapping[str, str]) -> Result:
    name = "UCCL-EP benchmark scripts"
    missing = [script for script in ("test_low_latency.py", "test_internode.py") if not system.exists(UCCL_EP_BENCH_DIR / script)]
    if missing:
        return Result(name, FAIL, f"missing in {UCCL_EP_BENCH_DIR}: {', '.join(missing)}")
    return Result(name, PASS, str(UCCL_EP_BENCH_DIR))


def check_kubectl_rsh(system: System, expected: Mapping[str, str]) -> Result:
    """kubectl at the pinned version and kubectl-rsh.sh, which mpirun uses to start its daemons in the other pods."""
    name = "kubectl exec rsh agent"
    problems = [f"{path} is missing" for path in (KUBECTL, KUBECTL_RSH) if not system.exists(path)]
    if not problems:
        out = system.run([KUBECTL.as_posix(), "version", "--client"])
        if f"Client Version: {expected['kubectl']}" not in out.splitlines():
            problems.append(
                f"kubectl reports {out.strip().splitlines()[0] if out.strip() else 'nothing'}; versions.yaml pins {expected['kubectl']}"
            )
    return _result(name, problems, f"{KUBECTL} {expected['kubectl']}, {KUBECTL_RSH}")


Check = Callable[[System, Mapping[str, str]], Result]

CHECKS: dict[str, list[Check]] = {
    "serving": [
        check_efa_installer,
        check_efa_env,
        check_ofi_nccl_plugin,
        check_ofi_nccl_version,
        check_torch,
        check_nccl,
        check_deep_ep_is_uccl_efa,
        check_mooncake_efa,
        check_nixl_libfabric,
        check_sglang,
        check_router,
        check_weights_staging,
    ],
    "serving-deepep": [
        check_efa_installer,
        check_efa_env,
        check_ofi_nccl_plugin,
        check_ofi_nccl_version,
        check_torch,
        check_nccl,
        check_deep_ep_is_upstream,
        check_mooncake_efa,
        check_nixl_libfabric,
        check_sglang,
        check_router,
        check_weights_staging,
    ],
    "validation": [
        check_efa_installer,
        check_efa_env_without_mooncake,
        check_ofi_nccl_plugin,
        check_ofi_nccl_version,
        check_torch,
        check_nccl,
        check_deep_ep_is_uccl_efa,
        check_nccl_tests,
        check_fabtests,
        check_uccl_ep_bench,
        check_kubectl_rsh,
    ],
}
REQUIRED_KEYS = {
    "serving": {
        "cuda_version",
        "efa_installer",
        "libfabric",
        "aws_ofi_nccl",
        "torch",
        "nccl_package",
        "nccl",
        "uccl_commit",
        "mooncake_package",
        "mooncake",
        "nixl_package",
        "nixl",
        "sglang",
        "router_package",
        "router",
        "router_module",
        "boto3",
    },
    "serving-deepep": {
        "cuda_version",
        "efa_installer",
        "libfabric",
        "aws_ofi_nccl",
        "torch",
        "nccl_package",
        "nccl",
        "sgl_deep_ep",
        "mooncake_package",
        "mooncake",
        "nixl_package",
        "nixl",
        "sglang",
        "router_package",
        "router",
        "router_module",
        "boto3",
    },
    "validation": {
        "cuda_version",
        "efa_installer",
        "libfabric",
        "aws_ofi_nccl",
        "torch",
        "nccl_package",
        "nccl",
        "uccl_commit",
        "nccl_tests_commit",
        "kubectl",
    },
}


def run_checks(system: System, expected: Mapping[str, str], profile: str) -> list[Result]:
    missing = REQUIRED_KEYS[profile] - set(expected)
    if missing:
        return [Result("expected versions", FAIL, f"missing from expected.json: {', '.join(sorted(missing))}")]
    results = []
    for check in CHECKS[profile]:
        try:
            results.append(check(system, expected))
        except Exception as exc:  # a probe blowing up is a failure to prove the build, not a crash
            results.append(Result(getattr(check, "__name__", "check"), FAIL, f"{type(exc).__name__}: {exc}"))
    return results


def render_table(results: Sequence[Result]) -> str:
    width = max(len(result.name) for result in results)
    lines = [f"{'CHECK'.ljust(width)}  STATUS  DETAIL", f"{'-' * width}  ------  ------"]
    lines += [f"{result.name.ljust(width)}  {result.status.ljust(6)}  {result.detail}" for result in results]
    failed = sum(result.failed for result in results)
    warned = sum(result.status == WARN for result in results)
    verdict = "FAIL" if failed else "PASS"
    lines.append(f"\nselftest {verdict}: {len(results) - failed - warned} passed, {failed} failed, {warned} warnings")
    return "\n".join(lines)


def record_expected(env: Mapping[str, str], profile: str, out: Path) -> dict[str, str]:
    """Write expected.json from the build args of this build (they come from versions.yaml)."""
    expected = {key: env[arg] for arg, key in EXPECTED_FROM_BUILD_ARGS.items() if env.get(arg)}
    missing = REQUIRED_KEYS[profile] - set(expected)
    if missing:
        args = sorted(arg for arg, key in EXPECTED_FROM_BUILD_ARGS.items() if key in missing)
        raise SystemExit(f"selftest record: build args missing for profile {profile}: {', '.join(args)}")
    out.write_text(json.dumps({"profile": profile, **expected}, indent=2, sort_keys=True) + "\n")
    return expected


def main(argv: Sequence[str] | None = None, system: System | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("command", nargs="?", default="check", choices=["check", "record"])
    parser.add_argument("--expected", type=Path, default=EXPECTED_FILE, help="expected versions (JSON)")
    parser.add_argument("--profile", choices=PROFILES, help="default: the profile recorded in the expected file")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    args = parser.parse_args(argv)

    if args.command == "record":
        if not args.profile:
            parser.error("record needs --profile")
        record_expected(os.environ, args.profile, args.expected)
        print(f"selftest: wrote {args.expected}")
        return 0

    try:
        expected = json.loads(args.expected.read_text())
    except (OSError, ValueError) as exc:
        print(f"selftest FAIL: cannot read expected versions from {args.expected}: {exc}", file=sys.stderr)
        return 1
    profile = args.profile or expected.get("profile", "serving")
    results = run_checks(system or RealSystem(), expected, profile)
    if args.json:
        print(json.dumps({"profile": profile, "ok": not any(r.failed for r in results), "results": [asdict(r) for r in results]}))
    else:
        print(f"selftest profile: {profile}")
        print(render_table(results))
    return 1 if any(result.failed for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
