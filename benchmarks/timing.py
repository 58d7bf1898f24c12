"""Timing shared by the benchmark scripts: median wall time after one burn-in run."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """``(median seconds, last result)`` of ``repeats`` calls of ``fn`` after one burn-in call
    (catalog load, caches, imports, a worker's first unpickling)."""
    fn()
    times = []
    result = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result
