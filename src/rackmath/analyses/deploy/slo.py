"""A workload served the way an engine runs it: SLO attainment, goodput, and the highest arrival
rate at a stated attainment, with its curve.

:func:`serve` builds what ``rackmath simulate`` runs (the plan's deployment, the runtime profile,
the replica sized for the longest request, the seeded Poisson workload or a trace, one replica
or an xPyD fleet) and keeps the per-request times;
:func:`rackmath.analyses.deploy.rate_search.search` probes arrival rates with them.

Definitions, each as a benchmark client states it (per request, from its times; the metric
definitions are :class:`rackmath.core.requests.RequestTimes`'s):

* **TTFT** runs from arrival, so it includes queueing (vLLM ``bench serve``, AIPerf and MLPerf
  loadgen all time it from the request's issue); **TPOT** = ``(E2E - TTFT) / (O - 1)`` (vLLM's
  ``calculate_metrics``; MLPerf's time per output token); **ITL** the pooled gaps between
  successive tokens, the first excluded (vLLM's ``itls``); **E2E** arrival to last token.
* **A limit** ``metric=time`` is met by a request whose metric is within it. TPOT of a one-token
  output counts as 0 (vLLM's goodput rule); a request the run did not finish meets no TPOT or
  E2E limit, and no TTFT limit without a first token. ITL is pooled over tokens, not requests, so
  it takes only the percentile form.
* **A percentile limit** ``metric_pQ=time`` (MLPerf's form: p99 TTFT and p99 TPOT within their
  limits, ``loadgen/results.cc`` ``PerfConstraintsMet``) is met when at least ``Q`` % of the
  requests (for ITL: of the gaps) are within the time: the share form of ``pQ <= time``.
* **Attainment** is the share of requests meeting every per-request limit together; **goodput**
  is the requests/s (and output tokens/s) of those requests (vLLM's ``request_goodput`` =
  good requests / duration; DistServe, Zhong et al. OSDI'24, arXiv 2401.09670, counts the
  completed requests per second that adhere to the SLOs). DistServe's headline figure, the highest
  rate whose attainment reaches a goal (90 % there), is the rate search's ``max_rate_per_s``.
* **The SLO is met** at a rate when every percentile limit holds and the attainment reaches
  ``--attainment`` (default 0.99 when a limit is bare; without one, the percentile limits decide).

Steady state: the rate search (:mod:`rackmath.analyses.deploy.rate_search`) probes each rate
over a warm-up, a measured window and a tail sized in request lifetimes (:meth:`Server.lifetime_s`).

MTP (multi-token prediction) on the request simulator. Each decode step verifies ``k + 1``
tokens a sequence and an MTP head drafts ``k`` (the step table of
:func:`rackmath.analyses.deploy.simulate.step_table`); a step yields ``E = 1 + a + ... + a^k`` tokens
on average (:class:`~rackmath.analyses.deploy.plan_features.PlanFeatures`). The simulator makes one
token a step, so a request of ``O`` output tokens runs as ``O' = 1 + ceil((O - 1) / E)``
steps' tokens (the expected value, not a draw per step) with ``O - O'`` tokens held in the KV
pool from admission: its reservation is the full ``I + O`` slots, and the context it attends to
is over-stated by at most ``O - O'`` tokens (conservative). TPOT is then
``(finish - first token) / (O - 1)`` over the real ``O``, and output tokens/s counts real
tokens. MTP with a disaggregated fleet is not modelled (refused). A fleet's ``speculation``
(:class:`~rackmath.analyses.serving.speculative.Speculation`: a drafter, a tree, acceptance per
position) runs the same way with its ``T = 1 + w k`` verified tokens, its drafter's time and
its ``E``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rackmath.analyses.deploy import simulate as sim
from rackmath.analyses.deploy.plan_features import PlanFeatures
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.analyses.serving.speculative import Speculation
from rackmath.catalog.offload import host_link
from rackmath.catalog.runtimes import runtime as catalog_runtime
from rackmath.core import requests as rq
from rackmath.errors import InputError
from rackmath.frames import Record
from rackmath.specs import checks
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.workload import LengthDist, Requests, parse_trace_text, with_hit_rate

FloatArray = NDArray[np.float64]

#: The attainment a bare limit asks for when none is stated (MLPerf's p99).
DEFAULT_ATTAINMENT = 0.99
#: Metrics a request is held to one by one (ITL is pooled over tokens).
PER_REQUEST = ("ttft", "tpot", "e2e")


# ----------------------------------------------------------------------------- the SLO


@dataclass(frozen=True)
class Limit:
    """``metric`` within ``limit_s``: for each request (``percentile`` None), or for at least
    ``percentile`` % of them (of the gaps, for ITL)."""

    metric: str
    limit_s: float
    percentile: float | None = None

    @property
    def key(self) -> str:
        return self.metric if self.percentile is None else f"{self.metric}_p{self.percentile:g}"


@dataclass(frozen=True)
class Slo:
    """Limits and the attainment the max-rate search holds them to (see the module docstring)."""

    limits: tuple[Limit, ...]
    attainment_frac: float | None = None

    @classmethod
    def parse(cls, text: str, attainment: float | None = None) -> Slo:
        """``"ttft_p99=2s,tpot=50ms"`` and an attainment in (0, 1] (``--attainment``)."""
        limits = []
        for key, value in sim.parse_slo(text).items():
            metric, _, q = key.partition("_p")
            if metric == "itl" and not q:
                raise InputError(
                    "--slo", key, "itl with a percentile (itl_p99=100ms): ITL pools every token's gap"
                )
            limits.append(Limit(metric, value, float(q) if q else None))
        if attainment is not None:
            checks.fraction("--attainment", attainment, zero=False, allowed="a share in (0, 1], e.g. 0.99")
        elif any(lim.percentile is None for lim in limits):
            attainment = DEFAULT_ATTAINMENT
        return cls(tuple(limits), attainment)

    @property
    def per_request(self) -> tuple[Limit, ...]:
        return tuple(lim for lim in self.limits if lim.metric in PER_REQUEST)

    def describe(self) -> str:
        parts = [f"{lim.key} <= {lim.limit_s:g} s" for lim in self.limits]
        if self.attainment_frac is not None:
            parts.append(f"attainment >= {self.attainment_frac:g}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "limits_s": {lim.key: lim.limit_s for lim in self.limits},
            "attainment_frac": self.attainment_frac,
        }


@dataclass(frozen=True)
class Attainment(Record):
    """The share of measured requests meeting each limit and all of them, and the goodput."""

    requests: int
    met_frac: dict[str, float]
    all_frac: float | None  # None: no per-request limit
    meets_slo: bool
    duration_s: float
    requests_per_s: float
    output_tokens_per_s: float
    goodput_requests_per_s: float
    goodput_output_tokens_per_s: float


def attainment(
    times: rq.RequestTimes, slo: Slo, measured: np.ndarray | None = None, duration_s: float | None = None
) -> Attainment:
    """Count the ``measured`` requests (default all) meeting each limit of ``slo``; rates over
    ``duration_s`` (default the run's span). See the module docstring for the rules."""
    keep = np.ones(times.requests.size, bool) if measured is None else np.asarray(measured, bool)
    n = int(keep.sum())
    done = np.isfinite(times.finish_s)
    one_token = times.requests.output_tokens <= 1
    with np.errstate(invalid="ignore"):
        value = {
            "ttft": times.ttft_s,
            "tpot": np.where(one_token, 0.0, times.tpot_s),
            "e2e": times.e2e_s,
        }
    met: dict[str, float] = {}
    good = keep & done
    for lim in slo.limits:
        if lim.metric == "itl":
            met[lim.key] = times.itl_within_frac(lim.limit_s)
            continue
        x = value[lim.metric]
        ok = np.isfinite(x) & (x <= lim.limit_s) & (done if lim.metric != "ttft" else True)
        met[lim.key] = float((ok & keep).sum() / n) if n else 1.0
        good = good & ok
    per = slo.per_request
    all_frac = float(good.sum() / n) if per and n else (None if not per else 1.0)
    meets = all(met[lim.key] >= lim.percentile / 100.0 for lim in slo.limits if lim.percentile is not None)
    if slo.attainment_frac is not None and all_frac is not None:
        meets = meets and all_frac >= slo.attainment_frac
    span = times.span_s if duration_s is None else duration_s
    completed = keep & done
    out = times.requests.output_tokens
    rate = lambda x: float(x) / span if span > 0 else 0.0  # noqa: E731
    if not per:  # no per-request limit: every completed request is good
        good = completed
    return Attainment(
        requests=n,
        met_frac=met,
        all_frac=all_frac,
        meets_slo=meets,
        duration_s=span,
        requests_per_s=rate(completed.sum()),
        output_tokens_per_s=rate(out[completed].sum()),
        goodput_requests_per_s=rate(good.sum()),
        goodput_output_tokens_per_s=rate(out[good].sum()),
    )


# ----------------------------------------------------------------------------- what is served


@dataclass(frozen=True)
class Workload:
    """What arrives: ``requests`` Poisson arrivals at ``rate_per_s`` with lengths drawn from
    ``input`` and ``output`` (seeded), or a ``trace`` as it was recorded; ``prefix_hit``: the
    share of each prompt found cached (a trace with block ids finds its own hits)."""

    rate_per_s: float | None = 5.0
    requests: int = 1000
    input: LengthDist | None = None
    output: LengthDist | None = None
    seed: int = 0
    trace: Requests | None = None
    prefix_hit: float | None = None

    def lengths(self) -> tuple[float, float, float, float]:
        """(longest input, longest output, mean input, mean output), as ``simulate`` sizes a replica."""
        if self.trace is not None:
            t = self.trace
            i, o = t.input_tokens, t.output_tokens
            return float(i.max()), float(o.max()), float(i.mean()), float(o.mean())
        if self.input is None or self.output is None or self.rate_per_s is None:
            raise InputError("workload", None, "a trace, or an arrival rate with input and output lengths")
        return self.input.max_tokens, self.output.max_tokens, self.input.mean, self.output.mean

    def poisson(self, rate_per_s: float, n: int) -> Requests:
        """``n`` seeded Poisson arrivals at ``rate_per_s`` (the same unit draws at every rate)."""
        assert self.input is not None and self.output is not None
        reqs = rq.poisson_requests(rate_per_s, n, self.input, self.output, self.seed)
        return reqs if self.prefix_hit is None else with_hit_rate(reqs, self.prefix_hit)

    def draw(self) -> Requests:
        if self.trace is not None:
            t = self.trace
            return (
                t if self.prefix_hit is None or t.block_ids is not None else with_hit_rate(t, self.prefix_hit)
            )
        if self.rate_per_s is None:
            raise InputError("workload", None, "a trace, or an arrival rate with input and output lengths")
        return self.poisson(self.rate_per_s, self.requests)


def parse_trace(text: str, field: str = "trace") -> Requests:
    """A trace file's text (CSV or Mooncake JSON lines): :func:`rackmath.specs.workload.parse_trace_text`."""
    return parse_trace_text(text, field)


@dataclass(frozen=True)
class Fleet:
    """How the model is served: a plan on a system under a runtime profile (its caps optionally
    overridden), optionally with an MTP head, a host-memory tier for offloaded KV, or as ``x``
    prefill and ``y`` decode replicas (``"2P1D"``)."""

    model: ModelSpec
    system: SystemSpec
    plan: str
    runtime: str = "vllm"
    efficiency: str = "kernel"
    mtp: int = 0
    acceptance: float = 0.8
    disaggregated: str | None = None
    prefill_plan: str | None = None  # the prefill replicas' plan (default: ``plan``)
    #: speculative decoding stated in full (drafter, tree, acceptance per position); it takes
    #: precedence over ``mtp`` and ``acceptance``
    speculation: Speculation | None = None
    max_seqs: int | None = None
    max_tokens: int | None = None
    host_cache_bytes: float = 0.0  # host memory for KV evicted from HBM (0: none)
    host_link_bytes_per_s: float | None = None  # per chip, per direction (None: the catalog's)
    weights: str | None = None  # weight format (None: as the model ships)
    kv: str | None = None  # KV-cache format (None: the model's default)


@dataclass(frozen=True)
class Server:
    """A fleet built for a workload: the replica (the decode pool's, with xPyD) and what runs it."""

    fleet: Fleet
    replica: sim.Replica
    prefill: sim.Replica | None
    pools: tuple[int, int] | None
    tokens_per_step: float
    setup: dict[str, Any]
    kv_tier: str | None = None

    def run(self, asked: Requests, cutoff_s: float = math.inf) -> Served:
        """Per-request times of ``asked`` (MTP and xPyD as the module docstring says)."""
        if self.pools is not None:
            assert self.prefill is not None
            x, y = self.pools
            f, _ = sim.disaggregated_requests(self.prefill, self.replica, x, y, asked)
            return Served(
                asked, f.first_token_s, f.finish_s, f.itl_gap_s, f.itl_weight, f.steps, f.mean_decode_batch
            )
        speculating = bool(self.fleet.mtp) or self.fleet.speculation is not None
        ran = mtp_requests(asked, self.tokens_per_step) if speculating else asked
        one = sim.run_requests(self.replica, ran, cutoff_s=cutoff_s)
        return Served(
            asked,
            one.first_token_s,
            one.finish_s,
            one.itl_gap_s,
            one.itl_weight,
            one.steps,
            one.mean_decode_batch,
            one.hit_tokens,
            one.host_hit_tokens,
        )

    def capacity_rate_per_s(self, input_mean: float, output_mean: float, prompt_frac: float = 1.0) -> float:
        """The rate search's upper bracket: the replica's (the smaller pool's, with xPyD) capacity."""
        if self.pools is None:
            return sim.capacity_rate_per_s(self.replica, input_mean, output_mean, prompt_frac)
        assert self.prefill is not None
        x, y = self.pools
        return min(
            x * sim.prefill_capacity_rate_per_s(self.prefill, input_mean),
            y * sim.decode_capacity_rate_per_s(self.replica, input_mean, output_mean),
        )

    def lifetime_s(self, input_mean: float, output_mean: float, prompt_frac: float = 1.0) -> float:
        """A request's time in the replica at its heaviest: ``(prefill steps + O - 1) t``."""
        rep = self.replica
        _, t = sim.capacity_step(rep, input_mean, output_mean, prompt_frac)
        chunk = min(rep.limits.chunk_tokens, rep.limits.max_tokens)
        return (math.ceil(prompt_frac * input_mean / chunk) + output_mean - 1) * t


def build(fleet: Fleet, workload: Workload) -> Server:
    """The replica (or the xPyD pools) ``simulate`` runs ``workload`` on."""
    features = PlanFeatures(mtp=fleet.mtp, acceptance=fleet.acceptance)
    spec = fleet.speculation
    tokens_per_step = features.tokens_per_step if spec is None else spec.tokens_per_step
    if (fleet.mtp or spec is not None) and fleet.disaggregated:
        drafts = f"{fleet.mtp if spec is None else spec.depth} draft tokens"
        raise InputError("MTP with disaggregation", f"{drafts}, {fleet.disaggregated}", "one or the other")
    dep = plan_deployment(
        fleet.model, fleet.system, fleet.plan, efficiency=fleet.efficiency, weights=fleet.weights, kv=fleet.kv
    )
    profile = catalog_runtime(fleet.runtime).with_overrides(
        max_seqs=fleet.max_seqs, max_tokens=fleet.max_tokens
    )
    i_max, o_max, i_mean, o_mean = workload.lengths()
    window = fleet.model.max_context
    if window and i_max + o_max > window:
        raise InputError(
            "input + output", f"{i_max + o_max:,.0f} tokens", f"at most {window:,} tokens (its window)"
        )
    link = host_link(fleet.system.chip.id)
    link_bw = fleet.host_link_bytes_per_s or (link.bandwidth_bytes_per_s_per_direction if link else None)
    link_name = "stated" if fleet.host_link_bytes_per_s else (link.link if link else "")
    rep = sim.replica(
        dep,
        profile,
        max_context=i_max + o_max,
        mean_context=i_mean + o_mean,
        mtp=fleet.mtp,
        speculation=spec,
        host_bytes=fleet.host_cache_bytes,
        host_link_bytes_per_s=link_bw,
        host_link=link_name,
    )
    if not fleet.disaggregated:
        setup = {"model": fleet.model.id, **rep.describe()}
        return Server(fleet, rep, None, None, tokens_per_step, setup)
    x, y = sim.parse_xpyd(fleet.disaggregated)
    pre_dep = dep
    if fleet.prefill_plan:
        pre_dep = plan_deployment(
            fleet.model,
            fleet.system,
            fleet.prefill_plan,
            efficiency=fleet.efficiency,
            weights=fleet.weights,
            kv=fleet.kv,
        )
    pre = sim.replica(pre_dep, profile, max_context=i_max + 1, mean_context=i_mean + 1)
    _, tier = sim.kv_transfer_times_s(pre, rep, x, y, [i_mean])
    setup = {
        "model": fleet.model.id,
        "disaggregated": f"{x}P{y}D",
        "kv_tier": tier,
        "prefill": pre.describe(),
        "decode": rep.describe(),
    }
    return Server(fleet, rep, pre, (x, y), 1.0, setup, tier)


@dataclass(frozen=True)
class Served(rq.RequestTimes):
    """Per-request times of a run against the requests as they were asked for."""

    requests: Requests
    first_token_s: FloatArray
    finish_s: FloatArray
    itl_gap_s: FloatArray
    itl_weight: FloatArray
    steps: int
    mean_decode_batch: float
    hit_tokens: NDArray[np.int64] | None = None
    host_hit_tokens: NDArray[np.int64] | None = None


def mtp_requests(requests: Requests, tokens_per_step: float) -> Requests:
    """The requests as the one-token-a-step simulator runs them under MTP (module docstring)."""
    o = requests.output_tokens
    steps = 1 + np.ceil((o - 1) / tokens_per_step).astype(np.int64)
    return replace(requests, output_tokens=steps, cached_tokens=o - steps)


@dataclass(frozen=True)
class SloRun:
    """A simulated workload: percentiles (as ``rackmath simulate`` reports them), the
    per-request times behind them, and the SLO attainment (None without an SLO)."""

    result: sim.SimulationResult
    times: Served
    attainment: Attainment | None
    slo: Slo | None
    setup: dict[str, Any]  # the replica (or the prefill and decode pools), as ``simulate --json``
    tokens_per_step: float  # E with MTP, else 1
    kv_tier: str | None = None  # xPyD: where the KV moves

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.setup,
            "tokens_per_step": self.tokens_per_step,
            "slo": None if self.slo is None else self.slo.to_dict(),
            "result": self.result.to_dict(),
            "attainment": None if self.attainment is None else self.attainment.to_dict(),
        }


def serve(fleet: Fleet, workload: Workload, slo: Slo | None = None) -> SloRun:
    """Simulate ``workload`` on ``fleet`` once, every request measured; see the module docstring."""
    server = build(fleet, workload)
    times = server.run(workload.draw())
    rate = workload.rate_per_s if workload.trace is None else None
    result = sim.summarize(times, rate)
    att = None if slo is None else attainment(times, slo)
    return SloRun(result, times, att, slo, server.setup, server.tokens_per_step, server.kv_tier)
