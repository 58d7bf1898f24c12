"""The step of a planned deployment under TP/EP/PP/DP, with its communication.

Pure and vectorized: plan dimensions (``tp, pp, dp, ep``), batch and context are
NumPy-broadcast arrays, so a search over thousands of plans x batches is one call. The
model enters as a :class:`~rackmath.core.sharding.ShardableModel` (bytes by how they
shard, :mod:`rackmath.core.sharding`); what a chip holds is the one memory account of
:mod:`rackmath.core.memory`.

Layout (Megatron-Core's rank order; the lecture's "layout mirrors the model"):
chips are numbered tensor-parallel innermost, then data/expert parallel, then pipeline
stages outermost. A stage is ``C = dp * tp * cp`` consecutive chips; a TP group is ``tp``
consecutive chips; an EP group is ``ep`` ranks of a stage spaced by the expert-TP degree.
A group of ``n`` chips with ``S`` chips per scale-up domain spans ``ceil(n/S)`` domains
(:func:`rackmath.core.network.place`), so wide EP beyond a domain pays scale-out.

The step (one "cycle": every sequence in the batch advances by its tokens) with ``P``
pipeline stages and ``P`` micro-batches in flight (no bubble in inference, D18):

    pass_s  = roofline(one micro-batch through one stage, per chip)   [core.roofline]
    stage_s = max(pass_s, f * comm_s) + (1 - f) * comm_s               f = comm_overlap_frac
    step_s  = P * stage_s * imbalance + hops * hop_s

``imbalance`` = slowest stage / mean stage (1 for ``P = 1``; :func:`balanced_stages`).
Each chip reads its weight shard once per micro-batch pass, so over a cycle the weight
time is ``P * W_stage / (C * BW)``: stages cannot fetch weights in parallel (D23).
With ``P = 1``, ``dp = 1``, ``tp = N`` and communication off, the step is the foundation's
ideal N-chip roofline, up to the replicated norm and router bytes (tested).

Sources: Shoeybi et al. 2019 (Megatron-LM: two all-reduces per layer under TP);
Narayanan et al. 2021 (Megatron PTD-P rank layout); DeepSeek-V3 report §3.4 and DeepEP
(attention-DP beside EP; dispatch/combine all-to-all of ``d_model`` per token and
destination rank); Korthikanti et al. 2022, eq. 1 (activations per layer); the lecture D13-D24.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import collective_ops as cops
from rackmath.core import numeric
from rackmath.core import operators as ops
from rackmath.core.chip_rates import ChipRates
from rackmath.core.loads import StepLoad
from rackmath.core.network import (
    DEFAULT_ACTIVATION_BYTES,
    CommOverlap,
    Topology,
    combine_comm_s,
    crossing_hops,
    pipeline_hop_s,
    pipeline_hops,
    two_batch_overlap_s,
)
from rackmath.core.sharding import (
    ShardableModel,
)
from rackmath.errors import InputError
from rackmath.specs import efficiency as seff

FloatArray = NDArray[np.float64]

#: The lecture's per-hop pipeline latency, D22: "a few milliseconds per hop (give or take
#: 10x)"; 4 stages take a 20 ms token to 30 ms, i.e. 2.5 ms for each of 4 hops (three
#: activation hops and the sampled token's return to the first stage).
LECTURE_HOP_LATENCY_S = 2.5e-3

_ATTENTION = (seff.OpClass.ATTENTION_DECODE, seff.OpClass.ATTENTION_PREFILL)


def _ordered(operators: tuple[ops.Operator, ...]) -> list[ops.Operator]:
    """The operators in the one order they are summed in, the attention core last. It is the
    one operator that varies with context, so over a batch x context grid the others add up on
    the batch axis and the grid pays one full-size addition; and a point alone adds in the same
    order as the same point inside a grid (the same bits)."""
    return [op for op in operators if op.op_class not in _ATTENTION] + [
        op for op in operators if op.op_class in _ATTENTION
    ]


def _sum_over(operators: tuple[ops.Operator, ...], term: Callable[[ops.Operator], Any]) -> FloatArray:
    """``sum(term(op))`` in the order of :func:`_ordered`."""
    out: Any = 0.0
    for op in _ordered(operators):
        out = out + term(op)
    return out


#: What bounds a step, by the index :attr:`PlanStep.bottleneck` computes: the operators' time
#: bound by compute, by moving weights and activations, by moving the KV cache, their launch
#: floors (``latency``), exposed communication, pipeline hops, and the host's per-step overhead.
BOTTLENECKS = np.array(["compute", "weights", "kv", "latency", "comm", "hops", "host"])


# ----------------------------------------------------------------------------- the step


@dataclass(frozen=True)
class PlanStep:
    """One cycle of a planned deployment (seconds; arrays broadcast over plan and grid).

    ``operators`` are one chip's operators for one micro-batch pass through one stage; the
    ``*_s`` properties scale pass times to the whole cycle (``P`` passes, imbalance
    included) so they compare directly with :attr:`step_s`:

        step_s = P * imbalance * stage_s + hops_s + overhead_s
        stage_s = max(pass_s, f comm) + (1 - f) comm,   pass_s = sum of operator times
    """

    operators: tuple[ops.Operator, ...]
    tp_comm_pass_s: FloatArray
    ep_comm_pass_s: FloatArray
    stage_s: FloatArray
    hops: FloatArray
    hops_s: FloatArray  # all hops of a cycle together
    pp: FloatArray
    imbalance: FloatArray
    #: host time per cycle: the per-step overhead plus the per-sequence host time of the
    #: busiest engine (an attention-DP rank or replica schedules only its own sequences)
    overhead_s: FloatArray | float = 0.0
    #: where two-batch overlap split the step into two half micro-batches (it does only where faster)
    two_batch_split: ArrayLike = False
    #: the collectives of one pass (TP and EP: ``tp_all_reduce``, ``moe_tp_all_reduce``,
    #: ``ep_dispatch``, ``ep_combine``) and the cycle's pipeline sends (``pp_send``), each an
    #: operator of class ``collective`` with its kernel
    #: (:func:`rackmath.core.collective_ops.step_collectives`)
    collectives: tuple[ops.Operator, ...] = ()

    @property
    def _scale(self) -> FloatArray:
        return np.asarray(self.pp * self.imbalance)

    def _total(self, attribute: str) -> FloatArray:
        return np.asarray(_sum_over(self.operators, lambda op: getattr(op, attribute)))

    @property
    def pass_s(self) -> FloatArray:
        """Sum over operators of ``max(compute, memory)`` (+ launch floors), one pass."""
        return self._total("time_s")

    @property
    def blackboard_pass_s(self) -> FloatArray:
        """The lecture's ``max(total compute, total memory)`` for one pass: the lower bound."""
        return np.asarray(np.maximum(self._total("compute_s"), self._total("memory_s")))

    @property
    def compute_s(self) -> FloatArray:
        return np.asarray(self._scale * self._total("compute_s"))

    def _moving_s(self, attribute: str) -> FloatArray:
        """Seconds the operators spend moving one tensor class (``weight_bytes``, ...)."""
        moving = _sum_over(self.operators, lambda op: op.moving_s(getattr(op, attribute)))
        return np.asarray(self._scale * moving)

    @property
    def weight_fetch_s(self) -> FloatArray:
        return self._moving_s("weight_bytes")

    @property
    def kv_fetch_s(self) -> FloatArray:
        return np.asarray(self._moving_s("kv_read_bytes") + self._moving_s("kv_write_bytes"))

    @property
    def activation_s(self) -> FloatArray:
        return self._moving_s("activation_bytes")

    @property
    def memory_s(self) -> FloatArray:
        return np.asarray(self._scale * self._total("memory_s"))

    @property
    def bytes_moved(self) -> FloatArray:
        """HBM bytes one chip moves in a cycle: weights, activations, KV read and written."""
        moved = _sum_over(
            self.operators,
            lambda op: op.weight_bytes + op.activation_bytes + op.kv_read_bytes + op.kv_write_bytes,
        )
        return np.asarray(self._scale * moved)

    @property
    def weight_bytes(self) -> FloatArray:
        return np.asarray(self._scale * self._total("weight_bytes"))

    @property
    def kv_read_bytes(self) -> FloatArray:
        return np.asarray(self._scale * self._total("kv_read_bytes"))

    @property
    def roofline_s(self) -> FloatArray:
        """The cycle without communication: ``P * imbalance * pass_s``."""
        return np.asarray(self._scale * self.pass_s)

    @property
    def blackboard_s(self) -> FloatArray:
        """The cycle in the lecture's form (no communication, no overhead)."""
        return np.asarray(self._scale * self.blackboard_pass_s)

    @property
    def tp_comm_s(self) -> FloatArray:
        return np.asarray(self._scale * self.tp_comm_pass_s)

    @property
    def ep_comm_s(self) -> FloatArray:
        return np.asarray(self._scale * self.ep_comm_pass_s)

    @property
    def comm_s(self) -> FloatArray:
        return np.asarray(self.tp_comm_s + self.ep_comm_s)

    @property
    def communication_s(self) -> FloatArray:
        """All communication of a cycle, hidden or not: TP, EP and pipeline hops."""
        return np.asarray(self.comm_s + self.hops_s)

    @property
    def exposed_communication_s(self) -> FloatArray:
        """Communication the roofline does not hide: ``step - roofline - overhead``."""
        return np.asarray(self.step_s - self.roofline_s - self.overhead_s)

    @cached_property
    def step_s(self) -> FloatArray:
        return np.asarray(self.pp * self.stage_s * self.imbalance + self.hops_s + self.overhead_s)

    @cached_property
    def step_band_s(self) -> tuple[FloatArray, FloatArray]:
        """The cycle's p10 and p90 (s): every operator's time scaled by the 10th and the 90th
        percentile of ``measured / predicted`` of its curve (``op.kernel.band``, measured on
        held-out shape values at calibration), communication, hops and host time as they are::

            step_p10 = step_s - P imbalance sum_i (1 - p10_i) t_i
            step_p90 = step_s + P imbalance sum_i (p90_i - 1) t_i

        The operators' errors are taken as comonotonic (all at their p10 together, all at their
        p90 together): the sum of the edges, the widest band their errors allow, where
        independent errors would partly cancel (a conservative choice). Where communication
        overlaps the pass (``stage = max(pass, f comm) + (1 - f) comm``) a pass shortened or
        lengthened by ``d`` moves the stage by at most ``d``, so the band stays an outer bound.
        The pure roofline's operators carry no band (``p10 = p90 = 1``): the band is the step.
        Worked number: operators of 6 ms (band 0.9-1.2) and 4 ms (0.8-1.5) plus 2 ms of exposed
        communication, one stage: 12 ms in [12 - 0.6 - 0.8, 12 + 1.2 + 2.0] = [10.6, 15.2] ms."""
        lo = _sum_over(self.operators, lambda op: op.time_s * (op.kernel.band.p10 - 1.0))
        hi = _sum_over(self.operators, lambda op: op.time_s * (op.kernel.band.p90 - 1.0))
        return np.asarray(self.step_s + self._scale * lo), np.asarray(self.step_s + self._scale * hi)

    def time_shares(self) -> dict[str, FloatArray]:
        """Where the cycle's time goes, in seconds that add up to :attr:`step_s`:

        * ``latency``: every operator's launch floors (``calls x floor_s``);
        * ``compute``: the rest of the time of operators bound by compute;
        * ``weights`` / ``kv``: the rest of the time of operators bound by memory, split by the
          bytes they move (weights and activations against KV read and written);
        * ``comm``: communication the roofline does not hide; ``hops``: pipeline hops;
          ``host``: the per-step overhead.
        """
        # one pass over the operators (the order of _sum_over: the same bits for a point alone
        # and inside a grid), each one's time less its launch floors split once by its bound
        compute: Any = 0.0
        weights: Any = 0.0
        kv: Any = 0.0
        latency: Any = 0.0
        for op in _ordered(self.operators):
            rest = op.time_s - op.latency_s
            memory_bound = op.compute_s < op.memory_s
            kv_moved = op.kv_read_bytes + op.kv_write_bytes
            moved = op.weight_bytes + op.activation_bytes + kv_moved
            on_memory = rest * memory_bound
            on_kv = on_memory * (kv_moved / np.maximum(moved, 1e-300))
            compute = compute + (rest - on_memory)
            weights = weights + (on_memory - on_kv)
            kv = kv + on_kv
            latency = latency + op.latency_s
        scale = self._scale
        shares = {
            "compute": scale * compute,
            "weights": scale * weights,
            "kv": scale * kv,
            "latency": scale * latency,
            "comm": self.step_s - self.roofline_s - self.overhead_s - self.hops_s,
            "hops": self.hops_s + 0.0 * self.step_s,
            "host": self.overhead_s + 0.0 * self.step_s,
        }
        return {k: np.asarray(v) for k, v in shares.items()}

    @property
    def latency_share(self) -> FloatArray:
        """The share of the cycle spent in launch floors (the kernels' fixed cost per call)."""
        return np.asarray(self.time_shares()["latency"] / self.step_s)

    @property
    def bottleneck(self) -> NDArray[np.str_]:
        """What takes most of the cycle's time (:data:`BOTTLENECKS`, :meth:`time_shares`)."""
        shares = self.time_shares()
        # argmax over the seven shares without stacking seven grid-sized arrays: a later share
        # takes a point only where it is strictly larger (argmax keeps the first of a tie)
        best = shares[BOTTLENECKS[0]]
        code: Any = np.zeros(np.shape(best), np.intp)
        for i, name in enumerate(BOTTLENECKS[1:], start=1):
            larger = shares[name] > best
            best = np.where(larger, shares[name], best)
            code = np.where(larger, i, code)
        return BOTTLENECKS[np.broadcast_to(code, np.shape(self.step_s))]

    def _collective_scale(self, op: ops.Operator) -> FloatArray:
        """A pass collective's time scales to the cycle like the operators (``P x imbalance``);
        the pipeline sends are already the cycle's."""
        return np.asarray(1.0) if op.name in cops.PER_CYCLE_COLLECTIVES else self._scale

    def breakdown_at(self, index: tuple[int, ...]) -> dict[str, Any]:
        """One point of the grid, operator by operator, as plain numbers:
        ``step_s = sum(time_s) + exposed_communication_s + overhead_s``. The collectives are
        listed apart (``collectives``: each one's time over the cycle, its fixed part, what
        bounds it and the kernel it ran on); how much of them the operators hide is
        ``communication_s - exposed_communication_s``."""
        shape = self.stage_s.shape
        scale = float(self._scale[index])
        operators = [
            {
                "name": op.name,
                "class": op.op_class.value,
                "flops": scale * float(np.broadcast_to(op.flops, shape)[index]),
                "bytes_read": scale * float(np.broadcast_to(op.bytes_read, shape)[index]),
                "bytes_written": scale * float(np.broadcast_to(op.bytes_written, shape)[index]),
                "compute_s": scale * float(np.broadcast_to(op.compute_s, shape)[index]),
                "memory_s": scale * float(np.broadcast_to(op.memory_s, shape)[index]),
                "time_s": scale * float(np.broadcast_to(op.time_s, shape)[index]),
                "latency_s": scale * float(np.broadcast_to(op.latency_s, shape)[index]),
                "bound": str(np.broadcast_to(op.bound, shape)[index]),
                "kernel": op.kernel.to_dict(),
            }
            for op in self.operators
        ]
        collectives = []
        for op in self.collectives:
            k = float(np.broadcast_to(self._collective_scale(op), shape)[index])
            time = k * float(np.broadcast_to(op.time_s, shape)[index])
            latency = k * float(np.broadcast_to(op.latency_s, shape)[index])
            collectives.append(
                {
                    "name": op.name,
                    "class": op.op_class.value,
                    "time_s": time,
                    "latency_s": latency,
                    "bound": "latency" if latency >= 0.5 * time else "link",
                    "kernel": op.kernel.to_dict(),
                }
            )
        shares = self.time_shares()
        return {
            "operators": operators,
            "collectives": collectives,
            "time_shares_s": {k: float(np.broadcast_to(v, shape)[index]) for k, v in shares.items()},
            "communication_s": float(self.communication_s[index]),
            "exposed_communication_s": float(self.exposed_communication_s[index]),
            "overhead_s": float(np.broadcast_to(self.overhead_s, self.stage_s.shape)[index]),
            "blackboard_step_s": float(self.blackboard_s[index]),
        }

    def operator_table(self) -> list[dict[str, Any]]:
        """Each operator over the whole cycle: ``{name, class, flops, bytes_read,
        bytes_written, compute_s, memory_s, time_s, latency_s, bound, kernel}`` (work per chip,
        times scaled like :attr:`step_s`; ``kernel`` the curve it ran on), then each collective
        (class ``collective``: no FLOPs and no HBM bytes; ``bound`` is ``latency`` where its
        fixed part is half its time or more, else ``link``), with its ``latency_s`` and ``kernel``."""
        scale = self._scale
        rows: list[dict[str, Any]] = [
            {
                "name": op.name,
                "class": op.op_class.value,
                "flops": np.asarray(scale * op.flops),
                "bytes_read": np.asarray(scale * op.bytes_read),
                "bytes_written": np.asarray(scale * op.bytes_written),
                "compute_s": np.asarray(scale * op.compute_s),
                "memory_s": np.asarray(scale * op.memory_s),
                "time_s": np.asarray(scale * op.time_s),
                "latency_s": np.asarray(scale * op.latency_s),
                "bound": op.bound,
                "kernel": op.kernel.to_dict(),
            }
            for op in self.operators
        ]
        for op in self.collectives:
            k = self._collective_scale(op)
            time, latency = np.asarray(k * op.time_s), np.asarray(k * op.latency_s)
            rows.append(
                {
                    "name": op.name,
                    "class": op.op_class.value,
                    "flops": np.zeros_like(time),
                    "bytes_read": np.zeros_like(time),
                    "bytes_written": np.zeros_like(time),
                    "compute_s": np.zeros_like(time),
                    "memory_s": np.zeros_like(time),
                    "time_s": time,
                    "latency_s": latency,
                    "bound": np.where(latency >= 0.5 * time, "latency", "link"),
                    "kernel": op.kernel.to_dict(),
                }
            )
        return rows


