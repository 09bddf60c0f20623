"""The kit's fact tables (instance types, models, regions), loaded from pdkit/model/data/*.yaml."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

DATA = Path(__file__).parent / "data"
GIB = 1024**3
GB = 10**9


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpu_model: str
    gpus: int
    gpu_memory_mib: int
    vcpus: int
    memory_mib: int
    nvme_gb: int
    network_gbps: int
    network_cards: int
    max_interfaces_per_card: int
    efa_devices: int
    topology_layers: int

    @property
    def gpu_memory_gb(self) -> float:
        return self.gpu_memory_mib * 1024**2 / GB


@dataclass(frozen=True)
class Model:
    id: str
    architecture: str
    total_params_b: float
    active_params_b: float
    layers: int
    dense_layers: int
    moe_layers: int
    mtp_layers: int
    hidden_size: int
    attention_heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    routed_experts: int
    experts_per_token: int
    shared_experts: int
    moe_intermediate_size: int
    vocab_size: int
    max_context_length: int
    weight_bytes_per_param: float
    kv_cache_bytes_per_element: float
    checkpoint_gb: float
    reasoning_parser: str
    tool_call_parser: str

    @property
    def routed_expert_gb(self) -> float:
        """Bytes of all routed experts (gate, up and down projections of every MoE layer)."""
        params = 3 * self.hidden_size * self.moe_intermediate_size * self.routed_experts * self.moe_layers
        return params * self.weight_bytes_per_param / GB

    @property
    def dense_gb(self) -> float:
        """Everything that is not a routed expert: attention, embeddings, dense layers, shared experts."""
        return self.checkpoint_gb - self.routed_expert_gb

    @property
    def kv_bytes_per_token_per_layer(self) -> float:
        """MLA caches the compressed latent plus the rope key, once per token and layer."""
        return (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_cache_bytes_per_element


def _load(name: str) -> dict[str, Any]:
    with (DATA / name).open() as f:
        table: dict[str, Any] = yaml.safe_load(f)
    return table


@cache
def instance_types() -> dict[str, InstanceType]:
    return {name: InstanceType(name=name, **row) for name, row in _load("instance_types.yaml").items()}


@cache
def models() -> dict[str, Model]:
    return {name: Model(id=name, **row) for name, row in _load("models.yaml").items()}


@cache
def region_zones() -> dict[str, tuple[str, ...]]:
    return {region: tuple(zones) for region, zones in _load("regions.yaml").items()}


@dataclass(frozen=True)
class Chart:
    name: str
    repository: str
    chart: str
    version: str
    namespace: str


@dataclass(frozen=True)
class Addons:
    managed: dict[str, str]
    charts: dict[str, Chart]
    load_balancer_controller: str
    eks_image_registry_accounts: dict[str, str]

    def eks_image_registry(self, region: str) -> str:
        account = self.eks_image_registry_accounts.get(region, self.eks_image_registry_accounts["default"])
        return f"{account}.dkr.ecr.{region}.amazonaws.com"


@cache
def addons() -> Addons:
    raw = _load("addons.yaml")
    return Addons(
        managed=dict(raw["managed"]),
        charts={name: Chart(name=name, **row) for name, row in raw["charts"].items()},
        load_balancer_controller=raw["load_balancer_controller"],
        eks_image_registry_accounts=dict(raw["eks_image_registry_accounts"]),
    )
