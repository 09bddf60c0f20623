#!/usr/bin/env bash
# Open MPI's rsh agent inside a Kubernetes Indexed Job: mpirun calls it as it would call ssh,
#
#   kubectl-rsh.sh HOST COMMAND...     (HOST = <job>-<index>.<service>, the pod's DNS name)
#
# and it runs COMMAND in that pod with `kubectl exec`, as MPI Operator v1's kubexec.sh did. Job pods
# are named <job>-<index>-<random>, so the pod is found by the labels the Job controller sets
# (batch.kubernetes.io/job-name, batch.kubernetes.io/job-completion-index). kubectl uses the pod's
# ServiceAccount token and namespace; pdkit's Role lets it read and exec into pods of that namespace only.
set -euo pipefail
[[ $# -ge 2 ]] || {
	echo "usage: kubectl-rsh.sh HOST COMMAND..." >&2
	exit 2
}
short="${1%%.*}"
shift
job="${short%-*}"
index="${short##*-}"
[[ -n "${job}" && "${job}" != "${short}" && "${index}" =~ ^[0-9]+$ ]] || {
	echo "kubectl-rsh.sh: ${short} is not <job>-<index>" >&2
	exit 2
}
pod="$(kubectl get pods --selector "batch.kubernetes.io/job-name=${job},batch.kubernetes.io/job-completion-index=${index}" \
	--output 'jsonpath={.items[0].metadata.name}')"
[[ -n "${pod}" ]] || {
	echo "kubectl-rsh.sh: no pod for ${job} index ${index}" >&2
	exit 255
}
# ssh joins its arguments into one command line for the remote shell; so does this agent.
exec kubectl exec "${pod}" --container check -- /bin/sh -c "$*"
