"""Page state <-> URL, and page state -> specs.

A page's state is a frozen dataclass of plain values (strings, ints, floats, ``None``), so
it is hashable (the cache key of the page's computation) and round-trips through the URL:
``parse_serving_query(serving_query(state)) == (state, [])``. Parsing never raises: each
bad parameter becomes a :class:`RackmathError` the page shows, and the default is used.

Nothing here draws a widget or does math: it validates user input at the boundary and
builds the frozen specs (a custom model from a pasted ``config.json``, a chip with edited
figures) that the analyses take.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from pydantic import ValidationError

from rackmath import catalog
from rackmath.analyses import search
from rackmath.errors import ConfigError, InputError, RackmathError
from rackmath.specs import ChipSpec, ModelSpec, Precision, SystemSpec, model_from_config
from rackmath.units import GB, TB, TERA

#: The model picker's entry for a pasted or uploaded config.json.
CUSTOM_MODEL = "custom"
#: Model id given to a custom model (its config.json carries no id of ours).
CUSTOM_MODEL_ID = "custom-model"
#: Slider ranges: batch 1 to 2**16 sequences, context 1 to 2**21 tokens.
MAX_BATCH = 2**16
MAX_CONTEXT = 2**21
#: Largest pasted config.json accepted (real ones are a few kB; this refuses a wrong file).
MAX_CONFIG_CHARS = 200_000

QueryParams = Mapping[str, str | list[str]]


@dataclass(frozen=True)
class ServingState:
    """Everything the Serving page shows is a function of these values (None = default)."""

    model: str = "deepseek-v3"
    config: str | None = None  # config.json text when model == CUSTOM_MODEL
    system: str = "gb200-nvl72"
    chips: int | None = None  # None: the system's default
    weights: str | None = None  # None: as the model ships
    kv: str | None = None  # None: bf16
    compute: str | None = None  # None: the weights' format if the chip has it, else bf16
    usd_per_chip_hour: float | None = None  # None: the catalog's dated price
    hbm_gb: float | None = None  # custom chip: HBM capacity per chip, GB (1e9 bytes)
    hbm_tb_per_s: float | None = None  # custom chip: HBM bandwidth per chip, TB/s (1e12 B/s)
    peak_tflop_per_s: float | None = None  # custom chip: dense peak at the compute precision
    batch: int = 256
    context: int = 4096


# --------------------------------------------------------------------------- URL encoding


def encode_config(text: str) -> str:
    """config.json text -> a short URL-safe token (zlib, then base64url)."""
    return base64.urlsafe_b64encode(zlib.compress(text.encode(), 9)).decode().rstrip("=")


def decode_config(token: str) -> str:
    padded = token + "=" * (-len(token) % 4)
    try:
        return zlib.decompress(base64.urlsafe_b64decode(padded)).decode()
    except (binascii.Error, zlib.error, UnicodeDecodeError, ValueError):
        raise InputError("URL parameter cfg", token[:40], "a config.json encoded by this app") from None


def _one(params: QueryParams, key: str) -> str | None:
    value = params.get(key)
    if isinstance(value, list):
        return value[-1] if value else None
    return value


def _whole(lo: int, hi: int) -> Callable[[str, str], int]:
    def parse(key: str, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise InputError(key, text, f"a whole number from {lo:,} to {hi:,}") from None
        if not lo <= value <= hi:
            raise InputError(key, text, f"a whole number from {lo:,} to {hi:,}")
        return value

    return parse


def _positive(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(key, text, "a positive, finite number") from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(key, text, "a positive, finite number")
    return value


def _precision(key: str, text: str) -> str:
    return Precision.parse(text, f"{key} precision").value


def _model_id(key: str, text: str) -> str:
    if text.strip().lower() == CUSTOM_MODEL:
        return CUSTOM_MODEL
    return catalog.model(text).id


def _system_id(key: str, text: str) -> str:
    return catalog.system(text).id


_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "model": _model_id,
    "system": _system_id,
    "chips": _whole(1, 1_000_000),
    "weights": _precision,
    "kv": _precision,
    "compute": _precision,
    "usd_per_chip_hour": _positive,
    "hbm_gb": _positive,
    "hbm_tb_per_s": _positive,
    "peak_tflop_per_s": _positive,
    "batch": _whole(1, MAX_BATCH),
    "context": _whole(1, MAX_CONTEXT),
}


def _parse_fields(
    params: QueryParams, parsers: Mapping[str, Callable[[str, str], Any]]
) -> tuple[dict[str, Any], list[RackmathError]]:
    values: dict[str, Any] = {}
    errors: list[RackmathError] = []
    for key, parse in parsers.items():
        text = _one(params, key)
        if text is None or text == "":
            continue
        try:
            values[key] = parse(key, text)
        except RackmathError as exc:
            errors.append(exc)
    return values, errors


def _custom_config(params: QueryParams, values: dict[str, Any], errors: list[RackmathError]) -> None:
    """The ``cfg`` parameter: only meaningful with ``model=custom``."""
    token = _one(params, "cfg")
    if token:
        try:
            values["config"] = decode_config(token)
        except RackmathError as exc:
            errors.append(exc)
    if values.get("model") == CUSTOM_MODEL and "config" not in values:
        values.pop("model")
        errors.append(InputError("model", CUSTOM_MODEL, "a catalog id, or 'custom' with a cfg parameter"))
    if values.get("model") != CUSTOM_MODEL:
        values.pop("config", None)


def parse_serving_query(params: QueryParams) -> tuple[ServingState, list[RackmathError]]:
    """URL query parameters -> state; each bad parameter is reported and left at its default."""
    values, errors = _parse_fields(params, _PARSERS)
    _custom_config(params, values, errors)
    return ServingState(**values), errors


def _query(state: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for f in fields(state):
        value = getattr(state, f.name)
        if value is None:
            continue
        if f.name == "config":
            out["cfg"] = encode_config(value)
        elif isinstance(value, tuple):
            out[f.name] = ",".join(value)
        else:
            out[f.name] = repr(value) if isinstance(value, float) else str(value)
    return out


def serving_query(state: ServingState) -> dict[str, str]:
    """State -> URL query parameters (None fields are left out)."""
    return _query(state)


# --------------------------------------------------------------------------- Deployments page


@dataclass(frozen=True)
class DeploymentsState:
    """The Deployments page: a search for the cheapest fleet under SLOs, and a frontier."""

    model: str = "llama-3.1-70b"
    config: str | None = None
    systems: tuple[str, ...] = search.DEFAULT_SYSTEMS
    precisions: tuple[str, ...] = search.DEFAULT_PRECISIONS
    traffic_tokens_per_s: float = 100_000.0
    input_len: int = 1024
    output_len: int = 1024
    ttft_ms: float | None = 2000.0
    tpot_ms: float | None = 50.0
    max_chips: int = search.DEFAULT_MAX_CHIPS
    frontier_system: str = "h100-hgx"


def _id_list(parse_one: Callable[[str, str], str]) -> Callable[[str, str], tuple[str, ...]]:
    def parse(key: str, text: str) -> tuple[str, ...]:
        items = tuple(dict.fromkeys(parse_one(key, part.strip()) for part in text.split(",") if part.strip()))
        if not items:
            raise InputError(key, text, "at least one entry")
        return items

    return parse


def _family(key: str, text: str) -> str:
    if text not in search.PRECISION_CHOICES:
        raise InputError(key, text, ", ".join(search.PRECISION_CHOICES))
    return text


def _slo_ms(key: str, text: str) -> float | None:
    return None if text.strip().lower() == "none" else _positive(key, text)


_DEPLOYMENT_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "model": _model_id,
    "systems": _id_list(_system_id),
    "precisions": _id_list(_family),
    "traffic_tokens_per_s": _positive,
    "input_len": _whole(1, MAX_CONTEXT),
    "output_len": _whole(1, MAX_CONTEXT),
    "ttft_ms": _slo_ms,
    "tpot_ms": _slo_ms,
    "max_chips": _whole(1, 100_000),
    "frontier_system": _system_id,
}


def parse_deployments_query(params: QueryParams) -> tuple[DeploymentsState, list[RackmathError]]:
    values, errors = _parse_fields(params, _DEPLOYMENT_PARSERS)
    _custom_config(params, values, errors)
    state = DeploymentsState(**values)
    # "none" in the URL means no SLO; an absent parameter means the default SLO
    return state, errors


def deployments_query(state: DeploymentsState) -> dict[str, str]:
    out = _query(state)
    for name in ("ttft_ms", "tpot_ms"):
        if getattr(state, name) is None:
            out[name] = "none"
    return out


def model_of(model: str, config: str | None) -> ModelSpec:
    """A catalog model, or the custom config.json text when ``model`` is 'custom'."""
    if model == CUSTOM_MODEL:
        return model_from_text(config or "")
    return catalog.model(model)


# --------------------------------------------------------------------------- state -> specs


def model_from_text(text: str, model_id: str = CUSTOM_MODEL_ID) -> ModelSpec:
    """A pasted or uploaded config.json (text) -> ModelSpec, with a clear message if it is not one."""
    if not text.strip():
        raise ConfigError("config.json is empty: paste the file's text or upload it")
    if len(text) > MAX_CONFIG_CHARS:
        raise ConfigError(
            f"config.json is {len(text):,} characters; a model config is a few thousand "
            f"(limit {MAX_CONFIG_CHARS:,}): is this the right file?"
        )
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config.json is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    name = config.get("_name_or_path") if isinstance(config, dict) else None
    label = f"{name} (config.json)" if isinstance(name, str) and name else "custom config.json"
    return model_from_config(config, model_id=model_id, name=label, source=("pasted config.json",))


def upload_text(content: bytes) -> str:
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError("the uploaded file is not UTF-8 text; upload a config.json") from None


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
