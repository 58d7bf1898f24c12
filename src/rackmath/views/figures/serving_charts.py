"""Serving charts: step time and cost against batch, one chip's memory, MFU against context
and the throughput/interactivity frontier."""

from __future__ import annotations

import numpy as np

from rackmath.analyses.deploy.frontier import Frontier
from rackmath.analyses.serving.deployment import DecodeGrid, Deployment
from rackmath.analyses.serving.explain import Explanation, cheapest_fitting
from rackmath.core import roofline as rl
from rackmath.units import GB, MS
from rackmath.views import fmt
from rackmath.views.figure_spec import COLORS, Annotation, Axis, FigureData, Panel, Series
from rackmath.views.figures.common import (
    SWEEP_PAST_BALANCE,
    SWEEP_POINTS,
    hline,
    log_span,
    marked_points,
    shaded_band,
    vline,
)


def batch_sweep(
    result: Explanation, top_batch: float | None = None, points: int = SWEEP_POINTS
) -> DecodeGrid:
    """A dense log-spaced batch sweep at the first context, for smooth curves.

    It reaches ``top_batch`` when given (the web's slider range), else the larger of the
    batches explained and :data:`SWEEP_PAST_BALANCE` times the balance batch.
    """
    if top_batch is None:
        b_star = float(result.balance.balance_batch_with_kv[0])
        knee = b_star if np.isfinite(b_star) else float(result.balance.balance_batch)
        top_batch = max(float(np.max(result.batches)), SWEEP_PAST_BALANCE * knee)
    batches = np.unique(np.round(np.geomspace(1, max(top_batch, 1.0), points)))
    return result.deployment.decode(batches, result.contexts[:1])


def compute_only_usd_per_million(result: Explanation, sweep: DecodeGrid) -> np.ndarray:
    """What a million output tokens would cost if a step took only its compute time."""
    d = result.deployment
    return np.asarray(
        rl.usd_per_million_tokens(
            sweep.step.compute_s[:, 0], sweep.batch[:, 0], d.chips, d.usd_per_chip_hour
        ),
        float,
    )


def _balance(result: Explanation, lo: float, hi: float) -> list[Series]:
    b_star = float(result.balance.balance_batch_with_kv[0])
    if np.isfinite(b_star):
        return [vline(b_star, lo, hi, f"balance B* = {b_star:,.0f}", COLORS["balance"], "dashdot")]
    closed = float(result.balance.balance_batch)
    return [vline(closed, lo, hi, f"B* without KV = {closed:,.0f}", COLORS["balance"], "dashdot")]


def _nofit(result: Explanation, top: float, lo: float, hi: float) -> list[Series]:
    max_batch = float(result.max_batch[0])
    if not 1 <= max_batch < top:
        return []
    return [shaded_band(max_batch, top, lo, hi, f"KV does not fit (batch > {max_batch:,.0f})")]


def _selected(point: DecodeGrid | None, y: float, unit: str) -> list[Series]:
    if point is None:
        return []
    b = float(point.batch[0, 0])
    return [marked_points(f"selected batch {b:,.0f}", [b], [y], hover=(f"batch {b:,.0f}<br>{y:.4g} {unit}",))]


