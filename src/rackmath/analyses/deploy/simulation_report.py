"""``rackmath simulate``'s whole answer: the fleet a request stream runs on, and the run.

:func:`simulate` takes what the command takes (a model and a system, a plan or the default
one, a runtime and its overrides, a Poisson workload or a trace, a prefix-cache hit rate, a
host-memory tier, an SLO and the attainment it asks, an xPyD split) and applies every rule the
command applies before any work: the default plan (tensor parallel over the chips, which must
divide the heads), the chip count a plan implies, the work bounds, the hit rate in [0, 1], the
host tier's sizes, the model's context window, an attainment only with an SLO, a rate search
only over a Poisson workload (a trace's checks are :func:`rackmath.specs.workload.parse_trace_text`'s).
With an SLO and no ``rate`` it searches the highest rate that meets it
(:func:`rackmath.analyses.deploy.rate_search.search`); otherwise it serves the workload once
(:func:`rackmath.analyses.deploy.slo.serve`), the SLO's attainment counted when one is given.
:class:`SimulationReport` holds the answer, and its ``to_dict`` is ``rackmath simulate --json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rackmath.analyses.deploy import rate_search
from rackmath.analyses.deploy import simulate as sim
from rackmath.analyses.deploy.slo import Fleet, Slo, SloRun, Workload, serve
from rackmath.analyses.serving.deployment import check_context
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.analyses.serving.pooled import with_weight_classes
from rackmath.analyses.serving.speculative import Speculation
from rackmath.catalog.runtimes import runtime as catalog_runtime
from rackmath.errors import InputError, RackmathError
from rackmath.numbers import parse_number
from rackmath.specs import checks
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.workload import LengthDist, Requests
from rackmath.units import SECONDS_PER_HOUR, SECONDS_PER_MINUTE

#: ``--rate`` suffixes: requests per second, per minute, per hour.
RATE_UNITS = (("/s", 1.0), ("/min", 1 / SECONDS_PER_MINUTE), ("/h", 1 / SECONDS_PER_HOUR))
#: The arrival rate of one run when none is given (and no SLO asks for a search).
DEFAULT_RATE = "5/s"


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
    """One simulated replica (or xPyD fleet) under a runtime: the run (its attainment when an
    SLO is given), or the rate search's attainment curve and the highest rate meeting the SLO."""

    model: str
    fleet: Fleet
    workload: Workload
    slo: Slo | None
    slo_text: str | None
    run: SloRun | None
    search: rate_search.SloSearch | None

    @property
    def setup(self) -> dict[str, Any]:
        """The replica (or the prefill and decode pools), as ``simulate --json`` heads its answer."""
        if self.search is not None:
            return self.search.setup
        assert self.run is not None
        return self.run.setup

    def require_slo(self) -> SimulationReport:
        """``self`` unless a rate search found no rate that meets the SLO; then
        :class:`SloUnmetError` naming the shares the lightest load reached, as ``rackmath
        simulate --slo`` exits 1 after its report."""
        found = self.search
        if found is None or found.best is not None:
            return self
        low = min(found.points, key=lambda p: p.rate_per_s)
        shares = ", ".join(f"{k} {v:.1%}" for k, v in low.attainment.met_frac.items())
        raise SloUnmetError(
            f"--slo: no arrival rate meets {self.slo_text} (attainment {found.slo.attainment_frac}); at the "
            f"lightest load probed ({low.rate_per_s:.3g}/s) the shares within the limits are {shares} "
            "(loosen the SLO or use a bigger plan)"
        )

    def to_dict(self) -> dict[str, Any]:
        if self.search is not None:
            return self.search.to_dict()
        assert self.run is not None
        return self.run.to_dict()


def _lengths(value: str | int | LengthDist, field: str) -> LengthDist:
    return value if isinstance(value, LengthDist) else LengthDist.parse(str(value), field)


