"""One grammar for every number a user types (CLI options, web text fields).

Counts and quantities::

    1024   1e3   2.5e12   1k   4K   1M   500M   2.5G   100B   3T   1_000_000   1/3

``k``/``K`` = 1e3, ``m``/``M`` = 1e6, ``g``/``G``/``b``/``B`` = 1e9, ``t``/``T`` = 1e12.
Suffixes are decimal (SI), never binary: ``4k`` is 4,000, not 4,096.

Durations (bare numbers are seconds)::

    250ms   30s   5min   5m   1h   2d   1w   3y      (m = min = minute; y = 365 days)

Every parse failure raises :class:`~rackmath.errors.InputError` naming the field, what was
typed and what is allowed; a value outside ``[minimum, maximum]`` does too. NaN and
infinities are never accepted. This module has no dependencies beyond the standard library,
so the command line can parse options without importing NumPy.
"""

from __future__ import annotations

import math
import re

from rackmath.errors import InputError
from rackmath.units import SECONDS_PER_DAY, SECONDS_PER_HOUR, SECONDS_PER_MINUTE, SECONDS_PER_YEAR

_SUFFIX = {"k": 1e3, "m": 1e6, "g": 1e9, "b": 1e9, "t": 1e12}
_NUMBER = re.compile(r"^([+-]?(?:[0-9][0-9_]*\.?[0-9_]*|\.[0-9]+)(?:e[+-]?[0-9]+)?)([kmgbt]?)$", re.I)

#: Seconds per duration unit (``y`` is a 365-day year, as in rackmath.units).
DURATION_UNITS_S = {
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "m": SECONDS_PER_MINUTE,
    "min": SECONDS_PER_MINUTE,
    "h": SECONDS_PER_HOUR,
    "d": SECONDS_PER_DAY,
    "w": 7 * SECONDS_PER_DAY,
    "y": SECONDS_PER_YEAR,
}
_DURATION = re.compile(r"^([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(ms|sec|min|s|m|h|d|w|y)?$", re.I)

NUMBER_HINT = "a number such as 1024, 1e3, 4k, 1M, 2.5G"
DURATION_HINT = "a duration such as 250ms, 30s, 5min, 1h, 2d or 3y"


def fmt_bound(value: float) -> str:
    """A bound as people write it: ``65,536``, ``0.5``, ``1e+15``."""
    if float(value).is_integer() and abs(value) < 1e10:
        return f"{int(value):,}"
    if 1e-3 <= abs(value) < 1e10:
        return f"{value:g}"
    mantissa, exponent = f"{value:.6e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def _range_text(minimum: float | None, maximum: float | None, integer: bool) -> str:
    kind = "a whole number" if integer else "a number"
    if minimum is not None and maximum is not None:
        return f"{kind} from {fmt_bound(minimum)} to {fmt_bound(maximum)}"
    if minimum is not None:
        return f"{kind} >= {fmt_bound(minimum)}"
    if maximum is not None:
        return f"{kind} <= {fmt_bound(maximum)}"
    return kind


def check_range(
    value: float,
    field: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    integer: bool = False,
    given: object = None,
    why: str = "",
) -> float:
    """``value`` if finite, whole when ``integer`` and within ``[minimum, maximum]``."""
    shown = value if given is None else given
    allowed = _range_text(minimum, maximum, integer) + (f" ({why})" if why else "")
    if not math.isfinite(value):
        raise InputError(field, shown, allowed)
    if integer and value != int(value):
        raise InputError(field, shown, allowed)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise InputError(field, shown, allowed)
    return value


def parse_number(
    text: str | float,
    field: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    integer: bool = False,
    why: str = "",
) -> float:
    """``"2.5G"`` -> ``2.5e9``; see the module docstring for the grammar."""
    if isinstance(text, bool):
        raise InputError(field, text, NUMBER_HINT)
    if isinstance(text, int | float):
        value = float(text)
    else:
        token = str(text).strip()
        num, slash, den = token.partition("/")
        if slash:  # a ratio such as 1/3
            top = parse_number(num, field)
            bottom = parse_number(den, field, minimum=0)
            if bottom == 0:
                raise InputError(field, text, "a ratio with a non-zero denominator, e.g. 1/3")
            return check_range(
                top / bottom, field, minimum=minimum, maximum=maximum, integer=integer, given=text
            )
        match = _NUMBER.match(token)
        if not match or match.group(1).strip("+-_.") == "":
            raise InputError(field, text, NUMBER_HINT)
        try:
            value = float(match.group(1)) * _SUFFIX.get(match.group(2).lower(), 1.0)
        except (ValueError, OverflowError):
            raise InputError(field, text, NUMBER_HINT) from None
    value = check_range(value, field, minimum=minimum, maximum=maximum, integer=integer, given=text, why=why)
    return float(int(value)) if integer else value


def parse_int(
    text: str | float, field: str, *, minimum: int | None = None, maximum: int | None = None, why: str = ""
) -> int:
    """:func:`parse_number` for whole numbers (``"1e3"`` and ``"1k"`` give ``1000``)."""
    return int(parse_number(text, field, minimum=minimum, maximum=maximum, integer=True, why=why))


def parse_list(
    text: str,
    field: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    integer: bool = False,
    most: int = 64,
) -> list[float]:
    """``"1,64,2k"`` -> ``[1.0, 64.0, 2000.0]``: at least one and at most ``most`` numbers."""
    parts = [p.strip() for p in str(text).split(",")]
    if not any(parts):
        raise InputError(field, text, "a comma list of numbers, e.g. 1,64,2k")
    if len(parts) > most:
        raise InputError(field, f"{len(parts)} values", f"at most {most} values in a list")
    for p in parts:
        if not _NUMBER.match(p):
            raise InputError(field, p, "comma-separated numbers such as 1,64,2k (each like 1e3, 4k, 1M)")
    return [parse_number(p, field, minimum=minimum, maximum=maximum, integer=integer) for p in parts]


def parse_duration(
    text: str | float,
    field: str,
    *,
    minimum_s: float | None = None,
    maximum_s: float | None = None,
) -> float:
    """``"5min"`` -> ``300.0``; a bare number is seconds. Always positive and finite."""
    if isinstance(text, bool):
        raise InputError(field, text, DURATION_HINT)
    if isinstance(text, int | float):
        value = float(text)
    else:
        match = _DURATION.match(str(text).strip())
        if not match:
            raise InputError(field, text, DURATION_HINT)
        value = float(match.group(1)) * DURATION_UNITS_S[(match.group(2) or "s").lower()]
    if not math.isfinite(value) or value <= 0:
        raise InputError(field, text, "a positive, finite duration")
    if (minimum_s is not None and value < minimum_s) or (maximum_s is not None and value > maximum_s):
        lo = "" if minimum_s is None else f"from {fmt_bound(minimum_s)} s "
        hi = "" if maximum_s is None else f"up to {fmt_bound(maximum_s)} s"
        raise InputError(field, text, f"a duration {lo}{hi}".strip())
    return value
