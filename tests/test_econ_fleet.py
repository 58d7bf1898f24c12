"""Fleets, the train schedule and the discrete-event simulation, checked against closed forms."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rackmath as rm
from rackmath.analyses.economics import fleet
from rackmath.analyses.serving import pooled
from rackmath.core import requests as rq
from rackmath.core import simulation as sim
from rackmath.errors import InputError
from rackmath.specs.workload import Requests


@cache
def lecture() -> fleet.Fleet:
    return fleet.fleet(loads=(0.3, 0.9), requests=3000)


def test_the_lectures_fleet() -> None:
    f = lecture()
    # D10: 2,000 sequences / 15.625 ms = 128,000 tokens/s per replica
    assert f.tokens_per_s_per_replica == pytest.approx(128_000)
    # 500M tokens/s -> ceil(3,906.25) = 3,907 replicas of 72 chips
    assert f.replicas == 3907
    assert f.chips == 3907 * 72
    assert f.usd_per_day == pytest.approx(3907 * 72 * 4.54 * 24)
    assert f.usd_per_million_tokens == pytest.approx(f.usd_per_day / (500e6 * 86400) * 1e6)


def test_more_traffic_never_needs_fewer_replicas() -> None:
    counts = [
        fleet.fleet(traffic_tokens_per_s=t, loads=(0.5,), requests=200).replicas
        for t in (1e6, 1.28e8, 1.29e8, 5e8)
    ]
    assert counts == sorted(counts)
    assert counts[1] == 1000 and counts[2] == 1008


def test_train_schedule_simulation_matches_its_closed_forms() -> None:
    # D8 at the lecture's 20 ms: worst 40 ms, mean 30 ms
    arrivals = sim.poisson_arrivals_s(2000.0, 5.0, seed=3)
    lat = sim.simulate_train_schedule(arrival_s=arrivals, interval_s=0.020, run_s=0.020, max_batch=10_000)
    assert lat.max() <= 0.040 + 1e-12
    assert lat.max() == pytest.approx(0.040, abs=0.001)
    assert lat.mean() == pytest.approx(0.030, rel=0.02)
    assert lat.min() >= 0.020


def test_full_trains_make_requests_wait_for_the_next_one() -> None:
    arrivals = np.array([0.001, 0.002, 0.003])
    lat = sim.simulate_train_schedule(arrival_s=arrivals, interval_s=0.01, run_s=0.01, max_batch=2)
    # two leave at 10 ms, the third at 20 ms
    assert lat == pytest.approx([0.019, 0.018, 0.027])


def test_continuous_batching_with_a_constant_step_is_the_train() -> None:
    f = lecture()
    step = f.step_s
    for p in f.loads:
        # a request waits for the running step (< T) then runs one (T): TTFT in [T, 2T]
        assert step <= p.ttft_p50_s <= 2 * step
        assert p.ttft_p99_s <= 2 * step + 1e-12
        assert p.tpot_p50_s == pytest.approx(step)
        assert p.completed_frac == 1.0
        # Little's law: running sequences = arrival rate x time in service (out x T)
        assert p.mean_batch == pytest.approx(p.arrival_rate_per_s * f.output_tokens * step, rel=0.05)
        assert p.tokens_per_s == pytest.approx(p.arrival_rate_per_s * f.output_tokens, rel=0.05)


def _batch_run(arrivals, steps, out: int, prefill_s: float = 0.0, cutoff_s: float = np.inf) -> rq.RequestRun:
    """fleet's replica: the request simulator with batch-only step times (core.requests)."""
    a = np.asarray(arrivals, float)
    reqs = Requests(a, np.ones(a.size, np.int64), np.full(a.size, out, np.int64))
    table = rq.BatchStepTable(steps, prompt_tokens=1, prefill_s=prefill_s)
    return rq.simulate(reqs, table, table.limits(), cutoff_s=cutoff_s)


def test_light_load_on_an_idle_server() -> None:
    # one request into an idle server: first token after prefill + one step
    run = _batch_run([1.0], [0.01, 0.02], 5, prefill_s=0.05)
    assert run.ttft_s[0] == pytest.approx(0.06)
    assert run.tpot_s[0] == pytest.approx(0.01)
    assert run.finish_s[0] == pytest.approx(1.0 + 0.06 + 4 * 0.01)