def plan_step(
    m: ShardableModel,
    *,
    tp: ArrayLike,
    pp: ArrayLike,
    dp: ArrayLike,
    ep: ArrayLike,
    load: StepLoad,
    rates: ChipRates,
    topo: Topology | None,
    stage_frac: ArrayLike | None = None,
    comm_overlap_frac: float = CommOverlap.ADDED,
    communication: bool = True,
    decode: bool = True,
    extra_hop_latency_s: float = 0.0,
    activation_bytes: float = DEFAULT_ACTIVATION_BYTES,
    moe_tp: ArrayLike = 0,
    redundant_experts: ArrayLike = 0,
    skew: ArrayLike = 1.0,
    tbo_overlap_frac: ArrayLike = 0.0,
    shape: tuple[int, ...] | None = None,
) -> PlanStep:
    """Operators plus communication of one cycle in which the deployment processes ``load``.

    Per chip and micro-batch pass (``C = dp tp`` chips per stage, ``P = pp``): the operators
    of :func:`rackmath.core.operators.pass_operators`; TP all-reduces over ``L/P`` layers;
    EP dispatch + combine over ``L_moe/P`` MoE layers, over the tiers the EP group spans
    (ranks spaced ``moe_tp`` apart; wide EP beyond a domain crosses scale-out). ``stage_frac``
    (the heaviest stage's share of the layer cost) sets ``imbalance = P * stage_frac``.

    The plan's MoE fields (:class:`rackmath.specs.plan.ParallelPlan`): ``moe_tp`` and
    ``redundant_experts`` set the experts' shards and slots; ``skew`` multiplies the busiest
    rank's expert GEMM and its dispatch/combine bytes; ``tbo_overlap_frac`` ``o`` overlaps
    the all-to-all with the other micro-batch (:func:`rackmath.core.network.two_batch_overlap_s`).
    The step then runs as two micro-batches of half the tokens, each through every operator
    (weights read twice, GEMMs at half the rows) and its own collectives:

        stage_s = min(combine(pass, tp + ep), tbo)
        tbo = combine(2 pass_half, 2 tp_half) + max(0, 2 ep_half - o 2 pass_half)

    the runtime splitting the step only where that is faster (a memory-bound decode step whose
    all-to-all is small pays more to read its weights twice than the overlap saves); where it
    does, the operators reported are the two halves'. ``shape`` (default: the inputs' broadcast shape) is the
    shape of the answer's arrays: a one-point load given as scalars is computed on scalars.
    """
    t, p, d, e = (numeric.num(x) for x in (tp, pp, dp, ep))
    split: ArrayLike = False
    chips_per_stage = d * t
    mb_tokens = load.tokens / p
    imbalance = p / p if stage_frac is None else p * numeric.num(stage_frac)

    def operators_of(step_load: StepLoad) -> tuple[ops.Operator, ...]:
        return ops.pass_operators(
            m.operators,
            step_load,
            rates,
            tp=t,
            pp=p,
            dp=d,
            ep=e,
            moe_tp=moe_tp,
            redundant_experts=redundant_experts,
            skew=skew,
        )

    operators = operators_of(load)
    pass_s = _sum_over(operators, lambda op: op.time_s)
    zero = 0.0 * pass_s  # broadcasts every term to the pass's shape
    collectives: tuple[ops.Operator, ...] = ()
    if communication:
        if topo is None:
            raise InputError("topology", None, "a topology when communication is on")
        ranks = cops.destination_ranks(e, m.experts, m.experts_per_token)

        def comms(tokens: FloatArray) -> tuple[ops.Operator, ...]:
            """The TP and EP collectives of one micro-batch of ``tokens`` tokens."""
            return cops.step_collectives(
                m, tokens, rates.efficiency, topo, t, d, e, p, moe_tp, skew, ranks, activation_bytes
            )

        collectives = comms(mb_tokens)
        tp_comm, ep_comm = cops.comm_pass_s(collectives, zero)
        hops = pipeline_hops(p, decode=decode) + zero
        if p.ndim == 0 and p == 1:  # one stage: no hop to time
            hops_s = zero
        else:
            crossing = crossing_hops(p, chips_per_stage, topo.chips_per_domain, hops)
            message = mb_tokens * m.hidden * activation_bytes / chips_per_stage
            hop_out = pipeline_hop_s(message, True, topo, extra_hop_latency_s)
            hop_up = pipeline_hop_s(message, False, topo, extra_hop_latency_s)
            hops_s = crossing * hop_out + (hops - crossing) * hop_up + zero
        stage = combine_comm_s(pass_s, tp_comm + ep_comm, comm_overlap_frac)
        o = numeric.num(tbo_overlap_frac)
        if (o > 0) if o.ndim == 0 else np.any(o > 0):
            # two micro-batches of half the tokens: each runs every operator (weights read twice,
            # GEMMs at half the rows) and its own collectives; one's all-to-all hides under the
            # other's operators
            halves = operators_of(load.halved())
            tbo_pass = 2.0 * _sum_over(halves, lambda op: op.time_s)
            half_collectives = comms(mb_tokens / 2.0)
            tp_half, ep_half = cops.comm_pass_s(half_collectives, zero)
            with_tbo = combine_comm_s(tbo_pass, 2.0 * tp_half, comm_overlap_frac) + two_batch_overlap_s(
                2.0 * ep_half, tbo_pass, o
            )
            use = (with_tbo < stage) & (o > 0)
            split = use
            operators = _either(use, halves, operators)
            collectives = _either(use, half_collectives, collectives)
            if np.ndim(use) == 0:
                if use:
                    tp_comm, ep_comm, stage = 2.0 * tp_half, 2.0 * ep_half, with_tbo
            else:
                tp_comm = np.where(use, 2.0 * tp_half, tp_comm)
                ep_comm = np.where(use, 2.0 * ep_half, ep_comm)
                stage = np.where(use, with_tbo, stage)
        if not (p.ndim == 0 and p == 1):
            latency = crossing * topo.scale_out_latency_s + (hops - crossing) * topo.scale_up_latency_s
            latency = latency + hops * extra_hop_latency_s
            send = cops.send_operator("pp_send", hops_s, latency, topo, rates.efficiency)
            collectives = (*collectives, send)
    else:  # nothing to combine: the stage is the pass (the fields broadcast below, as views)
        combine_comm_s(0.0, 0.0, comm_overlap_frac)  # the overlap fraction is checked all the same
        tp_comm = ep_comm = 0.0 * p
        hops = pipeline_hops(p, decode=decode)
        hops_s = hops * extra_hop_latency_s
        stage = pass_s
    if shape is None:
        shape = stage.shape
    elif stage.shape != shape:
        shape = np.broadcast_shapes(stage.shape, shape)

    fields = (tp_comm, ep_comm, stage, hops, hops_s, p, imbalance)
    if all(isinstance(x, float) or np.ndim(x) == 0 for x in fields):  # one point: seven views of one array
        tp_comm, ep_comm, stage, hops, hops_s, p, imbalance = np.array(fields).reshape(7, *shape)
    else:
        tp_comm, ep_comm, stage, hops, hops_s, p, imbalance = (
            x if isinstance(x, np.ndarray) and x.shape == shape else np.broadcast_to(x, shape) for x in fields
        )
    return PlanStep(
        operators=operators,
        tp_comm_pass_s=tp_comm,
        ep_comm_pass_s=ep_comm,
        stage_s=stage,
        hops=hops,
        hops_s=hops_s,
        pp=p,
        imbalance=imbalance,
        overhead_s=host_overhead_s(rates.efficiency, load, d),
        two_batch_split=split,
        collectives=collectives,
    )


