#!/usr/bin/env python3
"""Print the build args of an image from containers/versions.yaml, so buildx and CodeBuild use the same values.

    python containers/build_args.py sglang-efa              # one --build-arg=KEY=VALUE per line
    python containers/build_args.py sglang-efa --format json
    python containers/build_args.py sglang-efa --format env # KEY=VALUE lines
    python containers/build_args.py sglang-efa --tag        # content-derived image tag
    python containers/build_args.py sglang-efa --bases      # COMPONENT REF of each base image
    python containers/build_args.py sglang-efa --pin cuda_base=sha256:...   # build args with that base digest
    python containers/build_args.py sglang-efa --paths      # DOCKERFILE CONTEXT [TARGET]
    python containers/build_args.py --list                  # image names
    python containers/build_args.py --check                 # validate versions.yaml + lint Dockerfiles

Build locally (bash): mapfile -t args < <(python containers/build_args.py sglang-efa)
                      docker buildx build "${args[@]}" -f containers/sglang-efa/Dockerfile .
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import versions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build args for an image, from containers/versions.yaml.")
    parser.add_argument("image", nargs="?", help="image name from versions.yaml (e.g. sglang-efa)")
    parser.add_argument("--format", choices=["buildx", "json", "env"], default="buildx")
    parser.add_argument("--tag", action="store_true", help="print the content-derived image tag instead")
    parser.add_argument("--list", action="store_true", help="list image names")
    parser.add_argument("--check", action="store_true", help="validate versions.yaml and lint every Dockerfile")
    parser.add_argument("--bases", action="store_true", help="print COMPONENT REF for each base image of the image")
    parser.add_argument("--paths", action="store_true", help="print the image's Dockerfile, build context and target stage")
    parser.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="COMPONENT=DIGEST",
        help="use this digest for a base image (the one containers/build.sh just resolved)",
    )
    parser.add_argument("--versions", type=Path, default=versions.VERSIONS_FILE, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    try:
        doc = versions.load(args.versions)
    except versions.VersionsError as exc:
        print(f"build_args: {exc}", file=sys.stderr)
        return 1

    if args.list:
        print("\n".join(doc["images"]))
        return 0
    if args.check:
        problems = [
            problem
            for image in doc["images"]
            for problem in versions.lint_dockerfile(
                versions.dockerfile_path(doc, image).read_text(), doc, image, where=doc["images"][image]["dockerfile"]
            )
        ]
        print("\n".join(problems) if problems else "build_args: versions.yaml and Dockerfiles agree")
        return 1 if problems else 0
    if not args.image:
        parser.error("name an image (see --list)")
    if args.image not in doc["images"]:
        print(f"build_args: unknown image {args.image!r}; known: {', '.join(doc['images'])}", file=sys.stderr)
        return 1
    if args.tag:
        print(versions.image_tag(doc, args.image))
        return 0
    if args.paths:
        spec = doc["images"][args.image]
        print(spec["dockerfile"], spec["context"], versions.build_target(doc, args.image))
        return 0
    try:
        for pin in args.pin:
            versions.pin_base_image(doc, args.image, pin)
    except versions.VersionsError as exc:
        print(f"build_args: {exc}", file=sys.stderr)
        return 1
    if args.bases:
        print("\n".join(f"{name} {versions.image_ref(doc['components'][name])}" for name in versions.base_images(doc, args.image)))
        return 0

    values = versions.build_args(doc, args.image)
    if args.format == "json":
        print(json.dumps(values, indent=2))
    elif args.format == "env":
        print("\n".join(f"{key}={value}" for key, value in values.items()))
    else:
        print("\n".join(f"--build-arg={key}={value}" for key, value in values.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