def test_two_joiners_pay_the_batch_step_and_two_prefills() -> None:
    # t = [10, 12] ms, prefill 3 ms: A at 0 runs alone (13 ms); B arrives at 5 ms and joins at
    # 13 ms beside A's decode token: t(2) + 1 prefill = 15 ms -> B's first token at 28 ms;
    # both decode at t(2) = 12 ms: A's third token at 40 ms; B's third alone at t(1): 50 ms
    run = _batch_run([0.0, 0.005], [0.010, 0.012], 3, prefill_s=0.003)
    assert run.first_token_s == pytest.approx([0.013, 0.028])
    assert run.finish_s == pytest.approx([0.040, 0.050])
    # busy the whole time, 1 sequence for 13 ms then 2 for 27 ms, then B alone for 12 ms
    assert run.seq_time_s == pytest.approx(1 * 0.013 + 2 * 0.015 + 2 * 0.012 + 1 * 0.010)


def test_overload_leaves_requests_behind() -> None:
    steps = np.full(16, 0.01)
    arrivals = sim.poisson_arrivals_s(rate_per_s=2 * 16 / (10 * 0.01), horizon_s=5.0, seed=1)
    run = _batch_run(arrivals, steps, 10, cutoff_s=6.0)
    assert run.completed_frac < 0.7
    assert np.nanmax(run.ttft_s) > 1.0  # the queue grows


def test_a_vanishing_step_is_refused_and_latencies_stay_physical() -> None:
    # fuzz: `fleet --step 1e-30` printed mean_latency_s = -2e-13
    with pytest.raises(InputError, match="at least 1 us"):
        fleet.fleet(step_s=1e-30, requests=100)
    f = fleet.fleet(step_s=fleet.MIN_STEP_S, requests=200, loads=(0.5,))
    assert f.train.mean_latency_s >= f.train.run_s and f.train.worst_latency_s >= f.train.run_s
    assert f.train.mean_latency_s == pytest.approx(1.5e-6, rel=0.01)  # T/2 + run


def test_a_batch_that_does_not_fit_is_refused() -> None:
    d = rm.deployment("llama-3.1-70b", "h100-hgx")
    with pytest.raises(InputError, match="fit in memory"):
        fleet.fleet(deployment=d, batch=2000, context=4096, requests=100)


def test_roofline_step_times_drive_the_simulation() -> None:
    d = rm.deployment("llama-3.1-8b", "h100-hgx", chips=1)
    f = fleet.fleet(deployment=d, batch=64, context=2048, output_tokens=64, loads=(0.5,), requests=1500)
    steps = d.decode(np.arange(1, 65), [2048]).step_s[:, 0]
    assert f.step_s == pytest.approx(steps[-1])
    assert f.tokens_per_s_per_replica == pytest.approx(64 / steps[-1])
    p = f.loads[0]
    # per-token time lies between the step at batch 1 and at the full batch
    assert steps[0] <= p.tpot_p50_s <= steps[-1]
    assert f.chips_per_replica == 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"traffic_tokens_per_s": -1.0}, "traffic"),
        ({"batch": 0}, "batch"),
        ({"step_s": 0.0}, "step"),
        ({"output_tokens": 0}, "output"),
        ({"loads": (0.0,)}, "load"),
        ({"requests": 0}, "requests"),
        ({"seed": -1}, "seed"),
        ({"chips_per_replica": 0}, "chips per replica"),
        ({"usd_per_chip_hour": 0.0}, "price"),
    ],
)
def test_bad_fleet_inputs(kwargs, match) -> None:
    with pytest.raises(InputError, match=match):
        fleet.fleet(**{"requests": 100, **kwargs})


