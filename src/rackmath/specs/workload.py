"""A workload as typed input: the token-length distributions requests are drawn from, and
the requests themselves (a recorded trace, checked once at the boundary).

What the request simulator (:mod:`rackmath.core.requests`) and ``rackmath simulate`` take:
``--input``/``--output`` text parsed into a :class:`LengthDist`, a trace file into
:class:`Requests` by :func:`check_trace`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.errors import InputError

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Length distributions a workload may draw from.
DISTRIBUTIONS: tuple[str, ...] = ("fixed", "uniform", "lognormal")
#: Log-space standard deviation of the lognormal lengths when none is stated. An
#: estimate (a spread of about 2x either side of the median), not a measured figure.
DEFAULT_LOGNORMAL_SIGMA = 0.7


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution: ``fixed:N``, ``uniform:LO-HI`` or ``lognormal:MEAN``.

    The lognormal has the stated *mean* (not median): ``mu = ln(mean) - sigma^2/2``.
    Draws are rounded and clipped to at least 1 token.
    """

    kind: str
    mean: float
    low: float = 0.0
    high: float = 0.0
    sigma: float = DEFAULT_LOGNORMAL_SIGMA

    @classmethod
    def parse(cls, text: str, field: str) -> LengthDist:
        allowed = "N, fixed:N, uniform:LO-HI or lognormal:MEAN (tokens >= 1)"
        s = str(text).strip().lower()
        kind, _, arg = s.partition(":") if ":" in s else ("fixed", "", s)
        try:
            if kind == "fixed":
                n = float(arg)
                if math.isfinite(n) and n >= 1 and n == int(n):
                    return cls("fixed", n)
            elif kind == "uniform":
                lo_s, _, hi_s = arg.partition("-")
                lo, hi = float(lo_s), float(hi_s)
                if math.isfinite(hi) and 1 <= lo <= hi:
                    return cls("uniform", (lo + hi) / 2, lo, hi)
            elif kind == "lognormal":
                m = float(arg)
                if math.isfinite(m) and m >= 1:
                    return cls("lognormal", m)
        except ValueError:
            pass
        raise InputError(field, text, allowed)

    def sample(self, n: int, rng: np.random.Generator) -> IntArray:
        if self.kind == "fixed":
            x = np.full(n, self.mean)
        elif self.kind == "uniform":
            x = rng.integers(int(self.low), int(self.high) + 1, size=n).astype(float)
        else:
            mu = math.log(self.mean) - self.sigma**2 / 2
            x = rng.lognormal(mu, self.sigma, size=n)
        return np.maximum(np.rint(x), 1).astype(np.int64)

    @property
    def max_tokens(self) -> float:
        """The largest draw this can make (lognormal: its 99.99th percentile, a bound used only
        to size the step table)."""
        if self.kind == "fixed":
            return self.mean
        if self.kind == "uniform":
            return self.high
        mu = math.log(self.mean) - self.sigma**2 / 2
        return float(math.exp(mu + 3.72 * self.sigma))

    def __str__(self) -> str:
        if self.kind == "fixed":
            return f"{self.mean:.0f}"
        if self.kind == "uniform":
            return f"uniform:{self.low:.0f}-{self.high:.0f}"
        return f"lognormal:{self.mean:g}"


@dataclass(frozen=True)
class Requests:
    """Arrival times (s, sorted) and token lengths of each request."""

    arrival_s: FloatArray
    input_tokens: IntArray
    output_tokens: IntArray
    #: tokens already in the replica's KV on arrival (a disaggregated decode pool's transferred
    #: prompt): held and attended to, never prefilled; None is 0 for every request
    cached_tokens: IntArray | None = None

    @property
    def size(self) -> int:
        return int(self.arrival_s.size)


def check_trace(arrival_s: ArrayLike, input_tokens: ArrayLike, output_tokens: ArrayLike) -> Requests:
    """Validate a trace: times finite, >= 0 and sorted; lengths whole numbers >= 1."""
    a = np.asarray(arrival_s, float)
    i = np.asarray(input_tokens, float)
    o = np.asarray(output_tokens, float)
    if a.ndim != 1 or a.size == 0 or i.shape != a.shape or o.shape != a.shape:
        raise InputError(
            "trace", f"{a.size} rows", "one or more rows of (arrival_s, input_tokens, output_tokens)"
        )
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        row = int(np.flatnonzero(~np.isfinite(a) | (a < 0))[0])
        raise InputError("trace arrival_s", f"{a[row]} at row {row + 1}", "times >= 0 s, sorted ascending")
    if np.any(np.diff(a) < 0):
        row = int(np.flatnonzero(np.diff(a) < 0)[0]) + 1
        raise InputError(
            "trace arrival_s",
            f"{a[row]} after {a[row - 1]} at row {row + 1}",
            "times sorted ascending (sort the file)",
        )
    for name, x in (("trace input_tokens", i), ("trace output_tokens", o)):
        bad = ~np.isfinite(x) | (x < 1) | (x != np.round(x))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise InputError(name, f"{x[row]} at row {row + 1}", "whole numbers of tokens >= 1")
    return Requests(a, i.astype(np.int64), o.astype(np.int64))
