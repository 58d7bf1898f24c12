"""One copy of the small checks made of a number a caller gives: a whole number, a positive
finite number, a number at least some floor, a fraction, a number in a range.

Each returns the value as the caller goes on to use it (``int`` or ``float``) and otherwise
raises :class:`~rackmath.errors.InputError` ``(field, given, allowed)``: the one-line message
names the field, repeats what was given and says what is allowed. ``allowed`` defaults to the
usual wording (``"a whole number >= 1"``); a caller whose message says more passes its own.
``True`` and ``False`` are never numbers here, and neither is NaN.

Text is parsed elsewhere (:mod:`rackmath.numbers`: ``"4k"``, ``"250ms"``); these check values.
NumPy scalars pass as the numbers they are (the standard ``numbers`` ABCs; this module imports no
NumPy, so ``rackmath --help`` stays light).
"""

from __future__ import annotations

import math
from numbers import Integral, Real

from rackmath.errors import InputError


def _real(value: object) -> float | None:
    """``value`` as a float when it is a real number (bool, text and None are not), else None."""
    if type(value) is float:  # the usual case, without the abstract-class check
        return value
    if isinstance(value, bool) or not isinstance(value, Real):
        return None
    return float(value)


def _whole_text(minimum: int | None, maximum: int | None) -> str:
    if maximum is None:
        return f"a whole number >= {minimum}"
    return f"a whole number from {minimum} to {maximum:,}"


def whole(
    field: str, value: object, *, minimum: int = 1, maximum: int | None = None, allowed: str | None = None
) -> int:
    """An ``int`` (or NumPy integer) from ``minimum`` to ``maximum``: ``whole("stages", 4) == 4``;
    ``4.0`` is refused (a count given as a float is a mistake upstream)."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise InputError(field, value, allowed or _whole_text(minimum, maximum))
    n = int(value)
    if n < minimum or (maximum is not None and n > maximum):
        raise InputError(field, value, allowed or _whole_text(minimum, maximum))
    return n


def whole_valued(
    field: str, value: object, *, minimum: int = 1, maximum: int | None = None, allowed: str | None = None
) -> int:
    """A real number whose value is whole, from ``minimum`` to ``maximum``: ``4`` and ``4.0``
    alike (``whole_valued("batch", 4.0) == 4``); ``4.5``, NaN and infinity are refused."""
    x = _real(value)
    if x is None or not math.isfinite(x) or x != int(x):
        raise InputError(field, value, allowed or _whole_text(minimum, maximum))
    if x < minimum or (maximum is not None and x > maximum):
        raise InputError(field, value, allowed or _whole_text(minimum, maximum))
    return int(x)


def positive(
    field: str, value: object, *, allowed: str = "a positive, finite number", given: object = None
) -> float:
    """A finite number above zero: ``positive("price", 2.5) == 2.5`` (``given``: as in
    :func:`between`)."""
    x = _real(value)
    if x is None or not math.isfinite(x) or x <= 0:
        raise InputError(field, value if given is None else given, allowed)
    return x


def at_least(field: str, value: object, minimum: float, *, allowed: str | None = None) -> float:
    """A finite number ``>= minimum``: ``at_least("price multiple", 1.5, 1.0) == 1.5``."""
    x = _real(value)
    if x is None or not math.isfinite(x) or x < minimum:
        raise InputError(field, value, allowed or f"a number >= {minimum:g}")
    return x


def between(
    field: str,
    value: object,
    low: float,
    high: float,
    *,
    allowed: str | None = None,
    low_open: bool = False,
    high_open: bool = False,
    given: object = None,
) -> float:
    """A finite number from ``low`` to ``high`` (either end excluded when ``*_open``):
    ``between("skew", 1.3, 1.0, 64.0) == 1.3``. ``given``: what the message shows when the
    value was parsed from it (the text a user typed)."""
    x = _real(value)
    inside = (
        x is not None
        and math.isfinite(x)
        and (low < x if low_open else low <= x)
        and (x < high if high_open else x <= high)
    )
    if not inside:
        lo, hi = "(" if low_open else "[", ")" if high_open else "]"
        shown = value if given is None else given
        raise InputError(field, shown, allowed or f"a number in {lo}{low:g}, {high:g}{hi}")
    assert x is not None
    return x


def fraction(
    field: str,
    value: object,
    *,
    allowed: str | None = None,
    zero: bool = True,
    one: bool = True,
    given: object = None,
) -> float:
    """A share from 0 to 1 (``zero=False``: above 0; ``one=False``: below 1):
    ``fraction("hit rate", 0.25) == 0.25``."""
    text = allowed or _FRACTION_TEXT[zero, one]
    return between(field, value, 0.0, 1.0, allowed=text, low_open=not zero, high_open=not one, given=given)


#: What :func:`fraction` asks for, by whether 0 and 1 are allowed (formed once: a step checks its
#: overlap fraction on every call)
_FRACTION_TEXT = {
    (zero, one): f"a fraction in {'[' if zero else '('}0, 1{']' if one else ')'}"
    for zero in (True, False)
    for one in (True, False)
}
