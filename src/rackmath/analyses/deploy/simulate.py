"""Serve a stream of requests on one planned replica "as the engine ran it".

The step time comes from the per-operator model: one vectorized
:meth:`~rackmath.analyses.serving.deployment.Deployment.step` over a grid of (decode
sequences, prompt tokens per step, mean context), each point a step carrying
``decode_load + prefill_load`` (the pieces :func:`~rackmath.core.loads.mixed_load` is
made of, here with their own sizes). The runtime profile caps the batch, the token budget
and the chunk, and sets the KV pool. A plan with ``dp`` data-parallel ranks runs ``dp`` engines,
each with the profile's caps; they are simulated as one pooled scheduler with ``dp`` times the
caps (perfect load balance across ranks, an optimistic assumption). With
``kv_memory_basis = total`` (vLLM, SGLang) the pool is ``frac x HBM - weights - activations``;
with ``free`` (TensorRT-LLM) it is ``frac x (HBM - weights - activations)``; either is
divided by the KV bytes one token adds per chip (the one serving memory account,
:meth:`~rackmath.analyses.serving.deployment.Deployment.memory` under the runtime's memory
flag). Then :func:`rackmath.core.requests.simulate` runs the
requests.

The maximum rate under SLOs (MLPerf Server/Interactive style: p99 TTFT and p99 TPOT limits)
is a bisection over the Poisson arrival rate: each probe simulates the same seeded workload
at a new rate; the largest rate whose percentiles meet every limit wins.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from rackmath.analyses.serving.deployment import Deployment
from rackmath.analyses.serving.speculative import Speculation, draft_step_s
from rackmath.core import architecture as arch
from rackmath.core import disagg_requests as dq
from rackmath.core import loads
from rackmath.core import network as net
from rackmath.core import requests as rq
from rackmath.errors import InputError
from rackmath.progress import progress
from rackmath.specs.runtime import RuntimeProfile
from rackmath.specs.workload import LengthDist, Requests

#: The workload pieces the faces use (faces import analyses, never the core).

#: Most requests one simulation may run, and most steps (the work bound checked up front).
MAX_REQUESTS = 10**6
MAX_STEPS = 5 * 10**6
#: Requests per probe of the max-rate search, and probes (bisection halvings in log rate).
SEARCH_REQUESTS = 20_000
SEARCH_PROBES = 12
#: SLO metric names: ``ttft|tpot|e2e`` and a percentile ``p50|p90|p99``.
METRICS: tuple[str, ...] = tuple(f"{m}_p{q}" for m in ("ttft", "tpot", "e2e") for q in (50, 90, 99))
#: Context grid points of the step table (geometric from 1 token to the longest request).
CONTEXT_POINTS = 10


def _time_s(text: str, field: str) -> float:
    t = text.strip().lower()
    for suffix, scale in (("ms", 1e-3), ("us", 1e-6), ("s", 1.0)):
        if t.endswith(suffix):
            try:
                value = float(t[: -len(suffix)]) * scale
            except ValueError:
                break
            if math.isfinite(value) and value > 0:
                return value
            break
    raise InputError(field, text, "a positive time with a unit: 2s, 50ms, 800us")


def parse_slo(text: str) -> dict[str, float]:
    """``"ttft_p99=2s,tpot_p99=50ms"`` -> ``{"ttft_p99": 2.0, "tpot_p99": 0.05}``."""
    out: dict[str, float] = {}
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or key.lower() not in METRICS:
            raise InputError("--slo", part, f"metric=time pairs, metrics {', '.join(METRICS)}")
        out[key.lower()] = _time_s(value, f"--slo {key}")
    if not out:
        raise InputError("--slo", text, "at least one limit, e.g. ttft_p99=2s,tpot_p99=50ms")
    return out


# ----------------------------------------------------------------------------- replica


def kv_pool_tokens(dep: Deployment, mean_context: float) -> float:
    """Token slots of KV one replica holds under its runtime's memory setting: what the memory
    flag lets a chip fill (:meth:`~rackmath.analyses.serving.deployment.Deployment.usable_for`)
    less the weights and the activations of a full step, over the KV bytes one token adds."""
    assert dep.runtime is not None
    tokens = dep.runtime.max_tokens
    empty = dep.memory(0.0, mean_context, tokens_in_flight=tokens)
    one = dep.memory(1.0, mean_context, tokens_in_flight=tokens)
    room = float(np.asarray(empty.usable_bytes - empty.total_bytes))
    per_token = float(np.asarray(one.kv_bytes - empty.kv_bytes)) / mean_context
    return max(room, 0.0) / per_token


def _grid(top: float, first: float = 1.0) -> np.ndarray:
    """0, then ~sqrt(2) steps from ``first`` to ``top`` (inclusive)."""
    if top < first:
        return np.array([0.0, max(top, 0.0)]) if top > 0 else np.array([0.0])
    k = math.ceil(2 * math.log2(top / first))
    pts = np.unique(np.round(first * 2 ** (np.arange(k + 1) / 2)))
    return np.unique(np.concatenate([[0.0], pts[pts < top], [top]]))


def step_table(
    dep: Deployment,
    max_seqs: int,
    max_tokens: int,
    max_context: float,
    mtp: int = 0,
    speculation: Speculation | None = None,
) -> rq.StepTable:
    """Step seconds over (decode sequences, prompt tokens, mean context), one vectorized pass.

    With ``mtp = k > 0`` every decoding sequence verifies ``k + 1`` tokens a step and an MTP
    head drafts ``k`` (each one layer's share of the plain decode step,
    :func:`rackmath.core.speculative.mtp_draft_s`), as the search prices MTP. A
    ``speculation`` (which takes precedence) verifies its ``T = 1 + w k`` tokens a sequence
    and adds its drafter's time
    (:func:`rackmath.analyses.serving.speculative.draft_step_s`)."""
    if speculation is None and mtp:
        speculation = Speculation(mtp, (1.0,) * mtp)  # the table needs the shape, not the rates
    verified = 1.0 if speculation is None else float(speculation.tokens_verified)
    d = _grid(float(max_seqs))
    p = _grid(float(max_tokens), 16.0)
    c = np.unique(np.round(np.geomspace(1.0, max(max_context, 2.0), CONTEXT_POINTS)))
    kv_el = dep.kv_bytes_per_element

    def steps(dd: np.ndarray) -> np.ndarray:
        seqs, ctx = dd[:, None, None], c[None, None, :]
        dec = loads.decode_load(dep.model, seqs, ctx, kv_el, tokens_per_sequence=verified)
        pre = loads.prefill_load(dep.model, (p > 0).astype(float)[None, :, None], p[None, :, None], kv_el)
        load = replace(
            dec,
            prefill_sequences=pre.prefill_sequences,
            prefill_length=pre.prefill_length,
            prefill_attention_flops=pre.prefill_attention_flops,
            prefill_kv_write_bytes=pre.prefill_kv_write_bytes,
        )
        t = dep.step(load, decode=True).step_s
        if speculation is not None:
            plain = dep.step(loads.decode_load(dep.model, seqs, ctx, kv_el), decode=True).step_s
            t = t + np.where(seqs > 0, draft_step_s(dep, speculation, seqs, ctx, plain), 0.0)
        return np.broadcast_to(t, (dd.size, p.size, c.size))

    # the d = 0 plane (prompt chunks only) is its own pass, so its attention is costed as
    # prefill attention; its p = 0 corner is an empty step, never run, that still bounds the
    # interpolation below the first prompt-token point: it takes that point's time (a step of a
    # few tokens reads every weight, as the first point's does), not the zero-row efficiency's
    plane = np.array(steps(d[:1])[:, 1:, :], dtype=float)
    plane = np.concatenate([plane[:, :1, :], plane], axis=1) if p.size > 1 else np.zeros((1, 1, c.size))
    step_s = np.concatenate([plane, steps(d[1:])], axis=0) if d.size > 1 else plane
    return rq.StepTable(d, p, c, np.array(step_s, dtype=float))


@dataclass(frozen=True)
class Replica:
    """A planned deployment served by its runtime: the caps, KV pool and step table."""

    deployment: Deployment
    limits: rq.Limits
    table: rq.StepTable

    @property
    def runtime(self) -> RuntimeProfile:
        runtime = self.deployment.runtime
        assert runtime is not None  # replica() serves it with one
        return runtime

    def describe(self) -> dict[str, Any]:
        r = self.runtime
        return {
            "deployment": self.deployment.describe(),
            "runtime": {
                "id": r.id,
                "name": r.name,
                "version": r.version,
                "max_seqs": self.limits.max_seqs,
                "max_tokens": self.limits.max_tokens,
                "chunk_tokens": self.limits.chunk_tokens,
                "kv_memory_frac": float(r.memory_frac(self.deployment.dims.engine_chips)),
                "kv_memory_basis": r.kv_memory_basis,
                "kv_pool_tokens": self.limits.kv_tokens,
                "policy": r.policy,
                "chunked_prefill": r.chunked_prefill,
                "cuda_graphs": r.cuda_graphs,
                "source": list(r.source),
            },
        }


def replica(
    dep: Deployment,
    runtime: RuntimeProfile,
    *,
    max_context: float,
    mean_context: float,
    mtp: int = 0,
    speculation: Speculation | None = None,
) -> Replica:
    """Build the replica; refuses a KV pool that cannot hold one request of ``max_context``.
    ``mtp``: draft tokens an MTP head adds to every decode step, or a ``speculation``'s verify
    width and drafter (:func:`step_table`)."""
    dep = replace(dep, runtime=runtime)
    kv = kv_pool_tokens(dep, mean_context)
    if kv < max_context:
        raise InputError(
            "deployment",
            f"{dep.model.id} on {dep.chips} x {dep.system.chip.id} ({dep.plan})",
            f"a plan whose KV pool ({kv:,.0f} tokens under {runtime.id}) holds one {max_context:,.0f}-token "
            "request: more chips, lower-precision weights, or a larger memory fraction",
        )
    engines = dep.plan.dp  # one scheduler per data-parallel rank, pooled (perfect balance)
    seqs = int(min(engines * runtime.max_seqs, kv // 2))  # no more sequences than 2-token requests fit
    limits = rq.Limits(
        max_seqs=max(seqs, 1),
        max_tokens=engines * runtime.max_tokens,
        chunk_tokens=min(runtime.chunk_tokens, runtime.max_tokens),
        kv_tokens=kv,
        policy=runtime.policy,
        chunked=runtime.chunked_prefill,
    )
    table = step_table(dep, limits.max_seqs, limits.max_tokens, max_context, mtp, speculation)
    return Replica(dep, limits, table)


# ----------------------------------------------------------------------------- results


def _pct(x: np.ndarray, q: float) -> float | None:
    x = x[np.isfinite(x)]
    return float(np.percentile(x, q)) if x.size else None


@dataclass(frozen=True)
class SimulationResult:
    """Latency percentiles and throughput of one simulated run (SI)."""

    requests: int
    rate_per_s: float | None  # None for a trace
    metrics: dict[str, float | None]
    output_tokens_per_s: float
    requests_per_s: float
    mean_decode_batch: float
    steps: int
    span_s: float

    def meets(self, slo: dict[str, float]) -> bool:
        return all((self.metrics.get(k) or 0.0) <= v for k, v in slo.items())

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "rate_per_s": self.rate_per_s,
            **{f"{k}_s": v for k, v in self.metrics.items()},
            "output_tokens_per_s": self.output_tokens_per_s,
            "requests_per_s": self.requests_per_s,
            "mean_decode_batch": self.mean_decode_batch,
            "steps": self.steps,
            "span_s": self.span_s,
        }


def summarize(run: rq.RequestRun | dq.DisaggregatedRun, rate_per_s: float | None) -> SimulationResult:
    series = {"ttft": run.ttft_s, "tpot": run.tpot_s, "e2e": run.e2e_s}
    metrics = {f"{m}_p{q}": _pct(x, q) for m, x in series.items() for q in (50, 90, 99)}
    return SimulationResult(
        requests=run.requests.size,
        rate_per_s=rate_per_s,
        metrics=metrics,
        output_tokens_per_s=run.output_tokens_per_s,
        requests_per_s=run.requests.size / run.span_s if run.span_s > 0 else 0.0,
        mean_decode_batch=run.mean_decode_batch,
        steps=run.steps,
        span_s=run.span_s,
    )


def run_requests(rep: Replica, requests: Requests) -> rq.RequestRun:
    """Simulate ``requests`` on the replica, refusing more than :data:`MAX_STEPS` steps; the
    per-request times (:func:`run` summarizes them)."""
    if requests.size > MAX_REQUESTS:
        raise InputError("--requests", requests.size, f"at most {MAX_REQUESTS:,}")
    steps = rq.work_steps(requests, rep.limits)
    if steps > MAX_STEPS:
        raise InputError(
            "--requests",
            f"{requests.size:,} requests (at least {steps:,.0f} steps)",
            f"a run of at most {MAX_STEPS:,} steps: fewer requests or shorter outputs",
        )
    return rq.simulate(requests, rep.table, rep.limits)


def run(rep: Replica, requests: Requests, rate_per_s: float | None = None) -> SimulationResult:
    """Simulate ``requests`` on the replica (:func:`run_requests`): percentiles and throughput."""
    return summarize(run_requests(rep, requests), rate_per_s)


@dataclass(frozen=True)
class RateSearch:
    """The largest Poisson rate whose percentiles meet the SLOs, with the probes made."""

    slo: dict[str, float]
    best: SimulationResult | None
    probes: tuple[SimulationResult, ...]
    #: when no rate meets the SLOs: the best value of each limited metric reached (lowest rate)
    best_reached: dict[str, float | None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "slo_s": self.slo,
            "feasible": self.best is not None,
            "max_rate_per_s": self.best.rate_per_s if self.best else None,
            "best": self.best.to_dict() if self.best else None,
            "best_reached_s": self.best_reached,
            "probes": [p.to_dict() for p in self.probes],
        }


def capacity_rate_per_s(rep: Replica, input_mean: float, output_mean: float) -> float:
    """Requests/s of a replica whose steps run the largest batch the caps and KV allow, in steady
    mixed state (the search's upper bracket): ``B / (O t)`` with ``B`` decoding and ``B I / O``
    prompt tokens per step."""
    lim = rep.limits
    b = min(lim.max_seqs, lim.kv_tokens / (input_mean + output_mean))
    prompt = min(b * input_mean / output_mean, lim.max_tokens)
    b = min(b, max(lim.max_tokens - prompt, 1.0))
    t = float(rep.table(b, prompt, input_mean + output_mean / 2))
    return b / (output_mean * t)


def max_rate(
    rep: Replica,
    input_dist: LengthDist,
    output_dist: LengthDist,
    slo: dict[str, float],
    *,
    requests: int = SEARCH_REQUESTS,
    probes: int = SEARCH_PROBES,
    seed: int = 0,
) -> RateSearch:
    """Bisect the arrival rate (in log space) between a light load and 1.5x the capacity."""
    hi = 1.5 * capacity_rate_per_s(rep, input_dist.mean, output_dist.mean)

    def simulate_at(rate: float) -> SimulationResult:
        return run(rep, rq.poisson_requests(rate, requests, input_dist, output_dist, seed), rate)

    return bisect_rate(simulate_at, hi, slo, probes)


def bisect_rate(
    simulate_at: Callable[[float], SimulationResult], hi: float, slo: dict[str, float], probes: int
) -> RateSearch:
    """The largest Poisson rate (of ``probes`` log-space bisections between ``hi / 1000`` and
    ``hi``) whose simulated percentiles meet ``slo``; ``simulate_at(rate)`` runs one probe."""
    with progress("Searching the highest rate within the SLOs", total=probes + 2) as advance:
        return _bisect(simulate_at, hi, slo, probes, advance)


def _bisect(
    simulate_at: Callable[[float], SimulationResult],
    hi: float,
    slo: dict[str, float],
    probes: int,
    advance: Callable[[float], None],
) -> RateSearch:
    lo = hi / 1000.0
    made: list[SimulationResult] = []

    def probe(rate: float) -> SimulationResult:
        res = simulate_at(rate)
        made.append(res)
        advance(1)
        return res

    low = probe(lo)
    if not low.meets(slo):
        reached = {k: low.metrics.get(k) for k in slo}
        return RateSearch(slo, None, tuple(made), reached)
    best = low
    top = probe(hi)
    if top.meets(slo):
        return RateSearch(slo, top, tuple(made), {k: top.metrics.get(k) for k in slo})
    for _ in range(probes):
        mid = math.sqrt(lo * hi)
        res = probe(mid)
        if res.meets(slo):
            lo, best = mid, res
        else:
            hi = mid
    return RateSearch(slo, best, tuple(made), {k: best.metrics.get(k) for k in slo})


# ----------------------------------------------------------------------------- xPyD


def parse_xpyd(text: str) -> tuple[int, int]:
    """``"2P1D"`` -> ``(2, 1)``: prefill and decode replicas (each from 1 to 1,024)."""
    t = text.strip().upper()
    head, sep, tail = t.partition("P")
    allowed = f"xPyD with whole numbers of replicas from 1 to {dq.MAX_POOL_REPLICAS:,}, e.g. 2P1D"
    if not sep or not tail.endswith("D") or not head.isdigit() or not tail[:-1].isdigit():
        raise InputError("--disaggregated", text, allowed)
    x, y = int(head), int(tail[:-1])
    if not (1 <= x <= dq.MAX_POOL_REPLICAS and 1 <= y <= dq.MAX_POOL_REPLICAS):
        raise InputError("--disaggregated", text, allowed)
    return x, y


def kv_transfer_times_s(
    prefill: Replica, decode: Replica, x: int, y: int, input_tokens: ArrayLike
) -> tuple[np.ndarray, str]:
    """Each prompt's KV move, as the search times it (:mod:`rackmath.analyses.deploy.disagg_search`):
    ``kv(I) / min(chips_p, chips_d) / B + alpha`` over the scale-up fabric when the whole fleet
    sits in one scale-up domain of one system, else over the slower scale-out network."""
    from rackmath.analyses.deploy.disagg_search import kv_tier_topology

    p, d = prefill.deployment, decode.deployment
    slow, up = kv_tier_topology(p.system, d.system)
    together = p.system.id == d.system.id and x * p.chips + y * d.chips <= up.chips_per_domain
    kv = arch.kv_bytes_per_sequence(d.model, np.asarray(input_tokens, float), d.kv_bytes_per_element)
    links = min(p.chips, d.chips)
    return np.asarray(net.kv_transfer_s(kv, links, up if together else slow), dtype=float), (
        "scale-up" if together else "scale-out"
    )


def disaggregated_run(
    prefill: Replica,
    decode: Replica,
    x: int,
    y: int,
    requests: Requests,
    rate_per_s: float | None = None,
) -> tuple[SimulationResult, str]:
    """Simulate an xPyD fleet (:mod:`rackmath.core.disagg_requests`); returns the percentiles and
    the KV tier. The work bound is checked per pool as for one replica."""
    fleet_run, tier = disaggregated_requests(prefill, decode, x, y, requests)
    return summarize(fleet_run, rate_per_s), tier


def disaggregated_requests(
    prefill: Replica, decode: Replica, x: int, y: int, requests: Requests
) -> tuple[dq.DisaggregatedRun, str]:
    """The xPyD fleet's per-request times and the KV tier (:func:`disaggregated_run`)."""
    if requests.size > MAX_REQUESTS:
        raise InputError("--requests", requests.size, f"at most {MAX_REQUESTS:,}")
    steps = rq.work_steps(requests, prefill.limits) / x + rq.work_steps(requests, decode.limits) / y
    if steps > MAX_STEPS:
        raise InputError(
            "--requests",
            f"{requests.size:,} requests (at least {steps:,.0f} steps)",
            f"a run of at most {MAX_STEPS:,} steps: fewer requests or shorter outputs",
        )
    t_kv, tier = kv_transfer_times_s(prefill, decode, x, y, requests.input_tokens)
    run_ = dq.simulate_disaggregated(
        requests,
        prefill_table=prefill.table,
        prefill_limits=prefill.limits,
        prefill_replicas=x,
        decode_table=decode.table,
        decode_limits=decode.limits,
        decode_replicas=y,
        kv_transfer_s=t_kv,
    )
    return run_, tier


def prefill_capacity_rate_per_s(rep: Replica, input_mean: float) -> float:
    """Prompts/s of a prefill-only replica running full chunks of ``max_tokens`` prompt tokens."""
    chunk = rep.limits.max_tokens
    return chunk / input_mean / float(rep.table(0.0, chunk, input_mean / 2))


def decode_capacity_rate_per_s(rep: Replica, input_mean: float, output_mean: float) -> float:
    """Requests/s of a decode-only replica at the largest batch its caps and KV allow."""
    lim = rep.limits
    b = max(min(lim.max_seqs, lim.kv_tokens / (input_mean + output_mean)), 1.0)
    return b / (output_mean * float(rep.table(b, 0.0, input_mean + output_mean / 2)))


def max_rate_disaggregated(
    prefill: Replica,
    decode: Replica,
    x: int,
    y: int,
    input_dist: LengthDist,
    output_dist: LengthDist,
    slo: dict[str, float],
    *,
    requests: int = SEARCH_REQUESTS,
    probes: int = SEARCH_PROBES,
    seed: int = 0,
) -> RateSearch:
    """The highest Poisson rate an xPyD fleet serves within ``slo``: the same bisection as one
    replica's (:func:`bisect_rate`), each probe a :func:`disaggregated_run`, bracketed by 1.5x
    the smaller pool's capacity (``x`` prefill replicas' prompts/s, ``y`` decode replicas'
    requests/s)."""
    i, o = input_dist.mean, output_dist.mean
    hi = 1.5 * min(x * prefill_capacity_rate_per_s(prefill, i), y * decode_capacity_rate_per_s(decode, i, o))

    def simulate_at(rate: float) -> SimulationResult:
        reqs = rq.poisson_requests(rate, requests, input_dist, output_dist, seed)
        return disaggregated_run(prefill, decode, x, y, reqs, rate)[0]

    return bisect_rate(simulate_at, hi, slo, probes)