def step_time(result: Explanation, sweep: DecodeGrid, point: DecodeGrid | None = None) -> FigureData:
    """Decode step time and its parts against batch at the first context (log-log, ms)."""
    b = sweep.batch[:, 0]
    t = sweep.step
    step_ms = sweep.step_s[:, 0] / MS
    parts = [
        ("compute", t.compute_s[:, 0] / MS, COLORS["compute"]),
        ("weight fetch", t.weight_fetch_s[:, 0] / MS, COLORS["weights"]),
        ("KV fetch", t.kv_fetch_s[:, 0] / MS, COLORS["kv"]),
    ]
    e2e_lo_ms, e2e_hi_ms = sweep.end_to_end_step_s_p10[:, 0] / MS, sweep.end_to_end_step_s_p90[:, 0] / MS
    lo, hi = log_span([p[1] for p in parts] + [step_ms, e2e_hi_ms])
    floor_ms = result.latency_floor_s / MS
    series = [Series(name, b, y, color=color) for name, y, color in parts]
    p10_ms, p90_ms = sweep.step_s_p10[:, 0] / MS, sweep.step_s_p90[:, 0] / MS
    series += [
        Series("weights + KV", b, t.memory_s[:, 0] / MS, color=COLORS["memory"], dash="dot"),
        *(
            [
                Series(
                    "step end-to-end p10-p90 (the published rows' misses)",
                    [*b, *b[::-1], b[0]],
                    [*e2e_lo_ms, *e2e_hi_ms[::-1], e2e_lo_ms[0]],
                    kind="fill",
                    color=COLORS["step"],
                    opacity=0.07,
                )
            ]
            if sweep.end_to_end_band is not None
            else []
        ),
        Series(
            "step p10-p90 (kernel curves' held-out error)",
            [*b, *b[::-1], b[0]],
            [*p10_ms, *p90_ms[::-1], p10_ms[0]],
            kind="fill",
            color=COLORS["step"],
            opacity=0.15,
        ),
        Series("step (sum over operators)", b, step_ms, color=COLORS["step"], width=3),
        hline(
            float(b[0]),
            float(b[-1]),
            floor_ms,
            f"latency floor {fmt.seconds(result.latency_floor_s)}",
            COLORS["floor"],
        ),
        *_balance(result, lo, hi),
        *_nofit(result, float(b[-1]), lo, hi),
        *_selected(point, float(point.step_s[0, 0]) / MS if point is not None else 0.0, "ms"),
    ]
    return FigureData.single(
        Panel(
            f"Step time vs batch at {float(result.contexts[0]):,.0f} tokens of context",
            Axis("batch", "sequences", log=True),
            Axis("time per decode step", "ms", log=True, range=(lo, hi)),
            tuple(series),
        )
    )


def cost(result: Explanation, sweep: DecodeGrid, point: DecodeGrid | None = None) -> FigureData:
    """USD per million output tokens against batch, the compute-only cost below it, and the
    cheapest batch that fits."""
    d = result.deployment
    b = sweep.batch[:, 0]
    usd = sweep.usd_per_million_output_tokens[:, 0]
    compute_only = compute_only_usd_per_million(result, sweep)
    lo, hi = log_span([usd, compute_only])
    series = [
        Series("$ per million output tokens", b, usd, color=COLORS["step"], width=3),
        Series("compute-only cost", b, compute_only, color=COLORS["compute"], dash="dash", width=1.5),
    ]
    best = cheapest_fitting(sweep)
    if best is not None:
        series.append(
            marked_points(
                f"cheapest that fits: batch {b[best]:,.0f}, {fmt.usd(float(usd[best]))}/M",
                [b[best]],
                [usd[best]],
                color=COLORS["kv"],
                marker="o",
                size=9,
            )
        )
    series += [
        *_balance(result, lo, hi),
        *_nofit(result, float(b[-1]), lo, hi),
        *_selected(
            point,
            float(point.usd_per_million_output_tokens[0, 0]) if point is not None else 0.0,
            "$/M tokens",
        ),
    ]
    return FigureData.single(
        Panel(
            f"Cost per token vs batch at {fmt.usd(d.usd_per_chip_hour)}/chip-hour",
            Axis("batch", "sequences", log=True),
            Axis("USD per million output tokens", log=True, range=(lo, hi)),
            tuple(series),
        )
    )


def explain(result: Explanation, top_batch: float | None = None) -> FigureData:
    """The lecture's two drawings side by side (``rackmath explain --plot``)."""
    d = result.deployment
    sweep = batch_sweep(result, top_batch)
    return FigureData.join(
        f"{d.model.name} on {d.chips} x {d.system.chip.id} (weights {d.precisions.weights.value}, "
        f"KV {d.precisions.kv.value}, compute {d.precisions.compute.value})",
        step_time(result, sweep),
        cost(result, sweep),
    )


