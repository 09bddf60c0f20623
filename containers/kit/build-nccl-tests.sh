#!/usr/bin/env bash
# Builds nccl-tests at a pinned commit against the NCCL wheel that torch (and so SGLang) loads, with MPI
# from the EFA installer, into PREFIX/bin. A validation run then measures the NCCL that serving uses.
set -euo pipefail

PREFIX="${1:?usage: build-nccl-tests.sh PREFIX}"
: "${NCCL_TESTS_REPO:?set by build_args.py from versions.yaml}"
: "${NCCL_TESTS_COMMIT:?set by build_args.py from versions.yaml}"
: "${TORCH_CUDA_ARCH_LIST:?set by build_args.py from versions.yaml}"
NCCL_HOME="${NCCL_HOME:-/opt/nccl}"
MPI_HOME="${MPI_HOME:-/opt/amazon/openmpi}"
SRC="$(mktemp -d)"
trap 'rm -rf "${SRC}"' EXIT

die() {
	echo "build-nccl-tests: $*" >&2
	exit 1
}

test -f "${NCCL_HOME}/include/nccl.h" || die "${NCCL_HOME}/include/nccl.h missing (link the NCCL wheel there first)"
test -d "${MPI_HOME}" || die "${MPI_HOME} missing (Open MPI comes with the EFA installer)"

git init --quiet "${SRC}"
git -C "${SRC}" remote add origin "${NCCL_TESTS_REPO}"
git -C "${SRC}" fetch --quiet --depth 1 origin "${NCCL_TESTS_COMMIT}"
git -C "${SRC}" checkout --quiet --detach FETCH_HEAD
[[ "$(git -C "${SRC}" rev-parse HEAD)" == "${NCCL_TESTS_COMMIT}" ]] || die "checkout is not ${NCCL_TESTS_COMMIT}"

# "9.0 10.0" -> -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_100,code=sm_100
gencode=""
for arch in ${TORCH_CUDA_ARCH_LIST//;/ }; do
	sm="${arch%%+*}"
	sm="${sm//./}"
	gencode+=" -gencode=arch=compute_${sm},code=sm_${sm}"
done

make -C "${SRC}" -j "$(nproc)" MPI=1 MPI_HOME="${MPI_HOME}" CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" \
	NCCL_HOME="${NCCL_HOME}" NVCC_GENCODE="${gencode# }"
mkdir -p "${PREFIX}/bin"
find "${SRC}/build" -maxdepth 1 -type f -name '*_perf' -exec cp {} "${PREFIX}/bin/" \;
test -x "${PREFIX}/bin/all_reduce_perf" || die "all_reduce_perf was not built"
echo "build-nccl-tests: ${NCCL_TESTS_REPO}@${NCCL_TESTS_COMMIT} in ${PREFIX}/bin"
