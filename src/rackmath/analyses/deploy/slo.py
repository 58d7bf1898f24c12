"""A workload served the way an engine runs it, and the share of requests that meet an SLO.

:func:`serve` builds what ``rackmath simulate`` builds, in the same order (the plan's
deployment, the runtime profile, the replica sized for the longest request, the seeded Poisson
workload or a trace, one replica or an xPyD fleet) and keeps the simulator's per-request
results. From them :func:`attainment` counts the requests that meet a TTFT limit and a TPOT
limit: TTFT runs from arrival, so it includes the time a request waits in the queue; a request
of one output token has no TPOT and meets any TPOT limit once it has finished; a request the
run did not finish meets neither. Goodput is the requests meeting both, per second of the run.

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

import csv
import io
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rackmath.analyses.deploy import simulate as sim
from rackmath.analyses.deploy.plan_features import PlanFeatures
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.analyses.serving.speculative import Speculation
from rackmath.catalog.runtimes import runtime as catalog_runtime
from rackmath.core import requests as rq
from rackmath.errors import InputError
from rackmath.frames import Record
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.workload import LengthDist, Requests, check_trace

FloatArray = NDArray[np.float64]


def parse_trace(text: str, field: str = "trace") -> Requests:
    """CSV text of ``arrival_s,input_tokens,output_tokens`` rows (a header line is allowed),
    checked by :func:`rackmath.specs.workload.check_trace`; ``rackmath simulate --trace``
    reads the same format."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r and r[0].strip()]
    if rows and not _is_number(rows[0][0]):
        rows = rows[1:]
    if not rows or any(len(r) < 3 for r in rows):
        raise InputError(field, f"{len(rows)} rows", "CSV rows of arrival_s,input_tokens,output_tokens")
    try:
        cols = [[float(r[j]) for r in rows] for j in range(3)]
    except ValueError as exc:
        raise InputError(field, "a row", f"numbers in every row ({exc})") from None
    return check_trace(*cols)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Workload:
    """What arrives: ``requests`` Poisson arrivals at ``rate_per_s`` with lengths drawn from
    ``input`` and ``output`` (seeded), or a ``trace`` as it was recorded."""

    rate_per_s: float | None = 5.0
    requests: int = 1000
    input: LengthDist | None = None
    output: LengthDist | None = None
    seed: int = 0
    trace: Requests | None = None

    def lengths(self) -> tuple[float, float, float, float]:
        """(longest input, longest output, mean input, mean output), as ``simulate`` sizes a replica."""
        if self.trace is not None:
            t = self.trace
            i, o = t.input_tokens, t.output_tokens
            return float(i.max()), float(o.max()), float(i.mean()), float(o.mean())
        if self.input is None or self.output is None or self.rate_per_s is None:
            raise InputError("workload", None, "a trace, or an arrival rate with input and output lengths")
        return self.input.max_tokens, self.output.max_tokens, self.input.mean, self.output.mean

    def draw(self) -> Requests:
        if self.trace is not None:
            return self.trace
        assert self.input is not None and self.output is not None and self.rate_per_s is not None
        return rq.poisson_requests(self.rate_per_s, self.requests, self.input, self.output, self.seed)


@dataclass(frozen=True)
class Fleet:
    """How the model is served: a plan on a system under a runtime profile, optionally with
    an MTP head, optionally as ``x`` prefill and ``y`` decode replicas (``"2P1D"``)."""

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


@dataclass(frozen=True)
class Attainment(Record):
    """The share of requests meeting each limit, and both (fractions; None: no limit set)."""

    requests: int
    ttft_limit_s: float | None
    tpot_limit_s: float | None
    ttft_met_frac: float
    tpot_met_frac: float
    both_met_frac: float
    goodput_requests_per_s: float


def attainment(times: rq.RequestTimes, ttft_limit_s: float | None, tpot_limit_s: float | None) -> Attainment:
    """Count the requests of ``times`` meeting each limit (see the module docstring)."""
    ttft, tpot = times.ttft_s, times.tpot_s
    done = np.isfinite(times.finish_s)
    ttft_ok = np.isfinite(ttft) & (ttft <= (math.inf if ttft_limit_s is None else ttft_limit_s))
    one_token = times.requests.output_tokens <= 1
    with np.errstate(invalid="ignore"):
        tpot_ok = done & (one_token | (tpot <= (math.inf if tpot_limit_s is None else tpot_limit_s)))
    both = ttft_ok & tpot_ok
    n = times.requests.size
    span = times.span_s if np.isfinite(times.span_s) else float(np.nanmax(times.finish_s))
    return Attainment(
        requests=n,
        ttft_limit_s=ttft_limit_s,
        tpot_limit_s=tpot_limit_s,
        ttft_met_frac=float(ttft_ok.mean()),
        tpot_met_frac=float(tpot_ok.mean()),
        both_met_frac=float(both.mean()),
        goodput_requests_per_s=float(both.sum() / span) if span > 0 else 0.0,
    )