def memory(d: Deployment, point: DecodeGrid) -> FigureData:
    """HBM of one chip: weights, the KV cache of the selected batch, the reserve, what is free."""
    capacity = d.system.chip.hbm_capacity_bytes
    weights = d.weight_bytes_per_chip
    kv = float(point.kv_bytes_per_chip[0, 0])
    reserve = capacity - d.usable_bytes_per_chip
    free = d.usable_bytes_per_chip - weights - kv
    bars = [
        ("weights", weights, COLORS["weights"]),
        (f"KV cache of {point.batch[0, 0]:,.0f} sequences", kv, COLORS["kv"]),
        (f"reserve ({d.memory_reserve_frac:.0%})", reserve, COLORS["reserve"]),
    ]
    if free >= 0:
        bars.append(("free", free, COLORS["free"]))
    series: list[Series] = []
    left = 0.0
    for name, value, color in bars:
        series.append(Series(name, [value / GB], ["per chip"], kind="barh", base=[left], color=color))
        left += value / GB
    series.append(
        Series(
            f"HBM capacity {fmt.nbytes(capacity)}", [capacity / GB], [], kind="vline", color=COLORS["step"]
        )
    )
    title = "Memory of one chip" + ("" if free >= 0 else f": over by {fmt.nbytes(-free)}")
    return FigureData.single(
        Panel(
            title,
            Axis("memory", "GB", from_zero=True),
            Axis("", categories=("per chip",)),
            tuple(series),
            height_px=290,
        )
    )


def mfu_context(result: Explanation) -> FigureData:
    """MFU against context at the closed-form balance batch: long context turns FLOPs into reads."""
    b = result.balance.balance_batch
    return FigureData.single(
        Panel(
            f"MFU vs context at the balance batch {b:,.0f}",
            Axis("context", "tokens", log=True),
            Axis("MFU", percent="%", from_zero=True),
            (
                Series(
                    f"MFU at batch {b:,.0f}",
                    result.mfu_contexts,
                    result.mfu_at_balance_batch,
                    color=COLORS["compute"],
                    marker="o",
                ),
            ),
            legend=False,
        )
    )


def pareto(frontier: Frontier) -> FigureData:
    """Tokens/s per chip against tokens/s per user: every fitting deployment, and the frontier."""
    points = frontier.frontier
    xs = [p.tokens_per_s_per_user for p in points]
    ys = [p.tokens_per_s_per_chip for p in points]
    labelled = points[:: max(1, len(points) // 8)]
    return FigureData.single(
        Panel(
            f"{frontier.model} on {frontier.system}: throughput vs interactivity "
            f"({frontier.input_len:,} in / {frontier.output_len:,} out)",
            Axis("tokens/s per user (interactivity)", log=True),
            Axis("tokens/s per chip (throughput)", log=True),
            (
                Series(
                    f"all {frontier.all_per_user.size:,} fitting deployments",
                    frontier.all_per_user,
                    frontier.all_per_chip,
                    kind="scatter",
                    color=COLORS["muted"],
                    marker="o",
                    marker_size=3,
                    opacity=0.5,
                ),
                Series(
                    f"frontier ({len(points)} deployments)",
                    xs,
                    ys,
                    color=COLORS["step"],
                    width=2.5,
                    marker="o",
                    hover=tuple(
                        f"{p.plan_text}, {p.chips} chips, batch {p.batch:,}, {p.family}, "
                        f"{fmt.usd(p.usd_per_million_output_tokens)}/M out"
                        for p in points
                    ),
                ),
                *_disaggregated_series(frontier),
            ),
            annotations=tuple(
                Annotation(f"{p.plan_text} B={p.batch}", p.tokens_per_s_per_user, p.tokens_per_s_per_chip)
                for p in labelled
            ),
        )
    )


def _disaggregated_series(frontier: Frontier) -> tuple[Series, ...]:
    """The xPyD frontier, when the analysis computed one (none otherwise)."""
    points = frontier.disaggregated_frontier
    if not points:
        return ()
    return (
        Series(
            f"disaggregated xPyD frontier ({len(points)})",
            [p.tokens_per_s_per_user for p in points],
            [p.tokens_per_s_per_chip for p in points],
            color=COLORS["muted"],
            width=2.0,
            marker="s",
            hover=tuple(f"decode {p.plan_text}, batch {p.batch:,}, {p.family}" for p in points),
        ),
    )
