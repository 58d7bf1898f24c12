"""The deployment search space and its vectorized evaluation.

For each system and precision, every valid plan (``tp`` a divisor of the heads within the
scale-up domain, ``dp x cp x tp`` stage widths from powers of two and multiples of the domain,
``cp`` a power of two up to :data:`DEFAULT_MAX_CP` dividing ``width / tp`` and no more than
the prompt's KV blocks, ``ep`` a common divisor of the experts and the stage width, ``pp`` a
divisor of the layers) times every batch of :data:`BATCH_GRID` is one NumPy evaluation
through :func:`rackmath.core.parallel.plan_step`.

A replica serves a steady mix of prefill and decode (chunked prefill,
:func:`~rackmath.core.loads.mixed_load`): ``B`` sequences decode while new
prompts are prefilled in the same steps. TPOT is the step, TTFT ``max(1, O/B)`` steps,
throughput ``B`` output tokens per step. Traffic is in output tokens per second; the cost
per million output tokens includes the prefill work and rounds the fleet up to whole
replicas. :mod:`rackmath.analyses.deploy.search` picks from these candidates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rackmath.analyses.deploy.plan_features import BALANCED, MoeRouting
from rackmath.analyses.economics.fleet import check_traffic
from rackmath.analyses.kernels.tables import efficiency_label
from rackmath.analyses.serving.deployment import Deployment
from rackmath.analyses.serving.energy import step_energy
from rackmath.analyses.serving.parts import (
    DEFAULT_MEMORY_RESERVE_FRAC,
    PlanDims,
    Precisions,
    default_precisions,
)
from rackmath.analyses.serving.planned import topology
from rackmath.core import economics as econ
from rackmath.core import loads, rack_rules
from rackmath.core import memory as mem
from rackmath.core import roofline as rl
from rackmath.core import speculative as spec
from rackmath.core.network import CommOverlap
from rackmath.errors import InputError
from rackmath.frames import Col, Layout, Tabular
from rackmath.specs import checks
from rackmath.specs.bounds import MAX_SEARCH_CHIPS
from rackmath.specs.efficiency import EfficiencyMode
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.plan import ParallelPlan
from rackmath.specs.precision import Precision
from rackmath.specs.runtime import RuntimeProfile

FloatArray = NDArray[np.float64]

#: Six current systems searched when none are named (the benchmark's "six systems").
DEFAULT_SYSTEMS: tuple[str, ...] = (
    "h100-hgx",
    "h200-hgx",
    "b200-hgx",
    "gb200-nvl72",
    "gb300-nvl72",
    "mi355x-8",
)
#: Batches (sequences in flight per replica): 1 to 16,384 in steps of sqrt(2).
BATCH_GRID: tuple[int, ...] = tuple(sorted({round(2 ** (i / 2)) for i in range(29)}))
#: Precision families: "native" (as shipped, see serving.default_precisions), "fp8"
#: (fp8 weights, KV and compute) and "fp4" (4-bit block-scaled weights at the fp4 peak,
#: fp8 KV). A family the chip has no peak for is skipped.
PRECISION_CHOICES: tuple[str, ...] = ("native", "fp8", "fp4")
DEFAULT_PRECISIONS: tuple[str, ...] = ("native", "fp8")
DEFAULT_MAX_CHIPS = 256
DEFAULT_MAX_PP = 16
#: Largest context-parallel degree searched by default: 1, none, as the engines default
#: (vLLM's ``decode_context_parallel_size = 1``); ``max_cp = 8`` (vLLM's and SGLang's DCP
#: examples run up to 8 ranks) searches ``cp`` in 1, 2, 4, 8 and triples the space.
DEFAULT_MAX_CP = 1
#: What one step of a candidate carries (see :func:`evaluate`).
PHASES: tuple[str, ...] = ("mixed", "decode", "prefill")


def precision_family(name: str, model: ModelSpec, system: SystemSpec) -> Precisions | None:
    """The precisions a family name means on a chip, or None if the chip lacks the peak."""
    peaks = system.chip.peak_flops_per_s
    if name == "native":
        return default_precisions(model, system)
    if name == "fp8":
        if Precision.FP8 not in peaks:
            return None
        return Precisions(weights=Precision.FP8, kv=Precision.FP8, compute=Precision.FP8)
    if name == "fp4":
        if Precision.FP4 not in peaks:
            return None
        weights = Precision.NVFP4 if system.chip.vendor == "NVIDIA" else Precision.MXFP4
        return Precisions(weights=weights, kv=Precision.FP8, compute=Precision.FP4)
    raise InputError("precision", name, ", ".join(PRECISION_CHOICES))


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def check_max_chips(max_chips: object) -> int:
    return checks.whole("--max-chips", max_chips, maximum=MAX_SEARCH_CHIPS)


def enumerate_plans(
    model: ModelSpec,
    system: SystemSpec,
    *,
    max_chips: int,
    max_pp: int = DEFAULT_MAX_PP,
    redundant_experts: int = 0,
    max_cp: int = DEFAULT_MAX_CP,
) -> NDArray[np.int64]:
    """Every valid ``(tp, pp, dp, ep, cp)`` in the search space, as rows of an int array.

    tp: divisors of the heads up to the scale-up domain. Stage widths ``dp x cp x tp``: powers
    of two and multiples/halvings of the domain, at most ``max_chips / pp``. cp: 1, and the
    powers of two up to ``max_cp`` that divide ``width / tp`` (the rest is ``dp``). ep: 1 for a
    dense model, else every common divisor of the experts and the stage width. pp:
    divisors of the layers up to ``max_pp``. With ``redundant_experts`` R > 0 an EP degree
    may also divide ``E + R`` and the width (EPLB: ``ep = 72`` for 256 + 32 slots).
    """
    max_chips = check_max_chips(max_chips)
    s = system.scale_up_domain_chips
    heads = model.attention.num_heads
    tps = [t for t in divisors(heads) if t <= s]
    widths = {2**i for i in range(int(math.log2(max_chips)) + 1)}
    widths |= {s * k for k in range(1, max_chips // s + 1)}
    widths |= {s // 2**i for i in range(8) if s % 2**i == 0}
    pps = [p for p in divisors(model.num_layers) if p <= max_pp]
    experts = model.moe.num_experts if model.is_moe and model.moe else 1
    rows = []
    for pp in pps:
        for width in sorted(widths):
            if width * pp > max_chips:
                continue
            for tp in tps:
                if width % tp:
                    continue
                eps = set(divisors(math.gcd(experts, width)))
                if redundant_experts and experts > 1:
                    eps |= set(divisors(math.gcd(experts + redundant_experts, width)))
                cps = [2**i for i in range(int(math.log2(max(max_cp, 1))) + 1) if (width // tp) % 2**i == 0]
                for cp in cps:
                    for ep in sorted(eps):
                        rows.append((tp, pp, width // tp // cp, ep, cp))
    return np.asarray(rows, dtype=np.int64).reshape(-1, 5)


@dataclass(frozen=True)
class Workload:
    """Traffic (output tokens/s), request shape and SLOs (None: unconstrained)."""

    traffic_tokens_per_s: float
    input_len: int = 1024
    output_len: int = 1024
    ttft_s: float | None = None
    tpot_s: float | None = None
    #: the share of each prompt found in the prefix cache: skips its prefill, keeps its KV
    prefix_hit: float = 0.0

    def __post_init__(self) -> None:
        check_traffic(self.traffic_tokens_per_s, "--traffic")
        checks.fraction("--prefix-hit", self.prefix_hit, one=False, allowed="a hit rate in [0, 1), e.g. 0.5")
        for name in ("input_len", "output_len"):
            checks.whole(name.replace("_", "-"), getattr(self, name), allowed="a whole number of tokens >= 1")
        for name in ("ttft_s", "tpot_s"):
            if getattr(self, name) is not None:
                checks.positive(name, getattr(self, name), allowed="a positive time")


@dataclass(frozen=True)
class Candidates(Tabular):
    """Every (plan, batch) of one system and precision family, flattened; SI arrays."""

    frame_layout = Layout(
        columns=(
            Col("system.id", "system"),
            Col("family", "precision_family"),
            Col("precisions.weights", "weights_precision"),
            Col("precisions.kv", "kv_precision"),
            Col("precisions.compute", "compute_precision"),
            Col("efficiency_label", "efficiency"),
            *(Col(k, k) for k in ("tp", "pp", "dp", "ep", "cp")),
            Col("chips", "chips", "chips"),
            Col("batch", "batch", "sequences"),
            Col("tpot_s", "tpot_s", "s"),
            Col("ttft_s", "ttft_s", "s"),
            Col("bottleneck", "bottleneck"),
            Col("tokens_per_s", "tokens_per_s", "tokens/s"),
            Col("tokens_per_s_per_chip", "tokens_per_s_per_chip", "tokens/s"),
            Col("tokens_per_s_per_user", "tokens_per_s_per_user", "tokens/s"),
            Col("usd_per_million_output_tokens", "usd_per_million_output_tokens", "USD per 1e6 tokens"),
            Col("memory_bytes_per_chip", "memory_bytes_per_chip", "bytes"),
            Col("fits", "fits"),
        ),
        dims=("candidate",),
        coords=(None,),
    )

    system: SystemSpec
    family: str
    precisions: Precisions
    usd_per_chip_hour: float
    tp: NDArray[np.int64]
    pp: NDArray[np.int64]
    dp: NDArray[np.int64]
    ep: NDArray[np.int64]
    batch: FloatArray
    weight_bytes_per_chip: FloatArray
    memory_bytes_per_chip: FloatArray
    fits: NDArray[np.bool_]
    tpot_s: FloatArray
    ttft_s: FloatArray
    bottleneck: NDArray[np.str_]
    #: facility joules per output token (analyses.serving.energy; None when the chip has no TDP)
    joules_per_token: FloatArray | None = None
    #: the MoE routing features every ``ep > 1`` candidate ran with
    routing: MoeRouting = BALANCED
    #: context-parallel ranks per DP rank (1: none)
    cp: NDArray[np.int64] | None = None
    #: the efficiency the candidates were costed with
    efficiency: rl.Efficiency = rl.KERNEL_GROUNDED

    @property
    def efficiency_label(self) -> str:
        """Which efficiency the numbers use (:func:`rackmath.analyses.kernels.tables.efficiency_label`)."""
        return efficiency_label(self.system.chip.id, self.efficiency)

    @property
    def chips(self) -> NDArray[np.int64]:
        return self.tp * self.pp * self.dp if self.cp is None else self.tp * self.pp * self.dp * self.cp

    @property
    def size(self) -> int:
        return int(self.batch.size)

    @property
    def tokens_per_s(self) -> FloatArray:
        return np.asarray(self.batch / self.tpot_s)

    @property
    def tokens_per_s_per_chip(self) -> FloatArray:
        return np.asarray(self.tokens_per_s / self.chips)

    @property
    def tokens_per_s_per_user(self) -> FloatArray:
        return np.asarray(1.0 / self.tpot_s)

    @property
    def usd_per_million_output_tokens(self) -> FloatArray:
        return rl.usd_per_million_tokens(self.tpot_s, self.batch, self.chips, self.usd_per_chip_hour)


def evaluate(
    model: ModelSpec,
    system: SystemSpec,
    family: str,
    workload: Workload,
    *,
    max_chips: int = DEFAULT_MAX_CHIPS,
    max_pp: int = DEFAULT_MAX_PP,
    batches: tuple[int, ...] = BATCH_GRID,
    comm_overlap_frac: float = CommOverlap.ADDED,
    efficiency: rl.Efficiency | EfficiencyMode | str = rl.KERNEL_GROUNDED,
    memory_reserve_frac: float = DEFAULT_MEMORY_RESERVE_FRAC,
    phase: str = "mixed",
    runtime: RuntimeProfile | None = None,
    redundant_experts: int = 0,
    skew: float = 1.0,
    tbo_overlap_frac: float = 0.0,
    routing: MoeRouting | None = None,
    max_cp: int = DEFAULT_MAX_CP,
) -> Candidates | None:
    """All candidates of one system and precision family (None if the chip lacks it).

    ``redundant_experts``, ``skew`` and ``tbo_overlap_frac`` apply to every MoE plan with
    ``ep > 1`` (see :class:`rackmath.specs.plan.ParallelPlan`); the defaults are balanced
    routing without redundant slots or two-batch overlap. ``routing`` (a :class:`MoeRouting`)
    sets all three at once and wins over them.

    ``phase`` picks what a step carries: ``"mixed"`` (chunked prefill in every step, the
    aggregated replica), ``"decode"`` (a disaggregated decode pool: ``B`` sequences at the
    mean context ``I + O/2``, no prompt tokens; TTFT is not its business and is 0) or
    ``"prefill"`` (a prefill pool: ``batch`` prompts of ``I`` tokens per pass, KV held at
    ``I``; ``tpot_s`` and ``ttft_s`` are both the pass time).

    With a ``runtime`` profile a candidate fits only "as the engine runs it": each of the
    ``dp`` engines (one scheduler per data-parallel rank, as vLLM, SGLang and TensorRT-LLM run
    data parallelism) holds at most ``max_seqs`` sequences and ``max_tokens`` tokens a step
    (``B <= dp max_seqs``, step tokens ``<= dp max_tokens``; without chunked prefill a prompt
    must fit one engine's step, ``I <= max_tokens``), and HBM is what its memory flag
    grants: ``f x HBM`` (``basis = total``) or ``weights + activations + f x (HBM - weights -
    activations)`` (``basis = free``) instead of the reserve.

    Context parallelism: ``cp`` up to ``max_cp`` (1: none), never beyond the prompt's KV blocks
    (:func:`rackmath.core.memory.max_context_parallel` of ``I``); a CP group is one engine (its
    ``cp`` ranks share the engine's sequences), and the prefill phase's prompts are whole
    requests (:func:`rackmath.core.loads.prefill_load` with ``whole``): a pipeline micro-batch
    holds whole prompts.
    """
    if phase not in PHASES:
        raise InputError("phase", phase, ", ".join(PHASES))
    if routing is None:
        routing = MoeRouting(redundant_experts, skew, tbo_overlap_frac)
    precisions = precision_family(family, model, system)
    if precisions is None:
        return None
    dep = Deployment(
        model=model,
        system=system,
        plan=ParallelPlan(),  # each candidate's plan is a row of the dimensions below
        precisions=precisions,
        usd_per_chip_hour=system.chip.price_usd_per_chip_hour.value_usd,
        efficiency=rl.Efficiency.parse(efficiency),
        memory_reserve_frac=memory_reserve_frac,
        topology=topology(system),
        comm_overlap_frac=comm_overlap_frac,
        runtime=runtime,
    )
    plans = enumerate_plans(
        model,
        system,
        max_chips=max_chips,
        max_pp=max_pp,
        redundant_experts=routing.redundant_experts,
        max_cp=max_cp,
    )
    plans = plans[plans[:, 4] <= mem.max_context_parallel(workload.input_len)]
    dims, batch, weights = candidate_dims(dep, plans, batches, routing)
    load, ctx_max = candidate_load(model, phase, workload, batch, dep.kv_bytes_per_element, routing)
    memory = dep.memory(batch, ctx_max, tokens_in_flight=load.tokens, dims=dims)
    step = dep.step(load, decode=phase != "prefill", dims=dims)
    k = routing.mtp if phase != "prefill" else 0
    e_tok = routing.tokens_per_step if k else 1.0
    cycle = step.step_s
    if k:  # the MTP head: k drafted tokens, each one layer's share of the plain decode step
        i_len, o_len = workload.input_len, workload.output_len
        plain = dep.step(
            loads.decode_load(model, batch, i_len + o_len / 2.0, dep.kv_bytes_per_element), dims=dims
        )
        cycle = cycle + spec.mtp_draft_s(plain.step_s, k, model.num_layers)
    tpot = cycle / e_tok
    tp, pp, dp, ep, cp = (np.asarray(x) for x in (dims.tp, dims.pp, dims.dp, dims.ep, dims.cp))
    energy = step_energy(system.chip, step, dep.rates, tp * pp * dp * cp, batch * e_tok)
    if phase == "mixed":
        ttft = rack_rules.chunked_prefill_ttft_s(cycle, batch * e_tok, workload.output_len)
    else:
        ttft = tpot if phase == "prefill" else np.zeros_like(tpot)
    return Candidates(
        system=system,
        family=family,
        precisions=precisions,
        usd_per_chip_hour=dep.usd_per_chip_hour,
        tp=tp,
        pp=pp,
        dp=dp,
        ep=ep,
        batch=batch,
        weight_bytes_per_chip=weights,
        memory_bytes_per_chip=np.asarray(memory.total_bytes),
        # a data-parallel rank with no whole sequence to run is not a deployment
        fits=np.asarray((batch >= dp) & memory.fits & dep.runtime_admits(load, dims), dtype=bool),
        tpot_s=tpot,
        ttft_s=np.asarray(ttft, dtype=float),
        bottleneck=step.bottleneck,
        joules_per_token=None if energy is None else energy.joules_per_token,
        routing=routing,
        cp=cp,
        efficiency=dep.efficiency,
    )


def candidate_dims(
    dep: Deployment, plans: NDArray[np.int64], batches: tuple[int, ...], routing: MoeRouting
) -> tuple[PlanDims, FloatArray, FloatArray]:
    """Every (plan, batch) as plan dimensions, the batch and the plan's weights per chip, for the
    plans whose weights alone leave room in HBM; MoE routing on every ``ep > 1`` plan."""
    rows = dep.with_stages(PlanDims(plans[:, 0], plans[:, 1], plans[:, 2], plans[:, 3], cp=plans[:, 4]))
    weights = dep.weights_per_chip(rows).total
    keep = weights < dep.usable_bytes
    b = np.asarray(batches, float)
    tp, pp, dp, ep, cp, cost, weight_share, layers, weights = (
        np.repeat(np.asarray(x)[keep], b.size)
        for x in (*plans[:, :5].T, rows.stage_frac, rows.weight_frac, rows.layer_frac, weights)
    )
    dims = PlanDims(
        tp,
        pp,
        dp,
        ep,
        redundant_experts=np.where(ep > 1, routing.redundant_experts, 0),
        skew=np.where(ep > 1, np.minimum(routing.skew, ep), 1.0),
        tbo=routing.tbo_overlap_frac,
        cp=cp,
        stage_frac=cost,
        layer_frac=layers,
        weight_frac=weight_share,
    )
    return dims, np.tile(b, int(np.count_nonzero(keep))), weights


def candidate_load(
    model: ModelSpec, phase: str, workload: Workload, batch: FloatArray, kv_el: float, routing: MoeRouting
) -> tuple[loads.StepLoad, float]:
    """What one step of each candidate carries under ``phase`` (see :func:`evaluate`), and the
    context each sequence's KV is held at."""
    i_len, o_len = workload.input_len, workload.output_len
    k = routing.mtp if phase != "prefill" else 0
    if phase == "prefill":  # whole prompts (a pipeline micro-batch holds whole requests); the
        # prompt's cached share skips its prefill here too (the xPyD prefill pool)
        cached = workload.prefix_hit * i_len
        return loads.prefill_load(model, batch, i_len, kv_el, cached=cached, whole=True), float(i_len)
    if phase == "mixed" and not k:
        return loads.mixed_load(model, batch, i_len, o_len, kv_el, workload.prefix_hit), float(i_len + o_len)
    # decode tokens verify k + 1 a sequence when MTP is on
    load = loads.decode_load(model, batch, i_len + o_len / 2.0, kv_el, tokens_per_sequence=k + 1)
    if phase == "mixed":  # B E / O new prompts a step keep B in flight (mixed_load with E)
        e_tok = routing.tokens_per_step if k else 1.0
        cached = workload.prefix_hit * i_len  # the prompt's cached share skips its prefill
        pre = loads.prefill_load(model, batch * e_tok / o_len, i_len, kv_el, cached=cached)
        load = replace(
            load,
            prefill_sequences=pre.prefill_sequences,
            prefill_length=pre.prefill_length,
            prefill_attention_flops=pre.prefill_attention_flops,
            prefill_kv_write_bytes=pre.prefill_kv_write_bytes,
            prefill_kv_read_bytes=pre.prefill_kv_read_bytes,
        )
    return load, float(i_len + o_len)


@dataclass(frozen=True)
class Choice:
    """One deployment the search picked out, with its figures (SI)."""

    system: str
    chip: str
    family: str
    precisions: Precisions
    tp: int
    pp: int
    dp: int
    ep: int
    chips: int
    batch: int
    tpot_s: float
    ttft_s: float
    tokens_per_s: float
    tokens_per_s_per_chip: float
    tokens_per_s_per_user: float
    usd_per_million_output_tokens: float
    replicas: int
    fleet_usd_per_million_output_tokens: float
    memory_bytes_per_chip: float
    bottleneck: str
    joules_per_token: float | None = None  # facility energy per output token (default PUE)
    routing: MoeRouting = BALANCED  # applies when ep > 1
    cp: int = 1

    @property
    def plan_text(self) -> str:
        degrees = (("tp", self.tp), ("pp", self.pp), ("dp", self.dp), ("ep", self.ep), ("cp", self.cp))
        parts = [f"{k}={v}" for k, v in degrees if v > 1]
        text = ",".join(parts) or "tp=1"
        return text + (self.routing.plan_suffix() if self.ep > 1 else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "chip": self.chip,
            "precision_family": self.family,
            "precision": {
                "weights": self.precisions.weights.value,
                "kv": self.precisions.kv.value,
                "compute": self.precisions.compute.value,
            },
            "plan": {
                "tp": self.tp,
                "pp": self.pp,
                "dp": self.dp,
                "ep": self.ep,
                **(self.routing.to_dict() if self.ep > 1 else {}),
                **({"cp": self.cp} if self.cp > 1 else {}),
            },
            "plan_text": self.plan_text,
            "speculation": self.routing.speculation_dict(),
            "chips": self.chips,
            "batch": self.batch,
            "tpot_s": self.tpot_s,
            "ttft_s": self.ttft_s,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_chip": self.tokens_per_s_per_chip,
            "tokens_per_s_per_user": self.tokens_per_s_per_user,
            "usd_per_million_output_tokens": self.usd_per_million_output_tokens,
            "replicas": self.replicas,
            "fleet_usd_per_million_output_tokens": self.fleet_usd_per_million_output_tokens,
            "memory_bytes_per_chip": self.memory_bytes_per_chip,
            "bottleneck": self.bottleneck,
            "joules_per_token": self.joules_per_token,
            "tokens_per_s_per_mw": None if not self.joules_per_token else 1e6 / self.joules_per_token,
        }


def choice_at(c: Candidates, i: int, traffic: float) -> Choice:
    chips = int(c.chips[i])
    rate = float(c.tokens_per_s[i])
    replicas = int(econ.replicas_needed(traffic, rate))
    fleet = rl.usd_per_million_tokens(1.0, traffic, replicas * chips, c.usd_per_chip_hour)
    return Choice(
        system=c.system.id,
        chip=c.system.chip.id,
        family=c.family,
        precisions=c.precisions,
        tp=int(c.tp[i]),
        pp=int(c.pp[i]),
        dp=int(c.dp[i]),
        ep=int(c.ep[i]),
        chips=chips,
        batch=int(c.batch[i]),
        tpot_s=float(c.tpot_s[i]),
        ttft_s=float(c.ttft_s[i]),
        tokens_per_s=rate,
        tokens_per_s_per_chip=float(c.tokens_per_s_per_chip[i]),
        tokens_per_s_per_user=float(c.tokens_per_s_per_user[i]),
        usd_per_million_output_tokens=float(c.usd_per_million_output_tokens[i]),
        replicas=replicas,
        fleet_usd_per_million_output_tokens=float(fleet),
        memory_bytes_per_chip=float(c.memory_bytes_per_chip[i]),
        bottleneck=str(c.bottleneck[i]),
        joules_per_token=None if c.joules_per_token is None else float(c.joules_per_token[i]),
        routing=c.routing,
        cp=1 if c.cp is None else int(c.cp[i]),
    )


ASSUMPTIONS: tuple[str, ...] = (
    "traffic and cost are in output tokens; each replica runs chunked prefill, so the "
    "prefill work is inside every step and inside the price.",
    "TPOT = one mixed step at the average context I + O/2; TTFT = max(1, O/B) steps, no queueing.",
    "memory holds KV for B sequences at the full context I + O, one layer of activations, and the reserve.",
    "communication is added to the roofline (no overlap) unless stated; bandwidths and "
    "latencies from the catalog; chips in each domain fill it before the next.",
    "fleet = whole replicas, ceil(traffic / replica throughput); price per chip-hour from the catalog.",
    "disaggregated (xPyD): TTFT = prefill pass + KV transfer, TPOT = decode-only step, no queueing; "
    "SLO percentiles under load are `rackmath simulate`'s.",
)
