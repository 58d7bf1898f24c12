"""The planner's pages' state: Compare (configurations side by side), Frontier (several systems
on one set of axes) and Simulate (a workload through a replica, with SLO attainment).

Compare keeps one group of URL keys per configuration, ``a.model``, ``a.system``, ...,
``b.model``, ...; ``n`` says how many are shown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from rackmath.analyses.deploy.candidates import PRECISION_CHOICES
from rackmath.analyses.deploy.compare import MAX_CONFIGURATIONS
from rackmath.analyses.deploy.simulate import parse_xpyd
from rackmath.analyses.deploy.systems_frontier import MAX_SYSTEMS
from rackmath.analyses.serving.speculative import MAX_SPEC_DEPTH
from rackmath.catalog.runtimes import runtimes
from rackmath.errors import InputError, RackmathError
from rackmath.specs.plan import ParallelPlan
from rackmath.specs.workload import LengthDist
from rackmath.web.state.common import (
    MAX_BATCH,
    MAX_CONTEXT,
    PAGE_BOUNDS,
    QueryParams,
    between,
    choice,
    id_list,
    parse_fields,
    parse_model_id,
    parse_precision,
    parse_system_id,
    state_query,
    whole,
)

EFFICIENCY_MODES = ("kernel", "pure")
#: Configurations the Compare page shows side by side (letters A to D).
MAX_COMPARED = min(4, MAX_CONFIGURATIONS)
LETTERS = "abcd"[:MAX_COMPARED]
#: Requests one simulation on the page may run (the CLI allows 1e6; the page stays quick).
MAX_WEB_REQUESTS = 20_000
#: xPyD pools the page offers at most (each side).
MAX_WEB_POOL = 16


def _plan(key: str, text: str) -> str:
    return str(ParallelPlan.parse(text))


def _optional_plan(key: str, text: str) -> str | None:
    return None if text.strip().lower() in ("", "none") else _plan(key, text)


def _length(key: str, text: str) -> str:
    return str(LengthDist.parse(text, key))


def _xpyd(key: str, text: str) -> str | None:
    if text.strip().lower() in ("", "off", "none"):
        return None
    x, y = parse_xpyd(text)
    if max(x, y) > MAX_WEB_POOL:
        raise InputError(key, text, f"at most {MAX_WEB_POOL} replicas a pool on this page")
    return f"{x}P{y}D"


# --------------------------------------------------------------------------- Compare


@dataclass(frozen=True)
class CompareConfig:
    """One configuration: a Serving page's deployment at one batch and context."""

    model: str = "llama-3.1-70b"
    system: str = "h100-hgx"
    chips: int | None = None  # None: the system's default
    plan: str | None = None  # None: the chips act as one ideal chip
    weights: str | None = None
    kv: str | None = None
    batch: int = 64
    context: int = 8192
    efficiency: str = "kernel"


DEFAULT_CONFIGS: tuple[CompareConfig, ...] = (
    CompareConfig(chips=8),
    CompareConfig(system="b200-hgx", chips=8),
    CompareConfig(system="h200-hgx", chips=8),
    CompareConfig(system="gb200-nvl72", chips=8),
)


@dataclass(frozen=True)
class CompareState:
    count: int = 2
    configs: tuple[CompareConfig, ...] = field(default=DEFAULT_CONFIGS)

    @property
    def shown(self) -> tuple[CompareConfig, ...]:
        return self.configs[: self.count]


_CONFIG_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "model": parse_model_id,
    "system": parse_system_id,
    "chips": whole(1, 1_000_000),
    "plan": _optional_plan,
    "weights": parse_precision,
    "kv": parse_precision,
    "batch": whole(1, MAX_BATCH),
    "context": whole(1, MAX_CONTEXT),
    "efficiency": choice(EFFICIENCY_MODES),
}


def parse_compare_query(params: QueryParams) -> tuple[CompareState, list[RackmathError]]:
    errors: list[RackmathError] = []
    count, count_errors = parse_fields(params, {"n": whole(1, MAX_COMPARED)})
    errors += count_errors
    configs = []
    for letter, default in zip(LETTERS, DEFAULT_CONFIGS, strict=True):
        parsers = {f"{letter}.{k}": parse for k, parse in _CONFIG_PARSERS.items()}
        values, errs = parse_fields(params, parsers)
        errors += errs
        configs.append(replace(default, **{k.removeprefix(f"{letter}."): v for k, v in values.items()}))
    return CompareState(count.get("n", 2), tuple(configs)), errors


