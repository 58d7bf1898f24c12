"""Prompt caches: which memory tier should hold a conversation's KV cache, and for how long.

For each tier (HBM, DDR, flash, disk) the cost of holding one token's KV for a retention
``T``, of bringing it back, and of recomputing it instead (a prefill), from
:mod:`rackmath.core.economics` (D35, D36). HBM's time is priced at the GPU's rental; the
other tiers at their purchase price spread over an explicit ``amortization_s``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.analyses.serving.cache_tiers import DEFAULT_AMORTIZATION_S, CacheTier
from rackmath.analyses.serving.deployment import Deployment
from rackmath.analyses.serving.prefix import PrefixPrefill, prefix_cache, prefix_prefill, with_offload_tiers
from rackmath.core import architecture as arch
from rackmath.core import economics as econ
from rackmath.errors import InputError
from rackmath.specs import checks
from rackmath.specs.economics import ModelPrice
from rackmath.units import MILLION, SECONDS_PER_DAY, SECONDS_PER_HOUR, SECONDS_PER_MINUTE

FloatArray = NDArray[np.float64]

#: The two retentions providers sell (Anthropic: 5-minute and 1-hour cache writes).
SHORT_RETENTION_S = 5 * SECONDS_PER_MINUTE
LONG_RETENTION_S = SECONDS_PER_HOUR
#: Retentions tabulated by default: the two above among a second to a day.
DEFAULT_RETENTIONS_S = (1.0, 10.0, SECONDS_PER_MINUTE, SHORT_RETENTION_S, LONG_RETENTION_S, SECONDS_PER_DAY)
DEFAULT_PROMPT_TOKENS = 8192


@dataclass(frozen=True)
class CacheEconomics:
    tiers: tuple[CacheTier, ...]
    kv_bytes_per_token: float
    recompute_usd_per_token: float  # a prefill of the prompt, per token
    prompt_tokens: float
    retentions_s: FloatArray
    hold_usd_per_token: FloatArray  # tiers x retentions
    fetch_usd_per_token: FloatArray  # per tier
    amortization_s: float
    deployment: Deployment
    price: ModelPrice | None = None
    prefix: PrefixPrefill | None = None  # a prefix-cache hit on the prompt, if asked

    @property
    def hit_usd_per_token(self) -> FloatArray:
        """Hold for the retention, then read back: tiers x retentions."""
        return self.hold_usd_per_token + self.fetch_usd_per_token[:, None]

    @property
    def cheapest(self) -> list[str]:
        """Per retention, the cheapest tier, or "recompute" if a prefill beats every tier."""
        best = np.argmin(self.hit_usd_per_token, axis=0)
        out = []
        for j, i in enumerate(best):
            hit = self.hit_usd_per_token[i, j]
            out.append(self.tiers[i].id if hit < self.recompute_usd_per_token else "recompute")
        return out

    @property
    def hold_usd_per_token_per_s(self) -> FloatArray:
        """Cost of holding one token's KV for one second, per tier."""
        return np.asarray(self.hold_usd_per_token_at(1.0)[:, 0], dtype=float)

    def cheapest_at(self, retention_s: float) -> str:
        hits = self.hit_usd_per_token_at(retention_s)[:, 0]
        i = int(np.argmin(hits))
        return self.tiers[i].id if hits[i] < self.recompute_usd_per_token else "recompute"

    @property
    def crossovers_s(self) -> list[float | None]:
        """Retention at which each tier overtakes the one before it (fastest first)."""
        rates = self.hold_usd_per_token_per_s
        out: list[float | None] = []
        for i in range(1, len(self.tiers)):
            t = econ.retention_crossover_s(
                rates[i - 1], self.fetch_usd_per_token[i - 1], rates[i], self.fetch_usd_per_token[i]
            )
            out.append(None if np.isnan(t) else float(t))
        return out

    def to_dict(self) -> dict[str, Any]:
        p = self.price
        cheapest = self.cheapest
        rates = self.hold_usd_per_token_per_s
        pricing: dict[str, Any] | None = None
        if p is not None:
            base = p.base
            hold_5m = float(np.min(self.hold_usd_per_token_at(SHORT_RETENTION_S)))
            pricing = {
                "priced_model": p.id,
                "price_date": p.date,
                "input_usd_per_million_tokens": base.input_usd_per_million_tokens,
                "cache_read_usd_per_million_tokens": base.cache_read_usd_per_million_tokens,
                "cache_write_5m_usd_per_million_tokens": base.cache_write_5m_usd_per_million_tokens,
                "cache_write_1h_usd_per_million_tokens": base.cache_write_1h_usd_per_million_tokens,
                "miss_over_hit": base.miss_over_hit,
                "cost_recompute_over_hit_5m": self.recompute_usd_per_token
                / float(np.min(self.hit_usd_per_token_at(SHORT_RETENTION_S))),
                "cheapest_hold_5m_usd_per_million_tokens": hold_5m * MILLION,
            }
        return {
            "model": self.deployment.model.id,
            "system": self.deployment.system.id,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "prompt_tokens": self.prompt_tokens,
            "recompute_usd_per_million_tokens": self.recompute_usd_per_token * MILLION,
            "amortization_s": self.amortization_s,
            "tiers": [
                {
                    "id": t.id,
                    "name": t.name,
                    "capacity_bytes": t.capacity_bytes,
                    "bandwidth_bytes_per_s": t.bandwidth_bytes_per_s,
                    "drain_time_s": t.drain_time_s,
                    "lecture_drain_time_s": t.lecture_drain_time_s,
                    "device_usd_per_s": t.device_usd_per_s,
                    "cost_basis": t.cost_basis,
                    "hold_usd_per_million_tokens_per_s": rates[i] * MILLION,
                    "fetch_usd_per_million_tokens": float(self.fetch_usd_per_token[i]) * MILLION,
                    "crossover_from_previous_s": None if i == 0 else self.crossovers_s[i - 1],
                }
                for i, t in enumerate(self.tiers)
            ],
            "by_retention": [
                {
                    "retention_s": float(r),
                    "cheapest": cheapest[j],
                    "hit_usd_per_million_tokens": {
                        t.id: float(self.hit_usd_per_token[i, j]) * MILLION for i, t in enumerate(self.tiers)
                    },
                }
                for j, r in enumerate(self.retentions_s)
            ],
            "lecture_mapping": {
                "300s": self.cheapest_at(SHORT_RETENTION_S),
                "3600s": self.cheapest_at(LONG_RETENTION_S),
            },
            "pricing": pricing,
            **({"prefix": self.prefix.to_dict()} if self.prefix is not None else {}),
        }

    def hold_usd_per_token_at(self, retention_s: ArrayLike) -> FloatArray:
        """Holding cost per token, tiers x retentions (a scalar retention gives one column)."""
        r = np.atleast_1d(np.asarray(retention_s, float))
        kv = self.kv_bytes_per_token
        return np.array(
            [econ.hold_cost_usd(kv, t.device_usd_per_s, t.capacity_bytes, r) for t in self.tiers],
            dtype=float,
        )

    def hit_usd_per_token_at(self, retention_s: ArrayLike) -> FloatArray:
        """Hold for the retention then fetch, per token: tiers x retentions."""
        return self.hold_usd_per_token_at(retention_s) + self.fetch_usd_per_token[:, None]


