#!/usr/bin/env bash
# Builds fabtests from aws/libfabric at the tag of the libfabric the EFA installer ships
# (v${LIBFABRIC_VERSION}), against /opt/amazon/efa, into PREFIX.
set -euo pipefail

PREFIX="${1:?usage: build-fabtests.sh PREFIX}"
: "${FABTESTS_REPO:?set by build_args.py from versions.yaml}"
: "${LIBFABRIC_VERSION:?set by build_args.py from versions.yaml}"
EFA_HOME="${EFA_HOME:-/opt/amazon/efa}"
SRC="$(mktemp -d)"
trap 'rm -rf "${SRC}"' EXIT

git clone --quiet --depth 1 --branch "v${LIBFABRIC_VERSION}" "${FABTESTS_REPO}" "${SRC}"
cd "${SRC}/fabtests"
./autogen.sh
./configure --prefix="${PREFIX}" --with-libfabric="${EFA_HOME}" --with-cuda="${CUDA_HOME:-/usr/local/cuda}"
make -j "$(nproc)"
make install
test -x "${PREFIX}/bin/fi_rdm_pingpong" || {
	echo "build-fabtests: fi_rdm_pingpong was not built" >&2
	exit 1
}
echo "build-fabtests: ${FABTESTS_REPO}@v${LIBFABRIC_VERSION} in ${PREFIX}"
