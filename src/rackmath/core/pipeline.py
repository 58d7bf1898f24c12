"""Pipeline-parallel schedules: closed-form bubbles and an event simulator that lays them out.

A pipeline of ``P`` stages runs ``m`` micro-batches. Per micro-batch and per stage, the
forward pass takes ``t_f``, the backward pass for the input gradient ``t_b`` and the
weight gradient ``t_w`` (a standard backward is ``t_b + t_w``; with matmuls alone each is
one forward, so the usual ``backward = 2 x forward`` is ``t_b = t_w = t_f``). The bubble
fraction is the share of stage-time that is idle between the first op and the last:

    bubble_frac = 1 - sum(busy time) / (P * makespan)

Closed forms (derived below and checked against :func:`simulate` in the tests):

* **GPipe** (Huang et al. 2019): all ``m`` forwards, then all ``m`` backwards. The last
  stage starts after ``P-1`` forward slots and the first stage ends ``P-1`` backward slots
  after the last stage, so the makespan is ``(m + P - 1)(t_f + t_b + t_w)`` and

      bubble = (P - 1) / (m + P - 1)          (4 stages, 4 micro-batches: 3/7)

  Every stage holds the activations of all ``m`` micro-batches at the turn.
* **1F1B** (PipeDream-Flush, Narayanan et al. 2021, §2.2): stage ``s`` runs ``P - s - 1``
  warm-up forwards, then alternates one forward and one backward. Same makespan and
  bubble as GPipe, but stage 0 never holds more than ``min(P, m)`` micro-batches.
* **Interleaved 1F1B** (Narayanan et al. 2021, §2.2.2): each device holds ``v`` model
  chunks (virtual stages ``c * P + d``), each op is ``1/v`` as long, so the ramp-up and
  ramp-down shrink ``v``-fold: bubble time ``(P - 1)(t_f + t_b + t_w) / v`` and

      bubble = (P - 1) / (v * m + P - 1)      (needs m divisible by P)

  Stage 0 holds ``P + (P - 1)/v`` micro-batches' worth of activations (Korthikanti et al.
  2022, §4.2.3: ``(1 + (P-1)/(P v))`` times 1F1B's ``P``).
* **ZB-H1** (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", §2.2): the backward is
  split into ``B`` (input gradient, on the critical path between stages) and ``W``
  (weight gradient, needed by nobody downstream). Running 1F1B on ``F`` and ``B`` and
  deferring ``s`` of stage ``s``'s ``W`` ops (the last stage's ``P - 1`` fill its
  ramp-down) keeps 1F1B's peak memory of ``P`` micro-batches. Stage 0 now waits only
  ``(P - 1) t_b`` for the first ``B`` (the ``B`` chain moves one ``t_b`` per stage), and
  the last stage idles ``(P - 1) t_f`` at the start plus ``(P - 1)(t_b - t_w)`` at the
  end; all stages share one makespan, so when ``t_w <= min(t_f, t_b)`` each idles

      X = (P - 1)(t_f + t_b - t_w),      bubble = X / (m (t_f + t_b + t_w) + X)

  which is Qi et al.'s ZB-H1 bubble ``(p - 1)(T_F + T_B - T_W)``. With
  ``t_f = t_b = t_w``: ``bubble = (P - 1) / (3 m + P - 1)``, a third of 1F1B's bubble
  time. The simulator reproduces this exactly for ``m >= P`` (see the tests).
* **DualPipe** (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", §3.2.1 and Table 2):
  micro-batches are fed from both ends of the pipeline (each stage holds two model chunks,
  so two copies of its parameters) and each forward chunk is paired with a backward chunk
  whose communication it hides. Table 2 gives the bubble time
  ``(P/2 - 1)(T_F&B + T_B - 3 T_W)`` with ``T_B`` the full backward; with no compute gain
  from the pairing (``T_F&B = t_f + t_b + t_w``, ``T_B = t_b + t_w``, ``T_W = t_w``):

      X = (P/2 - 1)(t_f + 2 t_b - t_w),      bubble = X / (m (t_f + t_b + t_w) + X)

  (8 stages, 16 micro-batches, unit times: X = 6, bubble 6/54 = 1/9). Activations:
  ``P + 1`` micro-batches (Table 2). ``P`` must be even and ``m >= 2P`` (even).

  The simulator lays DualPipe out op by op (:func:`_dualpipe`), each F&B pair starting
  once both of its inputs are there. It reproduces Table 2 exactly (to rounding) wherever
  the table's setting holds, ``t_b = t_f`` and ``t_w <= t_f``: ``X`` above, and ``P + 1``
  micro-batches in flight on every rank. Elsewhere the layout and the closed form part:
  with ``t_b > t_f`` the layout idles less (4 stages, 8 micro-batches, ``t_b = 2``:
  ``X = 3`` against the table's 4), with ``t_f > t_b`` more; :func:`bubble_fraction`
  returns the table's closed form, :func:`simulate` the layout.

Everything here is pure: op orders are generated per stage, and :func:`simulate` starts
each op at the later of its stage being free and its dependencies being done (zero-cost
point-to-point sends; add them through ``t_f``/``t_b`` if needed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from rackmath.errors import InputError, UnknownIdError
from rackmath.specs import checks


class Schedule(StrEnum):
    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"
    ZERO_BUBBLE = "zb-h1"
    DUALPIPE = "dualpipe"

    @classmethod
    def parse(cls, text: str | Schedule) -> Schedule:
        if isinstance(text, Schedule):
            return text
        key = text.strip().lower()
        aliases = {"zero-bubble": cls.ZERO_BUBBLE, "zb": cls.ZERO_BUBBLE, "interleaved-1f1b": cls.INTERLEAVED}
        if key in aliases:
            return aliases[key]
        try:
            return cls(key)
        except ValueError:
            raise UnknownIdError("pipeline schedule", text, [s.value for s in cls]) from None


class OpKind(StrEnum):
    F = "F"  # forward
    B = "B"  # backward (input gradient; includes the weight gradient unless the schedule splits W)
    W = "W"  # weight gradient (zero-bubble schedules only)


@dataclass(frozen=True)
class Op:
    """One piece of work on one stage: ``kind`` of ``microbatch`` through model ``chunk``."""

    kind: OpKind
    microbatch: int
    chunk: int = 0
    #: DualPipe's F&B pair: this op and the next on its stage start together, once both of
    #: their inputs have arrived (the pair overlaps one's compute with the other's traffic)
    paired: bool = False


@dataclass(frozen=True)
class TimedOp:
    stage: int
    op: Op
    start: float
    end: float


@dataclass(frozen=True)
class Timeline:
    """A simulated schedule: every op with its start and end, in the time unit of the inputs."""

    schedule: Schedule
    stages: int
    microbatches: int
    virtual_stages: int
    ops: tuple[TimedOp, ...]

    @property
    def makespan(self) -> float:
        return max(o.end for o in self.ops) - min(o.start for o in self.ops)

    def busy(self, stage: int) -> float:
        return sum(o.end - o.start for o in self.ops if o.stage == stage)

    @property
    def bubble_frac(self) -> float:
        busy = sum(o.end - o.start for o in self.ops)
        return 1.0 - busy / (self.stages * self.makespan)

    def peak_in_flight(self, stage: int) -> float:
        """Most micro-batches whose activations ``stage`` holds at once, in whole-stage units.

        A forward of one chunk adds ``1/v``; the op that frees them (``W`` when split,
        else ``B``) removes ``1/v``.
        """
        mine = sorted((o for o in self.ops if o.stage == stage), key=lambda o: o.start)
        split = {(o.op.microbatch, o.op.chunk) for o in mine if o.op.kind is OpKind.W}
        held = peak = 0.0
        for o in mine:
            if o.op.kind is OpKind.F:
                held += 1.0 / self.virtual_stages
                peak = max(peak, held)
            elif (o.op.kind is OpKind.W) or (
                o.op.kind is OpKind.B and (o.op.microbatch, o.op.chunk) not in split
            ):
                held -= 1.0 / self.virtual_stages
        return peak


def _check(stages: int, microbatches: int, virtual_stages: int = 1) -> None:
    for name, value in (
        ("stages", stages),
        ("microbatches", microbatches),
        ("virtual stages", virtual_stages),
    ):
        checks.whole(name, value)


def _check_times(t_f: float, t_b: float, t_w: float) -> None:
    for name, value in (("t_f", t_f), ("t_b", t_b), ("t_w", t_w)):
        checks.positive(name, value, allowed="a positive, finite duration")


def _times(t_f: float = 1.0, t_b: float = 1.0, t_w: float = 1.0) -> tuple[float, float, float]:
    """``(t_f, t_b, t_w)``, checked: the unit times a schedule's ops take."""
    _check_times(t_f, t_b, t_w)
    return t_f, t_b, t_w


