#!/usr/bin/env bash
# Installs the EFA user space (libfabric, rdma-core, Open MPI, aws-ofi-nccl) into an image.
#
# The tarball is only extracted after its GPG signature checks out against the key fingerprint pinned
# in containers/versions.yaml (and its sha256, when one is pinned): the signing key is fetched from the
# same host as the tarball, so the fingerprint pin is what makes the signature mean anything.
# Every input comes from build args (containers/build_args.py); nothing is pinned here.
set -euo pipefail

: "${EFA_INSTALLER_VERSION:?set by build_args.py from versions.yaml}"
: "${EFA_INSTALLER_URL:?set by build_args.py from versions.yaml}"
: "${EFA_INSTALLER_GPG_FINGERPRINT:?set by build_args.py from versions.yaml}"
: "${LIBFABRIC_VERSION:?set by build_args.py from versions.yaml}"
EFA_INSTALLER_SHA256="${EFA_INSTALLER_SHA256:-}"

die() {
	echo "install-efa-installer: $*" >&2
	exit 1
}

url="${EFA_INSTALLER_URL//\{version\}/${EFA_INSTALLER_VERSION}}"
key_url="${url%/*}/aws-efa-installer.key"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
export GNUPGHOME="${work}/gnupg"
mkdir -m 700 "${GNUPGHOME}"

fetch() {
	curl --fail --silent --show-error --location --retry 3 --proto '=https' --tlsv1.2 -o "$2" "$1"
}
fetch "${url}" "${work}/installer.tar.gz"
fetch "${url}.sig" "${work}/installer.tar.gz.sig"
fetch "${key_url}" "${work}/installer.key"

gpg --batch --quiet --import "${work}/installer.key"
fingerprints="$(gpg --batch --with-colons --fingerprint | awk -F: '$1 == "fpr" {print $10}')"
if ! grep -Fx "${EFA_INSTALLER_GPG_FINGERPRINT}" <<<"${fingerprints}" >/dev/null; then
	die "the downloaded signing key is not ${EFA_INSTALLER_GPG_FINGERPRINT} (got: ${fingerprints//$'\n'/ })"
fi
status="$(gpg --batch --status-fd 1 --verify "${work}/installer.tar.gz.sig" "${work}/installer.tar.gz" 2>/dev/null || true)"
# VALIDSIG's last field is the primary key's fingerprint: the signature must come from the pinned key.
if ! grep -E "^\[GNUPG:\] VALIDSIG .* ${EFA_INSTALLER_GPG_FINGERPRINT}\$" <<<"${status}" >/dev/null; then
	die "GPG signature of ${url} does not verify against ${EFA_INSTALLER_GPG_FINGERPRINT}"
fi
if [[ -n "${EFA_INSTALLER_SHA256}" ]]; then
	echo "${EFA_INSTALLER_SHA256}  ${work}/installer.tar.gz" | sha256sum --check --status ||
		die "sha256 of ${url} is not ${EFA_INSTALLER_SHA256}"
fi
echo "install-efa-installer: ${url} signed by ${EFA_INSTALLER_GPG_FINGERPRINT}"

tar -xzf "${work}/installer.tar.gz" -C "${work}"
apt-get update
# Container flags: the kernel module, efa-nv-peermem and memlock limits belong to the node AMI, and the
# installer's self-test needs an EFA device that an image build does not have.
(cd "${work}/aws-efa-installer" && ./efa_installer.sh --yes --skip-kmod --skip-limit-conf --no-verify)
rm -rf /var/lib/apt/lists/*

grep -Fx "# EFA installer version: ${EFA_INSTALLER_VERSION}" /opt/amazon/efa_installed_packages >/dev/null ||
	die "/opt/amazon/efa_installed_packages does not name installer ${EFA_INSTALLER_VERSION}"
/opt/amazon/efa/bin/fi_info --version | grep -F "libfabric: ${LIBFABRIC_VERSION}" >/dev/null ||
	die "installer ${EFA_INSTALLER_VERSION} did not bring libfabric ${LIBFABRIC_VERSION}; update versions.yaml bundles"
test -f /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so ||
	die "aws-ofi-nccl plugin missing at /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"
ldconfig
echo "install-efa-installer: EFA installer ${EFA_INSTALLER_VERSION} (libfabric ${LIBFABRIC_VERSION}) installed"
