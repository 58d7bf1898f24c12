"""A pipeline schedule on its own: the simulator's layout beside its closed forms
(:mod:`rackmath.core.pipeline`), for ``rackmath pipeline`` and the web Training page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rackmath.core import pipeline as pl
from rackmath.errors import InputError
from rackmath.frames import Col, Layout, Tabular
from rackmath.specs import checks


@dataclass(frozen=True)
class PipelineResult(Tabular):
    """A schedule laid out by the simulator beside its closed form; as a table, one row per op
    (times in the unit of the forward time ``t_f``)."""

    frame_layout = Layout(
        columns=(
            Col("timeline.schedule", "schedule"),
            Col("timeline.stages", "stages", "stages"),
            Col("timeline.microbatches", "microbatches", "microbatches"),
            Col("timeline.bubble_frac", "bubble_frac", "1"),
            Col("closed_form_bubble_frac", "closed_form_bubble_frac", "1"),
            Col("timeline.ops[].stage", "stage"),
            Col("timeline.ops[].op.kind", "kind"),
            Col("timeline.ops[].op.microbatch", "microbatch"),
            Col("timeline.ops[].op.chunk", "chunk"),
            Col("timeline.ops[].start", "start_time", "t_f"),
            Col("timeline.ops[].end", "end_time", "t_f"),
        ),
        dims=("op",),
        coords=(None,),
    )

    timeline: pl.Timeline
    closed_form_bubble_frac: float
    closed_form_in_flight: float
    #: every schedule that applies at this P and m, closed form beside its source
    closed_forms: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        t = self.timeline
        return {
            "schedule": t.schedule.value,
            "stages": t.stages,
            "microbatches": t.microbatches,
            "virtual_stages": t.virtual_stages,
            "bubble_fraction": t.bubble_frac,
            "closed_form_bubble_fraction": self.closed_form_bubble_frac,
            "makespan": t.makespan,
            "peak_in_flight_microbatches": [t.peak_in_flight(s) for s in range(t.stages)],
            "closed_form_in_flight_microbatches": self.closed_form_in_flight,
            "closed_forms": list(self.closed_forms),
            "ops": [
                {
                    "stage": o.stage,
                    "kind": o.op.kind.value,
                    "microbatch": o.op.microbatch,
                    "chunk": o.op.chunk,
                    "start": o.start,
                    "end": o.end,
                }
                for o in t.ops
            ],
        }


#: Operations (forward, backward, weight-gradient per stage, micro-batch and chunk) one
#: simulation lays out at most: about two seconds of Python on the 2-core CI machine.
MAX_SIMULATED_OPS = 30_000


def closed_forms(
    stages: int,
    microbatches: int,
    *,
    virtual_stages: int = 2,
    t_f: float = 1.0,
    t_b: float = 1.0,
    t_w: float = 1.0,
) -> tuple[dict[str, Any], ...]:
    """Every schedule's bubble fraction and micro-batches in flight at ``P`` stages and ``m``
    micro-batches, each with its closed form and source (interleaved at ``v`` chunks when
    ``m`` is a multiple of ``P``; DualPipe when ``P`` is even)."""
    rows = []
    for sched in pl.Schedule:
        if sched is pl.Schedule.INTERLEAVED and (microbatches % stages or virtual_stages < 2):
            continue
        if sched is pl.Schedule.DUALPIPE and stages % 2:
            continue
        v = virtual_stages if sched is pl.Schedule.INTERLEAVED else 1
        formula, source = pl.CLOSED_FORMS[sched]
        rows.append(
            {
                "schedule": sched.value,
                "virtual_stages": v,
                "bubble_frac": pl.bubble_fraction(
                    sched, stages, microbatches, virtual_stages=v, t_f=t_f, t_b=t_b, t_w=t_w
                ),
                "in_flight_microbatches": pl.in_flight_microbatches(
                    sched, stages, microbatches, virtual_stages=v
                ),
                "closed_form": formula,
                "source": source,
            }
        )
    return tuple(rows)


def pipeline_schedule(
    schedule: pl.Schedule | str, stages: int, microbatches: int, *, virtual_stages: int = 1, **times: float
) -> PipelineResult:
    """Simulate a schedule (unit forward time by default) and give its closed forms;
    ``times``: ``t_f``, ``t_b``, ``t_w`` as :func:`rackmath.core.pipeline.simulate` takes them."""
    sched = pl.Schedule.parse(schedule)
    checks.whole("virtual stages", virtual_stages)
    if sched is pl.Schedule.INTERLEAVED and virtual_stages < 2:
        virtual_stages = 2  # the default of 1 means "the fewest chunks interleaving needs"
    elif sched is not pl.Schedule.INTERLEAVED and virtual_stages != 1:
        raise InputError("virtual stages", virtual_stages, "1 unless the schedule is interleaved")
    ops = (
        3 * stages * microbatches * virtual_stages
        if isinstance(stages, int) and isinstance(microbatches, int)
        else 0
    )
    if ops > MAX_SIMULATED_OPS:
        raise InputError(
            "stages x microbatches x virtual stages",
            f"{stages} x {microbatches} x {virtual_stages}",
            f"at most {MAX_SIMULATED_OPS // 3:,} (the simulator lays out every operation; "
            "the closed forms in rackmath.core.pipeline.bubble_fraction have no limit)",
        )
    timeline = pl.simulate(sched, stages, microbatches, virtual_stages=virtual_stages, **times)
    return PipelineResult(
        timeline=timeline,
        closed_form_bubble_frac=pl.bubble_fraction(
            sched, stages, microbatches, virtual_stages=virtual_stages, **times
        ),
        closed_form_in_flight=pl.in_flight_microbatches(
            sched, stages, microbatches, virtual_stages=virtual_stages
        ),
        closed_forms=closed_forms(stages, microbatches, virtual_stages=max(virtual_stages, 2), **times),
    )


def schedule_drawing(
    schedule: pl.Schedule | str, stages: int, microbatches: int, *, virtual_stages: int = 1
) -> PipelineResult:
    """The pipeline picture drawn beside a training run: its own schedule over a few
    micro-batches (``2P``, or fewer when the run has fewer; DualPipe needs ``2P``, so a run
    with fewer is drawn as 1F1B, and interleaving needs ``m`` a multiple of ``P``)."""
    sched = pl.Schedule.parse(schedule)
    m = min(microbatches, 2 * stages)
    if sched is pl.Schedule.DUALPIPE and (stages % 2 or microbatches < 2 * stages):
        sched = pl.Schedule.ONE_F_ONE_B
    if sched is pl.Schedule.DUALPIPE:
        m = 2 * stages
    v = virtual_stages if sched is pl.Schedule.INTERLEAVED else 1
    return pipeline_schedule(sched, stages, m, virtual_stages=v)
