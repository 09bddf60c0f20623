"""The plan's decode latency model: what EFA's CPU-proxy path adds to every output token.

UCCL-EP on EFA hands each dispatch and combine to a CPU proxy thread, which costs a fixed time per
cross-node message that IBGDA on RoCE/InfiniBand does not pay (the seed measured ~28 us). A decode
token sends `cross_node_moe_messages_per_token` such messages (GLM-5.1: 75 MoE layers x dispatch +
combine = 150), so the model predicts messages x per-message overhead on top of an IBGDA fabric's
TPOT: 150 x 28 us = 4.2 ms.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdkit.model.plan import Plan
from pdkit.model.seed import Seed


@dataclass(frozen=True)
class LatencyModel:
    messages_per_token: int
    per_message_overhead_us: float

    @property
    def tpot_overhead_ms(self) -> float:
        return self.messages_per_token * self.per_message_overhead_us / 1000

    def ibgda_equivalent_tpot_ms(self, measured_tpot_ms: float) -> float:
        """The TPOT the model expects on an IBGDA fabric for the same run (never below zero)."""
        return max(measured_tpot_ms - self.tpot_overhead_ms, 0.0)

    def proxy_share(self, measured_tpot_ms: float) -> float:
        """Fraction of a measured TPOT the model attributes to the CPU proxy."""
        return self.tpot_overhead_ms / measured_tpot_ms if measured_tpot_ms > 0 else 0.0

    @property
    def formula(self) -> str:
        return f"{self.messages_per_token} messages x {self.per_message_overhead_us:g} us = {self.tpot_overhead_ms:.1f} ms"


def from_plan(plan: Plan, seed: Seed) -> LatencyModel:
    return LatencyModel(
        messages_per_token=plan.decode.cross_node_moe_messages_per_token,
        per_message_overhead_us=seed.per_message_overhead_us,
    )
