"""A workload as typed input: the token-length distributions requests are drawn from, and
the requests themselves (a recorded trace, checked once at the boundary).

What the request simulator (:mod:`rackmath.core.requests`) and ``rackmath simulate`` take:
``--input``/``--output`` text parsed into a :class:`LengthDist`, a trace file into
:class:`Requests` by :func:`parse_trace_text`: CSV rows of ``arrival_s,input_tokens,output_tokens``
(:func:`check_trace`), or JSON lines in the public Mooncake trace format
(kvcache-ai/Mooncake ``FAST25-release/traces``; :func:`check_block_trace`): ``timestamp`` (ms from
the trace's start), ``input_length``, ``output_length`` and ``hash_ids``, the ids of the prompt's
512-token KV blocks, equal leading ids meaning an equal prefix::

    {"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, 2, 3, ...]}
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.errors import InputError
from rackmath.specs import checks
from rackmath.userfiles import read_text

#: Tokens of one KV block of a block-hash trace: the public Mooncake traces' ``hash_ids`` name
#: 512-token blocks (kvcache-ai/Mooncake FAST25-release/traces: ``len(hash_ids) =
#: ceil(input_length / 512)`` on every row read, e.g. 40,160 tokens -> 79 ids).
MOONCAKE_BLOCK_TOKENS = 512
#: Most requests in one trace (the simulator's own bound).
MAX_TRACE_ROWS = 10**6
#: Largest trace file read (the public Mooncake conversation trace is about 3 MB).
MAX_TRACE_BYTES = 64_000_000

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
    """Arrival times (s, sorted) and token lengths of each request, and what each prompt shares.

    Prefix reuse, one of two ways: ``prefix_tokens`` states each prompt's cached prefix (a hit
    rate applied to each request), or ``block_ids`` names each prompt's KV blocks as a block-hash
    trace does (request ``i``'s ids are ``block_ids[block_start[i]:block_start[i + 1]]``, blocks
    of ``block_tokens``), and the simulator's prefix cache finds the hits.
    """

    arrival_s: FloatArray
    input_tokens: IntArray
    output_tokens: IntArray
    #: tokens already in the replica's KV on arrival (a disaggregated decode pool's transferred
    #: prompt): held and attended to, never prefilled; None is 0 for every request
    cached_tokens: IntArray | None = None
    #: tokens of each prompt found in the prefix cache (part of ``input_tokens``): their prefill
    #: is skipped, their KV still takes slots; None is 0 for every request
    prefix_tokens: IntArray | None = None
    block_ids: IntArray | None = None
    block_start: IntArray | None = None
    block_tokens: int = MOONCAKE_BLOCK_TOKENS

    @property
    def size(self) -> int:
        return int(self.arrival_s.size)

    def ids(self, i: int) -> list[int]:
        """Request ``i``'s block ids (empty without ``block_ids``)."""
        if self.block_ids is None or self.block_start is None:
            return []
        return self.block_ids[self.block_start[i] : self.block_start[i + 1]].tolist()

    def take(self, index: ArrayLike) -> Requests:
        """The requests at ``index`` (in that order), with their prefix fields."""
        idx = np.asarray(index, np.int64)
        ids, start = None, None
        if self.block_ids is not None and self.block_start is not None:
            lo, hi = self.block_start[idx], self.block_start[idx + 1]
            start = np.concatenate([[0], np.cumsum(hi - lo)]).astype(np.int64)
            ids = (
                np.concatenate([self.block_ids[a:b] for a, b in zip(lo, hi, strict=True)]).astype(np.int64)
                if idx.size
                else np.zeros(0, np.int64)
            )
        return Requests(
            self.arrival_s[idx],
            self.input_tokens[idx],
            self.output_tokens[idx],
            None if self.cached_tokens is None else self.cached_tokens[idx],
            None if self.prefix_tokens is None else self.prefix_tokens[idx],
            ids,
            start,
            self.block_tokens,
        )


def with_hit_rate(requests: Requests, hit_frac: float) -> Requests:
    """Each prompt's first ``floor(h I)`` tokens cached (at most ``I - 1``: the last prompt
    token always runs); ``h`` in [0, 1]."""
    h = checks.fraction("--prefix-hit", hit_frac, allowed="a hit rate from 0 to 1, e.g. 0.5")
    i = requests.input_tokens
    cached = np.minimum(np.floor(h * i).astype(np.int64), i - 1)
    return replace(requests, prefix_tokens=cached)


def check_trace(arrival_s: ArrayLike, input_tokens: ArrayLike, output_tokens: ArrayLike) -> Requests:
    """Validate a trace: times finite, >= 0 and sorted; lengths whole numbers >= 1."""
    a = np.asarray(arrival_s, float)
    i = np.asarray(input_tokens, float)
    o = np.asarray(output_tokens, float)
    if a.ndim != 1 or a.size == 0 or i.shape != a.shape or o.shape != a.shape:
        raise InputError(
            "trace", f"{a.size} rows", "one or more rows of (arrival_s, input_tokens, output_tokens)"
        )
    if a.size > MAX_TRACE_ROWS:
        raise InputError("trace", f"{a.size:,} rows", f"at most {MAX_TRACE_ROWS:,} requests")
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


