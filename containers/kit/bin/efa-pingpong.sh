#!/usr/bin/env bash
# EFA reachability between two pods with fi_pingpong (libfabric's utility, RDM endpoint, efa provider).
#
#   efa-pingpong.sh server                 # on pod A; waits for one client
#   efa-pingpong.sh client SERVER_ADDRESS  # on pod B
#
# Environment: PINGPONG_ITERATIONS (default 1000), PINGPONG_PORT (default 47592), PINGPONG_TIMEOUT
# seconds (default 120). Exits non-zero when the efa provider is missing (e.g. /dev/infiniband not
# exposed by the EFA device plugin: "fi_getinfo ... No data available") or the exchange fails.
set -euo pipefail

role="${1:-}"
iterations="${PINGPONG_ITERATIONS:-1000}"
port="${PINGPONG_PORT:-47592}"
timeout_s="${PINGPONG_TIMEOUT:-120}"

usage() {
	echo "usage: efa-pingpong.sh server | client SERVER_ADDRESS" >&2
	exit 2
}

if ! fi_info -p efa -t FI_EP_RDM >/dev/null 2>&1; then
	echo "efa-pingpong: no efa provider (fi_info -p efa -t FI_EP_RDM found nothing); are vpc.amazonaws.com/efa devices requested?" >&2
	exit 1
fi

# The server listens on -B (its source port); the client connects to -P (destination port).
common=(-p efa -e rdm -I "${iterations}")
case "${role}" in
server)
	exec timeout "${timeout_s}" fi_pingpong "${common[@]}" -B "${port}"
	;;
client)
	[[ $# -eq 2 ]] || usage
	exec timeout "${timeout_s}" fi_pingpong "${common[@]}" -P "${port}" "$2"
	;;
*)
	usage
	;;
esac