def cached_kv_bytes_per_token(deployment: Deployment, prompt_tokens: float) -> float:
    """KV bytes a cached prompt of ``prompt_tokens`` tokens holds, per token of the prompt.

    ``kv_bytes_per_sequence(L) / L`` (:func:`rackmath.core.architecture.kv_bytes_per_sequence`):
    full-attention layers keep every token, a sliding-window layer only its last ``w``, so a
    windowed model stores less per token the longer the prompt. Gemma 3 27B (62 layers, every
    6th global: 10 full + 52 windowed at 1024; 16 KV heads x 128, K and V, bf16 = 8,192 B per
    token per layer), ``L = 8192``: ``8192 (10 * 8192 + 52 * 1024) / 8192 = 135,168`` B,
    against ``62 * 8192 = 507,904`` B if every layer held every token.
    """
    length = float(prompt_tokens)
    per_sequence = arch.kv_bytes_per_sequence(
        deployment.model, length, deployment.precisions.kv.bytes_per_element
    )
    return float(per_sequence) / length


def cache_economics(
    deployment: Deployment,
    tiers: tuple[CacheTier, ...],
    *,
    retentions_s: tuple[float, ...] | list[float] = DEFAULT_RETENTIONS_S,
    prompt_tokens: float = DEFAULT_PROMPT_TOKENS,
    amortization_s: float = DEFAULT_AMORTIZATION_S,
    price: ModelPrice | None = None,
    prefix_hit: float | None = None,
    prefix_tier: str = "hbm",
) -> CacheEconomics:
    """Hold, fetch and recompute costs per token of ``deployment``'s KV cache in each tier.

    The bytes held per cached token are :func:`cached_kv_bytes_per_token` of a
    ``prompt_tokens`` prompt (sliding-window layers keep only their window).

    Recompute = the prefill cost per token of a ``prompt_tokens`` prompt (batch 1, which is
    compute-bound: the cheapest a miss can be).

    ``prefix_hit`` (with ``prefix_tier``): also a prompt whose first ``prefix_hit`` share is
    found cached in that tier (:mod:`rackmath.analyses.serving.prefix`): its TTFT and what a hit is
    worth against holding the KV, tier by tier.
    """
    r = np.asarray(retentions_s, float)
    if r.size == 0 or np.any(~np.isfinite(r)) or np.any(r <= 0):
        raise InputError("retention", list(retentions_s), "positive durations")
    if not tiers:
        raise InputError("tiers", "()", "at least one memory tier")
    checks.at_least("prompt tokens", prompt_tokens, 1)
    kv_tok = cached_kv_bytes_per_token(deployment, prompt_tokens)
    pre = deployment.prefill([1.0], [prompt_tokens])
    recompute = float(pre.usd_per_million_input_tokens[0, 0]) / MILLION
    hold = np.array(
        [econ.hold_cost_usd(kv_tok, t.device_usd_per_s, t.capacity_bytes, r) for t in tiers], dtype=float
    )
    fetch = np.array(
        [float(econ.fetch_cost_usd(kv_tok, t.device_usd_per_s, t.bandwidth_bytes_per_s)) for t in tiers]
    )
    hit = None
    if prefix_hit is not None:
        offered = with_offload_tiers(tiers, amortization_s)
        chosen = prefix_cache(prefix_hit, prefix_tier, offered)
        hit = prefix_prefill(deployment, [prompt_tokens], chosen, offered)
    return CacheEconomics(
        tiers=tiers,
        kv_bytes_per_token=kv_tok,
        recompute_usd_per_token=recompute,
        prompt_tokens=float(prompt_tokens),
        retentions_s=r,
        hold_usd_per_token=hold,
        fetch_usd_per_token=fetch,
        amortization_s=amortization_s,
        deployment=deployment,
        price=price,
        prefix=hit,
    )