#: Most block ids in one trace (all rows together): 10^6 requests of 20 blocks.
MAX_TRACE_BLOCKS = 2 * 10**7
MS = 1e-3


def check_block_trace(
    timestamp_ms: ArrayLike,
    input_tokens: ArrayLike,
    output_tokens: ArrayLike,
    hash_ids: list[list[int]],
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
) -> Requests:
    """Validate a block-hash trace (:func:`check_trace` for the times and lengths, in ms here).

    ``hash_ids`` per row: whole numbers >= 0, at most ``ceil(input_length / block_tokens)`` of
    them (a prompt's blocks), none twice in a row. An id names one block content after one
    prefix, so it must follow the same id (or start the list) wherever it appears: an id seen
    after a different parent is an unknown block (the trace's ids are not prefix hashes)."""
    base = check_trace(np.asarray(timestamp_ms, float) * MS, input_tokens, output_tokens)
    inp = base.input_tokens
    if len(hash_ids) != base.size:
        raise InputError("trace hash_ids", f"{len(hash_ids)} lists", f"one list per row ({base.size})")
    total = sum(len(h) for h in hash_ids)
    if total > MAX_TRACE_BLOCKS:
        raise InputError("trace hash_ids", f"{total:,} ids", f"at most {MAX_TRACE_BLOCKS:,} ids in a trace")
    parent: dict[int, int] = {}
    for row, ids in enumerate(hash_ids):
        most = -(-int(inp[row]) // block_tokens)
        if len(ids) > most:
            raise InputError(
                "trace hash_ids",
                f"{len(ids)} ids at row {row + 1} for a {int(inp[row]):,}-token prompt",
                f"at most ceil(input_length / {block_tokens}) = {most} ids, one per block",
            )
        prev = -1
        seen: set[int] = set()
        for k in ids:
            if isinstance(k, bool) or not isinstance(k, int) or k < 0:
                raise InputError(
                    "trace hash_ids", f"{k!r} at row {row + 1}", "block ids that are whole numbers >= 0"
                )
            if k in seen:
                raise InputError(
                    "trace hash_ids",
                    f"id {k} twice at row {row + 1}",
                    "each block id once in a prompt's list",
                )
            seen.add(k)
            was = parent.setdefault(k, prev)
            if was != prev:
                first = "the start of a list" if was < 0 else f"block {was}"
                here = "the start" if prev < 0 else f"block {prev}"
                raise InputError(
                    "trace hash_ids",
                    f"unknown block {k} at row {row + 1} (after {here})",
                    f"an id naming one prefix: block {k} first came after {first} (ids are prefix hashes)",
                )
            prev = k
    start = np.concatenate([[0], np.cumsum([len(h) for h in hash_ids])]).astype(np.int64)
    flat = np.fromiter((k for h in hash_ids for k in h), np.int64, count=total)
    return replace(base, block_ids=flat, block_start=start, block_tokens=block_tokens)


def parse_trace_text(text: str, field: str = "--trace") -> Requests:
    """A trace file's text: JSON lines (Mooncake's format, :func:`check_block_trace`) when its
    first non-blank character is ``{``, else CSV rows of ``arrival_s,input_tokens,output_tokens``
    (a header line is allowed; :func:`check_trace`)."""
    import csv
    import io
    import json

    body = text.lstrip()
    if body.startswith("{"):
        cols: tuple[list[float], list[float], list[float]] = ([], [], [])
        ids: list[list[int]] = []
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(field, f"line {n}", f"one JSON object per line ({exc.msg})") from None
            if not isinstance(rec, dict):
                raise InputError(field, f"line {n}", "one JSON object per line")
            for key, col in zip(("timestamp", "input_length", "output_length"), cols, strict=True):
                value = rec.get(key)
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise InputError(
                        f"trace {key}", f"{value!r} at row {len(ids) + 1}", "a number on every line"
                    )
                col.append(float(value))
            h = rec.get("hash_ids", [])
            if not isinstance(h, list):
                raise InputError("trace hash_ids", f"{h!r} at row {len(ids) + 1}", "a list of block ids")
            ids.append(h)
            if len(ids) > MAX_TRACE_ROWS:
                raise InputError(
                    field, f"more than {MAX_TRACE_ROWS:,} rows", f"at most {MAX_TRACE_ROWS:,} requests"
                )
        if not ids:
            raise InputError(field, "0 rows", "one JSON object per request")
        return check_block_trace(*cols, ids)
    rows = [r for r in csv.reader(io.StringIO(text)) if r and r[0].strip()]
    if rows and not _is_number(rows[0][0]):
        rows = rows[1:]
    if not rows or any(len(r) < 3 for r in rows):
        raise InputError(field, f"{len(rows)} rows", "CSV rows of arrival_s,input_tokens,output_tokens")
    try:
        values = [[float(r[j]) for r in rows] for j in range(3)]
    except ValueError as exc:
        raise InputError(field, "a row", f"numbers in every row ({exc})") from None
    return check_trace(*values)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_trace(path: str | Path, field: str = "--trace") -> Requests:
    """A trace file (at most :data:`MAX_TRACE_BYTES`), read as :func:`parse_trace_text` reads its text."""
    return parse_trace_text(read_text(path, field, max_bytes=MAX_TRACE_BYTES), field)
