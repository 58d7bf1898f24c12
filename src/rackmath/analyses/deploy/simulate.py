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

SLO attainment, goodput and the highest rate at a stated attainment are
:mod:`rackmath.analyses.deploy.slo`'s; this module parses the SLO text (:func:`parse_slo`).
"""

from __future__ import annotations

import math
import re
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
from rackmath.specs.runtime import RuntimeProfile
from rackmath.specs.workload import Requests

#: Most requests one simulation may run, and most steps (the work bound checked up front).
MAX_REQUESTS = 10**6
MAX_STEPS = 5 * 10**6
#: Latency metrics: each request's TTFT, TPOT and end-to-end, and the pooled inter-token gaps.
METRICS: tuple[str, ...] = ("ttft", "tpot", "itl", "e2e")
#: Percentiles every result reports.
PERCENTILES: tuple[int, ...] = (50, 90, 99)
#: Context grid points of the step table (geometric from 1 token to the longest request).
CONTEXT_POINTS = 10
_SLO_KEY = re.compile(r"^(ttft|tpot|itl|e2e)(?:_p(\d{1,2}(?:\.\d+)?))?$")


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
    """``"ttft_p99=2s,tpot=50ms"`` -> ``{"ttft_p99": 2.0, "tpot": 0.05}``: limits in seconds, keyed
    by a metric of :data:`METRICS`, bare (a limit on each request) or with a percentile ``_pQ``
    (``0 < Q < 100``: that percentile of the metric within the limit)."""
    out: dict[str, float] = {}
    allowed = (
        "metric=time pairs: ttft, tpot, itl, e2e, bare or with a percentile (ttft_p99), e.g. ttft_p99=2s"
    )
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        key, sep, value = part.partition("=")
        match = _SLO_KEY.match(key.lower())
        if not sep or not match or (match.group(2) is not None and not 0 < float(match.group(2)) < 100):
            raise InputError("--slo", part, allowed)
        out[key.lower()] = _time_s(value, f"--slo {key}")
    if not out:
        raise InputError("--slo", text, "at least one limit, e.g. ttft_p99=2s,tpot_p99=50ms")
    return out


# ----------------------------------------------------------------------------- replica


def kv_bytes_per_token_per_chip(dep: Deployment, mean_context: float, tokens_in_flight: float) -> float:
    """KV bytes one token adds on one chip, in the serving memory account."""
    empty = dep.memory(0.0, mean_context, tokens_in_flight=tokens_in_flight)
    one = dep.memory(1.0, mean_context, tokens_in_flight=tokens_in_flight)
    return float(np.asarray(one.kv_bytes - empty.kv_bytes)) / mean_context


def kv_pool_tokens(dep: Deployment, mean_context: float) -> float:
    """Token slots of KV one replica holds under its runtime's memory setting: what the memory
    flag lets a chip fill (:meth:`~rackmath.analyses.serving.deployment.Deployment.usable_for`)
    less the weights and the activations of a full step, over the KV bytes one token adds."""
    assert dep.runtime is not None
    tokens = dep.runtime.max_tokens
    empty = dep.memory(0.0, mean_context, tokens_in_flight=tokens)
    room = float(np.asarray(empty.usable_bytes - empty.total_bytes))
    per_token = kv_bytes_per_token_per_chip(dep, mean_context, tokens)
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
    """A planned deployment under a runtime: its caps, KV pool, step table and host tier."""

    deployment: Deployment
    limits: rq.Limits
    table: rq.StepTable
    host: rq.HostTier | None = None
    #: the host link each chip loads offloaded KV over (bytes/s per direction) and what it is
    host_link_bytes_per_s: float | None = None
    host_link: str = ""

    @property
    def runtime(self) -> RuntimeProfile:
        runtime = self.deployment.runtime
        assert runtime is not None  # replica() serves it with one
        return runtime

    def describe(self) -> dict[str, Any]:
        r = self.runtime
        out: dict[str, Any] = {
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
                "date": r.date,
                "source": list(r.source),
            },
        }
        if self.host is not None:
            out["host_tier"] = {
                "kv_tokens": self.host.tokens,
                "load_s_per_token": self.host.load_s_per_token,
                "link": self.host_link,
                "link_bytes_per_s_per_chip": self.host_link_bytes_per_s,
            }
        return out

    def check_prompts(self, longest_input: float) -> None:
        """Without chunked prefill a prompt must fit one step's token budget whole: refuse a
        longer one in one line naming the option that would admit it."""
        r, lim = self.runtime, self.limits
        if r.chunked_prefill or longest_input <= lim.max_tokens:
            return
        fix = f"--runtime {r.chunked_variant} ({r.chunking_flag})" if r.chunked_variant else "chunked prefill"
        raise InputError(
            "request length",
            f"a {longest_input:,.0f}-token prompt",
            f"prompts of at most {r.token_budget_flag} = {lim.max_tokens:,} tokens under {r.id}, whose "
            f"prefill is not chunked; {fix} admits longer ones, or a larger --max-tokens",
        )


def replica(
    dep: Deployment,
    runtime: RuntimeProfile,
    *,
    max_context: float,
    mean_context: float,
    mtp: int = 0,
    speculation: Speculation | None = None,
    host_bytes: float = 0.0,
    host_link_bytes_per_s: float | None = None,
    host_link: str = "",
) -> Replica:
    """Build the replica; refuses a KV pool that cannot hold one request of ``max_context``.
    ``mtp``: draft tokens an MTP head adds to every decode step, or a ``speculation``'s verify
    width and drafter (:func:`step_table`). ``host_bytes``: host memory for KV evicted from HBM
    (the replica's, all chips' shards), loaded back over each chip's host link at
    ``host_link_bytes_per_s`` (every chip its own shard)."""
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
    host = None
    if host_bytes > 0:
        if not host_link_bytes_per_s:
            raise InputError(
                "--host-link",
                None,
                f"the host link of {dep.system.chip.id} (none in the catalog's host_links.yaml): state it, "
                "e.g. --host-link 64GB/s for PCIe Gen5 x16",
            )
        per_chip = kv_bytes_per_token_per_chip(dep, mean_context, runtime.max_tokens)
        host = rq.HostTier(host_bytes / (per_chip * dep.chips), per_chip / host_link_bytes_per_s)
    return Replica(dep, limits, table, host, host_link_bytes_per_s, host_link)


# ----------------------------------------------------------------------------- results


def _pct(x: np.ndarray, q: float) -> float | None:
    x = x[np.isfinite(x)]
    return float(np.percentile(x, q)) if x.size else None


@dataclass(frozen=True)
class SimulationResult:
    """Latency percentiles, throughput and prefix reuse of one simulated run (SI), over its
    measured requests (all of them, unless a probe set a warm-up and a window)."""

    requests: int
    rate_per_s: float | None  # None for a trace
    metrics: dict[str, float | None]
    output_tokens_per_s: float
    requests_per_s: float
    mean_decode_batch: float
    steps: int
    span_s: float
    #: share of the measured prompts' tokens found cached, and of them loaded from the host tier
    prefix_hit_frac: float | None = None
    host_hit_frac: float | None = None

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
            "prefix_hit_frac": self.prefix_hit_frac,
            "host_hit_frac": self.host_hit_frac,
        }


def summarize(
    run: rq.RequestTimes,
    rate_per_s: float | None,
    *,
    measured: np.ndarray | None = None,
    duration_s: float | None = None,
    steps: int = 0,
    mean_decode_batch: float = 0.0,
) -> SimulationResult:
    """Percentiles over the ``measured`` requests (default all), throughput over ``duration_s``
    (default the run's span: first arrival to last finish, as ``vllm bench serve`` divides by
    its run's duration). ITL percentiles pool every gap of the run (the gaps are not tied to a
    request)."""
    keep = np.ones(run.requests.size, bool) if measured is None else np.asarray(measured, bool)
    series = {"ttft": run.ttft_s[keep], "tpot": run.tpot_s[keep], "e2e": run.e2e_s[keep]}
    metrics: dict[str, float | None] = {}
    for m in METRICS:
        for q in PERCENTILES:
            metrics[f"{m}_p{q}"] = run.itl_percentile_s(q) if m == "itl" else _pct(series[m], q)
    span = run.span_s if duration_s is None else duration_s
    done = keep & np.isfinite(run.finish_s)
    out = float(run.requests.output_tokens[done].sum())
    hit = getattr(run, "hit_tokens", None)
    host = getattr(run, "host_hit_tokens", None)
    prompt = float(run.requests.input_tokens[keep].sum())
    return SimulationResult(
        requests=int(keep.sum()),
        rate_per_s=rate_per_s,
        metrics=metrics,
        output_tokens_per_s=out / span if span > 0 else 0.0,
        requests_per_s=float(done.sum()) / span if span > 0 else 0.0,
        mean_decode_batch=mean_decode_batch or getattr(run, "mean_decode_batch", 0.0),
        steps=steps or int(getattr(run, "steps", 0)),
        span_s=span,
        prefix_hit_frac=None if hit is None else float(hit[keep].sum()) / prompt,
        host_hit_frac=None if host is None else float(host[keep].sum()) / prompt,
    )


def run_requests(rep: Replica, requests: Requests, *, cutoff_s: float = math.inf) -> rq.RequestRun:
    """Simulate ``requests`` on the replica, refusing more than :data:`MAX_STEPS` steps and
    prompts the runtime cannot take; the per-request times (:func:`run` summarizes them)."""
    if requests.size > MAX_REQUESTS:
        raise InputError("--requests", requests.size, f"at most {MAX_REQUESTS:,}")
    rep.check_prompts(float(requests.input_tokens.max()))
    steps = rq.work_steps(requests, rep.limits)
    if steps > MAX_STEPS:
        raise InputError(
            "--requests",
            f"{requests.size:,} requests (at least {steps:,.0f} steps)",
            f"a run of at most {MAX_STEPS:,} steps: fewer requests or shorter outputs",
        )
    return rq.simulate(requests, rep.table, rep.limits, cutoff_s=cutoff_s, host=rep.host)


def run(rep: Replica, requests: Requests, rate_per_s: float | None = None) -> SimulationResult:
    """Simulate ``requests`` on the replica (:func:`run_requests`): percentiles and throughput."""
    return summarize(run_requests(rep, requests), rate_per_s)


def capacity_step(
    rep: Replica, input_mean: float, output_mean: float, prompt_frac: float = 1.0
) -> tuple[float, float]:
    """(sequences, step s) of a replica whose steps run the largest batch the caps and KV allow,
    in steady mixed state: ``B`` decoding and ``B f I / O`` prompt tokens per step (``f``: the
    share of each prompt that is prefilled, ``1 - hit rate``)."""
    lim = rep.limits
    b = min(lim.max_seqs, lim.kv_tokens / (input_mean + output_mean))
    prompt = min(b * prompt_frac * input_mean / output_mean, lim.max_tokens)
    b = min(b, max(lim.max_tokens - prompt, 1.0))
    return b, float(rep.table(b, prompt, input_mean + output_mean / 2))


def capacity_rate_per_s(
    rep: Replica, input_mean: float, output_mean: float, prompt_frac: float = 1.0
) -> float:
    """Requests/s at :func:`capacity_step` (the rate search's upper bracket): ``B / (O t)``."""
    b, t = capacity_step(rep, input_mean, output_mean, prompt_frac)
    return b / (output_mean * t)


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
    prefill.check_prompts(float(requests.input_tokens.max()))
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
