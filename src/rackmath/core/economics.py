"""Economics on plain numbers: what prices reveal, prompt-cache tiers, fast modes, fleets.

Pure and vectorized like :mod:`rackmath.core.roofline` (SI units in, SI units out: bytes,
seconds, FLOP, USD). Roofline quantities (step time, balance batch, latency floor, cost per
token of a real model) come from :mod:`rackmath.core.roofline` and
:mod:`rackmath.analyses.serving.pooled`; this module adds only the economic algebra on top.
The lecture (Pope 2026) derivations each function reproduces are named D<n> as in
``lecture-derivations.md``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import roofline as rl
from rackmath.units import SECONDS_PER_DAY, SECONDS_PER_HOUR

FloatArray = NDArray[np.float64]


# --------------------------------------------------------------------------- prices (D30-D34)
def implied_decode_utilization(
    output_over_input: ArrayLike, prefill_utilization: ArrayLike = 1.0
) -> FloatArray:
    """D34: if prices track cost, decode runs at ``u_prefill / (output price / input price)``.

    Prefill is compute-bound (its weight fetch is amortised over the whole prompt), so it
    runs near peak; a token of output priced ``r`` times a token of input says decode gets
    about ``1/r`` of prefill's FLOP utilization. Output/input = 5 -> decode MFU ~ 20%.
    """
    return np.asarray(prefill_utilization, float) / np.asarray(output_over_input, float)


def crossover_context_tokens(
    params_active: ArrayLike,
    balance_ratio: ArrayLike,
    kv_bytes_per_token: ArrayLike,
    bytes_per_weight: ArrayLike = 1.0,
) -> FloatArray:
    """D31: the context at which a decode token's KV fetch time equals its compute time.

    Per generated token: compute ``2 N_active / F``; KV read ``len * kv_bytes / BW``. Equal at
    ``len* = 2 N_active BW / (F kv_bytes) = N_active * bytes_per_weight / (r * kv_bytes)``
    with ``r = F * bytes_per_weight / (2 BW)``, the dense balance batch (the lecture's ~300,
    :func:`rackmath.core.roofline.dense_balance_batch`). Beyond ``len*`` cost per token
    grows linearly with context: the kink a long-context price tier should sit above.
    100e9 active, r = 300, 1,667 B/token -> 200,000 tokens.
    """
    return (
        np.asarray(params_active, float)
        * np.asarray(bytes_per_weight, float)
        / (np.asarray(balance_ratio, float) * np.asarray(kv_bytes_per_token, float))
    )


def kv_bytes_per_token_at_crossover(
    params_active: ArrayLike,
    balance_ratio: ArrayLike,
    context_tokens: ArrayLike,
    bytes_per_weight: ArrayLike = 1.0,
) -> FloatArray:
    """D31 inverted: the KV bytes per token a tier boundary at ``context_tokens`` implies.

    ``kv = N_active * bytes_per_weight / (r * len*)``: 100e9 / (300 * 200,000) = 1,667 bytes.
    """
    return crossover_context_tokens(params_active, balance_ratio, context_tokens, bytes_per_weight)


# --------------------------------------------------------------------------- prompt caches (D35, D36)
def amortized_usd_per_s(
    usd_per_byte: ArrayLike, capacity_bytes: ArrayLike, amortization_s: ArrayLike
) -> FloatArray:
    """A device's cost per second of ownership: purchase price spread evenly over its life.

    ``usd_per_byte * capacity / amortization_s`` (straight-line; no power, space or resale).
    """
    return (
        np.asarray(usd_per_byte, float)
        * np.asarray(capacity_bytes, float)
        / np.asarray(amortization_s, float)
    )


def hold_cost_usd(
    nbytes: ArrayLike, device_usd_per_s: ArrayLike, capacity_bytes: ArrayLike, hold_s: ArrayLike
) -> FloatArray:
    """D35: cost of occupying ``nbytes`` of a device for ``hold_s``: its share of the device's time.

    ``nbytes / capacity * device_usd_per_s * hold_s``. For HBM the device cost is the GPU's
    rental (KV held in HBM displaces batch), for DDR/flash/disk an amortised purchase price.
    """
    return (
        np.asarray(nbytes, float)
        / np.asarray(capacity_bytes, float)
        * np.asarray(device_usd_per_s, float)
        * np.asarray(hold_s, float)
    )


def fetch_cost_usd(
    nbytes: ArrayLike, device_usd_per_s: ArrayLike, bandwidth_bytes_per_s: ArrayLike
) -> FloatArray:
    """D35: cost of reading ``nbytes`` back: the device's time spent streaming them.

    ``nbytes / bandwidth * device_usd_per_s``. Since ``hold(T) = nbytes/capacity * $/s * T``,
    fetching costs exactly as much as holding for one drain time (capacity / bandwidth):
    the reason a tier suits retentions near its drain time (D36).
    """
    return (
        np.asarray(nbytes, float)
        / np.asarray(bandwidth_bytes_per_s, float)
        * np.asarray(device_usd_per_s, float)
    )


def drain_time_s(capacity_bytes: ArrayLike, bandwidth_bytes_per_s: ArrayLike) -> FloatArray:
    """Capacity / bandwidth of any memory tier (the roofline's HBM drain time, reused)."""
    return rl.hbm_drain_time_s(capacity_bytes, bandwidth_bytes_per_s)


def retention_crossover_s(
    fast_hold_usd_per_s: ArrayLike,
    fast_fetch_usd: ArrayLike,
    slow_hold_usd_per_s: ArrayLike,
    slow_fetch_usd: ArrayLike,
) -> FloatArray:
    """Retention beyond which the slower tier's hit (hold + fetch) is cheaper.

    ``h_f T + f_f = h_s T + f_s  =>  T* = (f_s - f_f) / (h_f - h_s)``. When the fast tier's
    hold rate dwarfs the slow tier's and the slow fetch dwarfs the fast one,
    ``T* ~ f_s / h_f``; NaN where the slow tier never wins.
    """
    h_f, f_f = np.asarray(fast_hold_usd_per_s, float), np.asarray(fast_fetch_usd, float)
    h_s, f_s = np.asarray(slow_hold_usd_per_s, float), np.asarray(slow_fetch_usd, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (f_s - f_f) / (h_f - h_s)
    return np.where((h_f > h_s) & (t >= 0), t, np.nan)


# --------------------------------------------------------------------------- fast modes (D12)
def ideal_step_s(batch: ArrayLike, balance_batch: ArrayLike, floor_s: ArrayLike) -> FloatArray:
    """The lecture's idealised decode step: ``t_w * max(1, B / B*)`` (weights only, no KV).

    Computed through :func:`rackmath.core.roofline.step_times` in normalised units (one
    "FLOP" per token at ``B*/t_w`` per second; one "byte" of weights at ``1/t_w`` per second),
    so this is the same roofline, not a second copy.
    """
    floor = np.asarray(floor_s, float)
    times = rl.step_times(
        flops=np.asarray(batch, float),
        weight_bytes=1.0,
        kv_bytes=0.0,
        peak_flops_per_s=np.asarray(balance_batch, float) / floor,
        bandwidth_bytes_per_s=1.0 / floor,
    )
    return times.step_s


def fast_mode_ideal(
    normal_batch: ArrayLike, fast_batch: ArrayLike, balance_batch: ArrayLike, floor_s: ArrayLike = 1.0
) -> tuple[FloatArray, FloatArray]:
    """D12: (speed-up, price multiple) of running at ``fast_batch`` instead of ``normal_batch``.

    Speed-up = ``t(B_n) / t(B_f)``; price multiple = cost per token ratio
    ``(t(B_f)/B_f) / (t(B_n)/B_n)``. The lecture's point: normal at ``B_n = 2.5 B*`` runs
    ``2.5 t_w``; fast at ``B_f = B*/6`` runs at the floor ``t_w``: 2.5x the speed for 6x the
    price. No batch is faster than ``t_w``, so no price buys more than ``t(B_n)/t_w``.
    """
    t_n = ideal_step_s(normal_batch, balance_batch, floor_s)
    t_f = ideal_step_s(fast_batch, balance_batch, floor_s)
    speedup = t_n / t_f
    price = (t_f / np.asarray(fast_batch, float)) / (t_n / np.asarray(normal_batch, float))
    return speedup, price


# --------------------------------------------------------------------------- fleets (D8-D10)
def replica_tokens_per_s(batch: ArrayLike, step_s: ArrayLike) -> FloatArray:
    """D10: one replica emits one token per sequence per step: ``B / t_step``.

    2,000 sequences at a 15.625 ms step (64 steps/s) -> 128,000 tokens/s.
    """
    return np.asarray(batch, float) / np.asarray(step_s, float)


#: Replicas a traffic needs are rounded up only past this excess over a whole number, so
#: float noise (384,000 / 128,000 = 3.0000000000000004) does not buy a spurious replica.
REPLICA_ROUNDING_TOLERANCE = 1e-9


def replicas_needed(traffic_tokens_per_s: ArrayLike, tokens_per_s_per_replica: ArrayLike) -> FloatArray:
    """Whole replicas to carry a traffic: ``max(1, ceil(traffic / per-replica throughput))``.

    Any positive traffic needs at least one replica (a tiny traffic must not round to zero);
    zero traffic needs none. 500e6 tokens/s at 128,000 per replica -> 3,907.
    """
    ratio = np.asarray(traffic_tokens_per_s, float) / np.asarray(tokens_per_s_per_replica, float)
    whole = np.maximum(np.ceil(ratio - REPLICA_ROUNDING_TOLERANCE), 1.0)
    return np.asarray(np.where(ratio > 0, whole, 0.0), dtype=float)


def usd_per_s(chips: ArrayLike, usd_per_chip_hour: ArrayLike) -> FloatArray:
    """Rental of ``chips`` per second: ``chips * $/chip-hour / 3600 s/h``."""
    return np.asarray(chips, float) * np.asarray(usd_per_chip_hour, float) / SECONDS_PER_HOUR


def usd_per_day(chips: ArrayLike, usd_per_chip_hour: ArrayLike) -> FloatArray:
    """Rental of ``chips`` for a day: ``chips * $/chip-hour * 24``."""
    return (
        np.asarray(chips, float) * np.asarray(usd_per_chip_hour, float) * (SECONDS_PER_DAY / SECONDS_PER_HOUR)
    )


def train_worst_latency_s(interval_s: ArrayLike, run_s: ArrayLike) -> FloatArray:
    """D8: a batch departs every ``T``; a request that just missed one waits ``T`` then runs.

    Worst case ``T + t_run``: 20 + 20 = 40 ms for the lecture's 20 ms train.
    """
    return np.asarray(interval_s, float) + np.asarray(run_s, float)


def train_mean_latency_s(interval_s: ArrayLike, run_s: ArrayLike) -> FloatArray:
    """D8 averaged: Poisson (uniform-in-phase) arrivals wait ``T/2`` on average, then run."""
    return 0.5 * np.asarray(interval_s, float) + np.asarray(run_s, float)


def batch_fill_time_s(batch: ArrayLike, arrival_rate_per_s: ArrayLike) -> FloatArray:
    """Time for ``arrival_rate`` requests per second to fill a batch of ``B``: ``B / rate``.

    When it exceeds the departure interval, trains leave part-empty (the fleet is too big).
    """
    return np.asarray(batch, float) / np.asarray(arrival_rate_per_s, float)
