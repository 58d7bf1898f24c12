"""Training charts: the simulated pipeline schedule, memory per chip and recompute."""

from __future__ import annotations

import numpy as np

from rackmath.analyses.training.estimate import TrainingEstimate
from rackmath.core import pipeline as pl
from rackmath.units import GB
from rackmath.views import fmt
from rackmath.views.figure_spec import COLORS, Axis, FigureData, Panel, Series
from rackmath.views.figures.common import LABELLED_OPS, OP_COLORS, OP_NAMES, marked_points


def pipeline(timeline: pl.Timeline, closed_form_bubble_frac: float | None = None) -> FigureData:
    """The lecture's pipeline drawing from a simulated schedule: one bar per op, per stage."""
    t = timeline
    label = len(t.ops) <= LABELLED_OPS
    stages = tuple(f"stage {s}" for s in range(t.stages))
    series: list[Series] = []
    for kind in ("F", "B", "W"):
        ops = [o for o in t.ops if o.op.kind.value == kind]
        if not ops:
            continue
        chunk = t.virtual_stages > 1 or t.schedule is pl.Schedule.DUALPIPE  # DualPipe: chunk = direction
        text = tuple(f"{kind}{o.op.microbatch}" + (f".{o.op.chunk}" if chunk else "") for o in ops)
        series.append(
            Series(
                OP_NAMES[kind],
                [o.end - o.start for o in ops],
                [f"stage {o.stage}" for o in ops],
                kind="barh",
                base=[o.start for o in ops],
                color=OP_COLORS[kind],
                opacity=tuple(1.0 if o.op.chunk % 2 == 0 else 0.6 for o in ops),
                labels=text if label else None,
                hover=tuple(f"{x}: {o.start:g} to {o.end:g}" for x, o in zip(text, ops, strict=True)),
            )
        )
    v = f", v = {t.virtual_stages}" if t.virtual_stages > 1 else ""
    closed = "" if closed_form_bubble_frac is None else f" (closed form {closed_form_bubble_frac:.1%})"
    return FigureData.single(
        Panel(
            f"{t.schedule.value}: P = {t.stages}, m = {t.microbatches}{v}; "
            f"bubble {t.bubble_frac:.1%}{closed}",
            Axis("time (forward of one micro-batch on one stage = 1)", range=(0.0, float(t.makespan))),
            Axis("", categories=stages, reversed=True),
            tuple(series),
            width=2.0,
            height_px=max(260, 36 * t.stages + 150),
        )
    )


def training_memory(est: TrainingEstimate) -> FigureData:
    """Memory per chip by component, for each recomputation mode, against usable HBM."""
    m = est.memory
    modes = tuple(o.mode.value for o in est.options)
    parts = [
        ("weights", [m.weights_bytes] * len(modes), COLORS["weights"]),
        ("gradients", [m.grads_bytes] * len(modes), COLORS["balance"]),
        ("optimizer states", [m.optimizer_bytes] * len(modes), COLORS["reserve"]),
        ("activations", [o.activations_bytes for o in est.options], COLORS["kv"]),
    ]
    series: list[Series] = []
    base = np.zeros(len(modes))
    for name, values, color in parts:
        gb = np.asarray(values, float) / GB
        series.append(Series(name, modes, gb, kind="bar", base=base.copy(), color=color))
        base += gb
    series.append(
        Series(
            f"usable HBM {fmt.nbytes(m.usable_bytes)}",
            [],
            [m.usable_bytes / GB],
            kind="hline",
            color=COLORS["step"],
            dash="dash",
        )
    )
    series.append(
        marked_points(
            f"chosen: {est.setup.recompute.value}, {fmt.nbytes(m.total_bytes)}",
            [est.setup.recompute.value],
            [m.total_bytes / GB],
        )
    )
    return FigureData.single(
        Panel(
            "Memory per chip by recomputation mode",
            Axis("recomputation", categories=modes),
            Axis("memory per chip", "GB", from_zero=True),
            tuple(series),
        )
    )


def recompute_step(est: TrainingEstimate) -> FigureData:
    """Step time for each recomputation mode: memory saved is paid in FLOPs."""
    opts = est.options
    modes = tuple(o.mode.value for o in opts)
    return FigureData.single(
        Panel(
            "Step time by recomputation mode (green: fits, red: does not)",
            Axis("recomputation", categories=modes),
            Axis("step time", "s", from_zero=True),
            (
                Series(
                    "step time",
                    modes,
                    [o.step_s for o in opts],
                    kind="bar",
                    colors=tuple(COLORS["kv"] if o.fits else COLORS["memory"] for o in opts),
                    labels=tuple(f"+{o.extra_flops_frac:.0%}" for o in opts),
                    hover=tuple(
                        f"{o.mode.value}: {o.step_s:.4g} s, +{o.extra_flops_frac:.1%} FLOPs, "
                        + ("fits" if o.fits else "does not fit")
                        for o in opts
                    ),
                ),
            ),
            legend=False,
        )
    )


def training(est: TrainingEstimate, timeline: pl.Timeline) -> FigureData:
    """``rackmath train --plot``: memory per chip by recomputation mode beside the schedule."""
    s = est.setup
    return FigureData.join(
        f"{s.model.name} on {s.chips} x {s.system.chip.id}, plan {s.plan}",
        training_memory(est),
        pipeline(timeline),
    )
