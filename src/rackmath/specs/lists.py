"""Comma-separated number lists typed by a user (the CLI's options, the web's text boxes)."""

from __future__ import annotations

import math

from rackmath.errors import InputError


def number_list(text: str, field: str, *, integer: bool = False, minimum: float = 1) -> list[float]:
    """``"1,64,2048"`` -> ``[1.0, 64.0, 2048.0]``; accepts ``4k`` / ``1M`` suffixes."""
    values: list[float] = []
    for part in text.split(","):
        token = part.strip().lower()
        scale = 1.0
        if token.endswith("k"):
            token, scale = token[:-1], 1e3
        elif token.endswith("m"):
            token, scale = token[:-1], 1e6
        try:
            value = float(token) * scale
        except ValueError:
            raise InputError(field, part.strip(), "comma-separated numbers, e.g. 1,64,2048") from None
        if not math.isfinite(value) or value < minimum:
            raise InputError(field, part.strip(), f"numbers >= {minimum:g}")
        if integer and value != int(value):
            raise InputError(field, part.strip(), "whole numbers")
        values.append(value)
    if not values:
        raise InputError(field, text, "at least one number")
    return values
