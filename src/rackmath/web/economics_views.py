"""The Economics page's computations: each tab's analysis result, cached on (reference
deployment, the tab's state). Only analyses are called here; nothing is drawn."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from functools import lru_cache

from rackmath.analyses.economics import caching, fast_mode, fleet, overtrain, prices, sparsity
from rackmath.analyses.serving import cache_tiers
from rackmath.analyses.serving.deployment import Deployment
from rackmath.analyses.serving.pooled import require_weights_fit
from rackmath.api import deployment
from rackmath.catalog import economics as ce
from rackmath.specs.economics import parse_duration_s
from rackmath.units import BILLION, MILLION, MS, SECONDS_PER_DAY
from rackmath.views.figures import economics_charts
from rackmath.web.state import common
from rackmath.web.state.economics import (
    MAX_LOAD_FRAC,
    MAX_LOADS,
    NO_PRICE,
    CachesTab,
    EconomicsState,
    FastTab,
    FleetTab,
    OvertrainTab,
    PricesTab,
    SparsityTab,
)


@lru_cache(maxsize=32)
def reference(model: str, system: str) -> Deployment:
    """The reference deployment whose roofline supplies costs (refused if its weights do not fit)."""
    return require_weights_fit(deployment(model, system))


@lru_cache(maxsize=32)
def prices_view(
    model: str, system: str, tab: PricesTab, as_of: dt.date
) -> tuple[prices.PriceSurvey, prices.LongContext]:
    """The price survey against the roofline's output/input, and one long-context reading."""
    dep = reference(model, system)
    survey = prices.survey(list(ce.prices().values()), dep, as_of=as_of, batch=tab.batch, context=tab.context)
    return survey, prices.long_context(ce.price(tab.long_price), dep, batch=tab.long_batch)


@lru_cache(maxsize=32)
def caches_view(model: str, system: str, tab: CachesTab) -> caching.CacheEconomics:
    dep = reference(model, system)
    amortization_s = parse_duration_s(f"{tab.amortization_years!r}y", "caches.amortization_years")
    return caching.cache_economics(
        dep,
        cache_tiers.default_tiers(dep, ce.memory_tiers(), amortization_s),
        retentions_s=common.durations_s(tab.retentions, "caches.retentions"),
        prompt_tokens=tab.prompt_tokens,
        amortization_s=amortization_s,
        price=ce.price(tab.price),
    )


@lru_cache(maxsize=32)
def fast_view(model: str, system: str, tab: FastTab) -> fast_mode.FastModeReport:
    return fast_mode.report(
        reference(model, system),
        context=tab.context,
        price=None if tab.price == NO_PRICE else ce.price(tab.price),
        normal_over_balance=tab.normal_over_balance,
        price_multiple=tab.price_multiple,
    )


@lru_cache(maxsize=16)
def fleet_view(model: str, system: str, tab: FleetTab) -> fleet.Fleet:
    """Fleet sizing and the small simulation (the step time stated, or the reference's roofline)."""
    roofline = tab.step_source == "roofline"
    return fleet.fleet(
        traffic_tokens_per_s=tab.traffic_tokens_per_s,
        batch=tab.batch,
        step_s=None if roofline else tab.step_ms * MS,
        deployment=reference(model, system) if roofline else None,
        context=tab.context,
        chips_per_replica=tab.chips_per_replica,
        usd_per_chip_hour=tab.usd_per_chip_hour,
        output_tokens=tab.output_tokens,
        loads=common.number_list(
            tab.loads, "fleet.loads", minimum=1e-6, most=MAX_LOADS, maximum=MAX_LOAD_FRAC
        ),
        requests=tab.requests,
        seed=tab.seed,
    )


@dataclass(frozen=True)
class OvertrainView:
    result: overtrain.Overtraining
    curve: economics_charts.OvertrainCurve  # model sizes of the same loss and their lifetime compute


@lru_cache(maxsize=32)
def overtrain_view(tab: OvertrainTab) -> OvertrainView:
    r = overtrain.overtrain(
        params=tab.params_billions * BILLION,
        tokens_per_s=tab.tokens_per_s_millions * MILLION,
        duration_s=tab.duration_days * SECONDS_PER_DAY,
        coefficients=overtrain.ComputeCoefficients(
            rl=tab.rl_flops_per_param_token,
            rl_efficiency=tab.rl_efficiency_frac,
            inference_efficiency=tab.inference_efficiency_frac,
        ),
        tokens_per_param=tab.tokens_per_param,
    )
    return OvertrainView(r, economics_charts.overtrain_curve(r))


@lru_cache(maxsize=32)
def sparsity_view(model: str, system: str, tab: SparsityTab) -> sparsity.SparsityStudy:
    """Chips are sized per row by the study itself: the reference need not fit as it ships."""
    return sparsity.sparsity_study(
        deployment(model, system),
        sparsities=common.number_list(tab.sparsities, "sparsity.sparsities", minimum=1),
        context=tab.context,
        users=tab.users,
        params_active=None if tab.params_active_billions is None else tab.params_active_billions * BILLION,
    )


def prices_report(state: EconomicsState, as_of: dt.date) -> prices.PricesReport:
    """What ``rackmath prices`` reports for this state (the matplotlib figure draws it)."""
    survey, long = prices_view(state.model, state.system, state.prices, as_of)
    return prices.PricesReport(
        survey=survey,
        long_context=long,
        caching=caches_view(state.model, state.system, state.caches),
        fast_mode=fast_view(state.model, state.system, state.fast),
    )
