"""The Economics page's state: a reference deployment and one state per tab, with their URL."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rackmath.analyses.economics import caching, fleet, overtrain, sparsity
from rackmath.analyses.economics import overtrain as ot
from rackmath.errors import RackmathError
from rackmath.units import BILLION, MILLION, MS
from rackmath.web.state.common import (
    MAX_BATCH,
    MAX_CONTEXT,
    QueryParams,
    between,
    choice,
    number_text,
    parse_durations_text,
    parse_fields,
    parse_fraction,
    parse_model_id,
    parse_positive,
    parse_system_id,
    priced,
    section_query,
    whole,
)

#: The Economics page's tabs: URL id -> label.
ECONOMICS_TABS: dict[str, str] = {
    "prices": "What prices reveal",
    "caches": "Cache tiers",
    "fast": "Fast modes",
    "fleet": "Fleets",
    "overtrain": "Over-training",
    "sparsity": "Sparsity",
}


#: Each simulated load is a simulation (~0.2 s at batch 2,000): keep the page responsive.
MAX_LOADS = 8


#: A simulated load above this (a fraction of capacity) only grows the queue.
MAX_LOAD_FRAC = 2.0


#: The range of every real-valued input of the Economics page, shared by its widgets (their
#: min and max) and its URL parser, so a number typed or linked is refused the same way.
ECONOMICS_BOUNDS: dict[str, tuple[float, float]] = {
    "caches.amortization_years": (0.1, 30.0),
    "fast.normal_over_balance": (1.0, 1_000.0),
    "fast.price_multiple": (1.0, 1_000.0),
    "fleet.traffic_tokens_per_s": (1.0, 1e12),
    "fleet.step_ms": (0.001, 60_000.0),
    "fleet.usd_per_chip_hour": (0.01, 1_000.0),
    "overtrain.params_billions": (0.001, 100_000.0),
    "overtrain.tokens_per_s_millions": (1e-6, 1e6),
    "overtrain.duration_days": (1.0, 36_500.0),
    "overtrain.rl_flops_per_param_token": (0.1, 100.0),
    "overtrain.rl_efficiency_frac": (0.001, 1.0),
    "overtrain.inference_efficiency_frac": (0.001, 1.0),
    "overtrain.tokens_per_param": (1.0, 100_000.0),
    "sparsity.params_active_billions": (0.001, 100_000.0),
}


#: The fast-mode picker's entry for "no published fast mode: the lecture's 2.5x and 6x".
NO_PRICE = "none"


@dataclass(frozen=True)
class PricesTab:
    """What prices reveal: output over input against the roofline, long-context tiers."""

    batch: int = fleet.LECTURE_BATCH  # decode batch of the output/input reference
    context: int = 8192  # context of the output/input reference (tokens)
    long_price: str = "gemini-3.1-pro"  # priced model whose context tiers are drawn
    long_batch: int = 64  # decode batch of the cost-per-token-vs-context curve


@dataclass(frozen=True)
class CachesTab:
    """Prompt-cache tiers: hold, fetch and recompute costs of a conversation's KV."""

    price: str = "claude-opus-4.6"  # priced model whose cache prices are compared
    retentions: str = "1s,10s,1m,5m,1h,1d"
    amortization_years: float = 3.0  # memory purchases spread over this many 365-day years
    prompt_tokens: int = caching.DEFAULT_PROMPT_TOKENS  # prompt a cache miss recomputes


@dataclass(frozen=True)
class FastTab:
    """Fast modes: what a higher price per token buys through a smaller batch."""

    price: str = "claude-opus-4.6"  # a priced model with a fast mode, or NO_PRICE
    normal_over_balance: float | None = None  # k; None: the published speed-up (or 2.5)
    price_multiple: float | None = None  # m; None: the published multiple (or 6)
    context: int = 4096


@dataclass(frozen=True)
class FleetTab:
    """Fleets: replicas, chips and dollars for a traffic; the train; a small simulation."""

    traffic_tokens_per_s: float = fleet.LECTURE_TRAFFIC_TOKENS_PER_S
    batch: int = fleet.LECTURE_BATCH
    step_source: str = "stated"  # "stated": step_ms at every batch; "roofline": the reference's
    step_ms: float = fleet.LECTURE_STEP_S / MS  # the lecture's 64 steps per second
    context: int = 4096  # context of the roofline step times
    chips_per_replica: int | None = None  # None: 72, or the reference deployment's
    usd_per_chip_hour: float | None = None  # None: the catalog's GB200 price, or the reference's
    output_tokens: int = fleet.DEFAULT_OUTPUT_TOKENS
    loads: str = ",".join(f"{x:g}" for x in fleet.DEFAULT_LOADS)  # simulated loads, fractions of capacity
    requests: int = 1000  # arrivals simulated per load (at least)
    seed: int = 0