def compare_query(state: CompareState) -> dict[str, str]:
    out = {"n": str(state.count)}
    for letter, config in zip(LETTERS, state.shown, strict=False):
        out.update({f"{letter}.{k}": v for k, v in state_query(config).items()})
    return out


# --------------------------------------------------------------------------- Frontier

DEFAULT_FRONTIER_SYSTEMS = ("h100-hgx", "h200-hgx", "b200-hgx", "gb200-nvl72", "mi355x-8")


@dataclass(frozen=True)
class FrontierState:
    model: str = "llama-3.1-70b"
    systems: tuple[str, ...] = DEFAULT_FRONTIER_SYSTEMS
    input_len: int = 1024
    output_len: int = 1024
    precision: str = "native"
    max_chips: int | None = None  # None: each system's own (its domain, at least 64)
    efficiency: str = "kernel"


def _systems(key: str, text: str) -> tuple[str, ...]:
    ids = id_list(parse_system_id)(key, text)
    if len(ids) > MAX_SYSTEMS:
        raise InputError(key, text, f"at most {MAX_SYSTEMS} systems")
    return ids


_FRONTIER_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "model": parse_model_id,
    "systems": _systems,
    "input_len": whole(1, MAX_CONTEXT),
    "output_len": whole(1, MAX_CONTEXT),
    "precision": choice(PRECISION_CHOICES),
    "max_chips": whole(1, 1024),
    "efficiency": choice(EFFICIENCY_MODES),
}


def parse_frontier_query(params: QueryParams) -> tuple[FrontierState, list[RackmathError]]:
    values, errors = parse_fields(params, _FRONTIER_PARSERS)
    return FrontierState(**values), errors


def frontier_query(state: FrontierState) -> dict[str, str]:
    return state_query(state)


# --------------------------------------------------------------------------- Simulate


@dataclass(frozen=True)
class SimulateState:
    model: str = "llama-3.1-70b"
    system: str = "h100-hgx"
    plan: str = "tp=8"
    runtime: str = "vllm"
    rate_per_s: float = 5.0
    requests: int = 1000
    input: str = "lognormal:2000"
    output: str = "500"
    seed: int = 0
    mtp: int = 0
    acceptance: float = 0.8
    disaggregated: str | None = None  # "2P1D": prefill and decode replicas; None: one replica
    prefill_plan: str | None = None  # None: the decode plan
    ttft_ms: float = 1000.0  # the TTFT limit (queueing included)
    tpot_ms: float = 50.0  # the TPOT limit
    efficiency: str = "kernel"
    attainment: float = 0.99  # the share of requests meeting both limits the rate search asks
    prefix_hit: float = 0.0  # the share of each prompt found in the prefix cache
    curve: int = 0  # 1: probe rates for the attainment curve and the highest rate meeting the SLO


_SIMULATE_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "model": parse_model_id,
    "system": parse_system_id,
    "plan": _plan,
    "runtime": lambda key, text: choice(tuple(runtimes()))(key, text),
    "rate_per_s": between(*PAGE_BOUNDS["simulate.rate_per_s"]),
    "requests": whole(1, MAX_WEB_REQUESTS),
    "input": _length,
    "output": _length,
    "seed": whole(0, 2**31),
    "mtp": whole(0, MAX_SPEC_DEPTH),
    "acceptance": between(0.0, 1.0),
    "disaggregated": _xpyd,
    "prefill_plan": _optional_plan,
    "ttft_ms": between(*PAGE_BOUNDS["simulate.ttft_ms"]),
    "tpot_ms": between(*PAGE_BOUNDS["simulate.tpot_ms"]),
    "efficiency": choice(EFFICIENCY_MODES),
    "attainment": between(*PAGE_BOUNDS["simulate.attainment"]),
    "prefix_hit": between(0.0, 1.0),
    "curve": whole(0, 1),
}


def parse_simulate_query(params: QueryParams) -> tuple[SimulateState, list[RackmathError]]:
    values, errors = parse_fields(params, _SIMULATE_PARSERS)
    return SimulateState(**values), errors


def simulate_query(state: SimulateState) -> dict[str, str]:
    defaults = SimulateState()
    out = state_query(state)
    for f in fields(state):  # the URL holds what differs from the defaults, and the workload
        if f.name not in ("model", "system", "plan") and getattr(state, f.name) == getattr(defaults, f.name):
            out.pop(f.name, None)
    return out
