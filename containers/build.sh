#!/usr/bin/env bash
# Build one image the way CodeBuild does (stacks/images_stack.py runs this), from the repository root:
#
#   bash containers/build.sh sglang-efa sglang-efa:local             # build, then the import smoke test
#   bash containers/build.sh sglang-efa REGISTRY/REPO:TAG --push     # ... then push
#
# 1. Resolve each base image to the digest it points at now (docker pull + RepoDigests), build from exactly
#    that digest, label the image with it (OCI org.opencontainers.image.base.*) and print the
#    `containers/pin_digests.py --set` line that pins the next build to it (--record FILE collects them).
# 2. Build with Docker's own builder and load the image (no docker-container builder: that would pull
#    moby/buildkit from Docker Hub).
# 3. Import smoke test: `docker run` of the built image, no GPU (/opt/kit/import_smoke.py). Not a RUN step:
#    torch's oneMKL initialization fails inside BuildKit, as AWS's UCCL-EP recipe notes
#    (awslabs/awsome-distributed-ai 3.test_cases/pytorch/sglang/dsr1-deepep-efa/Dockerfile.uccl).
# 4. Push only an image that passed.
set -euo pipefail

usage="usage: containers/build.sh IMAGE REF [--push] [--record FILE]"
image="${1:?${usage}}"
ref="${2:?${usage}}"
shift 2
push=0
record=""
while (($#)); do
	case "$1" in
	--push) push=1 ;;
	--record)
		record="${2:?${usage}}"
		shift
		;;
	*)
		echo "${usage}" >&2
		exit 2
		;;
	esac
	shift
done

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bases="$(python3 containers/build_args.py "${image}" --bases)"
if [[ -z "${bases}" ]]; then
	echo "build: ${image}: containers/build_args.py --bases named no base image; check containers/versions.yaml" >&2
	exit 1
fi
pins=()
labels=()
while read -r component base; do
	docker pull --quiet --platform linux/amd64 "${base}" >/dev/null
	resolved="$(docker image inspect --format '{{index .RepoDigests 0}}' "${base}")"
	digest="${resolved#*@}"
	pins+=("--pin=${component}=${digest}")
	labels+=("--label=org.opencontainers.image.base.name=${base}" "--label=org.opencontainers.image.base.digest=${digest}")
	echo "build: ${image}: ${base} is ${resolved}; pin the next build with: python3 containers/pin_digests.py --set ${component}=${digest}"
	if [[ -n "${record}" ]]; then
		echo "${component}=${digest}" >>"${record}"
	fi
done <<<"${bases}"

build_args="$(python3 containers/build_args.py "${image}" "${pins[@]}")"
mapfile -t args <<<"${build_args}"
paths="$(python3 containers/build_args.py "${image}" --paths)"
read -r dockerfile context target <<<"${paths}"
# Three images (sglang-efa, sglang-deepep, validation) share containers/sglang-efa/Dockerfile; versions.yaml names the stage each one is.
targets=()
if [[ -n "${target}" ]]; then
	targets=("--target=${target}")
fi
docker buildx build --platform linux/amd64 --progress plain --load -t "${ref}" \
	"${args[@]}" "${labels[@]}" "${targets[@]}" -f "${dockerfile}" "${context}"

docker run --rm --network none --entrypoint python3 "${ref}" /opt/kit/import_smoke.py

if ((push)); then
	docker push "${ref}"
fi
