#!/usr/bin/env bash
# Builds UCCL-EP from a pinned commit with EFA support, as two wheels in OUT_DIR:
#   uccl-*.whl     the uccl package with uccl/ep*.so (CUDA kernels + CPU proxies over EFA verbs)
#   deep_ep-*.whl  ep/deep_ep_wrapper, the DeepEP-compatible `deep_ep` module SGLang imports
# and OUT_DIR/uccl-build.json (repo, commit, arch) for the in-image self-test.
#
# UCCL's ep/setup.py compiles the EFA path (-DEFA, links libefa) only when /opt/amazon/efa exists, and
# says so in its build summary; this script refuses to produce wheels without it. The build options of
# versions.yaml (components.uccl.build_options) go to ep/setup.py as the variables it reads,
# PER_EXPERT_BATCHING and USE_DMABUF, and the build summary must show them.
set -euo pipefail

OUT_DIR="${1:?usage: build-uccl-ep.sh OUT_DIR}"
: "${UCCL_REPO:?set by build_args.py from versions.yaml}"
: "${UCCL_COMMIT:?set by build_args.py from versions.yaml}"
: "${TORCH_CUDA_ARCH_LIST:?set by build_args.py from versions.yaml}"
: "${UCCL_PER_EXPERT_BATCHING:?set by build_args.py from versions.yaml}"
: "${UCCL_USE_DMABUF:?set by build_args.py from versions.yaml}"
EFA_HOME="${EFA_HOME:-/opt/amazon/efa}"
SRC="${UCCL_SRC:-/opt/src/uccl}"

die() {
	echo "build-uccl-ep: $*" >&2
	exit 1
}

test -d "${EFA_HOME}" || die "${EFA_HOME} is missing: install the EFA user space first"
test -f "${RDMA_INCLUDE:-/usr/include}/infiniband/efadv.h" || die "infiniband/efadv.h is missing (rdma-core headers from the EFA installer)"
for option in "${UCCL_PER_EXPERT_BATCHING}" "${UCCL_USE_DMABUF}"; do
	[[ "${option}" == 0 || "${option}" == 1 ]] || die "UCCL build options are 0 or 1, got '${option}' (versions.yaml components.uccl.build_options)"
done

git init --quiet "${SRC}"
git -C "${SRC}" remote add origin "${UCCL_REPO}"
git -C "${SRC}" fetch --quiet --depth 1 origin "${UCCL_COMMIT}"
git -C "${SRC}" checkout --quiet --detach FETCH_HEAD
head="$(git -C "${SRC}" rev-parse HEAD)"
[[ "${head}" == "${UCCL_COMMIT}" ]] || die "checked out ${head}, expected ${UCCL_COMMIT}"

log="$(mktemp)"
(
	cd "${SRC}/ep"
	EFA_HOME="${EFA_HOME}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST}" MAX_JOBS="${MAX_JOBS:-$(nproc)}" \
		PER_EXPERT_BATCHING="${UCCL_PER_EXPERT_BATCHING}" USE_DMABUF="${UCCL_USE_DMABUF}" \
		python setup.py build
) 2>&1 | tee "${log}"
grep -F "EFA Support: Yes" "${log}" >/dev/null || die "ep/setup.py did not build the EFA path (no 'EFA Support: Yes')"
# ep/setup.py prints "Building with DMA-BUF ..." or "Building without DMA-BUF ..." and its CXX flags.
dmabuf_line="Building without DMA-BUF GPU memory registration"
[[ "${UCCL_USE_DMABUF}" == 0 ]] || dmabuf_line="Building with DMA-BUF GPU memory registration"
grep -F "${dmabuf_line}" "${log}" >/dev/null || die "ep/setup.py did not report '${dmabuf_line}' (USE_DMABUF=${UCCL_USE_DMABUF})"
batching=0
grep -E "CXX Flags: .*-DPER_EXPERT_BATCHING" "${log}" >/dev/null && batching=1
[[ "${batching}" == "${UCCL_PER_EXPERT_BATCHING}" ]] || die "ep/setup.py compiled PER_EXPERT_BATCHING=${batching}, versions.yaml says ${UCCL_PER_EXPERT_BATCHING}"

mapfile -t built < <(find "${SRC}/ep/build" -name 'ep*.so' -type f)
[[ "${#built[@]}" -eq 1 ]] || die "expected one ep*.so under ep/build, found ${#built[@]}"
cp "${built[0]}" "${SRC}/uccl/"
so="${SRC}/uccl/$(basename "${built[0]}")"
readelf --dynamic "${so}" | grep -F "[libefa.so.1]" >/dev/null || die "${so} does not link libefa.so.1"
nm --dynamic --undefined-only "${so}" | grep -F "efadv_create_qp_ex" >/dev/null || die "${so} does not use efadv_create_qp_ex"

mkdir -p "${OUT_DIR}"
(cd "${SRC}" && pip wheel --no-deps --no-build-isolation --wheel-dir "${OUT_DIR}" .)
(cd "${SRC}/ep/deep_ep_wrapper" && pip wheel --no-deps --no-build-isolation --wheel-dir "${OUT_DIR}" .)
printf '{"repo": "%s", "commit": "%s", "efa": true, "torch_cuda_arch_list": "%s", "per_expert_batching": "%s", "use_dmabuf": "%s"}\n' \
	"${UCCL_REPO}" "${head}" "${TORCH_CUDA_ARCH_LIST}" "${UCCL_PER_EXPERT_BATCHING}" "${UCCL_USE_DMABUF}" >"${OUT_DIR}/uccl-build.json"
echo "build-uccl-ep: wheels for ${UCCL_REPO}@${head} (EFA) in ${OUT_DIR}"