def test_zero_overrides_are_refused_with_a_deployment_too() -> None:
    # 0 chips or $0 must not silently fall back to the deployment's own values
    dep = pooled.make_deployment(rm.model("llama-3.1-8b"), rm.system("h100-hgx"), chips=1)
    zeros = (({"chips_per_replica": 0}, "chips per replica"), ({"usd_per_chip_hour": 0.0}, "price"))
    for kwargs, match in zeros:
        with pytest.raises(InputError, match=match):
            fleet.fleet(deployment=dep, batch=8, loads=(0.5,), requests=100, **kwargs)


def test_a_trickle_of_traffic_still_needs_one_replica() -> None:
    # 1 token/s (the least a fleet is sized for) over 128,000 per replica: one replica serves it
    f = fleet.fleet(traffic_tokens_per_s=1.0, loads=(0.5,), requests=100)
    assert f.replicas == 1 and f.chips == 72
    assert f.usd_per_million_tokens == pytest.approx(72 * 4.54 / 3600 / 1.0 * 1e6)


@pytest.mark.parametrize("traffic", [1e-30, 1e-9, 0.999, float("nan")])
def test_less_than_one_token_per_second_is_refused(traffic: float) -> None:
    """Below 1 token/s a fleet is one idle replica: 1e-30 tokens/s used to price a million
    tokens at $6e32. The rule is the analysis layer's, so fleet, plan and sweep share it."""
    with pytest.raises(InputError) as err:
        fleet.fleet(traffic_tokens_per_s=traffic, loads=(0.5,), requests=100)
    assert "at least 1 output token/s" in str(err.value)
    assert fleet.check_traffic(1.0) == 1.0


def _trains_by_hand(arrivals: np.ndarray, interval_s: float, max_batch: int) -> np.ndarray:
    """Departure train of each request, seat by seat: the oracle for the vectorized recurrence."""
    trains, seats = [], {}
    for a in arrivals:
        # the first train whose departure, k * interval as computed, is not before the arrival
        # (an arrival one ulp after a departure, from summing the gaps, misses that train)
        k = max(1, int(np.ceil(a / interval_s)))
        while k > 1 and (k - 1) * interval_s >= a:
            k -= 1
        while k * interval_s < a:
            k += 1
        k = max(k, trains[-1] if trains else 1)
        while seats.get(k, 0) >= max_batch:
            k += 1
        seats[k] = seats.get(k, 0) + 1
        trains.append(k)
    return np.asarray(trains, float)


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.floats(1e-4, 3.0), min_size=1, max_size=200),
    interval=st.floats(0.01, 2.0),
    seats=st.integers(1, 12),
)
def test_train_schedule_matches_seat_by_seat_boarding(gaps: list[float], interval: float, seats: int) -> None:
    arrivals = np.cumsum(gaps)
    lat = sim.simulate_train_schedule(arrival_s=arrivals, interval_s=interval, run_s=0.5, max_batch=seats)
    expected = _trains_by_hand(arrivals, interval, seats) * interval + 0.5 - arrivals
    np.testing.assert_allclose(lat, expected, rtol=1e-9, atol=1e-9)


def test_train_schedule_boundaries_and_full_trains_by_hand() -> None:
    """Trains every 1 s, 2 seats: arrivals at 0.5, 0.6, 0.7 -> trains 1, 1, 2; an arrival
    exactly at 3.0 takes the train leaving at 3.0; run 0: latencies 0.5, 0.4, 1.3, 0."""
    lat = sim.simulate_train_schedule(arrival_s=[0.5, 0.6, 0.7, 3.0], interval_s=1.0, run_s=0.0, max_batch=2)
    np.testing.assert_allclose(lat, [0.5, 0.4, 1.3, 0.0], atol=1e-12)


def test_train_schedule_of_millions_of_arrivals_is_one_vectorized_pass() -> None:
    """The fuzz found a fleet whose trains departed 10^7 times; the recurrence has no loop over
    trains, so 2M arrivals over 10^6 s of trains every 0.01 s finish at once (not timed: the
    answer's shape and bound are checked)."""
    arrivals = np.sort(np.random.default_rng(0).uniform(0, 1e6, 2_000_000))
    lat = sim.simulate_train_schedule(arrival_s=arrivals, interval_s=0.01, run_s=0.0, max_batch=4)
    assert lat.shape == arrivals.shape and float(lat.min()) >= 0.0
