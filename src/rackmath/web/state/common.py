"""What every page's state shares: the URL encoding of a pasted config.json, the field
parsers (whole numbers, positive numbers, ranges, choices, id lists, durations), the parse and
query loops, the ranges of the real-valued inputs, and the custom model from a config.json."""

from __future__ import annotations

import base64
import binascii
import json
import math
import zlib
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any, TypeVar

from rackmath.catalog import economics as ce
from rackmath.catalog import loader as catalog
from rackmath.errors import ConfigError, InputError, RackmathError
from rackmath.specs import checks, lists
from rackmath.specs.economics import parse_duration_s
from rackmath.specs.hf_config import model_from_config
from rackmath.specs.model import ModelSpec
from rackmath.specs.precision import Precision

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
_Number = TypeVar("_Number", int, float)


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


def in_range(
    convert: Callable[[str], _Number], lo: float, hi: float, allowed: str
) -> Callable[[str, str], _Number]:
    """A parser of ``convert(text)`` that refuses what does not convert or falls outside [lo, hi]."""

    def parse(key: str, text: str) -> _Number:
        try:
            value = convert(text)
        except ValueError:
            raise InputError(key, text, allowed) from None
        checks.between(key, value, lo, hi, allowed=allowed, given=text)
        return value

    return parse


def whole(lo: int, hi: int) -> Callable[[str, str], int]:
    return in_range(int, lo, hi, f"a whole number from {lo:,} to {hi:,}")


def parse_positive(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(key, text, "a positive, finite number") from None
    return checks.positive(key, value, given=text)


def parse_precision(key: str, text: str) -> str:
    return Precision.parse(text, f"{key} precision").value


def parse_model_id(key: str, text: str) -> str:
    if text.strip().lower() == CUSTOM_MODEL:
        return CUSTOM_MODEL
    return catalog.model(text).id


def parse_system_id(key: str, text: str) -> str:
    return catalog.system(text).id


def parse_fields(
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


_State = TypeVar("_State")


def parse_model_page(
    params: QueryParams, parsers: Mapping[str, Callable[[str, str], Any]], state: Callable[..., _State]
) -> tuple[_State, list[RackmathError]]:
    """URL -> the state of a page that picks a model (a catalog id or a pasted config.json):
    each bad parameter is reported and left at its default."""
    values, errors = parse_fields(params, parsers)
    _custom_config(params, values, errors)
    return state(**values), errors


def state_query(state: Any) -> dict[str, str]:
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


def id_list(parse_one: Callable[[str, str], str]) -> Callable[[str, str], tuple[str, ...]]:
    def parse(key: str, text: str) -> tuple[str, ...]:
        items = tuple(dict.fromkeys(parse_one(key, part.strip()) for part in text.split(",") if part.strip()))
        if not items:
            raise InputError(key, text, "at least one entry")
        return items

    return parse


def model_of(model: str, config: str | None) -> ModelSpec:
    """A catalog model, or the custom config.json text when ``model`` is 'custom'."""
    if model == CUSTOM_MODEL:
        return model_from_text(config or "")
    return catalog.model(model)


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


def choice(options: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(key: str, text: str) -> str:
        value = text.strip().lower()
        if value not in options:
            raise InputError(key, text, ", ".join(options))
        return value

    return parse


def parse_fraction(key: str, text: str) -> float:
    value = parse_positive(key, text)
    if value > 1:
        raise InputError(key, text, "a fraction in (0, 1]")
    return value


def number_text(minimum: float, most: int = 64, maximum: float = math.inf) -> Callable[[str, str], str]:
    """A comma list of numbers (``"0.2,0.5,0.95"``), kept as typed once it parses."""

    def parse(key: str, text: str) -> str:
        number_list(text, key, minimum=minimum, most=most, maximum=maximum)
        return text.strip()

    return parse


def parse_durations_text(key: str, text: str) -> str:
    """A comma list of durations (``"1s,5m,1h"``), kept as typed once it parses."""
    durations_s(text, key)
    return text.strip()


def number_list(
    text: str, field: str, *, minimum: float, most: int = 64, maximum: float = math.inf
) -> tuple[float, ...]:
    """``"0.2, 0.5"`` -> ``(0.2, 0.5)`` (the CLI's parser: ``4k`` / ``1M`` suffixes too)."""
    values = tuple(lists.number_list(text, field, minimum=minimum))
    if len(values) > most:
        raise InputError(field, text, f"at most {most} numbers")
    for v in values:
        if v > maximum:
            raise InputError(field, f"{v:g}", f"numbers from {minimum:g} to {maximum:g}")
    return values


def between(lo: float, hi: float) -> Callable[[str, str], float]:
    return in_range(float, lo, hi, f"a number from {lo:g} to {hi:g}")


def durations_s(text: str, field: str) -> tuple[float, ...]:
    """``"1s,5m,1h"`` -> ``(1.0, 300.0, 3600.0)``."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise InputError(field, text, "durations such as 1s,5m,1h")
    return tuple(parse_duration_s(p, field) for p in parts)


def priced(where: Callable[[Any], bool] = lambda p: True, allowed: str = "") -> Callable[[str, str], str]:
    def parse(key: str, text: str) -> str:
        price = ce.price(text.strip())
        if not where(price):
            raise InputError(key, text, allowed)
        return price.id

    return parse


def section_query(prefix: str, state: Any) -> dict[str, str]:
    return {f"{prefix}.{k}": v for k, v in state_query(state).items()}


#: The range of every real-valued input of the Serving, Deployments and Training pages
#: (``<page>.<field>``), shared by the widgets (min and max) and the URL parsers. Whole
#: numbers are bounded where they are parsed (``_whole``) with the same limits as the widgets.
PAGE_BOUNDS: dict[str, tuple[float, float]] = {
    "serving.usd_per_chip_hour": (0.01, 1_000.0),
    "serving.hbm_gb": (0.1, 10_000.0),
    "serving.hbm_tb_per_s": (0.01, 1_000.0),
    "serving.peak_tflop_per_s": (0.1, 1_000_000.0),
    "deployments.traffic_tokens_per_s": (1.0, 1e12),
    "deployments.ttft_ms": (0.1, 1e6),
    "deployments.tpot_ms": (0.1, 1e5),
    "training.trillion_tokens": (1e-6, 10_000.0),
    "training.usd_per_chip_hour": (0.01, 1_000.0),
    "simulate.rate_per_s": (0.001, 10_000.0),
    "simulate.ttft_ms": (1.0, 600_000.0),
    "simulate.tpot_ms": (0.1, 10_000.0),
    "simulate.attainment": (0.01, 1.0),
}


def bounded(page: str, parsers: dict[str, Callable[[str, str], Any]]) -> None:
    """Replace a page's plain positive parsers by the range :data:`PAGE_BOUNDS` gives them."""
    for key, (lo, hi) in PAGE_BOUNDS.items():
        field = key.removeprefix(f"{page}.")
        if key.startswith(f"{page}.") and parsers.get(field) is parse_positive:
            parsers[field] = between(lo, hi)
