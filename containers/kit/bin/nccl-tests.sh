#!/usr/bin/env bash
# Runs an nccl-tests command and fails unless NCCL used aws-ofi-nccl on the efa provider and,
# optionally, reached a bus bandwidth floor. Catches the silent socket fallback (~14 vs ~400 GB/s).
#
#   nccl-tests.sh [--min-busbw GBPS] [--allow-socket] -- all_reduce_perf -b 8 -e 16G -f 2 -g 8
#   nccl-tests.sh --min-busbw 300 -- mpirun -np 16 -N 8 ... all_reduce_perf -b 8 -e 16G -f 2 -g 1
#
# Prints the test's own output, then one verdict line. Sets NCCL_DEBUG=INFO and
# NCCL_DEBUG_SUBSYS=INIT,NET unless already set (that is where NCCL names the network it chose).
set -euo pipefail

min_busbw=""
allow_socket=0
while [[ $# -gt 0 ]]; do
	case "$1" in
	--min-busbw)
		min_busbw="${2:?--min-busbw needs a number (GB/s)}"
		shift 2
		;;
	--allow-socket)
		allow_socket=1
		shift
		;;
	--)
		shift
		break
		;;
	*) break ;;
	esac
done
[[ $# -gt 0 ]] || {
	echo "usage: nccl-tests.sh [--min-busbw GBPS] [--allow-socket] -- COMMAND..." >&2
	exit 2
}

export NCCL_DEBUG="${NCCL_DEBUG:-INFO}"
export NCCL_DEBUG_SUBSYS="${NCCL_DEBUG_SUBSYS:-INIT,NET}"
log="$(mktemp)"
trap 'rm -f "${log}"' EXIT

status=0
"$@" 2>&1 | tee "${log}" || status=$?
if [[ "${status}" -ne 0 ]]; then
	echo "nccl-tests: FAIL: command exited ${status}" >&2
	exit "${status}"
fi
if [[ "${allow_socket}" -eq 0 ]]; then
	if grep -E "Using network Socket" "${log}" >/dev/null; then
		echo "nccl-tests: FAIL: NCCL fell back to sockets; check NCCL_NET_PLUGIN=ofi and LD_LIBRARY_PATH" >&2
		exit 1
	fi
	# "Using network Libfabric" (or "AWS Libfabric" with NCCL_NET set to that old name) alone is not
	# enough: it reads the same when aws-ofi-nccl bound libfabric's tcp provider. aws-ofi-nccl logs
	# "NET/OFI Selected provider is efa, fabric is efa (found N nics)"; that line is what proves EFA.
	if ! grep -iE "NET/OFI Selected provider is efa([,[:space:]]|$)" "${log}" >/dev/null; then
		echo "nccl-tests: FAIL: no 'NET/OFI Selected provider is efa' in the NCCL log; aws-ofi-nccl did not use EFA" >&2
		exit 1
	fi
fi
# nccl-tests' footer: "# Avg bus bandwidth    : 380.25 " and, with NCCL_TESTS_MIN_BW set (v2.19),
# "... : 380.25 OK" or "... : 12.5 FAILED". Take the first word after the colon, and only a number.
busbw="$(awk '/Avg bus bandwidth/ { sub(/^.*Avg bus bandwidth[^:]*:[[:space:]]*/, ""); print $1 }' "${log}" | tail -n 1)"
if [[ ! "${busbw}" =~ ^[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$ ]]; then
	busbw=""
fi
if [[ -n "${min_busbw}" ]]; then
	if [[ -z "${busbw}" ]] || ! awk -v got="${busbw}" -v want="${min_busbw}" 'BEGIN {exit !(got + 0 >= want + 0)}'; then
		echo "nccl-tests: FAIL: average bus bandwidth ${busbw:-unknown} GB/s is below ${min_busbw} GB/s" >&2
		exit 1
	fi
fi
echo "nccl-tests: PASS: aws-ofi-nccl on the efa provider, average bus bandwidth ${busbw:-n/a} GB/s"
