"""The highest arrival rate at which a deployment meets an SLO, and the attainment curve.

Each probe simulates a rate in steady state (:func:`probe`): Poisson arrivals over a warm-up, a
measured window and a tail, each a number of request lifetimes ``L = (prefill steps + O - 1) t``
(``t`` the replica's step at the largest batch its caps and KV allow,
:meth:`rackmath.analyses.deploy.slo.Server.lifetime_s`). The warm-up (2 ``L``) fills the batch
from empty and is not counted; the window (4 ``L``, longer if it would hold fewer than
:data:`MIN_MEASURED` requests) is measured; the tail (2 ``L``) keeps the load on while the last
measured requests finish, and the run stops at its end: a measured request unfinished then has
failed. So a long output lengthens the probe instead of leaving it in its ramp (a fixed
20,000-request probe at 10 requests/s covers 2,000 s, under four lifetimes of a 20,000-token
output at 30 ms a token). Attainment and goodput are counted over the window
(:func:`rackmath.analyses.deploy.slo.attainment`).

The curve probes :data:`CURVE_POINTS` rates evenly up to 1.5x the capacity; the highest rate
meeting the SLO lies between the last rate of the curve's first meeting run and the next, and
:data:`SEARCH_PROBES` halvings (in log rate) refine it (:func:`bisect_rates`). Every probe draws
the same seeded unit arrivals scaled to its rate (common random numbers), so the curve compares
rates, not draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rackmath.analyses.deploy import simulate as sim
from rackmath.analyses.deploy.slo import Attainment, Fleet, Server, Slo, Workload, attainment, build
from rackmath.errors import InputError
from rackmath.progress import progress

#: A probe's warm-up, measured window and tail, in request lifetimes (module docstring).
WARMUP_LIFETIMES = 2.0
WINDOW_LIFETIMES = 4.0
TAIL_LIFETIMES = 2.0
#: Fewest requests a probe measures (a p99 then rests on at least 20 requests beyond it).
MIN_MEASURED = 2000
#: Most requests one probe simulates (the window shrinks to fit, to one lifetime at least; never
#: the warm-up).
MAX_PROBE_REQUESTS = 200_000
#: Rates the attainment curve probes (evenly up to 1.5x the capacity), then the halvings that
#: refine the highest rate meeting the SLO between two of them.
CURVE_POINTS = 10
SEARCH_PROBES = 6


@dataclass(frozen=True)
class Window:
    """A probe's arrivals: warm-up (not measured), the measured window and the tail (s)."""

    lifetime_s: float
    warmup_s: float
    measure_s: float
    tail_s: float

    @property
    def horizon_s(self) -> float:
        return self.warmup_s + self.measure_s + self.tail_s

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("lifetime_s", "warmup_s", "measure_s", "tail_s")}


def probe_window(lifetime_s: float, rate_per_s: float, min_measured: int | None = None) -> Window:
    """Warm-up, window and tail of a probe at ``rate_per_s`` (module docstring), the window cut
    to keep the probe within :data:`MAX_PROBE_REQUESTS` arrivals, down to one lifetime."""
    min_measured = MIN_MEASURED if min_measured is None else min_measured
    warm, tail = WARMUP_LIFETIMES * lifetime_s, TAIL_LIFETIMES * lifetime_s
    measure = max(WINDOW_LIFETIMES * lifetime_s, min_measured / rate_per_s)
    room = MAX_PROBE_REQUESTS / rate_per_s - warm - tail
    if room < WINDOW_LIFETIMES * lifetime_s and room < min_measured / rate_per_s:
        measure = max(room, lifetime_s)
    else:
        measure = min(measure, room)
    return Window(lifetime_s, warm, measure, tail)


@dataclass(frozen=True)
class SloPoint:
    """One probe: the rate, its steady-state window, attainment and percentiles."""

    rate_per_s: float
    window: Window
    attainment: Attainment
    result: sim.SimulationResult

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate_per_s": self.rate_per_s,
            "window": self.window.to_dict(),
            "attainment": self.attainment.to_dict(),
            "result": self.result.to_dict(),
        }