def simulate(
    model: ModelSpec,
    system: SystemSpec,
    runtime: str = "vllm",
    *,
    chips: int | None = None,
    plan: str | None = None,
    rate: str | float | None = None,
    requests: float = 1e4,
    input_len: str | int | LengthDist = "lognormal:2000",
    output_len: str | int | LengthDist = "500",
    max_seqs: int | None = None,
    max_tokens: int | None = None,
    trace: Requests | None = None,
    slo: str | None = None,
    attainment: float | None = None,
    prefix_hit: float | None = None,
    host_cache_bytes: float = 0.0,
    host_link_bytes_per_s: float | None = None,
    seed: int = 0,
    disaggregated: str | None = None,
    prefill_plan: str | None = None,
    efficiency: str = "kernel",
    weights: str | None = None,
    kv: str | None = None,
    weight_classes: str | dict[str, str] | None = None,
    mtp: int = 0,
    acceptance: float = 0.8,
    speculation: Speculation | None = None,
) -> SimulationReport:
    """Requests through one replica of ``model`` on ``system`` as ``runtime`` (a catalog id) runs it.

    ``plan`` defaults to :func:`default_plan`; ``chips`` must then match the plan's. A
    ``trace`` replaces the Poisson workload (``rate``, default 5/s, ``requests``, ``input_len``
    and ``output_len`` lengths as ``N``, ``uniform:LO-HI`` or ``lognormal:MEAN``).
    ``prefix_hit`` (in [0, 1]): the share of each prompt found cached (a trace with block ids
    finds its own hits); ``host_cache_bytes`` of host memory hold KV evicted from HBM, loaded
    back over ``host_link_bytes_per_s`` per chip (default: the catalog's link). ``slo``
    (``ttft_p99=2s,tpot=50ms``, with ``attainment`` in (0, 1]) searches the highest rate that
    meets it when no ``rate`` is given, else counts the run's attainment; ``disaggregated``
    (``2P1D``) simulates an xPyD fleet whose prefill replicas use ``prefill_plan`` (default:
    the decode plan). ``weights``, ``kv`` and ``weight_classes``
    (``"experts=nvfp4,attention=fp8"``: weights per tensor class, the rest in ``weights``) as
    :func:`rackmath.analyses.serving.pooled.make_deployment` takes them. ``mtp`` draft tokens at
    ``acceptance`` each (an MTP head), or a ``speculation`` stated in full (drafter, tree,
    acceptance per position): each decode step verifies and drafts, and a request advances by
    the expected tokens per step (:mod:`rackmath.analyses.deploy.slo`)."""
    # the model as stored (per class where weight_classes says so), so that every replica the
    # fleet builds serves it so (pooled.with_weight_classes: make_deployment's rule)
    model, weights = with_weight_classes(model, weights, weight_classes)
    the_plan = plan or default_plan(model, system, chips)
    dep = plan_deployment(model, system, the_plan, efficiency=efficiency, weights=weights, kv=kv)
    if chips is not None and chips != dep.chips:
        raise InputError("--chips", chips, f"the plan's {dep.chips} chips ({the_plan})")
    catalog_runtime(runtime)  # an unknown runtime is refused before any work
    n = checks.whole_valued("--requests", requests, maximum=sim.MAX_REQUESTS)
    if prefix_hit is not None:
        checks.fraction("--prefix-hit", prefix_hit, allowed="a hit rate from 0 to 1, e.g. 0.5")
    checks.at_least("--host-cache", host_cache_bytes, 0.0, allowed="bytes >= 0 (e.g. 512G)")
    if host_link_bytes_per_s is not None:
        checks.positive("--host-link", host_link_bytes_per_s, allowed="bytes/s > 0 (e.g. 64G)")
    if trace is not None:
        i, o = trace.input_tokens, trace.output_tokens
        check_context(model, float(i.max()) + float(o.max()), "--input + --output")
        workload = Workload(rate_per_s=None, trace=trace, prefix_hit=prefix_hit)
    else:
        i_dist, o_dist = _lengths(input_len, "--input"), _lengths(output_len, "--output")
        check_context(model, i_dist.max_tokens + o_dist.max_tokens, "--input + --output")
        rate_per_s = parse_rate(DEFAULT_RATE if rate is None else rate)
        workload = Workload(rate_per_s, n, i_dist, o_dist, seed, prefix_hit=prefix_hit)
    the_slo = None if slo is None else Slo.parse(slo, attainment)
    if attainment is not None and the_slo is None:
        raise InputError("--attainment", attainment, "an --slo to attain, e.g. --slo ttft=2s,tpot=50ms")
    fleet = Fleet(
        model,
        system,
        the_plan,
        runtime,
        efficiency,
        disaggregated=disaggregated,
        prefill_plan=prefill_plan,
        max_seqs=max_seqs,
        max_tokens=max_tokens,
        host_cache_bytes=host_cache_bytes,
        host_link_bytes_per_s=host_link_bytes_per_s,
        weights=weights,
        kv=kv,
        mtp=mtp,
        acceptance=acceptance,
        speculation=speculation,
    )
    if the_slo is not None and trace is None and rate is None:
        found = rate_search.search(fleet, workload, the_slo)
        return SimulationReport(model.id, fleet, workload, the_slo, slo, None, found)
    return SimulationReport(model.id, fleet, workload, the_slo, slo, serve(fleet, workload, the_slo), None)
