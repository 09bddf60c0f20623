#!/usr/bin/env bash
# Gives the NCCL wheel torch uses a stable path: LINK -> <venv>/site-packages/nvidia/nccl
# (include/ and lib/libnccl.so.2). With --dev also adds lib/libnccl.so so `-lnccl` links against it.
set -euo pipefail

link="${1:?usage: link-nccl.sh LINK [--dev]}"
nccl_dir="$(python - <<'EOF'
import importlib.util

spec = importlib.util.find_spec("nvidia.nccl")
if spec is None or not spec.submodule_search_locations:
    raise SystemExit("link-nccl: the NCCL wheel (nvidia.nccl) is not installed in this Python")
print(list(spec.submodule_search_locations)[0])
EOF
)"
test -f "${nccl_dir}/lib/libnccl.so.2" || {
	echo "link-nccl: ${nccl_dir}/lib/libnccl.so.2 is missing" >&2
	exit 1
}
ln -sfn "${nccl_dir}" "${link}"
if [[ "${2:-}" == "--dev" ]]; then
	ln -sf libnccl.so.2 "${nccl_dir}/lib/libnccl.so"
fi
echo "link-nccl: ${link} -> ${nccl_dir}"
