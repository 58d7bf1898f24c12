"""specs/checks.py: the one copy of the small number checks, with the messages callers show."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rackmath.errors import InputError
from rackmath.specs import checks


def _message(call) -> str:
    with pytest.raises(InputError) as info:
        call()
    return str(info.value)


def test_whole_takes_ints_and_numpy_ints_and_refuses_the_rest() -> None:
    assert checks.whole("stages", 4) == 4
    assert checks.whole("stages", np.int64(4)) == 4 and type(checks.whole("stages", np.int64(4))) is int
    assert checks.whole("seed", 0, minimum=0) == 0
    for bad in (True, 4.0, 0, -3, "4", None):
        assert (
            _message(lambda b=bad: checks.whole("stages", b))
            == f"stages: got {bad!r}; allowed: a whole number >= 1"
        )
    assert _message(lambda: checks.whole("mtp", 9, minimum=0, maximum=8)) == (
        "mtp: got 9; allowed: a whole number from 0 to 8"
    )
    assert _message(lambda: checks.whole("requests", 0, maximum=1_000_000)) == (
        "requests: got 0; allowed: a whole number from 1 to 1,000,000"
    )
    assert _message(lambda: checks.whole("chips", 0, allowed="1 to 8 (the domain)")) == (
        "chips: got 0; allowed: 1 to 8 (the domain)"
    )


def test_whole_valued_takes_integral_floats() -> None:
    assert checks.whole_valued("batch", 4.0) == 4
    assert checks.whole_valued("batch", np.float32(4.0)) == 4
    for bad in (4.5, math.nan, math.inf, True, "4", 0.0):
        assert _message(lambda b=bad: checks.whole_valued("batch", b)).startswith(
            f"batch: got {bad!r}; allowed:"
        )


def test_positive_refuses_zero_nan_infinity_bools_and_text() -> None:
    assert checks.positive("price", 2.5) == 2.5
    assert checks.positive("price", np.float64(2.5)) == 2.5
    for bad in (0, -1.0, math.nan, math.inf, True, "2.5", None):
        assert _message(lambda b=bad: checks.positive("price", b)) == (
            f"price: got {bad!r}; allowed: a positive, finite number"
        )
    # the text a user typed, when the value was parsed from it
    assert _message(
        lambda: checks.positive("--rate", 0.0, allowed="requests per second > 0", given="0/s")
    ) == ("--rate: got '0/s'; allowed: requests per second > 0")


def test_at_least_and_between() -> None:
    assert checks.at_least("batch", 1, 1) == 1.0
    assert _message(lambda: checks.at_least("batch", 0.5, 1)) == "batch: got 0.5; allowed: a number >= 1"
    assert _message(lambda: checks.at_least("batch", math.inf, 1)) == "batch: got inf; allowed: a number >= 1"
    assert checks.between("skew", 64.0, 1.0, 64.0) == 64.0
    assert (
        _message(lambda: checks.between("skew", 64.5, 1.0, 64.0))
        == "skew: got 64.5; allowed: a number in [1, 64]"
    )
    assert _message(lambda: checks.between("load", 0.0, 0.0, 2.0, low_open=True)) == (
        "load: got 0.0; allowed: a number in (0, 2]"
    )


@pytest.mark.parametrize(
    ("zero", "one", "inside", "outside", "allowed"),
    [
        (True, True, (0.0, 1.0), (-0.1, 1.1), "a fraction in [0, 1]"),
        (False, True, (1e-9, 1.0), (0.0, 1.1), "a fraction in (0, 1]"),
        (True, False, (0.0, 0.999), (1.0, -0.1), "a fraction in [0, 1)"),
    ],
)
def test_fraction_ends(zero: bool, one: bool, inside: tuple, outside: tuple, allowed: str) -> None:
    for x in inside:
        assert checks.fraction("f", x, zero=zero, one=one) == x
    for x in (*outside, math.nan, True):
        assert (
            _message(lambda v=x: checks.fraction("f", v, zero=zero, one=one))
            == f"f: got {x!r}; allowed: {allowed}"
        )
