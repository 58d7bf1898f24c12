"""core.economics: the lecture's economic algebra, recomputed independently, plus invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rackmath.core import economics as econ

pos = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)


def test_output_over_input_implies_decode_utilization() -> None:
    # D34: output 5x input -> decode at ~1/5 of prefill's utilization
    assert econ.implied_decode_utilization(5.0) == pytest.approx(0.2)
    assert econ.implied_decode_utilization(3.0, 0.6) == pytest.approx(0.2)


def test_long_context_crossover_and_its_inverse() -> None:
    # D31: 100B active, r = 300, a 200K boundary -> 1e11 / (300 * 2e5) = 1,666.7 bytes per token
    assert econ.kv_bytes_per_token_at_crossover(100e9, 300, 200_000) == pytest.approx(1e11 / 6e7)
    assert econ.crossover_context_tokens(100e9, 300, 1e11 / 6e7) == pytest.approx(200_000)
    # D32's check: 2 * 128 * 8 = 2,048 B/token puts the kink at 100e9 / (300 * 2048) = 162,760 tokens
    assert econ.crossover_context_tokens(100e9, 300, 2048) == pytest.approx(162_760.4, rel=1e-5)


@given(n=pos, r=pos, kv=pos)
def test_crossover_is_where_kv_time_equals_compute_time(n: float, r: float, kv: float) -> None:
    # With F = 2 r BW (1 byte/weight): compute 2N/F must equal len* kv / BW
    bw = 1.0
    f = 2 * r * bw
    length = float(econ.crossover_context_tokens(n, r, kv))
    assert 2 * n / f == pytest.approx(length * kv / bw, rel=1e-9)


@given(nbytes=pos, usd_s=pos, cap=pos, bw=pos)
def test_fetching_costs_one_drain_time_of_holding(nbytes: float, usd_s: float, cap: float, bw: float) -> None:
    fetch = econ.fetch_cost_usd(nbytes, usd_s, bw)
    hold = econ.hold_cost_usd(nbytes, usd_s, cap, econ.drain_time_s(cap, bw))
    assert fetch == pytest.approx(hold, rel=1e-9)


def test_amortization_spreads_the_price() -> None:
    # $13.8/GB x 64 GB over 3 years
    got = econ.amortized_usd_per_s(13.8e-9, 64e9, 3 * 365 * 86400)
    assert got == pytest.approx(13.8 * 64 / (3 * 365 * 86400))


tier = st.tuples(
    st.floats(min_value=1e-12, max_value=1e-3),  # hold $/s
    st.floats(min_value=1e-12, max_value=1e-3),  # fetch $
)


@given(fast=tier, slow=tier, t1=st.floats(0.001, 1e6), t2=st.floats(0.001, 1e6))
def test_longer_retention_never_makes_a_slower_tier_relatively_worse(fast, slow, t1, t2) -> None:
    (h_f, f_f), (h_s, f_s) = fast, slow
    # a slower tier: cheaper to hold, dearer to fetch
    h_s, f_s = min(h_s, h_f), max(f_s, f_f)
    lo, hi = sorted((t1, t2))

    def ratio(t: float) -> float:
        return (h_s * t + f_s) / (h_f * t + f_f)

    assert ratio(hi) <= ratio(lo) * (1 + 1e-12)


def test_retention_crossover() -> None:
    # fast: 1e-6 $/s hold, 1e-9 fetch; slow: 1e-9 $/s hold, 1e-6 fetch -> T* = (1e-6-1e-9)/(1e-6-1e-9) = 1 s
    assert econ.retention_crossover_s(1e-6, 1e-9, 1e-9, 1e-6) == pytest.approx(1.0)
    assert np.isnan(econ.retention_crossover_s(1e-9, 1e-9, 1e-6, 1e-6))  # slow tier never wins


def test_fast_mode_reproduces_six_times_the_price_for_two_and_a_half_times_the_speed() -> None:
    # D12: normal B = 2.5 B*, latency 2.5 t_w; fast B* / 6 at the floor t_w
    b_star, t_w = 2400.0, 0.02
    speed, price = econ.fast_mode_ideal(2.5 * b_star, b_star / 6, b_star, t_w)
    assert speed == pytest.approx(2.5)
    assert price == pytest.approx(6.0)
    assert econ.ideal_step_s(2.5 * b_star, b_star, t_w) == pytest.approx(2.5 * t_w)


@given(k=st.floats(1.0, 10.0), frac=st.floats(1e-4, 1.0))
def test_no_price_buys_speed_beyond_the_floor(k: float, frac: float) -> None:
    speed, price = econ.fast_mode_ideal(k, frac, 1.0)
    assert speed <= k * (1 + 1e-12)
    assert price >= 1 - 1e-12


def test_one_replica_and_a_fleet() -> None:
    # D10: 2,000 sequences at 64 steps/s -> 128,000 tokens/s; at 15.6 ms ~ 128K
    assert econ.replica_tokens_per_s(2000, 1 / 64) == pytest.approx(128_000)
    assert econ.replica_tokens_per_s(2000, 0.0156) == pytest.approx(128_000, rel=3e-3)
    assert econ.replicas_needed(500e6, 128_000) == math.ceil(500e6 / 128_000) == 3907
    assert econ.replicas_needed(384_000, 128_000) == 3  # exact multiple: no spurious extra replica
    assert econ.usd_per_day(72, 4.54) == pytest.approx(72 * 4.54 * 24)
    assert econ.usd_per_s(72, 4.54) == pytest.approx(72 * 4.54 / 3600)
    # any positive traffic needs a whole replica; none needs none
    assert econ.replicas_needed(1e-9, 128_000) == 1
    assert econ.replicas_needed(0.0, 128_000) == 0
    assert econ.replicas_needed(128_001, 128_000) == 2


@given(a=st.floats(1.0, 1e12), b=st.floats(1.0, 1e12), per=st.floats(1.0, 1e7))
def test_more_traffic_never_needs_fewer_replicas(a: float, b: float, per: float) -> None:
    lo, hi = sorted((a, b))
    assert econ.replicas_needed(hi, per) >= econ.replicas_needed(lo, per)


def test_train_schedule_closed_forms() -> None:
    # D8: departs every 20 ms, runs 20 ms: worst 40 ms, mean 30 ms
    assert econ.train_worst_latency_s(0.020, 0.020) == pytest.approx(0.040)
    assert econ.train_mean_latency_s(0.020, 0.020) == pytest.approx(0.030)
    assert econ.batch_fill_time_s(2000, 500.0) == pytest.approx(4.0)
