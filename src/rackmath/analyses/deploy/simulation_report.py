"""``rackmath simulate``'s whole answer: the replica a request stream runs on, and the run.

:func:`simulate` takes what the command takes (a model and a system, a plan or the default
one, a runtime and its overrides, a Poisson workload or a trace, an SLO to search the highest
rate under, an xPyD split) and applies every rule the command applies before any work: the
default plan (tensor parallel over the chips, which must divide the heads), the chip count a
plan implies, the work bounds, the model's context window, an SLO search only over a Poisson
workload. The pieces are :mod:`rackmath.analyses.deploy.simulate`'s (replica, run, rate
search, xPyD); :class:`SimulationReport` holds them, and its ``to_dict`` is
``rackmath simulate --json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rackmath.analyses.deploy import simulate as sim
from rackmath.analyses.deploy.slo import Workload
from rackmath.analyses.serving.deployment import check_context
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.core import roofline as rl
from rackmath.errors import InputError, RackmathError
from rackmath.numbers import parse_number
from rackmath.specs import checks
from rackmath.specs.efficiency import EfficiencyMode
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.runtime import RuntimeProfile
from rackmath.specs.workload import LengthDist, Requests
from rackmath.units import SECONDS_PER_HOUR, SECONDS_PER_MINUTE

#: ``--rate`` suffixes: requests per second, per minute, per hour.
RATE_UNITS = (("/s", 1.0), ("/min", 1 / SECONDS_PER_MINUTE), ("/h", 1 / SECONDS_PER_HOUR))


class SloUnmetError(RackmathError):
    """No arrival rate meets the SLOs on this replica."""


def parse_rate(rate: str | float) -> float:
    """``5/s``, ``5``, ``300/min`` (or a number) -> requests per second (> 0)."""
    if isinstance(rate, str):
        t, scale = rate.strip().lower(), 1.0
        for suffix, s in RATE_UNITS:
            if t.endswith(suffix):
                t, scale = t[: -len(suffix)], s
                break
        value = parse_number(t, "--rate") * scale
    else:
        value = rate
    return checks.positive("--rate", value, allowed="requests per second > 0 (e.g. 5/s)", given=rate)


def seconds_text(value: float) -> str:
    """``1.23 s``, ``45.6 ms``, ``789 us``: a time in an error line (the views format results)."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms")):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value * 1e6:.3g} us"


def default_plan(model: ModelSpec, system: SystemSpec, chips: int | None = None) -> str:
    """Without a plan: tensor parallel over ``chips`` (which must divide the heads), else over
    the largest divisor of the heads that fits one scale-up domain."""
    heads = model.attention.num_heads
    if chips is not None:
        if heads % chips:
            allowed = f"a --plan over the {chips} chips (without one, tp = --chips must divide {heads} heads)"
            raise InputError("--plan", None, allowed)
        return f"tp={chips}"
    domain = system.scale_up_domain_chips
    return f"tp={max(t for t in range(1, min(heads, domain) + 1) if heads % t == 0)}"


@dataclass(frozen=True)
class SimulationReport:
    """One simulated replica (or xPyD fleet) under a runtime: the run, or the rate search."""

    model: str
    decode: sim.Replica
    #: with an xPyD split: the prefill replicas, the split and the tier the KV moves over
    prefill: sim.Replica | None
    xpyd: tuple[int, int] | None
    kv_tier: str | None
    result: sim.SimulationResult | None
    search: sim.RateSearch | None
    slo: str | None

    @property
    def runtime(self) -> RuntimeProfile:
        return self.decode.runtime

    def require_slo(self) -> SimulationReport:
        """``self`` unless a rate search found no rate that meets the SLOs; then
        :class:`SloUnmetError` naming the best the lightest load reached, as ``rackmath
        simulate --slo`` exits 1 after its report."""
        s = self.search
        if s is None or s.best is not None:
            return self
        d = self.decode.deployment
        what = f"{d.chips} x {d.system.chip.id} ({d.plan})"
        if self.xpyd is not None:
            what = f"{self.xpyd[0]}P{self.xpyd[1]}D of {what}"
        reached = ", ".join(f"{k} {seconds_text(v)}" for k, v in s.best_reached.items() if v is not None)
        raise SloUnmetError(
            f"--slo: no arrival rate meets {self.slo} on {what} under {self.runtime.id}; the best reached "
            f"at the lightest load is {reached} (loosen the SLO or use a bigger plan)"
        )

    def to_dict(self) -> dict[str, Any]:
        if self.xpyd is None:
            head: dict[str, Any] = {"model": self.model, **self.decode.describe()}
        else:
            assert self.prefill is not None
            head = {
                "model": self.model,
                "disaggregated": f"{self.xpyd[0]}P{self.xpyd[1]}D",
                "kv_tier": self.kv_tier,
                "prefill": self.prefill.describe(),
                "decode": self.decode.describe(),
            }
        if self.search is not None:
            return {**head, "rate_search": self.search.to_dict()}
        assert self.result is not None
        return {**head, "result": self.result.to_dict()}


