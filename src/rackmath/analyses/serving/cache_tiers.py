"""Memory tiers that can hold a conversation's KV cache: HBM priced at the chip's rental, the
other tiers (DDR, flash, disk) at their purchase price spread over an explicit amortization.

Shared by prefix caching (:mod:`rackmath.analyses.serving.prefix`: what a hit in a tier does to
prefill) and the cache economics (:mod:`rackmath.analyses.economics.caching`: which tier should hold
the KV, and for how long), from :mod:`rackmath.core.economics` (D35, D36).
"""

from __future__ import annotations

from dataclasses import dataclass

from rackmath.analyses.serving.deployment import Deployment
from rackmath.core import economics as econ
from rackmath.specs import checks
from rackmath.specs.economics import MemoryTierSpec
from rackmath.units import SECONDS_PER_YEAR

#: Default amortization of memory purchases: 3 years of 365 days (a common straight-line
#: depreciation period for servers; hyperscalers use 5-6 years, which halves these costs).
DEFAULT_AMORTIZATION_S = 3 * SECONDS_PER_YEAR


@dataclass(frozen=True)
class CacheTier:
    """A place to keep KV: a device's size, speed and cost per second of its time."""

    id: str
    name: str
    capacity_bytes: float
    bandwidth_bytes_per_s: float
    device_usd_per_s: float
    cost_basis: str
    lecture_drain_time_s: float | None = None

    @property
    def drain_time_s(self) -> float:
        return float(econ.drain_time_s(self.capacity_bytes, self.bandwidth_bytes_per_s))


def hbm_tier(deployment: Deployment, lecture_drain_time_s: float | None = None) -> CacheTier:
    """One of the deployment's GPUs: its HBM, priced at the chip's rental (D35)."""
    chip = deployment.system.chip
    return CacheTier(
        id="hbm",
        name=f"HBM ({chip.id})",
        capacity_bytes=chip.hbm_capacity_bytes,
        bandwidth_bytes_per_s=chip.hbm_bandwidth_bytes_per_s,
        device_usd_per_s=float(econ.usd_per_s(1, deployment.usd_per_chip_hour)),
        cost_basis=f"GPU rental ${deployment.usd_per_chip_hour:.2f}/chip-hour",
        lecture_drain_time_s=lecture_drain_time_s,
    )


def purchased_tier(spec: MemoryTierSpec, amortization_s: float) -> CacheTier:
    checks.positive("amortization", amortization_s, allowed="a positive duration")
    price = spec.price
    years = amortization_s / SECONDS_PER_YEAR
    return CacheTier(
        id=spec.id,
        name=spec.name,
        capacity_bytes=spec.capacity_bytes,
        bandwidth_bytes_per_s=spec.bandwidth_bytes_per_s,
        device_usd_per_s=float(econ.amortized_usd_per_s(price.value, spec.capacity_bytes, amortization_s)),
        cost_basis=f"${price.value * 1e9:.3g}/GB ({price.date}) over {years:.3g} years",
        lecture_drain_time_s=spec.lecture_drain_time_s,
    )


def default_tiers(
    deployment: Deployment, specs: dict[str, MemoryTierSpec], amortization_s: float = DEFAULT_AMORTIZATION_S
) -> tuple[CacheTier, ...]:
    """HBM of the deployment's chip (rental-priced), then every non-HBM catalog tier."""
    hbm_spec = specs.get("hbm")
    tiers = [hbm_tier(deployment, hbm_spec.lecture_drain_time_s if hbm_spec else None)]
    tiers += [purchased_tier(s, amortization_s) for s in specs.values() if s.id != "hbm"]
    return tuple(tiers)
