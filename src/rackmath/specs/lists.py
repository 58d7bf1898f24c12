"""Comma-separated number lists typed by a user (the CLI's options, the web's text boxes)."""

from __future__ import annotations

from rackmath.numbers import parse_list

#: Values in one comma list, at most (a bound on the work a list can ask for).
MAX_LIST = 64


def number_list(
    text: str,
    field: str,
    *,
    integer: bool = False,
    minimum: float = 1,
    maximum: float | None = None,
    most: int = MAX_LIST,
) -> list[float]:
    """``"1,64,2k"`` -> ``[1.0, 64.0, 2000.0]``: the number grammar of :mod:`rackmath.numbers`
    (``4k``, ``1M``, ``2.5G``) per item, each within ``[minimum, maximum]``."""
    return parse_list(text, field, minimum=minimum, maximum=maximum, integer=integer, most=most)