def _lengths(value: str | int | LengthDist, field: str) -> LengthDist:
    return value if isinstance(value, LengthDist) else LengthDist.parse(str(value), field)


def simulate(
    model: ModelSpec,
    system: SystemSpec,
    runtime: RuntimeProfile,
    *,
    chips: int | None = None,
    plan: str | None = None,
    rate: str | float = "5/s",
    requests: float = 1e4,
    input_len: str | int | LengthDist = "lognormal:2000",
    output_len: str | int | LengthDist = "500",
    max_seqs: int | None = None,
    max_tokens: int | None = None,
    trace: Requests | None = None,
    slo: str | None = None,
    seed: int = 0,
    disaggregated: str | None = None,
    prefill_plan: str | None = None,
    efficiency: rl.Efficiency | EfficiencyMode | str = "kernel",
    weights: str | None = None,
    kv: str | None = None,
    weight_classes: str | dict[str, str] | None = None,
) -> SimulationReport:
    """Requests through one replica of ``model`` on ``system`` as ``runtime`` runs it.

    ``plan`` defaults to :func:`default_plan`; ``chips`` must then match the plan's. A
    ``trace`` replaces the Poisson workload (``rate``, ``requests``, ``input_len`` and
    ``output_len`` lengths as ``N``, ``uniform:LO-HI`` or ``lognormal:MEAN``). ``slo``
    (``ttft_p99=2s,tpot_p99=50ms``) searches the highest rate that meets it instead of one
    run; ``disaggregated`` (``2P1D``) simulates an xPyD fleet whose prefill replicas use
    ``prefill_plan`` (default: the decode plan). ``weights``, ``kv`` and ``weight_classes``
    (``"experts=nvfp4,attention=fp8"``: weights per tensor class, the rest in ``weights``) as
    :func:`rackmath.analyses.serving.pooled.make_deployment` takes them."""
    the_plan = plan or default_plan(model, system, chips)
    formats: dict[str, Any] = {"weights": weights, "kv": kv, "weight_classes": weight_classes}
    dep = plan_deployment(model, system, the_plan, efficiency=efficiency, **formats)
    if chips is not None and chips != dep.chips:
        raise InputError("--chips", chips, f"the plan's {dep.chips} chips ({the_plan})")
    profile = runtime.with_overrides(max_seqs=max_seqs, max_tokens=max_tokens)
    n = checks.whole_valued("--requests", requests, maximum=sim.MAX_REQUESTS)
    if trace is not None:
        i, o = trace.input_tokens, trace.output_tokens
        i_max, o_max, i_mean, o_mean = float(i.max()), float(o.max()), float(i.mean()), float(o.mean())
        dists = None
    else:
        i_dist, o_dist = _lengths(input_len, "--input"), _lengths(output_len, "--output")
        i_max, o_max, i_mean, o_mean = i_dist.max_tokens, o_dist.max_tokens, i_dist.mean, o_dist.mean
        dists = (i_dist, o_dist)
    check_context(model, i_max + o_max, "--input + --output")
    if slo is not None and dists is None:
        raise InputError("--slo", slo, "a Poisson workload (--rate with --input/--output), not --trace")
    rep = sim.replica(dep, profile, max_context=i_max + o_max, mean_context=i_mean + o_mean)
    limits = None if slo is None else sim.parse_slo(slo)
    probes = min(n, sim.SEARCH_REQUESTS)
    rate_per_s = None if dists is None or limits is not None else parse_rate(rate)
    arrivals = trace if dists is None or rate_per_s is None else Workload(rate_per_s, n, *dists, seed).draw()
    if disaggregated is None:
        if limits is not None:
            assert dists is not None
            search = sim.max_rate(rep, *dists, limits, requests=probes, seed=seed)
            return SimulationReport(model.id, rep, None, None, None, search.best, search, slo)
        assert arrivals is not None
        return SimulationReport(
            model.id, rep, None, None, None, sim.run(rep, arrivals, rate_per_s), None, slo
        )
    x, y = sim.parse_xpyd(disaggregated)
    pre_dep = (
        dep
        if prefill_plan is None
        else plan_deployment(model, system, prefill_plan, efficiency=efficiency, **formats)
    )
    pre = sim.replica(pre_dep, profile, max_context=i_max + 1, mean_context=i_mean + 1)  # prompts alone
    if limits is not None:
        assert dists is not None
        search = sim.max_rate_disaggregated(pre, rep, x, y, *dists, limits, requests=probes, seed=seed)
        _, tier = sim.kv_transfer_times_s(pre, rep, x, y, [i_mean])
        return SimulationReport(model.id, rep, pre, (x, y), tier, search.best, search, slo)
    assert arrivals is not None
    result, tier = sim.disaggregated_run(pre, rep, x, y, arrivals, rate_per_s)
    return SimulationReport(model.id, rep, pre, (x, y), tier, result, None, slo)
