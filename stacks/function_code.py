"""Lambda code from pdkit modules, packaged without Docker (no engine in CI or on many laptops).

CDK local bundling copies just the listed files of the `pdkit` package into the asset, so a
handler ships with the stdlib-only rules it shares with the CLI (pdkit/model/reservation.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_lambda as lambda_

PDKIT = Path(__file__).resolve().parent.parent / "pdkit"


@jsii.implements(cdk.ILocalBundling)
class _CopyModules:
    def __init__(self, modules: tuple[str, ...]) -> None:
        self._modules = modules

    def try_bundle(self, output_dir: str, *args: Any, **kwargs: Any) -> bool:
        for module in self._modules:
            target = Path(output_dir) / "pdkit" / module
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(PDKIT / module, target)
        return True


def pdkit_code(*modules: str) -> lambda_.Code:
    """An asset with the given module paths (relative to pdkit/) and the __init__.py of every package above them."""
    packages = {str(parent / "__init__.py") for m in modules for parent in Path(m).parents}
    files = (*sorted(packages), *modules)
    for module in files:
        if not (PDKIT / module).is_file():
            raise FileNotFoundError(PDKIT / module)
    return lambda_.Code.from_asset(
        str(PDKIT),
        asset_hash_type=cdk.AssetHashType.OUTPUT,
        bundling=cdk.BundlingOptions(
            image=cdk.DockerImage.from_registry("unused-local-bundling-only"),
            local=_CopyModules(files),
            # CDK caches bundles by source path and bundling options, not by the local bundler: the file
            # list must be in the options, or every function would get the first function's bundle.
            command=list(files),
        ),
    )
