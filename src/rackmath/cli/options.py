"""Parsing helpers shared by the commands: comma lists, positive numbers, output."""

from __future__ import annotations

import math
from typing import Any

from rackmath import fmt
from rackmath.errors import InputError
from rackmath.specs.lists import number_list as number_list


def positive(value: float | None, field: str) -> float | None:
    if value is None:
        return None
    if not math.isfinite(value) or value <= 0:
        raise InputError(field, value, "a positive, finite number")
    return value


def dump_json(payload: Any) -> str:
    return fmt.to_json(payload)