@dataclass(frozen=True)
class Served(rq.RequestTimes):
    """Per-request times of a run against the requests as they were asked for."""

    requests: Requests
    first_token_s: FloatArray
    finish_s: FloatArray
    steps: int
    mean_decode_batch: float


@dataclass(frozen=True)
class SloRun:
    """A simulated workload: percentiles (as ``rackmath simulate`` reports them), the
    per-request times behind them, and the SLO attainment."""

    result: sim.SimulationResult
    times: Served
    attainment: Attainment
    setup: dict[str, Any]  # the replica (or the prefill and decode pools), as ``simulate --json``
    tokens_per_step: float  # E with MTP, else 1
    kv_tier: str | None = None  # xPyD: where the KV moves

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.setup,
            "tokens_per_step": self.tokens_per_step,
            "result": self.result.to_dict(),
            "attainment": self.attainment.to_dict(),
        }


def mtp_requests(requests: Requests, tokens_per_step: float) -> Requests:
    """The requests as the one-token-a-step simulator runs them under MTP (module docstring)."""
    o = requests.output_tokens
    steps = 1 + np.ceil((o - 1) / tokens_per_step).astype(np.int64)
    return Requests(requests.arrival_s, requests.input_tokens, steps, o - steps)


def serve(fleet: Fleet, workload: Workload, ttft_limit_s: float | None, tpot_limit_s: float | None) -> SloRun:
    """Simulate ``workload`` on ``fleet``; see the module docstring."""
    features = PlanFeatures(mtp=fleet.mtp, acceptance=fleet.acceptance)
    s = fleet.speculation
    e = features.tokens_per_step if s is None else s.tokens_per_step
    speculating = bool(fleet.mtp) or s is not None
    if speculating and fleet.disaggregated:
        drafts = f"{fleet.mtp if s is None else s.depth} draft tokens"
        raise InputError("MTP with disaggregation", f"{drafts}, {fleet.disaggregated}", "one or the other")
    dep = plan_deployment(fleet.model, fleet.system, fleet.plan, efficiency=fleet.efficiency)
    profile = catalog_runtime(fleet.runtime)
    i_max, o_max, i_mean, o_mean = workload.lengths()
    window = fleet.model.max_context
    if window and i_max + o_max > window:
        raise InputError(
            "input + output", f"{i_max + o_max:,.0f} tokens", f"at most {window:,} tokens (its window)"
        )
    rep = sim.replica(
        dep, profile, max_context=i_max + o_max, mean_context=i_mean + o_mean, mtp=fleet.mtp, speculation=s
    )
    asked = workload.draw()
    tier = None
    if fleet.disaggregated:
        x, y = sim.parse_xpyd(fleet.disaggregated)
        pre_dep = dep
        if fleet.prefill_plan:
            pre_dep = plan_deployment(
                fleet.model, fleet.system, fleet.prefill_plan, efficiency=fleet.efficiency
            )
        pre = sim.replica(pre_dep, profile, max_context=i_max + 1, mean_context=i_mean + 1)
        fleet_run, tier = sim.disaggregated_requests(pre, rep, x, y, asked)
        steps, batch = fleet_run.steps, fleet_run.mean_decode_batch
        first, finish = fleet_run.first_token_s, fleet_run.finish_s
        setup: dict[str, Any] = {
            "model": fleet.model.id,
            "disaggregated": f"{x}P{y}D",
            "kv_tier": tier,
            "prefill": pre.describe(),
            "decode": rep.describe(),
        }
    else:
        one = sim.run_requests(rep, mtp_requests(asked, e) if speculating else asked)
        steps, batch, first, finish = one.steps, one.mean_decode_batch, one.first_token_s, one.finish_s
        setup = {"model": fleet.model.id, **rep.describe()}
    times = Served(asked, first, finish, steps, batch)
    result = sim.summarize(times, workload.rate_per_s if workload.trace is None else None)  # type: ignore[arg-type]
    return SloRun(result, times, attainment(times, ttft_limit_s, tpot_limit_s), setup, e, tier)
