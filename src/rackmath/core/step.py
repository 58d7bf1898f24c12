"""One cycle of a planned deployment and where its time goes: :class:`PlanStep`.

What :func:`rackmath.core.parallel.plan_step` returns (its operators, its communication, its
pipeline hops and host time) and the views every report reads off it: the step and its band,
time shares and the bottleneck, throughput, one point operator by operator. Pure and
vectorized like the step itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import collective_ops as cops
from rackmath.core import numeric
from rackmath.core import operators as ops
from rackmath.core.lazy import cached_property
from rackmath.core.numeric import compact, constant
from rackmath.specs import efficiency as seff

FloatArray = NDArray[np.float64]

_ATTENTION = (seff.OpClass.ATTENTION_DECODE, seff.OpClass.ATTENTION_PREFILL)


def ordered(operators: tuple[ops.Operator, ...]) -> list[ops.Operator]:
    """The operators in the one order they are summed in, the attention core last. It is the
    one operator that varies with context, so over a batch x context grid the others add up on
    the batch axis and the grid pays one full-size addition; and a point alone adds in the same
    order as the same point inside a grid (the same bits). One pass, the attention set aside."""
    first: list[ops.Operator] = []
    last: list[ops.Operator] = []
    for op in operators:
        (last if op.op_class in _ATTENTION else first).append(op)
    return first + last


def sum_over(operators: tuple[ops.Operator, ...], term: Callable[[ops.Operator], Any]) -> FloatArray:
    """``sum(term(op))`` in the order of :func:`ordered`."""
    out: Any = 0.0
    for op in ordered(operators):
        out = out + term(op)
    return out


#: What bounds a step, by the index :attr:`PlanStep.bottleneck` computes: the operators' time
#: bound by compute, by moving weights and activations, by moving the KV cache, their launch
#: floors (``latency``), exposed communication, pipeline hops, and the host's per-step overhead.
BOTTLENECKS = np.array(["compute", "weights", "kv", "latency", "comm", "hops", "host"])
_LABELS = BOTTLENECKS.view(f"V{BOTTLENECKS.itemsize}")

#: The fields of an operator :meth:`PlanStep.time_shares` splits its time by.
_SHARE_FIELDS = (
    "time_s", "latency_s", "compute_s", "memory_s",
    "weight_bytes", "activation_bytes", "kv_read_bytes", "kv_write_bytes",
)  # fmt: skip


def _add_time(
    totals: tuple[Any, ...], time_s: Any, latency_s: Any, compute_s: Any, memory_s: Any,
    weight_bytes: Any, activation_bytes: Any, kv_read_bytes: Any, kv_write_bytes: Any,
) -> tuple[Any, ...]:  # fmt: skip
    """``(compute, weights, kv, latency)`` plus one operator's time: its launch floors to
    ``latency``, the rest to ``compute`` where it is bound by compute, else to ``weights`` and
    ``kv`` by the bytes it moves (:meth:`PlanStep.time_shares`)."""
    compute, weights, kv, latency = totals
    rest = time_s - latency_s
    memory_bound = compute_s < memory_s
    kv_moved = kv_read_bytes + kv_write_bytes
    moved = weight_bytes + activation_bytes + kv_moved
    on_memory = rest * memory_bound
    on_kv = on_memory * (kv_moved / np.maximum(moved, 1e-300))
    return compute + (rest - on_memory), weights + (on_memory - on_kv), kv + on_kv, latency + latency_s


def _shares_of(
    want: str, operators: int, scale: Any, step_s: Any, roofline_s: Any, hops: Any, host: Any, *rest: Any
) -> tuple[Any, ...]:
    """The shares of :meth:`PlanStep.time_shares` from the totals of the operators added so
    far (four values), the step's addends to take from its communication (host and hops time
    where not 0) and the remaining ``operators`` operators' :data:`_SHARE_FIELDS`: ``(compute,
    weights, kv, latency, comm)`` where ``want`` is ``"shares"``, else ``(code,)``, the index in
    :data:`BOTTLENECKS` of the largest share (:func:`_largest`)."""
    totals, taken, fields = rest[:4], rest[4 : len(rest) - 8 * operators], rest[len(rest) - 8 * operators :]
    for i in range(operators):
        totals = _add_time(totals, *fields[8 * i : 8 * i + 8])
    comm: Any = step_s - roofline_s
    for x in taken:
        comm = comm - x
    shares = [x if scale is None else np.asarray(scale * x) for x in totals]
    shares.append(np.asarray(comm))
    return tuple(shares) if want == "shares" else (_largest(*shares, hops, host),)


def _largest(*shares: Any) -> Any:
    """The index of the largest of the seven shares (:data:`BOTTLENECKS`), the first of a tie,
    without stacking seven grid-sized arrays: a later share takes a point only where it is
    strictly larger, so the code is the last share that was larger (an increasing index: a
    running maximum). A share no larger than the largest so far anywhere (``max(share) <=
    min(best)``: one value per plan, no communication) needs no pass; a NaN share never wins."""
    best = shares[0]
    code: Any = np.zeros(np.shape(best), np.int8)
    owned = False  # whether ``best`` is this function's own array (then updated in place)
    for i, share in enumerate(shares[1:], start=1):
        if np.size(best) and numeric.highest(compact(share)) <= numeric.lowest(best):
            continue
        larger = share > best
        if type(larger) is np.ndarray and larger.shape == code.shape:  # True as the byte 1
            np.maximum(code, larger.view(np.int8) * np.int8(i), out=code)
        else:
            code = np.maximum(code, larger * np.int8(i))
        if owned and best.shape == larger.shape:
            np.fmax(best, share, out=best)  # the larger where larger (a NaN share never is)
        else:
            best = np.fmax(best, share)
            owned = type(best) is np.ndarray
    return code


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
    #: (:func:`rackmath.core.collective_ops.step_collectives`), then a CP group's
    #: (:func:`rackmath.core.collective_ops.cp_collectives`)
    collectives: tuple[ops.Operator, ...] = ()
    #: a CP group's traffic of one pass, hidden or not (0 without context parallelism)
    cp_comm_pass_s: FloatArray | float = 0.0
    #: the operators' times summed in the order of :func:`sum_over` where the caller has them
    #: (:func:`rackmath.core.parallel.plan_step` does): :attr:`pass_s` without a second sum
    operator_sum_s: FloatArray | None = field(default=None, repr=False, compare=False)

    @cached_property
    def _scale(self) -> FloatArray:
        """``P x imbalance`` at the fields' shape, computed on their values (a broadcast view)."""
        shape = np.broadcast_shapes(np.shape(self.pp), np.shape(self.imbalance))
        return np.broadcast_to(compact(self.pp) * compact(self.imbalance), shape)

    def _scaled(self, x: Any) -> FloatArray:
        """``P x imbalance x x`` at the step's shape: ``x`` itself (a view) where that factor is 1
        everywhere (one stage, no imbalance): multiplying by 1 is exact."""
        if constant(self._scale) == 1.0:
            return np.broadcast_to(x, np.broadcast_shapes(np.shape(x), self._scale.shape))
        return np.asarray(self._scale * x)

    def _total(self, attribute: str) -> FloatArray:
        return np.asarray(sum_over(self.operators, lambda op: getattr(op, attribute)))

    @cached_property
    def pass_s(self) -> FloatArray:
        """Sum over operators of ``max(compute, memory)`` (+ launch floors), one pass."""
        if self.operator_sum_s is not None:
            return np.asarray(self.operator_sum_s)
        return self._total("time_s")

    @property
    def blackboard_pass_s(self) -> FloatArray:
        """The lecture's ``max(total compute, total memory)`` for one pass: the lower bound."""
        return np.asarray(np.maximum(self._total("compute_s"), self._total("memory_s")))

    @property
    def compute_s(self) -> FloatArray:
        return self._scaled(self._total("compute_s"))

    def _moving_s(self, attribute: str) -> FloatArray:
        """Seconds the operators spend moving one tensor class (``weight_bytes``, ...)."""
        moving = sum_over(self.operators, lambda op: op.moving_s(getattr(op, attribute)))
        return self._scaled(moving)

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
        return self._scaled(self._total("memory_s"))

    @property
    def bytes_moved(self) -> FloatArray:
        """HBM bytes one chip moves in a cycle: weights, activations, KV read and written."""
        moved = sum_over(
            self.operators,
            lambda op: op.weight_bytes + op.activation_bytes + op.kv_read_bytes + op.kv_write_bytes,
        )
        return self._scaled(moved)

    @property
    def weight_bytes(self) -> FloatArray:
        return self._scaled(self._total("weight_bytes"))

    @property
    def kv_read_bytes(self) -> FloatArray:
        return self._scaled(self._total("kv_read_bytes"))

    @property
    def roofline_s(self) -> FloatArray:
        """The cycle without communication: ``P * imbalance * pass_s``."""
        return self._scaled(self.pass_s)

    @property
    def blackboard_s(self) -> FloatArray:
        """The cycle in the lecture's form (no communication, no overhead)."""
        return self._scaled(self.blackboard_pass_s)

    @property
    def tp_comm_s(self) -> FloatArray:
        return self._scaled(self.tp_comm_pass_s)

    @property
    def ep_comm_s(self) -> FloatArray:
        return self._scaled(self.ep_comm_pass_s)

    @property
    def cp_comm_s(self) -> FloatArray:
        """A CP group's traffic over the cycle (KV gathers, query gathers, output merges)."""
        return self._scaled(self.cp_comm_pass_s)

    @property
    def comm_s(self) -> FloatArray:
        """TP, EP and CP traffic over the cycle (the CP part only where there is any)."""
        if isinstance(self.cp_comm_pass_s, float) and self.cp_comm_pass_s == 0.0:
            return np.asarray(self.tp_comm_s + self.ep_comm_s)
        return np.asarray(self.tp_comm_s + self.ep_comm_s + self.cp_comm_s)

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
        """``P x stage_s x imbalance + hops_s + overhead_s``, each term skipped where it is an
        exact identity (a factor of 1, an addend of 0: the same numbers, no grid-sized pass)."""
        if np.size(self.stage_s) == 1:  # one point: four operations cost less than the checks
            return np.asarray(self.pp * self.stage_s * self.imbalance + self.hops_s + self.overhead_s)
        cycle: Any = self.stage_s
        if constant(self.pp) != 1.0 or constant(self.imbalance) != 1.0:
            cycle = self.pp * cycle * self.imbalance
        for extra in (self.hops_s, self.overhead_s):
            if constant(extra) != 0.0:
                cycle = cycle + extra
        shape = np.shape(self.stage_s)
        for x in (self.pp, self.imbalance, self.hops_s):  # plan_step gives them all one shape
            if np.shape(x) != shape:
                shape = np.broadcast_shapes(shape, np.shape(x))
        return np.asarray(cycle) if np.shape(cycle) == shape else np.broadcast_to(cycle, shape)

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
        lo = sum_over(self.operators, lambda op: op.time_s * (op.kernel.band.p10 - 1.0))
        hi = sum_over(self.operators, lambda op: op.time_s * (op.kernel.band.p90 - 1.0))
        return np.asarray(self.step_s + self._scaled(lo)), np.asarray(self.step_s + self._scaled(hi))

    def time_shares(self) -> dict[str, FloatArray]:
        """Where the cycle's time goes, in seconds that add up to :attr:`step_s`:

        * ``latency``: every operator's launch floors (``calls x floor_s``);
        * ``compute``: the rest of the time of operators bound by compute;
        * ``weights`` / ``kv``: the rest of the time of operators bound by memory, split by the
          bytes they move (weights and activations against KV read and written);
        * ``comm``: communication the roofline does not hide; ``hops``: pipeline hops;
          ``host``: the per-step overhead.
        """
        return dict(self._shares)

    @cached_property
    def _shares(self) -> dict[str, FloatArray]:
        """:meth:`time_shares`, formed once (the arrays are shared by every call)."""
        values = list(self._share_pass("shares"))
        # multiplying by 1 is exact: the operators' shares at the step's shape, as views
        if constant(self._scale) == 1.0:
            values[:4] = [
                np.broadcast_to(x, np.broadcast_shapes(np.shape(x), self._scale.shape)) for x in values[:4]
            ]
        hops, host = self._plan_shares
        names = ("compute", "weights", "kv", "latency", "comm")
        return {**dict(zip(names, values, strict=True)), "hops": hops, "host": host}

    @cached_property
    def _plan_shares(self) -> tuple[FloatArray, FloatArray]:
        """The hops and host shares: one value per plan, as views at the step's shape."""
        shape = np.shape(self.step_s)
        return (
            np.broadcast_to(compact(self.hops_s) + 0.0, shape),
            np.broadcast_to(compact(self.overhead_s) + 0.0, shape),
        )

    def _share_pass(self, want: str) -> tuple[Any, ...]:
        """:func:`_shares_of` over the operators: those that vary on the batch axis only add up
        first (the order of :func:`sum_over`: the same bits for a point alone and inside a
        grid), the grid-sized ones (attention, last) in blocks of rows
        (:func:`rackmath.core.numeric.by_rows`: no grid-sized temporaries)."""
        fields = [tuple(getattr(op, f) for f in _SHARE_FIELDS) for op in ordered(self.operators)]
        first = next((i for i, f in enumerate(fields) if numeric.grid_shape(f) is not None), len(fields))
        totals: tuple[Any, ...] = (0.0, 0.0, 0.0, 0.0)
        for f in fields[:first]:
            totals = _add_time(totals, *f)
        scale = None if constant(self._scale) == 1.0 else self._scale
        # subtracting 0 is exact: skipped
        taken = tuple(x for x in (self.overhead_s, self.hops_s) if constant(x) != 0.0)
        rest = [x for f in fields[first:] for x in f]
        args = (
            want,
            len(fields) - first,
            scale,
            self.step_s,
            self.roofline_s,
            *self._plan_shares,
            *totals,
            *taken,
            *rest,
        )
        grid = numeric.grid_shape(args)
        return _shares_of(*args) if grid is None else numeric.by_rows(_shares_of, args, grid)

    @cached_property
    def _bottleneck_code(self) -> NDArray[np.int8]:
        """The index of the largest share at each point: from the shares where they were asked
        for already, else from a pass that keeps them only block by block."""
        if "_shares" not in self.__dict__:
            return self._share_pass("code")[0]
        shares = tuple(self._shares[name] for name in BOTTLENECKS)
        grid = numeric.grid_shape(shares)
        return (
            _largest(*shares)
            if grid is None
            else numeric.by_rows(lambda *x: (_largest(*x),), shares, grid)[0]
        )

    @property
    def latency_share(self) -> FloatArray:
        """The share of the cycle spent in launch floors (the kernels' fixed cost per call)."""
        return np.asarray(self.time_shares()["latency"] / self.step_s)

    @property
    def bottleneck(self) -> NDArray[np.str_]:
        """What takes most of the cycle's time (:data:`BOTTLENECKS`, :meth:`time_shares`)."""
        code = np.broadcast_to(self._bottleneck_code, np.shape(self.step_s))
        # the labels taken as raw bytes of their width: the same strings, copied as a block each
        return _LABELS.take(code.astype(np.intp)).view(BOTTLENECKS.dtype)

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
