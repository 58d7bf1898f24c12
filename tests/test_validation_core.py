"""The plain-number helpers of the reality check (rackmath.core.reality)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rackmath.core import reality


def test_decode_contexts_follow_the_generation() -> None:
    # prompt of 5, 4 tokens out: the first comes with the prefill, then contexts 6, 7, 8
    assert reality.decode_contexts(5, 4).tolist() == [6.0, 7.0, 8.0]
    assert reality.decode_contexts(5, 1).size == 0


def test_static_batch_throughput_by_hand() -> None:
    # 64 sequences x 128 tokens over 0.5 s of prefill and 3.5 s of decode = 2,048 tokens/s
    assert float(reality.static_batch_output_tokens_per_s(64, 128, 0.5, 3.5)) == pytest.approx(2048.0)


def test_kv_fraction_of_free_memory() -> None:
    # 80 GB, 70 GB of weights, 0.9 of the free 10 GB -> 1 GB reserved = 1/80 of HBM
    r = reality.reserve_frac_for_kv_fraction(80e9, 70e9, 0.9, of_free=True)
    assert float(r) == pytest.approx(1 / 80)
    assert float(reality.reserve_frac_for_kv_fraction(80e9, 70e9, 0.9, of_free=False)) == pytest.approx(0.1)


def test_error_quantiles() -> None:
    med, p90 = reality.abs_error_quantiles([0.1, -0.2, 0.3, -0.4, 0.5])
    assert med == pytest.approx(0.3)
    assert p90 == pytest.approx(0.46)


@given(flat=st.floats(1e-3, 1.0), true_knee=st.floats(4.0, 2000.0))
def test_knee_of_a_max_curve_is_flat_over_slope(flat: float, true_knee: float) -> None:
    slope = flat / true_knee
    batches = np.geomspace(1, true_knee * 64, 12)
    steps = np.maximum(flat, slope * batches)
    assert reality.knee_batch(batches, steps) == pytest.approx(true_knee, rel=0.05)


def test_coordinate_search_finds_the_grid_minimum() -> None:
    grids = {"a": tuple(np.linspace(0, 2, 21)), "b": tuple(np.linspace(-1, 1, 21))}
    best = reality.coordinate_search(
        lambda p: (p["a"] - 1.3) ** 2 + (p["b"] + 0.4) ** 2, {"a": 0.0, "b": 0.0}, grids
    )
    assert best == pytest.approx({"a": 1.3, "b": -0.4})