@dataclass(frozen=True)
class SloSearch:
    """The attainment curve over the probed rates and the highest rate meeting the SLO."""

    slo: Slo
    points: tuple[SloPoint, ...]  # by rate
    best: SloPoint | None
    capacity_rate_per_s: float
    chips: int
    setup: dict[str, Any]

    @property
    def max_rate_per_s(self) -> float | None:
        return None if self.best is None else self.best.rate_per_s

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        return {
            **self.setup,
            "slo": self.slo.to_dict(),
            "feasible": best is not None,
            "max_rate_per_s": self.max_rate_per_s,
            "max_rate_per_s_per_chip": None if best is None else best.rate_per_s / self.chips,
            "capacity_rate_per_s": self.capacity_rate_per_s,
            "best": None if best is None else best.to_dict(),
            "curve": [
                {
                    "rate_per_s": p.rate_per_s,
                    "all_frac": p.attainment.all_frac,
                    **{f"{k}_met_frac": v for k, v in p.attainment.met_frac.items()},
                    "meets_slo": p.attainment.meets_slo,
                    "goodput_requests_per_s": p.attainment.goodput_requests_per_s,
                    "requests_per_s": p.attainment.requests_per_s,
                    "measured_requests": p.attainment.requests,
                }
                for p in self.points
            ],
        }


def probe(server: Server, workload: Workload, slo: Slo, rate_per_s: float) -> SloPoint:
    """One steady-state probe at ``rate_per_s`` (module docstring)."""
    _, _, i, o = workload.lengths()
    frac = 1.0 - (workload.prefix_hit or 0.0)
    win = probe_window(server.lifetime_s(i, o, frac), rate_per_s)
    n = max(1, math.ceil(rate_per_s * win.horizon_s))
    asked = workload.poisson(rate_per_s, n)
    times = server.run(asked, cutoff_s=win.horizon_s)
    a = asked.arrival_s
    measured = (a >= win.warmup_s) & (a < win.warmup_s + win.measure_s)
    att = attainment(times, slo, measured, win.measure_s)
    res = sim.summarize(times, rate_per_s, measured=measured, duration_s=win.measure_s)
    return SloPoint(rate_per_s, win, att, res)


def search(
    fleet: Fleet, workload: Workload, slo: Slo, *, points: int | None = None, probes: int | None = None
) -> SloSearch:
    """The attainment curve at ``points`` rates evenly up to 1.5x the capacity, and the highest
    rate meeting the SLO, refined by ``probes`` halvings between the last rate of the curve's
    first meeting run and the next (:func:`bisect_rates`)."""
    if workload.trace is not None:
        raise InputError(
            "--slo", slo.describe(), "a Poisson workload (--rate with --input/--output), not --trace"
        )
    points = CURVE_POINTS if points is None else points
    probes = SEARCH_PROBES if probes is None else probes
    server = build(fleet, workload)
    _, _, i, o = workload.lengths()
    cap = server.capacity_rate_per_s(i, o, 1.0 - (workload.prefix_hit or 0.0))
    with progress("Probing rates against the SLO", total=points + probes + 1) as advance:

        def at(rate: float) -> SloPoint:
            point = probe(server, workload, slo, rate)
            advance(1)
            return point

        made, best = bisect_rates(at, 1.5 * cap, points, probes)
    chips = server.replica.deployment.chips
    if server.pools is not None:
        assert server.prefill is not None
        chips = server.pools[0] * server.prefill.deployment.chips + server.pools[1] * chips
    ordered = tuple(sorted(made, key=lambda p: p.rate_per_s))
    return SloSearch(slo, ordered, best, cap, chips, server.setup)


def bisect_rates(
    at: Callable[[float], SloPoint], top: float, points: int, probes: int
) -> tuple[list[SloPoint], SloPoint | None]:
    """Probe ``points`` rates ``top k / points``; the highest meeting rate lies between the last of
    the first run of meeting rates and the next, halved ``probes`` times (in log rate). When even
    the lowest misses, one probe at ``top / 1000`` decides between infeasible and a log-bisection
    below the grid."""
    made = [at(top * k / points) for k in range(1, points + 1)]
    ok = [p.attainment.meets_slo for p in made]
    if ok[0]:
        k = next((j for j, m in enumerate(ok) if not m), len(ok))
        if k == len(ok):
            return made, made[-1]
        lo, hi, best = made[k - 1].rate_per_s, made[k].rate_per_s, made[k - 1]
    else:
        floor = at(top / 1000.0)
        made.append(floor)
        if not floor.attainment.meets_slo:
            return made, None
        lo, hi, best = floor.rate_per_s, made[0].rate_per_s, floor
    for _ in range(probes):
        mid = math.sqrt(lo * hi)
        p = at(mid)
        made.append(p)
        if p.attainment.meets_slo:
            lo, best = mid, p
        else:
            hi = mid
    return made, best
