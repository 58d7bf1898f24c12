"""Time of collective communication on plain numbers (the alpha-beta model).

Each operation costs a bandwidth term (bytes over the per-chip, per-direction link
bandwidth) plus a latency term (``alpha`` per sequential hop/step). Sources: Thakur,
Rabenseifner & Gropp 2005, "Optimization of collective communication operations in
MPICH" (ring all-gather/reduce-scatter ``(n-1)/n * M / B + (n-1) alpha``; all-reduce as
reduce-scatter followed by all-gather, twice that); NCCL's ring algorithm follows the
same bandwidth term ("bus bandwidth", nccl-tests PERFORMANCE.md).

Arguments are SI: ``bytes_per_chip`` is the buffer each chip holds (the full tensor for
all-reduce, the per-chip shard times ``n`` for all-gather), ``bandwidth_bytes_per_s`` is
one chip's link bandwidth in one direction, ``latency_s`` one hop. Everything broadcasts.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]


def _ring_fraction(chips: ArrayLike) -> FloatArray:
    n = np.asarray(chips, float)
    return np.where(n > 1, (n - 1) / np.maximum(n, 1), 0.0)


def all_gather_s(
    bytes_per_chip: ArrayLike, chips: ArrayLike, bandwidth_bytes_per_s: ArrayLike, latency_s: ArrayLike
) -> FloatArray:
    """Ring all-gather of a ``bytes_per_chip`` result: ``(n-1)/n * M / B + (n-1) alpha``.

    Reduce-scatter has the same cost. One chip (``n = 1``) costs nothing.
    """
    n = np.asarray(chips, float)
    return np.asarray(
        _ring_fraction(n) * np.asarray(bytes_per_chip, float) / np.asarray(bandwidth_bytes_per_s, float)
        + np.maximum(n - 1, 0) * np.asarray(latency_s, float),
        dtype=float,
    )


reduce_scatter_s = all_gather_s


def all_reduce_s(
    bytes_per_chip: ArrayLike, chips: ArrayLike, bandwidth_bytes_per_s: ArrayLike, latency_s: ArrayLike
) -> FloatArray:
    """Ring all-reduce = reduce-scatter + all-gather: ``2 (n-1)/n * M / B + 2 (n-1) alpha``."""
    return 2.0 * all_gather_s(bytes_per_chip, chips, bandwidth_bytes_per_s, latency_s)


def all_to_all_s(
    bytes_per_chip: ArrayLike, chips: ArrayLike, bandwidth_bytes_per_s: ArrayLike, latency_s: ArrayLike
) -> FloatArray:
    """All-to-all where each chip sends ``bytes_per_chip`` spread evenly over ``n`` chips.

    ``(n-1)/n`` of the buffer leaves the chip, sent in parallel through a switch:
    ``(n-1)/n * M / B + alpha``.
    """
    n = np.asarray(chips, float)
    return np.asarray(
        _ring_fraction(n) * np.asarray(bytes_per_chip, float) / np.asarray(bandwidth_bytes_per_s, float)
        + np.where(n > 1, np.asarray(latency_s, float), 0.0),
        dtype=float,
    )


def point_to_point_s(
    message_bytes: ArrayLike, bandwidth_bytes_per_s: ArrayLike, latency_s: ArrayLike
) -> FloatArray:
    """One message over one link: ``M / B + alpha``."""
    return np.asarray(
        np.asarray(message_bytes, float) / np.asarray(bandwidth_bytes_per_s, float)
        + np.asarray(latency_s, float),
        dtype=float,
    )


def cross_domain_fraction(domains: ArrayLike) -> FloatArray:
    """Share of uniformly spread all-to-all traffic that leaves a domain: ``(R-1)/R``."""
    return _ring_fraction(domains)
