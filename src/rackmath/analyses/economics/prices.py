"""What API prices reveal: output over input, long-context tiers, and how old the prices are.

Inputs are catalog prices (:mod:`rackmath.catalog.economics`) and a reference deployment
whose roofline (:mod:`rackmath.analyses.serving.pooled`) supplies costs; the algebra is in
:mod:`rackmath.core.economics`. Nothing here reads files or prints.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rackmath.analyses.economics.caching import DEFAULT_PROMPT_TOKENS, DEFAULT_RETENTIONS_S
from rackmath.analyses.serving import pooled
from rackmath.analyses.serving.deployment import Deployment, check_context
from rackmath.core import architecture as arch
from rackmath.core import economics as econ
from rackmath.errors import InputError, UnknownIdError
from rackmath.specs import checks
from rackmath.specs.bounds import MAX_BATCH, MAX_CONTEXT
from rackmath.specs.economics import ModelPrice
from rackmath.units import SECONDS_PER_YEAR

FloatArray = NDArray[np.float64]

#: The lecture's round inputs for reading a tier boundary (D31): 100B active parameters,
#: a FLOP/byte balance ratio of 300, one byte per weight.
LECTURE_PARAMS_ACTIVE = 100e9
LECTURE_BALANCE_RATIO = 300.0


def price_dict(p: ModelPrice, today: dt.date) -> dict[str, Any]:
    base = p.base
    return {
        "id": p.id,
        "provider": p.provider,
        "name": p.name,
        "date": p.date,
        "age_days": p.age_days(today),
        "confidence": p.confidence,
        "input_usd_per_million_tokens": base.input_usd_per_million_tokens,
        "output_usd_per_million_tokens": base.output_usd_per_million_tokens,
        "output_over_input": base.output_over_input,
        "implied_decode_utilization_frac": float(econ.implied_decode_utilization(base.output_over_input)),
        "cache_read_usd_per_million_tokens": base.cache_read_usd_per_million_tokens,
        "cache_write_5m_usd_per_million_tokens": base.cache_write_5m_usd_per_million_tokens,
        "cache_write_1h_usd_per_million_tokens": base.cache_write_1h_usd_per_million_tokens,
        "miss_over_hit": base.miss_over_hit,
        "cache_storage_usd_per_million_tokens_per_hour": p.cache_storage_usd_per_million_tokens_per_hour,
        "tiers": [t.model_dump() for t in p.tiers],
        "fast_mode": p.fast_mode.model_dump() if p.fast_mode else None,
        "source": list(p.source),
        "note": p.note,
    }


@dataclass(frozen=True)
class RooflineRatio:
    """What the roofline predicts for output over input on a reference deployment (D34)."""

    deployment: Deployment
    batch: float
    context: float
    usd_per_million_output_tokens: float
    usd_per_million_input_tokens: float
    decode_mfu: float
    prefill_mfu: float

    @property
    def output_over_input(self) -> float:
        return self.usd_per_million_output_tokens / self.usd_per_million_input_tokens

    def to_dict(self) -> dict[str, Any]:
        d = self.deployment
        return {
            **d.labels(),
            "usd_per_chip_hour": d.usd_per_chip_hour,
            "batch": self.batch,
            "context": self.context,
            "usd_per_million_output_tokens": self.usd_per_million_output_tokens,
            "usd_per_million_input_tokens": self.usd_per_million_input_tokens,
            "output_over_input": self.output_over_input,
            "decode_mfu_frac": self.decode_mfu,
            "prefill_mfu_frac": self.prefill_mfu,
        }


def roofline_ratio(deployment: Deployment, batch: float, context: float) -> RooflineRatio:
    """Decode at ``batch`` sequences of ``context`` tokens vs prefilling one ``context`` prompt."""
    dec = deployment.decode([batch], [context])
    pre = deployment.prefill([1.0], [context])
    return RooflineRatio(
        deployment=deployment,
        batch=float(batch),
        context=float(context),
        usd_per_million_output_tokens=float(dec.usd_per_million_output_tokens[0, 0]),
        usd_per_million_input_tokens=float(pre.usd_per_million_input_tokens[0, 0]),
        decode_mfu=float(dec.mfu[0, 0]),
        prefill_mfu=float(pre.mfu[0, 0]),
    )


@dataclass(frozen=True)
class LongContext:
    """A provider's context-tiered prices drawn over a reference deployment's cost (D30, D31)."""

    price: ModelPrice
    deployment: Deployment
    batch: float
    contexts: FloatArray
    cost_usd_per_million_output_tokens: FloatArray
    price_usd_per_million_output_tokens: FloatArray
    cost_usd_per_million_input_tokens: FloatArray
    price_usd_per_million_input_tokens: FloatArray
    fits: NDArray[np.bool_]
    crossover_context_tokens: float  # of the reference deployment
    kv_bytes_per_token: float  # of the reference deployment
    boundary_implied_kv_bytes_per_token: tuple[float, ...]  # lecture inputs, per tier boundary
    params_active_assumed: float
    balance_ratio_assumed: float

    @property
    def output_margin(self) -> FloatArray:
        """Price over cost, minus one (0.5 = priced 50% above cost)."""
        return self.price_usd_per_million_output_tokens / self.cost_usd_per_million_output_tokens - 1.0

    @property
    def input_margin(self) -> FloatArray:
        return self.price_usd_per_million_input_tokens / self.cost_usd_per_million_input_tokens - 1.0

    @property
    def above_cost_everywhere(self) -> bool:
        return bool(np.all(self.output_margin >= 0) and np.all(self.input_margin >= 0))

    def to_dict(self) -> dict[str, Any]:
        out_m, in_m = self.output_margin, self.input_margin
        i_out, i_in = int(np.argmin(out_m)), int(np.argmin(in_m))
        d = self.deployment
        return {
            "priced_model": self.price.id,
            "price_date": self.price.date,
            "tier_boundaries_tokens": list(self.price.tier_boundaries_tokens),
            "reference_model": d.model.id,
            "system": d.system.id,
            "chips": d.chips,
            "batch": self.batch,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "crossover_context_tokens": self.crossover_context_tokens,
            "params_active_assumed": self.params_active_assumed,
            "balance_ratio_assumed": self.balance_ratio_assumed,
            "boundary_implied_kv_bytes_per_token": list(self.boundary_implied_kv_bytes_per_token),
            "above_cost_everywhere": self.above_cost_everywhere,
            "min_output_margin_frac": float(out_m[i_out]),
            "min_output_margin_context": float(self.contexts[i_out]),
            "min_input_margin_frac": float(in_m[i_in]),
            "min_input_margin_context": float(self.contexts[i_in]),
            "curve": [
                {
                    "context": float(c),
                    "cost_usd_per_million_output_tokens": float(co),
                    "price_usd_per_million_output_tokens": float(po),
                    "cost_usd_per_million_input_tokens": float(ci),
                    "price_usd_per_million_input_tokens": float(pi),
                    "fits": bool(f),
                }
                for c, co, po, ci, pi, f in zip(
                    self.contexts,
                    self.cost_usd_per_million_output_tokens,
                    self.price_usd_per_million_output_tokens,
                    self.cost_usd_per_million_input_tokens,
                    self.price_usd_per_million_input_tokens,
                    self.fits,
                    strict=True,
                )
            ],
        }


def default_contexts(price: ModelPrice, top: float = 1_000_000) -> FloatArray:
    """Log-spaced contexts 1K..``top`` plus each tier boundary and the token just above it."""
    grid = np.geomspace(1024, top, 41)
    edges = [b for b in price.tier_boundaries_tokens] + [b + 1 for b in price.tier_boundaries_tokens]
    return np.unique(np.concatenate([np.round(grid), np.asarray(edges, float)]))


def long_context(
    price: ModelPrice,
    deployment: Deployment,
    *,
    batch: float,
    contexts: FloatArray | None = None,
    params_active: float = LECTURE_PARAMS_ACTIVE,
    balance_ratio: float = LECTURE_BALANCE_RATIO,
) -> LongContext:
    """Cost per token against context at ``batch`` with ``price``'s schedule over it.

    Output cost: one decode step of ``batch`` sequences at each context (KV fetch grows
    with it). Input cost: prefilling one prompt of that length. The price at context ``L``
    is the tier a request with an ``L``-token prompt is billed at.
    """
    checks.at_least("batch", batch, 1)
    c = default_contexts(price) if contexts is None else np.asarray(contexts, float)
    dec = deployment.decode([batch], c)
    pre = deployment.prefill([1.0], c)
    tiers = [price.tier_for(x) for x in c]
    kv_tok = arch.kv_bytes_per_token(deployment.model, deployment.precisions.kv.bytes_per_element)
    bal = pooled.balance(deployment, c[:1])
    return LongContext(
        price=price,
        deployment=deployment,
        batch=float(batch),
        contexts=c,
        cost_usd_per_million_output_tokens=dec.usd_per_million_output_tokens[0],
        price_usd_per_million_output_tokens=np.array([t.output_usd_per_million_tokens for t in tiers]),
        cost_usd_per_million_input_tokens=pre.usd_per_million_input_tokens[0],
        price_usd_per_million_input_tokens=np.array([t.input_usd_per_million_tokens for t in tiers]),
        fits=dec.fits[0],
        crossover_context_tokens=float(
            econ.crossover_context_tokens(
                deployment.params.active,
                bal.dense_balance_batch,
                kv_tok,
                deployment.precisions.weights.bytes_per_element,
            )
        ),
        kv_bytes_per_token=kv_tok,
        boundary_implied_kv_bytes_per_token=tuple(
            float(econ.kv_bytes_per_token_at_crossover(params_active, balance_ratio, b))
            for b in price.tier_boundaries_tokens
        ),
        params_active_assumed=params_active,
        balance_ratio_assumed=balance_ratio,
    )


@dataclass(frozen=True)
class PriceSurvey:
    """The price catalog as of a day, with what each ratio implies."""

    as_of: dt.date
    prices: tuple[ModelPrice, ...]
    roofline: RooflineRatio

    @property
    def oldest_days(self) -> int:
        return max(p.age_days(self.as_of) for p in self.prices)

    def to_dict(self) -> dict[str, Any]:
        return {
            "as_of": self.as_of.isoformat(),
            "oldest_price_age_days": self.oldest_days,
            "prices": [price_dict(p, self.as_of) for p in self.prices],
            "roofline_reference": self.roofline.to_dict(),
        }


def survey(
    prices: list[ModelPrice] | tuple[ModelPrice, ...],
    deployment: Deployment,
    *,
    as_of: dt.date,
    batch: float,
    context: float,
) -> PriceSurvey:
    if not prices:
        raise InputError("prices", "[]", "at least one priced model")
    return PriceSurvey(as_of=as_of, prices=tuple(prices), roofline=roofline_ratio(deployment, batch, context))


@dataclass(frozen=True)
class PricesReport:
    """Everything ``rackmath prices`` shows: the survey, a long-context reading, prompt-cache
    tiers and fast modes."""

    survey: PriceSurvey
    long_context: LongContext | None
    caching: Any  # analyses.economics.caching.CacheEconomics (imported lazily to keep this module light)
    fast_mode: Any  # analyses.economics.fast_mode.FastModeReport

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.survey.to_dict(),
            "long_context": self.long_context.to_dict() if self.long_context else None,
            "caching": self.caching.to_dict() if self.caching is not None else None,
            "fast_mode": self.fast_mode.to_dict() if self.fast_mode is not None else None,
            "efficiency": self.survey.roofline.deployment.efficiency_described,
        }


#: Most retentions one cache reading compares.
MAX_RETENTIONS = 32
#: Longest amortization period of bought memory (s): a century.
MAX_AMORTIZATION_S = 100 * SECONDS_PER_YEAR


def aged_to(as_of: dt.date | str | None, table: dict[str, ModelPrice]) -> dt.date:
    """The day prices are aged to (default today): a date ``YYYY-MM-DD`` not before the newest
    price, so no price is younger than zero days."""
    if as_of is None:
        day = dt.date.today()
    elif isinstance(as_of, dt.date):
        day = as_of
    else:
        try:
            day = dt.date.fromisoformat(as_of)
        except ValueError:
            raise InputError("--as-of", as_of, "a date YYYY-MM-DD") from None
    newest = max(dt.date.fromisoformat(p.date) for p in table.values())
    if day < newest:
        allowed = f"a date on or after {newest} (the newest price)"
        raise InputError("--as-of", str(as_of or day.isoformat()), allowed)
    return day


def report(
    table: dict[str, ModelPrice],
    deployment: Deployment,
    *,
    provider: str | None = None,
    as_of: dt.date | str | None = None,
    batch: float = 2000,
    context: float = 8192,
    long_context_model: str = "gemini-3.1-pro",
    long_batch: float = 64,
    cache_model: str = "claude-opus-4.6",
    retentions_s: tuple[float, ...] | list[float] = DEFAULT_RETENTIONS_S,
    amortization_s: float = 3 * SECONDS_PER_YEAR,
    prompt_tokens: float = DEFAULT_PROMPT_TOKENS,
    prefix_hit: float | None = None,
    prefix_tier: str = "hbm",
    fast_model: str = "claude-opus-4.6",
    fast_context: float = 4096,
) -> PricesReport:
    """``rackmath prices``: the survey of ``table`` (one ``provider``'s prices, or all) as of a
    day against ``deployment``'s roofline, the long-context tiers of ``long_context_model``,
    the prompt-cache tiers priced for ``cache_model`` and the fast mode of ``fast_model``.

    Refuses a provider the table lacks, a day before the newest price, a reference deployment
    whose weights do not fit, a context beyond its model's window and the work bounds."""
    from rackmath.analyses.economics import caching, fast_mode
    from rackmath.analyses.serving import cache_tiers
    from rackmath.catalog.economics import memory_tiers, providers
    from rackmath.catalog.economics import price as priced

    today = aged_to(as_of, table)
    chosen = list(table.values())
    if provider is not None:
        known = providers(table)
        if provider.lower() not in known:
            raise UnknownIdError("provider", provider, known)
        chosen = [p for p in chosen if p.provider == provider.lower()]
    pooled.require_weights_fit(deployment)
    check_context(deployment.model, context, "--context")
    for field, value, most in (
        ("--batch", batch, MAX_BATCH),
        ("--long-batch", long_batch, MAX_BATCH),
        ("--context", context, MAX_CONTEXT),
        ("--prompt-tokens", prompt_tokens, MAX_CONTEXT),
        ("--fast-context", fast_context, MAX_CONTEXT),
    ):
        checks.between(field, value, 1, most)
    checks.between("--amortization", amortization_s, 0.0, MAX_AMORTIZATION_S, low_open=True)
    retentions = list(dict.fromkeys(float(r) for r in retentions_s))
    if len(retentions) > MAX_RETENTIONS:
        raise InputError("--retention", len(retentions), f"at most {MAX_RETENTIONS} durations")
    lc_price = priced(long_context_model, table)
    long = long_context(lc_price, deployment, batch=long_batch) if lc_price.tier_boundaries_tokens else None
    cache = caching.cache_economics(
        deployment,
        cache_tiers.default_tiers(deployment, memory_tiers(), amortization_s),
        retentions_s=retentions,
        prompt_tokens=prompt_tokens,
        amortization_s=amortization_s,
        price=priced(cache_model, table),
        prefix_hit=prefix_hit,
        prefix_tier=prefix_tier,
    )
    fast = fast_mode.report(deployment, context=fast_context, price=priced(fast_model, table))
    return PricesReport(
        survey=survey(chosen, deployment, as_of=today, batch=batch, context=context),
        long_context=long,
        caching=cache,
        fast_mode=fast,
    )
