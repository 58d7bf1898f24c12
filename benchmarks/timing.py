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


#: Seconds between the runs a speed figure takes its least of: a shared host's bursts of load
#: slow the core itself (CPU time rises with wall time) for a second or so, and runs back to
#: back sit inside one burst; spread out, one of them more often finds a quiet moment.
PAUSE_S = 0.2


def least_s(fn: Callable[[], Any], runs: int, pause_s: float = PAUSE_S) -> float:
    """The least wall time of ``runs`` calls of ``fn``, ``pause_s`` apart (``fn`` warmed up by
    its caller): the code's own speed, as near as a shared host lets a run see it."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
        time.sleep(pause_s)
    return best


def machine(**extra: object) -> dict[str, object]:
    """The machine a run is on and how loaded it was when the script started (the 1-, 5- and
    15-minute load averages; on a shared 2-core machine the figures scale with them)."""
    import datetime
    import os
    import platform

    import numpy as np

    from rackmath import __version__

    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_model": _cpu_model(),
        "cpus": os.cpu_count(),
        "rackmath": __version__,
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
        "load_average": [round(x, 2) for x in load],
        **extra,
    }


def _cpu_model() -> str:
    """The CPU's model name (Linux's ``/proc/cpuinfo``; "" elsewhere): fcb134f's decode grid ran
    12.1 M points/s on one shared 2-core machine and 22.0 M on another a day later, so a figure
    names the machine it was measured on."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""
