"""What the serving renderer needs beyond the plan's decisions: image URIs (the plan names the
repositories and tags; the registry's account resolves at deploy), the weights location, and the
hostNetwork switch.

Read from the plan where it carries them, else from one clearly named attribute, else a documented
placeholder:
- `plan.images["sglang-efa"]`: the serving image (repository and tag from containers/versions.yaml);
- `plan.images[role.image]`: each SGLang role's image, which its MoE all-to-all backend decides
  (`sglang-efa` for UCCL-EP or none, `sglang-deepep` for upstream DeepEP);
- `plan.images["router"]`: the slim router image (containers/router/), when versions.yaml has it (else
  the serving image, which also carries the router);
- `plan.weights.bucket(account)` / `plan.weights.prefix`: where the weights import puts the checkpoint;
- `plan.host_network`: the hostNetwork switch (default off).

`pdkit render --registry/--image/--router-image/--weights-bucket` override them for plain-YAML users.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pdkit.model.plan import Plan
from pdkit.pods.weights_manifest import MANIFEST_NAME

# Stands in for the account until the profile names one; a CDK deploy passes the real registry.
PLACEHOLDER_ACCOUNT = "000000000000"
SERVING_IMAGE = "sglang-efa"
ROUTER_IMAGE = "router"


@dataclass(frozen=True)
class ServingInputs:
    image: str
    router_image: str
    weights_bucket: str
    weights_prefix: str
    host_network: bool
    # Role name -> image URI, from each role's backend; a role missing here runs `image` (`--image` overrides all).
    role_images: dict[str, str] = field(default_factory=dict)

    def role_image(self, role: str) -> str:
        return self.role_images.get(role, self.image)

    @property
    def manifest_key(self) -> str:
        return f"{self.weights_prefix}{MANIFEST_NAME}"


def default_registry(plan: Plan) -> str:
    return plan.image_registry(plan.account or PLACEHOLDER_ACCOUNT)


def from_plan(
    plan: Plan,
    *,
    registry: str | None = None,
    image: str | None = None,
    router_image: str | None = None,
    weights_bucket: str | None = None,
) -> ServingInputs:
    registry = registry or default_registry(plan)
    serving = image or plan.images[SERVING_IMAGE].uri(registry)
    router = router_image or (plan.images[ROUTER_IMAGE].uri(registry) if ROUTER_IMAGE in plan.images else serving)
    return ServingInputs(
        image=serving,
        router_image=router,
        weights_bucket=weights_bucket or plan.weights.bucket(plan.account or PLACEHOLDER_ACCOUNT),
        weights_prefix=plan.weights.prefix,
        host_network=plan.host_network,
        role_images={} if image else {role.name: plan.images[role.image].uri(registry) for role in plan.roles.values()},
    )