@dataclass(frozen=True)
class OvertrainTab:
    """Over-training: the lecture's chain from inference traffic to pre-training tokens."""

    params_billions: float = overtrain.LECTURE_PARAMS_ACTIVE / BILLION  # active parameters N
    tokens_per_s_millions: float = overtrain.LECTURE_TOKENS_PER_S / MILLION  # inference traffic served
    duration_days: float = overtrain.LECTURE_DAYS
    rl_flops_per_param_token: float = ot.ComputeCoefficients().rl
    rl_efficiency_frac: float = ot.ComputeCoefficients().rl_efficiency
    inference_efficiency_frac: float = ot.ComputeCoefficients().inference_efficiency
    tokens_per_param: float = ot.CHINCHILLA_TOKENS_PER_PARAM


@dataclass(frozen=True)
class SparsityTab:
    """Sparsity: what a sparser MoE buys (quality) and costs (batch, memory, users)."""

    sparsities: str = ",".join(f"{x:g}" for x in sparsity.DEFAULT_SPARSITIES)
    params_active_billions: float | None = None  # None: the reference model's active size
    context: int = 4096
    users: int = sparsity.DEFAULT_USERS


@dataclass(frozen=True)
class EconomicsState:
    """The Economics page: a reference deployment (sidebar) and one state per tab."""

    tab: str = "prices"
    model: str = "deepseek-v3"
    system: str = "gb200-nvl72"
    prices: PricesTab = PricesTab()
    caches: CachesTab = CachesTab()
    fast: FastTab = FastTab()
    fleet: FleetTab = FleetTab()
    overtrain: OvertrainTab = OvertrainTab()
    sparsity: SparsityTab = SparsityTab()


_with_fast_mode = priced(lambda p: p.fast_mode is not None, "a priced model with a fast mode, or none")


def _fast_price(key: str, text: str) -> str:
    return NO_PRICE if text.strip().lower() == NO_PRICE else _with_fast_mode(key, text)


_ECONOMICS_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "tab": choice(tuple(ECONOMICS_TABS)),
    "model": parse_model_id,
    "system": parse_system_id,
    "prices.batch": whole(1, MAX_BATCH),
    "prices.context": whole(1, MAX_CONTEXT),
    "prices.long_price": priced(
        lambda p: bool(p.tier_boundaries_tokens), "a priced model with context tiers"
    ),
    "prices.long_batch": whole(1, MAX_BATCH),
    "caches.price": priced(),
    "caches.retentions": parse_durations_text,
    "caches.amortization_years": parse_positive,
    "caches.prompt_tokens": whole(1, MAX_CONTEXT),
    "fast.price": _fast_price,
    "fast.normal_over_balance": parse_positive,
    "fast.price_multiple": parse_positive,
    "fast.context": whole(1, MAX_CONTEXT),
    "fleet.traffic_tokens_per_s": parse_positive,
    "fleet.batch": whole(1, 100_000),
    "fleet.step_source": choice(("stated", "roofline")),
    "fleet.step_ms": parse_positive,
    "fleet.context": whole(1, MAX_CONTEXT),
    "fleet.chips_per_replica": whole(1, 1_000_000),
    "fleet.usd_per_chip_hour": parse_positive,
    "fleet.output_tokens": whole(1, 100_000),
    "fleet.loads": number_text(1e-6, MAX_LOADS, MAX_LOAD_FRAC),
    "fleet.requests": whole(100, 20_000),
    "fleet.seed": whole(0, 2**31 - 1),
    "overtrain.params_billions": parse_positive,
    "overtrain.tokens_per_s_millions": parse_positive,
    "overtrain.duration_days": parse_positive,
    "overtrain.rl_flops_per_param_token": parse_positive,
    "overtrain.rl_efficiency_frac": parse_fraction,
    "overtrain.inference_efficiency_frac": parse_fraction,
    "overtrain.tokens_per_param": parse_positive,
    "sparsity.sparsities": number_text(1),
    "sparsity.params_active_billions": parse_positive,
    "sparsity.context": whole(1, MAX_CONTEXT),
    "sparsity.users": whole(1, 10_000_000),
}


_ECONOMICS_PARSERS.update({k: between(lo, hi) for k, (lo, hi) in ECONOMICS_BOUNDS.items()})


_ECONOMICS_SECTIONS: dict[str, type] = {
    "prices": PricesTab,
    "caches": CachesTab,
    "fast": FastTab,
    "fleet": FleetTab,
    "overtrain": OvertrainTab,
    "sparsity": SparsityTab,
}


def parse_economics_query(params: QueryParams) -> tuple[EconomicsState, list[RackmathError]]:
    """URL -> state: ``tab``, ``model``, ``system`` and ``<tab>.<field>`` for each tab's controls."""
    values, errors = parse_fields(params, _ECONOMICS_PARSERS)
    top: dict[str, Any] = {k: v for k, v in values.items() if "." not in k}
    for section, cls in _ECONOMICS_SECTIONS.items():
        prefix = f"{section}."
        top[section] = cls(**{k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)})
    return EconomicsState(**top), errors


def economics_query(state: EconomicsState) -> dict[str, str]:
    out = {"tab": state.tab, "model": state.model, "system": state.system}
    for section in _ECONOMICS_SECTIONS:
        out.update(section_query(section, getattr(state, section)))
    return out
