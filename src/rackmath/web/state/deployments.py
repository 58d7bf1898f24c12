"""The Deployments page's state: a search for the cheapest fleet under SLOs, and a frontier."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rackmath.analyses.deploy import candidates
from rackmath.errors import InputError, RackmathError
from rackmath.web.state.common import (
    MAX_CONTEXT,
    PAGE_BOUNDS,
    QueryParams,
    between,
    bounded,
    id_list,
    parse_model_id,
    parse_model_page,
    parse_positive,
    parse_system_id,
    state_query,
    whole,
)


@dataclass(frozen=True)
class DeploymentsState:
    """The Deployments page: a search for the cheapest fleet under SLOs, and a frontier."""

    model: str = "llama-3.1-70b"
    config: str | None = None
    systems: tuple[str, ...] = candidates.DEFAULT_SYSTEMS
    precisions: tuple[str, ...] = candidates.DEFAULT_PRECISIONS
    traffic_tokens_per_s: float = 100_000.0
    input_len: int = 1024
    output_len: int = 1024
    ttft_ms: float | None = 2000.0
    tpot_ms: float | None = 50.0
    max_chips: int = candidates.DEFAULT_MAX_CHIPS
    frontier_system: str = "h100-hgx"


def _family(key: str, text: str) -> str:
    if text not in candidates.PRECISION_CHOICES:
        raise InputError(key, text, ", ".join(candidates.PRECISION_CHOICES))
    return text


def _slo_ms(key: str, text: str) -> float | None:
    if text.strip().lower() == "none":
        return None
    lo, hi = PAGE_BOUNDS[f"deployments.{key}"]
    return between(lo, hi)(key, text)


_DEPLOYMENT_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "model": parse_model_id,
    "systems": id_list(parse_system_id),
    "precisions": id_list(_family),
    "traffic_tokens_per_s": parse_positive,
    "input_len": whole(1, MAX_CONTEXT),
    "output_len": whole(1, MAX_CONTEXT),
    "ttft_ms": _slo_ms,
    "tpot_ms": _slo_ms,
    "max_chips": whole(1, 100_000),
    "frontier_system": parse_system_id,
}


def parse_deployments_query(params: QueryParams) -> tuple[DeploymentsState, list[RackmathError]]:
    """URL -> state: ``none`` for an SLO means no SLO; an absent parameter, the default SLO."""
    return parse_model_page(params, _DEPLOYMENT_PARSERS, DeploymentsState)


def deployments_query(state: DeploymentsState) -> dict[str, str]:
    out = state_query(state)
    for name in ("ttft_ms", "tpot_ms"):
        if getattr(state, name) is None:
            out[name] = "none"
    return out


bounded("deployments", _DEPLOYMENT_PARSERS)