def _gpipe(stages: int, m: int, v: int) -> list[list[Op]]:
    # The lecture's drawing: F0..F(m-1), then B(m-1)..B0.
    return [
        [Op(OpKind.F, i) for i in range(m)] + [Op(OpKind.B, i) for i in reversed(range(m))]
        for _ in range(stages)
    ]


def _one_f_one_b(stages: int, m: int, v: int) -> list[list[Op]]:
    orders = []
    for s in range(stages):
        warm = min(stages - s - 1, m)
        order = [Op(OpKind.F, i) for i in range(warm)]
        for i in range(m - warm):
            order += [Op(OpKind.F, warm + i), Op(OpKind.B, i)]
        order += [Op(OpKind.B, i) for i in range(m - warm, m)]
        orders.append(order)
    return orders


def _interleaved(stages: int, m: int, v: int) -> list[list[Op]]:
    """Megatron-LM's interleaved order (``forward_backward_pipelining_with_interleaving``).

    The ``k``-th forward op on a device runs chunk ``(k // P) % v`` of micro-batch
    ``(k // (P v)) P + k % P``; backwards run the chunks in reverse. Device ``d`` warms up
    with ``2 (P - d - 1) + (v - 1) P`` forwards, then alternates, then cools down.
    """
    total = m * v

    def forward(k: int) -> Op:
        return Op(OpKind.F, (k // (stages * v)) * stages + k % stages, (k // stages) % v)

    def backward(k: int) -> Op:
        return Op(OpKind.B, (k // (stages * v)) * stages + k % stages, v - 1 - (k // stages) % v)

    orders = []
    for d in range(stages):
        ramp = stages - d - 1 if v == 1 else 2 * (stages - d - 1) + (v - 1) * stages
        warm = min(ramp, total)
        order = [forward(k) for k in range(warm)]
        for i in range(total - warm):
            order += [forward(warm + i), backward(i)]
        order += [backward(k) for k in range(total - warm, total)]
        orders.append(order)
    return orders


def _dualpipe(stages: int, m: int, v: int) -> list[list[Op]]:
    """DeepSeek's DualPipe order (DeepSeek-V3 report §3.2.1, Figure 5; the eight phases of
    the ``deepseek-ai/DualPipe`` reference schedule), written out per rank.

    ``m`` micro-batches, half fed at rank 0 (direction 0) and half at rank ``P - 1``
    (direction 1); ``Op.chunk`` is the direction. On rank ``r`` "near" is the direction in
    which it is stage ``h = min(r, P - 1 - r)`` and "far" the other one. A rank runs:
    ``2(P/2 - h - 1)`` near forwards; ``h + 1`` near/far forward pairs; ``P/2 - h - 1`` of
    (far input-gradient ``B``, one deferred ``W``, far forward); the steady
    ``m/2 - P + h + 1`` of (near F, far full B, far F, near full B); ``P/2 - h - 1`` of
    (far full B, far F, near full B); ``h + 1`` of (far B, near B), the later half of them
    input-gradient only; ``P/2 - h - 1`` of (``W``, near input-gradient ``B``); and the
    ``W`` left. Deferred ``W`` run first in, first out.
    """
    return [_dualpipe_rank(stages, m, r) for r in range(stages)]


def _dualpipe_rank(stages: int, m: int, r: int) -> list[Op]:
    """Rank ``r``'s DualPipe order (see :func:`_dualpipe`)."""
    half = stages // 2
    h = min(r, stages - 1 - r)
    near, far = (0, 1) if r < half else (1, 0)
    nf = {near: 0, far: 0}
    nb = {near: 0, far: 0}
    pending: list[Op] = []
    order: list[Op] = []

    def fwd(d: int, paired: bool = False) -> None:
        order.append(Op(OpKind.F, nf[d], d, paired))
        nf[d] += 1

    def bwd(d: int, split: bool = False) -> None:
        order.append(Op(OpKind.B, nb[d], d))
        if split:
            pending.append(Op(OpKind.W, nb[d], d))
        nb[d] += 1

    for _ in range(2 * (half - h - 1)):
        fwd(near)
    for _ in range(h + 1):
        fwd(near)
        fwd(far)
    for _ in range(half - h - 1):
        bwd(far, split=True)
        order.append(pending.pop(0))
        fwd(far)
    for i in range(m // 2 - stages + h + 1):
        fwd(near, paired=not (i == 0 and h == half - 1))  # the middle ranks' first pair runs apart
        bwd(far)
        fwd(far, paired=True)
        bwd(near)
    for _ in range(half - h - 1):
        bwd(far)
        fwd(far, paired=True)
        bwd(near)
    split = False
    for i in range(h + 1):
        if i == (h + 1) // 2 and h % 2 == 1:
            split = True
        bwd(far, split)
        if i == (h + 1) // 2 and h % 2 == 0:
            split = True
        bwd(near, split)
    for _ in range(half - h - 1):
        order.append(pending.pop(0))
        bwd(near, split=True)
    return order + pending


def _zero_bubble_h1(stages: int, m: int, v: int) -> list[list[Op]]:
    """1F1B on F and B; stage ``s`` runs the W of micro-batch ``i - s`` after ``B(i)``.

    Deferring ``s`` weight-gradient ops on stage ``s`` lets every stage take each ``B`` as
    soon as it arrives (the ``B`` chain then moves one ``t_b`` per stage), and the last
    stage's ``P - 1`` deferred ``W`` fill its ramp-down, so all stages end together.
    """
    orders = []
    for s in range(stages):
        warm = min(stages - s - 1, m)
        order = [Op(OpKind.F, i) for i in range(warm)]
        backwards = []
        for i in range(m - warm):
            order.append(Op(OpKind.F, warm + i))
            backwards.append(len(order))
            order.append(Op(OpKind.B, i))
            if i >= s:
                order.append(Op(OpKind.W, i - s))
        for i in range(m - warm, m):
            order.append(Op(OpKind.B, i))
            if i >= s:
                order.append(Op(OpKind.W, i - s))
        order += [Op(OpKind.W, i) for i in range(max(m - s, 0), m)]
        orders.append(order)
    return orders


_ORDERS: dict[Schedule, Callable[[int, int, int], list[list[Op]]]] = {
    Schedule.GPIPE: _gpipe,
    Schedule.ONE_F_ONE_B: _one_f_one_b,
    Schedule.INTERLEAVED: _interleaved,
    Schedule.ZERO_BUBBLE: _zero_bubble_h1,
    Schedule.DUALPIPE: _dualpipe,
}


def stage_orders(
    schedule: Schedule, stages: int, microbatches: int, virtual_stages: int = 1
) -> list[list[Op]]:
    """Per-stage op orders of ``schedule`` (the input to :func:`simulate`)."""
    _check(stages, microbatches, virtual_stages)
    schedule = Schedule.parse(schedule)
    if schedule is Schedule.DUALPIPE:
        if stages % 2:
            raise InputError("stages", stages, "an even number for DualPipe (it feeds both ends)")
        if microbatches % 2 or microbatches < 2 * stages:
            raise InputError(
                "microbatches",
                microbatches,
                f"an even number >= 2 x the {stages} stages for DualPipe (half enter at each end)",
            )
    v = virtual_stages if schedule is Schedule.INTERLEAVED else 1
    if schedule is Schedule.INTERLEAVED and v > 1 and microbatches % stages:
        raise InputError(
            "microbatches", microbatches, f"a multiple of the {stages} stages for the interleaved schedule"
        )
    return _ORDERS[schedule](stages, microbatches, v)


def simulate(
    schedule: Schedule | str,
    stages: int,
    microbatches: int,
    *,
    virtual_stages: int = 1,
    t_f: float = 1.0,
    t_b: float = 1.0,
    t_w: float = 1.0,
) -> Timeline:
    """Lay out ``schedule`` op by op and return the timeline.

    Dependencies (virtual stage ``u = chunk * P + stage``, ``U = v P`` of them):
    ``F(i, u)`` after ``F(i, u-1)``; ``B(i, U-1)`` after ``F(i, U-1)``; ``B(i, u)`` after
    ``B(i, u+1)``; ``W(i, u)`` after ``B(i, u)``. Each stage runs its ops in order, each as
    soon as its stage is free and its dependency is done. Op durations per chunk are
    ``t_f / v``, ``(t_b + t_w) / v`` for an unsplit ``B``, ``t_b / v`` and ``t_w / v`` when
    ``W`` is split (zero bubble; DualPipe splits some backwards and not others: a ``B``
    whose ``W`` the stage runs later is the input gradient only).

    DualPipe: ``Op.chunk`` is the direction ``d``; rank ``r`` is stage ``r`` of direction 0
    and stage ``P - 1 - r`` of direction 1, and the same chain rules hold along each
    direction.
    """
    schedule = Schedule.parse(schedule)
    _check_times(t_f, t_b, t_w)
    orders = stage_orders(schedule, stages, microbatches, virtual_stages)
    v = virtual_stages if schedule is Schedule.INTERLEAVED else 1
    dual = schedule is Schedule.DUALPIPE
    split_b = {(s, o.microbatch, o.chunk) for s, ops in enumerate(orders) for o in ops if o.kind is OpKind.W}
    chain = stages if dual else v * stages

    def duration(stage: int, op: Op) -> float:
        if op.kind is OpKind.F:
            return t_f / v
        if op.kind is OpKind.W:
            return t_w / v
        return (t_b if (stage, op.microbatch, op.chunk) in split_b else t_b + t_w) / v

    def position(stage: int, op: Op) -> int:
        if dual:
            return op.chunk * stages + (stage if op.chunk == 0 else stages - 1 - stage)
        return op.chunk * stages + stage

    def dependency(stage: int, op: Op) -> tuple[OpKind, int, int] | None:
        u = position(stage, op)
        if op.kind is OpKind.F:
            return None if u % chain == 0 else (OpKind.F, op.microbatch, u - 1)
        if op.kind is OpKind.B:
            last = u % chain == chain - 1
            return (OpKind.F, op.microbatch, u) if last else (OpKind.B, op.microbatch, u + 1)
        return (OpKind.B, op.microbatch, u)

    done: dict[tuple[OpKind, int, int], float] = {}
    free = [0.0] * stages
    cursor = [0] * stages
    timed: list[TimedOp] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(stages):
            while cursor[s] < len(orders[s]):
                op = orders[s][cursor[s]]
                dep = dependency(s, op)
                if dep is not None and dep not in done:
                    break
                start = max(free[s], done[dep] if dep is not None else 0.0)
                if op.paired:  # the F&B pair waits for its partner's input too
                    partner = dependency(s, orders[s][cursor[s] + 1])
                    if partner is not None and partner not in done:
                        break
                    start = max(start, done[partner] if partner is not None else 0.0)
                end = start + duration(s, op)
                done[(op.kind, op.microbatch, position(s, op))] = end
                free[s] = end
                timed.append(TimedOp(s, op, start, end))
                cursor[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # an inconsistent order; cannot happen for the registered schedules
            raise RuntimeError(f"{schedule.value} order deadlocks at stages={stages}, m={microbatches}")
    return Timeline(schedule, stages, microbatches, v, tuple(sorted(timed, key=lambda o: (o.stage, o.start))))


#: Each schedule's closed-form bubble fraction and its source (derivations in the module
#: docstring; ``X`` is the idle time per stage).
CLOSED_FORMS: dict[Schedule, tuple[str, str]] = {
    Schedule.GPIPE: ("(P-1)/(m+P-1)", "Huang et al. 2019, GPipe"),
    Schedule.ONE_F_ONE_B: ("(P-1)/(m+P-1)", "Narayanan et al. 2021, SC21, §2.2"),
    Schedule.INTERLEAVED: ("(P-1)/(v m+P-1)", "Narayanan et al. 2021, SC21, §2.2.2"),
    Schedule.ZERO_BUBBLE: (
        "X/(m(t_f+t_b+t_w)+X), X = (P-1)(t_f+t_b-t_w)",
        "Qi et al. 2023, Zero Bubble PP, §2.2",
    ),
    Schedule.DUALPIPE: (
        "X/(m(t_f+t_b+t_w)+X), X = (P/2-1)(t_f+2t_b-t_w)",
        "DeepSeek-AI 2024, DeepSeek-V3 report, §3.2.1 Table 2",
    ),
}


def bubble_fraction(
    schedule: Schedule | str, stages: int, microbatches: int, *, virtual_stages: int = 1, **times: float
) -> float:
    """Closed-form idle share of a pipeline (see the module docstring for the derivations);
    ``times``: ``t_f``, ``t_b``, ``t_w`` as :func:`simulate` takes them (1 each by default).

    ``P = 1`` has no bubble. GPipe, 1F1B: ``(P-1)/(m+P-1)``; interleaved:
    ``(P-1)/(v m + P-1)``; ZB-H1: ``X / (m(t_f+t_b+t_w) + X)`` with
    ``X = (P-1)(t_f + t_b - t_w)`` for ``m >= P`` and ``t_w <= min(t_f, t_b)``; outside
    that range (too few micro-batches to defer work into, or a ``W`` longer than the gaps
    it should fill) the simulated value is returned.
    """
    schedule = Schedule.parse(schedule)
    _check(stages, microbatches, virtual_stages)
    t_f, t_b, t_w = _times(**times)
    p, m = stages, microbatches
    if schedule in (Schedule.GPIPE, Schedule.ONE_F_ONE_B):
        return (p - 1) / (m + p - 1)
    if schedule is Schedule.INTERLEAVED:
        return (p - 1) / (virtual_stages * m + p - 1)
    if schedule is Schedule.DUALPIPE:
        x = max(p / 2 - 1, 0.0) * (t_f + 2 * t_b - t_w)
        return x / (m * (t_f + t_b + t_w) + x)
    if m < p or t_w > min(t_f, t_b):
        return simulate(schedule, p, m, t_f=t_f, t_b=t_b, t_w=t_w).bubble_frac
    bubble = (p - 1) * (t_f + t_b - t_w)
    return bubble / (m * (t_f + t_b + t_w) + bubble)


def in_flight_microbatches(
    schedule: Schedule | str, stages: int, microbatches: int, *, virtual_stages: int = 1
) -> float:
    """Peak micro-batches of activations held by the first (busiest) stage.

    GPipe: ``m``. 1F1B and ZB-H1: ``min(P, m)``. DualPipe: ``min(P + 1, m)``.
    Interleaved: ``min(P + (P-1)/v, m)`` (Korthikanti et al. 2022, §4.2.3).
    """
    schedule = Schedule.parse(schedule)
    _check(stages, microbatches, virtual_stages)
    p, m = stages, microbatches
    if schedule is Schedule.GPIPE:
        return float(m)
    if schedule is Schedule.INTERLEAVED and virtual_stages > 1:
        return float(min(p + (p - 1) / virtual_stages, m))
    if schedule is Schedule.DUALPIPE:
        return float(min(p + 1, m))
    return float(min(p, m))
