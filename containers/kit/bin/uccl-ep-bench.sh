#!/usr/bin/env bash
# UCCL-EP dispatch/combine benchmarks (UCCL's ep/bench scripts) under torchrun, one process per GPU.
#
#   uccl-ep-bench.sh low-latency|normal|intranode [BENCH ARGS...]
#
# low-latency = bench/test_low_latency.py (decode path), normal = bench/test_internode.py (prefill path),
# intranode = bench/test_intranode.py (NVLink only). BENCH ARGS go to the script unchanged, e.g.
# --num-tokens=128 --hidden=6144 --num-topk=8 --num-experts=256 (the caller knows the model).
#
# Multi-node rendezvous comes from LeaderWorkerSet's environment when present:
#   LWS_LEADER_ADDRESS (master address), LWS_GROUP_SIZE (nodes), LWS_WORKER_INDEX (node rank);
# otherwise MASTER_ADDR / NNODES / NODE_RANK, defaulting to a single node.
# GPUS_PER_NODE defaults to the number of GPUs nvidia-smi lists. MASTER_PORT defaults to 29500.
set -euo pipefail

BENCH_DIR="${UCCL_EP_BENCH_DIR:-/opt/uccl-ep/bench}"
mode="${1:-}"
case "${mode}" in
low-latency) script=test_low_latency.py ;;
normal) script=test_internode.py ;;
intranode) script=test_intranode.py ;;
*)
	echo "usage: uccl-ep-bench.sh low-latency|normal|intranode [BENCH ARGS...]" >&2
	exit 2
	;;
esac
shift

nnodes="${LWS_GROUP_SIZE:-${NNODES:-1}}"
node_rank="${LWS_WORKER_INDEX:-${NODE_RANK:-0}}"
master_addr="${LWS_LEADER_ADDRESS:-${MASTER_ADDR:-127.0.0.1}}"
master_port="${MASTER_PORT:-29500}"
gpus="${GPUS_PER_NODE:-$(nvidia-smi --list-gpus | wc -l)}"
[[ "${gpus}" -gt 0 ]] || {
	echo "uccl-ep-bench: no GPUs visible" >&2
	exit 1
}

cd "${BENCH_DIR}"
exec torchrun --nnodes="${nnodes}" --node_rank="${node_rank}" --nproc_per_node="${gpus}" \
	--master_addr="${master_addr}" --master_port="${master_port}" "${script}" "$@"
