"""Prefix caching and KV offload: what a cache hit does to prefill, TTFT and cost, tier by tier.

A prompt of ``L`` tokens whose first ``P = h L`` tokens are cached (hit rate ``h``) prefills
only the ``L - P`` suffix; the suffix still attends to (and reads) the prefix's KV
(:func:`rackmath.core.loads.prefill_load` with ``cached = P``). The cached KV lives in a
tier (:mod:`rackmath.analyses.serving.cache_tiers`: HBM, host DRAM, flash, disk); outside HBM it is first
brought back, its bytes over the tier's bandwidth, with the chips waiting (not overlapped)::

    TTFT_hit = t_prefill(suffix | prefix) + kv_bytes_held(P) / BW_tier     (0 load for HBM)

What a hit is worth, per cached token, is the chip time it saves priced at the rental,
``(t_cold - TTFT_hit) chips $/s / P``; what it costs to keep is the tier's holding cost per
token-hour (D35); their ratio is the longest a cached prefix may wait for its next hit and
still pay (the break-even retention).

Worked number: Llama 3.1 70B, bf16 KV (2 x 8 heads x 128 x 80 layers x 2 B = 327,680 B per
token), 8,192-token prompt at ``h = 0.5``: 4,096 cached tokens hold 1.342 GB; from one
DDR5-6400 DIMM (51.2 GB/s) loading takes 26.2 ms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.analyses.serving import cache_tiers
from rackmath.analyses.serving.cache_tiers import CacheTier
from rackmath.analyses.serving.deployment import Deployment, PrefillGrid
from rackmath.catalog.offload import offload_tiers
from rackmath.core import architecture as arch
from rackmath.core import economics as econ
from rackmath.core import loads
from rackmath.core import roofline as rl
from rackmath.core.step import PlanStep
from rackmath.errors import InputError, UnknownIdError
from rackmath.specs import checks
from rackmath.units import MILLION, SECONDS_PER_HOUR

FloatArray = NDArray[np.float64]

#: Everyday names for the catalog's tiers (memory_tiers.yaml ids; ``cxl`` is its own id).
TIER_ALIASES = {"host-dram": "ddr5", "dram": "ddr5", "ssd": "flash", "nvme": "flash", "hdd": "disk"}


@dataclass(frozen=True)
class PrefixCache:
    """A prefix-cache hit rate (share of each prompt's tokens found cached) and the tier
    the cached KV lives in."""

    hit_frac: float
    tier: CacheTier


def prefix_cache(hit_frac: object, tier: str, tiers: tuple[CacheTier, ...]) -> PrefixCache:
    """Validate ``--prefix-hit`` (in [0, 1)) and ``--prefix-tier`` (a catalog tier id:
    hbm, ddr5, cxl, flash, disk, or host-dram / ssd / hdd)."""
    try:
        h = float(hit_frac)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError("--prefix-hit", hit_frac, "a fraction in [0, 1), e.g. 0.6") from None
    checks.fraction(
        "--prefix-hit",
        h,
        one=False,
        allowed="a fraction in [0, 1) of each prompt found cached (1 leaves nothing to prefill), e.g. 0.6",
        given=hit_frac,
    )
    key = TIER_ALIASES.get(tier.strip().lower(), tier.strip().lower())
    by_id = {t.id: t for t in tiers}
    if key not in by_id:
        raise UnknownIdError("prefix tier", tier, [*by_id, *TIER_ALIASES])
    return PrefixCache(h, by_id[key])


@dataclass(frozen=True)
class PrefixPrefill:
    """One prompt (batch 1) per length: cold prefill beside a prefix-cache hit."""

    deployment: Deployment
    prefix: PrefixCache
    cold: PrefillGrid
    warm: PlanStep  # the suffix's prefill
    cached_tokens: FloatArray
    cached_kv_bytes: FloatArray
    load_s: FloatArray
    tiers: tuple[CacheTier, ...]

    @property
    def prompt_tokens(self) -> FloatArray:
        return self.cold.length

    @property
    def ttft_cold_s(self) -> FloatArray:
        return self.cold.step_s

    @property
    def ttft_s(self) -> FloatArray:
        return np.asarray(self.warm.step_s + self.load_s)

    @property
    def prefill_flops_saved_frac(self) -> FloatArray:
        warm = sum(np.asarray(op.flops, float) for op in self.warm.operators)
        cold = sum(np.asarray(op.flops, float) for op in self.cold.step.operators)
        return np.asarray(1.0 - warm / cold)

    @property
    def usd_per_million_input_tokens(self) -> FloatArray:
        """Chip time of a hit prefill (load included) over all the prompt's tokens."""
        d = self.deployment
        return rl.usd_per_million_tokens(self.ttft_s, self.prompt_tokens, d.chips, d.usd_per_chip_hour)

    def tier_values(self) -> list[dict[str, Any]]:
        """Per tier, at the first prompt length: load time, USD a hit saves per cached token,
        USD to hold a token one hour there, and the break-even retention."""
        d = self.deployment
        chip_usd_per_s = float(econ.usd_per_s(d.chips, d.usd_per_chip_hour))
        cached = float(self.cached_tokens[0, 0])
        held = float(self.cached_kv_bytes[0, 0])
        warm = float(self.warm.step_s[0, 0])
        cold = float(self.cold.step_s[0, 0])
        out = []
        for t in self.tiers:
            load = 0.0 if t.id == "hbm" else held / t.bandwidth_bytes_per_s
            saved = (cold - warm - load) * chip_usd_per_s / cached if cached else 0.0
            per_token = held / cached if cached else 0.0
            hold_hour = float(
                econ.hold_cost_usd(per_token, t.device_usd_per_s, t.capacity_bytes, SECONDS_PER_HOUR)
            )
            out.append(
                {
                    "tier": t.id,
                    "name": t.name,
                    "load_s": load,
                    "ttft_s": warm + load,
                    "saved_usd_per_million_hit_tokens": saved * MILLION,
                    "hold_usd_per_million_tokens_per_hour": hold_hour * MILLION,
                    "break_even_retention_s": saved / hold_hour * SECONDS_PER_HOUR
                    if hold_hour > 0 and saved > 0
                    else 0.0,
                }
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        rows = [
            {
                "prompt_tokens": int(self.prompt_tokens[0, j]),
                "cached_tokens": float(self.cached_tokens[0, j]),
                "cached_kv_bytes": float(self.cached_kv_bytes[0, j]),
                "load_s": float(self.load_s[0, j]),
                "ttft_cold_s": float(self.ttft_cold_s[0, j]),
                "ttft_s": float(self.ttft_s[0, j]),
                "prefill_flops_saved_frac": float(self.prefill_flops_saved_frac[0, j]),
                "usd_per_million_input_tokens_cold": float(self.cold.usd_per_million_input_tokens[0, j]),
                "usd_per_million_input_tokens": float(self.usd_per_million_input_tokens[0, j]),
            }
            for j in range(self.prompt_tokens.shape[1])
        ]
        return {
            "hit_frac": self.prefix.hit_frac,
            "tier": self.prefix.tier.id,
            "tier_bandwidth_bytes_per_s": self.prefix.tier.bandwidth_bytes_per_s,
            "points": rows,
            "tiers": self.tier_values(),
        }


def prefix_prefill(
    deployment: Deployment, prompt_tokens: ArrayLike, prefix: PrefixCache, tiers: tuple[CacheTier, ...] = ()
) -> PrefixPrefill:
    """Cold and hit prefill of one prompt per length in ``prompt_tokens``; ``tiers`` to
    compare (default: only the chosen one)."""
    d = deployment
    cold = d.prefill([1.0], prompt_tokens)
    n = cold.length
    cached = np.floor(prefix.hit_frac * n)
    kvb = d.precisions.kv.bytes_per_element
    warm = d.step(loads.prefill_load(d.model, cold.batch, n, kvb, cached=cached))
    held = np.asarray(arch.kv_bytes_per_sequence(d.model, cached, kvb), float)
    load = np.zeros_like(held) if prefix.tier.id == "hbm" else held / prefix.tier.bandwidth_bytes_per_s
    return PrefixPrefill(
        deployment=d,
        prefix=prefix,
        cold=cold,
        warm=warm,
        cached_tokens=cached,
        cached_kv_bytes=held,
        load_s=load,
        tiers=tiers or (prefix.tier,),
    )


def from_options(deployment: Deployment, hit_frac: float | None, tier: str = "hbm") -> PrefixCache | None:
    """The prefix cache ``explain``'s ``--prefix-hit`` and ``--prefix-tier`` ask for (None
    without a hit rate), over the deployment's HBM and the catalog's other tiers."""
    if hit_frac is None:
        return None
    from rackmath.catalog.economics import memory_tiers

    return prefix_cache(hit_frac, tier, default_cache_tiers(deployment, memory_tiers()))


def default_cache_tiers(
    deployment: Deployment, specs: dict[str, Any], amortization_s: float = cache_tiers.DEFAULT_AMORTIZATION_S
) -> tuple[CacheTier, ...]:
    """The deployment's HBM and the catalog's other tiers as the prompt-cache analysis prices
    them, plus the offload-only tiers (CXL memory), fastest first."""
    return with_offload_tiers(cache_tiers.default_tiers(deployment, specs, amortization_s), amortization_s)


def with_offload_tiers(
    tiers: tuple[CacheTier, ...], amortization_s: float = cache_tiers.DEFAULT_AMORTIZATION_S
) -> tuple[CacheTier, ...]:
    """``tiers`` plus the catalog's offload-only tiers not among them, by bandwidth (fastest first)."""
    have = {t.id for t in tiers}
    extra = [
        cache_tiers.purchased_tier(s, amortization_s) for s in offload_tiers().values() if s.id not in have
    ]
    return tuple(sorted((*tiers, *extra), key=lambda t: -t.bandwidth_bytes_per_s))