def host_overhead_s(table: seff.EfficiencyTable, load: StepLoad, dp: ArrayLike) -> FloatArray | float:
    """Host time of one cycle: ``overhead_s`` per step plus ``overhead_s_per_sequence`` for
    each sequence the busiest engine runs, ``ceil(B / dp)`` of a batch of ``B`` (each
    attention-DP rank or replica schedules its own: 64 ranks running 8,192 sequences pay for
    128 at 10 us, 1.28 ms, not 82 ms)."""
    if not table.overhead_s_per_sequence:
        return table.overhead_s
    sequences = ops.whole(load.decode_sequences / load.decode_queries, numeric.num(dp))
    return np.asarray(table.overhead_s + table.overhead_s_per_sequence * sequences)


def _either(
    use: ArrayLike, halves: tuple[ops.Operator, ...], whole: tuple[ops.Operator, ...]
) -> tuple[ops.Operator, ...]:
    """Per point, the two half micro-batches' operators (each quantity twice one half's) where
    ``use``, else the whole micro-batch's; the bandwidth is the half's where used."""
    if np.ndim(use) == 0:  # one point: one tuple or the other, NumPy scalars kept
        if not use:
            return whole
        return tuple(h._replace(**{f: 2.0 * getattr(h, f) for f in _OPERATOR_TOTALS}) for h in halves)
    out = []
    for h, w in zip(halves, whole, strict=True):
        numbers = {f: np.where(use, 2.0 * getattr(h, f), getattr(w, f)) for f in _OPERATOR_TOTALS}
        bandwidth = np.where(use, h.bandwidth_bytes_per_s, w.bandwidth_bytes_per_s)
        out.append(w._replace(bandwidth_bytes_per_s=bandwidth, **numbers))
    return tuple(out)


_OPERATOR_TOTALS = (
    "flops",
    "weight_bytes",
    "activation_bytes",
    "kv_read_bytes",
    "kv_write_bytes",
    "compute_s",
    "memory_s",
    "time_s",
    "latency_s",
    "input_values",
)


#: The step's collectives that are tensor-parallel traffic, and those that are the experts'.
