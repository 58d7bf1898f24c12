"""Discrete-event simulation of request arrivals and batched decoding.

Why no SimPy: arrivals here are an open-loop Poisson process, independent of the server's
state, so they are drawn up front as one NumPy array (cumulative exponential gaps) and
admitted with ``searchsorted``. The only other events are step boundaries, and the server
is a single loop (one replica), so a plain event loop over steps with vectorized updates of
the running batch is exact and 10-100x faster than a process-per-request SimPy model; it
adds no dependency. Everything is seeded (``numpy.random.default_rng``) and reproducible.

Two servers:

* :func:`simulate_continuous_batching`: the iteration-level scheduler of Orca / vLLM. At each
  step boundary waiting requests join the running batch (FIFO, up to ``max_batch``); a step
  over ``b`` sequences takes ``step_s_by_batch[b-1]`` plus ``prefill_s`` for each joiner (its
  prompt is prefilled in that step, unchunked); every running sequence gains one token per
  step; a sequence leaves after ``output_tokens``.
* :func:`simulate_train_schedule`: the lecture's "train" (D8): a batch departs every
  ``interval_s`` with whoever is waiting (up to ``max_batch``) and runs for ``run_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]


def poisson_arrivals_s(rate_per_s: float, horizon_s: float, seed: int) -> FloatArray:
    """Arrival times of a Poisson process of ``rate_per_s`` on ``[0, horizon_s)``."""
    rng = np.random.default_rng(seed)
    expected = rate_per_s * horizon_s
    n = int(expected + 10 * np.sqrt(expected) + 20)
    times = np.cumsum(rng.exponential(1.0 / rate_per_s, size=n))
    while times[-1] < horizon_s:  # rare: draw more
        times = np.concatenate([times, times[-1] + np.cumsum(rng.exponential(1.0 / rate_per_s, size=n))])
    return np.asarray(times[times < horizon_s], dtype=float)


@dataclass(frozen=True)
class BatchingRun:
    """Per-request times (seconds; NaN if not finished before the run was cut off)."""

    arrival_s: FloatArray
    first_token_s: FloatArray
    finish_s: FloatArray
    output_tokens: int
    end_s: float
    busy_s: float  # time the server spent stepping
    batch_time_integral: float  # sum over steps of (sequences x step time)

    @property
    def ttft_s(self) -> FloatArray:
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> FloatArray:
        """Mean time per output token after the first: (finish - first) / (tokens - 1)."""
        if self.output_tokens < 2:
            return np.full_like(self.arrival_s, np.nan)
        return (self.finish_s - self.first_token_s) / (self.output_tokens - 1)

    @property
    def completed_frac(self) -> float:
        return float(np.mean(np.isfinite(self.finish_s))) if self.arrival_s.size else 1.0

    @property
    def mean_batch(self) -> float:
        """Time-averaged number of running sequences while the server is busy."""
        return self.batch_time_integral / self.busy_s if self.busy_s > 0 else 0.0

    @property
    def utilization(self) -> float:
        return self.busy_s / self.end_s if self.end_s > 0 else 0.0


def simulate_continuous_batching(
    *,
    arrival_s: ArrayLike,
    step_s_by_batch: ArrayLike,
    output_tokens: int,
    prefill_s: float = 0.0,
    cutoff_s: float | None = None,
) -> BatchingRun:
    """Serve ``arrival_s`` (sorted) with continuous batching; see the module docstring.

    ``step_s_by_batch[b - 1]`` is the decode step time with ``b`` running sequences, so its
    length is the maximum batch. The run stops when every request is done or at
    ``cutoff_s`` (requests unfinished by then keep NaN times: an overloaded server).
    """
    arrivals = np.asarray(arrival_s, float)
    steps = np.asarray(step_s_by_batch, float)
    max_batch = steps.size
    n = arrivals.size
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    running_ids = np.empty(max_batch, dtype=np.int64)
    remaining = np.empty(max_batch, dtype=np.int64)
    active = 0
    admitted = 0
    t = 0.0
    busy = 0.0
    batch_integral = 0.0
    limit = np.inf if cutoff_s is None else cutoff_s
    while (admitted < n or active > 0) and t < limit:
        if active == 0 and arrivals[admitted] > t:
            t = float(arrivals[admitted])  # idle until the next arrival
        arrived = int(np.searchsorted(arrivals, t, side="right"))
        joining = min(max_batch - active, arrived - admitted)
        if joining:
            running_ids[active : active + joining] = np.arange(admitted, admitted + joining)
            remaining[active : active + joining] = output_tokens
            active += joining
        dt = float(steps[active - 1]) + prefill_s * joining
        t += dt
        busy += dt
        batch_integral += active * dt
        if joining:
            first[admitted : admitted + joining] = t
            admitted += joining
        remaining[:active] -= 1
        done = remaining[:active] == 0
        if done.any():
            finish[running_ids[:active][done]] = t
            keep = ~done
            kept = int(keep.sum())
            running_ids[:kept] = running_ids[:active][keep]
            remaining[:kept] = remaining[:active][keep]
            active = kept
    return BatchingRun(
        arrival_s=arrivals,
        first_token_s=first,
        finish_s=finish,
        output_tokens=output_tokens,
        end_s=t,
        busy_s=busy,
        batch_time_integral=batch_integral,
    )


def simulate_train_schedule(
    *, arrival_s: ArrayLike, interval_s: float, run_s: float, max_batch: int
) -> FloatArray:
    """Latency of each request when a batch departs at ``k * interval_s`` (k = 1, 2, ...).

    FIFO, at most ``max_batch`` per departure; a request is done ``run_s`` after its train
    leaves. Returns ``done - arrival`` per request (closed forms: at most
    ``interval + run``, mean ``interval/2 + run`` when trains never fill).

    Exact and vectorized: request ``i`` (arrivals sorted) can leave on train
    ``c_i = max(1, ceil(a_i / interval))``, and FIFO with ``B`` seats a train puts it at least
    one train after request ``i - B``: ``k_i = max(c_i, k_{i-B} + 1)``. Along each residue
    class ``i = r + m B`` that is ``k_m = m + cummax_m(c_m - m)``, one pass for all classes,
    so the work is O(n) NumPy whatever the number of trains.
    """
    arrivals = np.sort(np.asarray(arrival_s, float))
    n = arrivals.size
    if n == 0:
        return np.zeros(0)
    b = int(max_batch)
    earliest = np.ceil(arrivals / interval_s)
    # the first train with k * interval >= arrival, compared as the departure time is computed
    earliest = np.where((earliest - 1.0) * interval_s >= arrivals, earliest - 1.0, earliest)
    earliest = np.where(earliest * interval_s < arrivals, earliest + 1.0, earliest)
    earliest = np.maximum(1.0, earliest)
    rows = -(-n // b)
    padded = np.full(rows * b, np.inf)
    padded[:n] = earliest
    m = np.arange(rows, dtype=float)[:, None]
    grid = padded.reshape(rows, b) - m
    grid = np.where(np.isinf(grid), -np.inf, grid)  # padding never delays a real request
    train = (np.maximum.accumulate(grid, axis=0) + m).reshape(-1)[:n]
    return np.asarray(train * interval_s + run_s - arrivals, dtype=float)
