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


def test_diagonal_moves_leave_a_valley_one_axis_at_a_time_cannot() -> None:
    """A valley along a + b = 1 with its floor at a = 0.8: one parameter at a time, from
    (0.5, 0.5), neither move alone lowers the objective (it climbs the valley's wall); the
    diagonal steps walk down it to the grid minimum."""
    grids = {"a": tuple(np.round(np.linspace(0, 1, 11), 1)), "b": tuple(np.round(np.linspace(0, 1, 11), 1))}

    def valley(p: dict[str, float]) -> float:
        return 100 * (p["a"] + p["b"] - 1.0) ** 2 + (p["a"] - 0.8) ** 2

    start = {"a": 0.5, "b": 0.5}
    assert reality.coordinate_search(valley, start, grids) == start
    best = reality.coordinate_search(valley, start, grids, sweeps=10, diagonal=True)
    assert best == pytest.approx({"a": 0.8, "b": 0.2})


def test_dequantization_costs_byte_equivalents_per_weight() -> None:
    # kappa = 0.25 byte-equivalents: int8 keeps 1 / 1.25 = 0.8, int4 keeps 0.5 / 0.75 = 2/3
    assert float(reality.dequant_weight_bandwidth_frac(1.0, 0.25)) == pytest.approx(0.8)
    assert float(reality.dequant_weight_bandwidth_frac(0.5, 0.25)) == pytest.approx(2 / 3)
    assert float(reality.dequant_weight_bandwidth_frac(0.5, 0.0)) == 1.0  # the pure roofline


@given(kappa=st.floats(1e-3, 2.0))
def test_int4_gains_less_than_twice_over_int8_when_dequantization_costs(kappa: float) -> None:
    """Weight-read time ~ b / frac(b) = b + kappa: halving the stored bytes never halves it."""
    t8 = 1.0 / float(reality.dequant_weight_bandwidth_frac(1.0, kappa))
    t4 = 0.5 / float(reality.dequant_weight_bandwidth_frac(0.5, kappa))
    assert 1.0 < t8 / t4 < 2.0
    assert t8 == pytest.approx(1.0 + kappa) and t4 == pytest.approx(0.5 + kappa)


def test_weight_and_kv_bandwidth_fractions_scale_only_their_reads() -> None:
    from rackmath.core import roofline as rl

    eff = rl.Efficiency(bandwidth_frac=0.5, weight_bandwidth_frac=0.8, kv_bandwidth_frac=0.25)
    t = rl.step_times(
        flops=0.0,
        weight_bytes=4e9,
        kv_bytes=1e9,
        peak_flops_per_s=1e15,
        bandwidth_bytes_per_s=1e12,
        efficiency=eff,
    )
    assert float(t.weight_fetch_s) == pytest.approx(4e9 / (1e12 * 0.5 * 0.8))
    assert float(t.kv_fetch_s) == pytest.approx(1e9 / (1e12 * 0.5 * 0.25))
    with pytest.raises(Exception, match="kv_bandwidth_frac"):
        rl.Efficiency(kv_bandwidth_frac=0.0)
