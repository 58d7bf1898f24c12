"""The capacity planner's charts: several systems' frontiers on one set of axes (throughput per
GPU, cost and energy against tokens/s per user) with published measurements overlaid, the
latency distributions of a simulated workload against its SLO limits, the SLO attainment
curve over arrival rates, and configurations compared side by side."""

from __future__ import annotations

from typing import Any

import numpy as np

from rackmath.analyses.deploy.compare import Comparison
from rackmath.analyses.deploy.rate_search import SloSearch
from rackmath.analyses.deploy.slo import SloRun
from rackmath.analyses.deploy.systems_frontier import PublishedPoint, SystemsFrontier
from rackmath.analyses.serving.energy import DEFAULT_PUE
from rackmath.views import fmt
from rackmath.views.figure_spec import COLORS, PALETTE, Axis, FigureData, Panel, Series

#: The three views of one frontier: (key, y axis, the figure of a point it reads).
FRONTIER_VIEWS: tuple[tuple[str, Axis, str], ...] = (
    ("throughput", Axis("tokens/s per GPU (throughput)", log=True), "tokens_per_s_per_chip"),
    ("cost", Axis("USD per million output tokens", log=True), "usd_per_million_output_tokens"),
    ("energy", Axis("joules per output token", "J", log=True), "joules_per_token"),
)
_TITLES = {
    "throughput": "Throughput per GPU",
    "cost": "Cost per million output tokens (catalog prices)",
    "energy": f"Energy per output token (facility, PUE {DEFAULT_PUE:g})",
}


def _hover(p: Any, system: str) -> str:
    j = "n/a" if p.joules_per_token is None else f"{p.joules_per_token:.3g} J"
    return (
        f"{system}: {p.plan_text}, {p.chips} chips, batch {p.batch:,}<br>"
        f"{p.tokens_per_s_per_user:,.1f} tokens/s per user, {p.tokens_per_s_per_chip:,.0f} per GPU<br>"
        f"{fmt.usd(p.usd_per_million_output_tokens)}/M out, {j} per token"
    )


def _published_hover(p: PublishedPoint) -> str:
    return (
        f"published (row {p.row_id}, {p.input_tokens:,} in / {p.output_tokens:,} out): {p.how}<br>{p.source}"
    )


def _published(
    sf: SystemsFrontier, key: str, color_of: dict[str, str], x_range: tuple[float, float]
) -> list[Series]:
    """Measured points (diamonds) and levels (maximum throughput: no per-user figure)."""
    if key == "energy":
        return []  # no measurement states its power
    out: list[Series] = []
    for p in sf.published:
        y = p.tokens_per_s_per_chip if key == "throughput" else p.usd_per_million_output_tokens
        name = f"published {p.system}, row {p.row_id}"
        if p.tokens_per_s_per_user is None:
            out.append(
                Series(
                    f"{name}: max throughput ({p.input_tokens:,}/{p.output_tokens:,})",
                    list(x_range),
                    [y, y],
                    color=color_of[p.system],
                    dash="dot",
                    width=1.5,
                    hover=(_published_hover(p),) * 2,
                )
            )
        else:
            out.append(
                Series(
                    name,
                    [p.tokens_per_s_per_user],
                    [y],
                    kind="scatter",
                    color=color_of[p.system],
                    marker="D",
                    marker_size=11,
                    hover=(_published_hover(p),),
                )
            )
    return out


def systems_frontier(sf: SystemsFrontier) -> dict[str, FigureData]:
    """One chart per view (``throughput``, ``cost``, ``energy``), each every system's frontier
    against tokens/s per user, published measurements overlaid where they place."""
    color_of = {c.system: PALETTE[i % len(PALETTE)] for i, c in enumerate(sf.curves)}
    xs = [p.tokens_per_s_per_user for c in sf.curves if c.frontier for p in c.frontier.frontier]
    xs += [p.tokens_per_s_per_user for p in sf.published if p.tokens_per_s_per_user]
    x_range = (min(xs) / 1.5, max(xs) * 1.5) if xs else (1.0, 1000.0)
    out: dict[str, FigureData] = {}
    for key, y_axis, attr in FRONTIER_VIEWS:
        series: list[Series] = []
        for c in sf.curves:
            if c.frontier is None:
                continue
            pts = [p for p in c.frontier.frontier if getattr(p, attr) is not None]
            if not pts:
                continue
            series.append(
                Series(
                    f"{c.system} ({c.efficiency})",
                    [p.tokens_per_s_per_user for p in pts],
                    [getattr(p, attr) for p in pts],
                    color=color_of[c.system],
                    marker="o",
                    marker_size=5,
                    hover=tuple(_hover(p, c.system) for p in pts),
                )
            )
        series += _published(sf, key, color_of, x_range)
        out[key] = FigureData.single(
            Panel(
                f"{_TITLES[key]}: {sf.model}, {sf.input_len:,} in / {sf.output_len:,} out",
                Axis("tokens/s per user (interactivity)", log=True, range=x_range),
                y_axis,
                tuple(series),
                height_px=460,
            )
        )
    return out


def _cdf(values: np.ndarray, scale: float) -> tuple[list[float], list[float]]:
    v = np.sort(values[np.isfinite(values)]) * scale
    return v.tolist(), (np.arange(1, v.size + 1) / max(v.size, 1)).tolist()


