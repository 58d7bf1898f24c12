"""The Serving page's state, its URL, and the model and (edited) system it builds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from rackmath.analyses.serving.energy import DEFAULT_PUE, MAX_PUE
from rackmath.analyses.serving.speculative import MAX_SPEC_DEPTH
from rackmath.catalog import loader as catalog
from rackmath.errors import InputError, RackmathError
from rackmath.specs.hardware import ChipSpec, SystemSpec
from rackmath.specs.model import ModelSpec, parse_weight_classes
from rackmath.specs.precision import Precision
from rackmath.units import GB, TB, TERA
from rackmath.web.state.common import (
    MAX_BATCH,
    MAX_CONTEXT,
    QueryParams,
    bounded,
    choice,
    in_range,
    model_of,
    parse_model_id,
    parse_model_page,
    parse_positive,
    parse_precision,
    parse_system_id,
    state_query,
    whole,
)

#: how operators are costed: fitted kernel curves, or the lecture's pure roofline
EFFICIENCY_MODES = ("kernel", "pure")
#: where a prefix cache's KV may live (the memory-tier catalog's tiers)
PREFIX_TIERS = ("hbm", "host-dram", "cxl", "ssd", "hdd")
#: the highest prefix-cache hit rate the page offers (a prompt always has a suffix to prefill)
MAX_PREFIX_HIT = 0.95
#: the defaults of the serving features when the URL leaves them out
DEFAULT_ACCEPTANCE = 0.8
DEFAULT_PREFIX_TIER = "hbm"


@dataclass(frozen=True)
class ServingState:
    """Everything the Serving page shows is a function of these values (None = default)."""

    model: str = "deepseek-v3"
    config: str | None = None  # config.json text when model == CUSTOM_MODEL
    system: str = "gb200-nvl72"
    chips: int | None = None  # None: the system's default
    weights: str | None = None  # None: as the model ships
    #: weights per tensor class ("experts=mxfp4,attention=bf16"), the rest in ``weights``
    weight_classes: str | None = None
    kv: str | None = None  # None: bf16
    compute: str | None = None  # None: the weights' format if the chip has it, else bf16
    usd_per_chip_hour: float | None = None  # None: the catalog's dated price
    hbm_gb: float | None = None  # custom chip: HBM capacity per chip, GB (1e9 bytes)
    hbm_tb_per_s: float | None = None  # custom chip: HBM bandwidth per chip, TB/s (1e12 B/s)
    peak_tflop_per_s: float | None = None  # custom chip: dense peak at the compute precision
    batch: int = 256
    context: int = 4096
    efficiency: str = "kernel"  # "kernel": fitted kernel curves; "pure": the lecture's roofline
    # serving features (None = off or the default): MTP draft tokens and their acceptance per
    # position, prefix-cache hit rate and the tier its KV lives in, facility PUE for energy
    mtp: int | None = None
    acceptance: float | None = None
    prefix_hit: float | None = None
    prefix_tier: str | None = None
    pue: float | None = None


#: the page's name for the weights-per-class field (its refusals name it, not the CLI flag)
WEIGHT_CLASSES_LABEL = "Weights per tensor class"


def parse_weight_class_text(key: str, text: str) -> str | None:
    """``experts=mxfp4,attention=bf16`` as typed, once the model's class parser accepts it
    (:func:`rackmath.specs.model.parse_weight_classes`: the same names and formats as the CLI's
    ``--weight-classes``); empty text: None (every class in the weights' format)."""
    cleaned = text.replace(" ", "").lower()
    if not cleaned:
        return None
    parse_weight_classes(cleaned, field=WEIGHT_CLASSES_LABEL)
    return cleaned


_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "model": parse_model_id,
    "system": parse_system_id,
    "chips": whole(1, 1_000_000),
    "weights": parse_precision,
    "weight_classes": parse_weight_class_text,
    "kv": parse_precision,
    "compute": parse_precision,
    "usd_per_chip_hour": parse_positive,
    "hbm_gb": parse_positive,
    "hbm_tb_per_s": parse_positive,
    "peak_tflop_per_s": parse_positive,
    "batch": whole(1, MAX_BATCH),
    "context": whole(1, MAX_CONTEXT),
    "efficiency": choice(EFFICIENCY_MODES),
    "mtp": whole(0, MAX_SPEC_DEPTH),
    "acceptance": in_range(float, 0.0, 1.0, "an acceptance rate from 0 to 1, e.g. 0.8"),
    "prefix_hit": in_range(float, 0.0, MAX_PREFIX_HIT, f"a hit rate from 0 to {MAX_PREFIX_HIT:g}, e.g. 0.5"),
    "prefix_tier": choice(PREFIX_TIERS),
    "pue": in_range(float, 1.0, MAX_PUE, f"a PUE from 1 to {MAX_PUE:g}, e.g. {DEFAULT_PUE:g}"),
}


def parse_serving_query(params: QueryParams) -> tuple[ServingState, list[RackmathError]]:
    """URL query parameters -> state; each bad parameter is reported and left at its default."""
    return parse_model_page(params, _PARSERS, ServingState)


def serving_query(state: ServingState) -> dict[str, str]:
    """State -> URL query parameters (None fields are left out)."""
    return state_query(state)


def serving_model(state: ServingState) -> ModelSpec:
    return model_of(state.model, state.config)


def edited_chip(
    chip: ChipSpec,
    compute: Precision,
    *,
    hbm_gb: float | None = None,
    hbm_tb_per_s: float | None = None,
    peak_tflop_per_s: float | None = None,
) -> ChipSpec:
    """``chip`` with some figures replaced (face units: GB, TB/s, TFLOP/s), validated again."""
    if hbm_gb is None and hbm_tb_per_s is None and peak_tflop_per_s is None:
        return chip
    data = chip.model_dump()
    if hbm_gb is not None:
        data["hbm_capacity_bytes"] = hbm_gb * GB
    if hbm_tb_per_s is not None:
        data["hbm_bandwidth_bytes_per_s"] = hbm_tb_per_s * TB
    if peak_tflop_per_s is not None:
        data["peak_flops_per_s"] = {**chip.peak_flops_per_s, compute.compute_class: peak_tflop_per_s * TERA}
    data["id"] = f"{chip.id}-edited"
    data["name"] = f"{chip.name} (edited)"
    data["notes"] = "figures edited in the web explorer"
    try:
        return ChipSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise InputError(f"chip {field}", first.get("input"), first["msg"]) from None


def serving_system(state: ServingState, compute: Precision) -> SystemSpec:
    base = catalog.system(state.system)
    chip = edited_chip(
        base.chip,
        compute,
        hbm_gb=state.hbm_gb,
        hbm_tb_per_s=state.hbm_tb_per_s,
        peak_tflop_per_s=state.peak_tflop_per_s,
    )
    return base if chip is base.chip else base.model_copy(update={"chip": chip})


bounded("serving", _PARSERS)
