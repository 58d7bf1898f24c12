"""Poisson arrivals and the lecture's batch "train".

Why no SimPy: arrivals here are an open-loop Poisson process, independent of the server's
state, so they are drawn up front as one NumPy array (cumulative exponential gaps).
Everything is seeded (``numpy.random.default_rng``) and reproducible.

* :func:`poisson_arrivals_s`: the arrival process every simulation draws from.
* :func:`simulate_train_schedule`: the lecture's "train" (D8): a batch departs every
  ``interval_s`` with whoever is waiting (up to ``max_batch``) and runs for ``run_s``.
* :func:`mg1_mean_wait_s` (with :func:`md1_mean_wait_s` and :func:`mm1_mean_wait_s`): the
  closed forms the request simulator is held to.

Continuous batching (``fleet`` and ``simulate``) has one simulator,
:func:`rackmath.core.requests.simulate`; ``fleet``'s replica is its special case
:class:`rackmath.core.requests.BatchStepTable`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.errors import InputError

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


def mg1_mean_wait_s(rate_per_s: ArrayLike, mean_service_s: ArrayLike, service_scv: ArrayLike) -> FloatArray:
    """Mean wait in queue of an M/G/1 server (Pollaczek-Khinchine):
    ``W_q = rho (1 + C^2) E[S] / (2 (1 - rho))``, ``rho = lambda E[S] < 1``, ``C^2`` the squared
    coefficient of variation of the service time (Kleinrock, *Queueing Systems* vol. 1, 1975,
    eq. 5.77). Units: 1/s, s, dimensionless; returns s."""
    lam = np.asarray(rate_per_s, float)
    s = np.asarray(mean_service_s, float)
    rho = lam * s
    if np.any(rho >= 1) or np.any(rho < 0):
        raise InputError("utilization", rho, "rate x service time in [0, 1)")
    return np.asarray(rho * (1.0 + np.asarray(service_scv, float)) * s / (2.0 * (1.0 - rho)), dtype=float)


def md1_mean_wait_s(rate_per_s: ArrayLike, service_s: ArrayLike) -> FloatArray:
    """M/D/1 (a deterministic service, ``C^2 = 0``): ``W_q = rho s / (2 (1 - rho))``. Worked
    number: ``lambda = 50/s``, ``s = 10 ms``: ``rho = 0.5``, ``W_q = 0.5 x 10 ms / 1 = 5 ms``."""
    return mg1_mean_wait_s(rate_per_s, service_s, 0.0)


def mm1_mean_wait_s(rate_per_s: ArrayLike, mean_service_s: ArrayLike) -> FloatArray:
    """M/M/1 (an exponential service, ``C^2 = 1``): ``W_q = rho E[S] / (1 - rho)``. Worked
    number: ``lambda = 50/s``, ``E[S] = 10 ms``: ``W_q = 0.5 x 10 ms / 0.5 = 10 ms``."""
    return mg1_mean_wait_s(rate_per_s, mean_service_s, 1.0)