def slo_distribution(run: SloRun, which: str) -> FigureData:
    """The share of requests at or below each TTFT (or TPOT, or E2E), with the SLO's limit on
    that metric and the share meeting it."""
    t = run.times
    values = {"ttft": t.ttft_s, "tpot": t.tpot_s, "e2e": t.e2e_s}[which]
    x, y = _cdf(np.asarray(values, float), 1e3)
    series = [Series(f"{which.upper()} of each request", x, y, kind="step", color=COLORS["compute"])]
    limits = [] if run.slo is None else [lim for lim in run.slo.limits if lim.metric == which]
    for lim in limits:
        met = run.attainment.met_frac[lim.key] if run.attainment else float("nan")
        series.append(
            Series(
                f"{lim.key} limit {fmt.seconds(lim.limit_s)}: {met:.1%} of requests meet it",
                [lim.limit_s * 1e3],
                [],
                kind="vline",
                color=COLORS["memory"],
                dash="dash",
            )
        )
    name = {
        "ttft": "time to first token (queueing included)",
        "tpot": "time per output token",
        "e2e": "end-to-end latency",
    }[which]
    return FigureData.single(
        Panel(
            f"{name.capitalize()}: {t.requests.size:,} requests",
            Axis(name, "ms", log=True),
            Axis("share of requests at or below", range=(0.0, 1.0), percent="%"),
            tuple(series),
            height_px=380,
        )
    )


def latency_distributions(run: SloRun) -> FigureData:
    """TTFT and TPOT distributions side by side (``simulate --plot`` without a rate search)."""
    return FigureData.join(
        "Latency distributions", slo_distribution(run, "ttft"), slo_distribution(run, "tpot")
    )


def attainment_curve(search: SloSearch) -> FigureData:
    """SLO attainment (all per-request limits together, and each limit) against the arrival
    rate, the stated attainment as a line and the highest rate meeting the SLO marked."""
    pts = search.points
    rates = [p.rate_per_s for p in pts]
    series = []
    if any(p.attainment.all_frac is not None for p in pts):
        series.append(
            Series(
                "all limits together",
                rates,
                [p.attainment.all_frac for p in pts],
                color=COLORS["compute"],
                marker="o",
                width=2.5,
            )
        )
    for i, lim in enumerate(search.slo.limits):
        series.append(
            Series(
                f"{lim.key} <= {fmt.seconds(lim.limit_s)}",
                rates,
                [p.attainment.met_frac[lim.key] for p in pts],
                color=PALETTE[(i + 1) % len(PALETTE)],
                dash="dot",
                marker="o",
                marker_size=4,
            )
        )
    goal = search.slo.attainment_frac
    if goal is not None:
        series.append(
            Series(f"attainment {goal:.0%}", [], [goal], kind="hline", color=COLORS["floor"], dash="dash")
        )
    if search.best is not None:
        series.append(
            Series(
                f"highest rate meeting the SLO: {search.best.rate_per_s:.3g}/s",
                [search.best.rate_per_s],
                [],
                kind="vline",
                color=COLORS["memory"],
                dash="dash",
            )
        )
    return FigureData.single(
        Panel(
            "SLO attainment against the arrival rate",
            Axis("arrival rate", "requests/s"),
            Axis("share of requests meeting the limit", range=(0.0, 1.02), percent="%"),
            tuple(series),
            height_px=420,
        )
    )


#: Figures the comparison chart draws relative to the first configuration.
COMPARED_FIGURES: tuple[tuple[str, str], ...] = (
    ("step_s", "step time"),
    ("tokens_per_s_per_user", "tokens/s per user"),
    ("tokens_per_s_per_chip", "tokens/s per GPU"),
    ("usd_per_million_output_tokens", "$ per M tokens"),
    ("joules_per_token", "J per token"),
    ("memory_bytes_per_chip", "memory per chip"),
)


def comparison(c: Comparison) -> FigureData:
    """Each configuration's figures over configuration A's (A = 1), grouped by figure."""
    names = tuple(what for _, what in COMPARED_FIGURES)
    ratios = {key: c.ratio(key) for key, _ in COMPARED_FIGURES}
    series = []
    for i, p in enumerate(c.points):
        values = [ratios[key][i] for key, _ in COMPARED_FIGURES]
        series.append(
            Series(
                f"{p.label}: {p.model} on {p.chips} x {p.chip}",
                list(names),
                [np.nan if v is None else v for v in values],
                kind="scatter",
                color=PALETTE[i % len(PALETTE)],
                marker="o",
                marker_size=13,
                hover=tuple(
                    f"{p.label} {what}: " + ("n/a" if v is None else f"{v:.3g}x {c.points[0].label}'s")
                    for what, v in zip(names, values, strict=True)
                ),
            )
        )
    same = Series(f"= {c.points[0].label}", [], [1.0], kind="hline", color=COLORS["floor"], dash="dot")
    series.append(same)
    return FigureData.single(
        Panel(
            f"Each configuration's figures over {c.points[0].label}'s",
            Axis("", categories=names),
            Axis(f"ratio to {c.points[0].label}", log=True),
            tuple(series),
            height_px=400,
        )
    )
