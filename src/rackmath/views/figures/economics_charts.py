"""Economics charts: price ratios, long-context and cache-tier pricing, fast mode, the fleet,
over-training and sparsity."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rackmath.analyses.economics import caching
from rackmath.analyses.economics.caching import CacheEconomics
from rackmath.analyses.economics.fast_mode import FastModeReport
from rackmath.analyses.economics.fleet import Fleet
from rackmath.analyses.economics.overtrain import Overtraining
from rackmath.analyses.economics.prices import LongContext, PriceSurvey, price_dict
from rackmath.analyses.economics.sparsity import SparsityStudy
from rackmath.core import scaling_laws as sl
from rackmath.units import MILLION, MS
from rackmath.views import fmt
from rackmath.views.figure_spec import COLORS, PALETTE, Annotation, Axis, FigureData, Panel, Series
from rackmath.views.figures.common import (
    CACHE_CURVE_RETENTIONS_S,
    OVERTRAIN_CURVE_SPAN,
    OVERTRAIN_Y_FACTOR,
    finite_or_none,
    hline,
    log_span,
    marked_points,
    shaded_band,
    vline,
)


def price_ratio(survey: PriceSurvey) -> FigureData:
    """Each priced model's output/input price ratio, beside the roofline's cost ratio (D34)."""
    rows = sorted((price_dict(p, survey.as_of) for p in survey.prices), key=lambda r: r["output_over_input"])
    ratio = survey.roofline.output_over_input
    ref = survey.roofline.to_dict()
    ids = tuple(str(r["id"]) for r in rows)
    return FigureData.single(
        Panel(
            "Output over input: what the price ratio says about decode",
            Axis("output / input (price or cost per token)", from_zero=True),
            Axis("", categories=ids),
            (
                Series(
                    "output price / input price",
                    [r["output_over_input"] for r in rows],
                    ids,
                    kind="barh",
                    color=COLORS["weights"],
                    hover=tuple(
                        f"{r['id']}: {r['output_over_input']:.2f}x; implies decode at "
                        f"~{r['implied_decode_utilization_frac']:.0%} of prefill's utilization; "
                        f"price of {r['date']}"
                        for r in rows
                    ),
                ),
                Series(
                    f"roofline cost ratio {ratio:.1f}x ({ref['model']}, batch {ref['batch']:,.0f}, "
                    f"{ref['context']:,.0f} tokens)",
                    [ratio],
                    [],
                    kind="vline",
                    color=COLORS["step"],
                    dash="dash",
                ),
            ),
            height_px=max(420, 28 * len(rows) + 160),
        )
    )


def long_context(lc: LongContext) -> FigureData:
    """Cost per token against context at a batch, with a provider's tier prices over it (D30, D31)."""
    c = lc.contexts
    lo, hi = log_span(
        [
            lc.cost_usd_per_million_output_tokens,
            lc.price_usd_per_million_output_tokens,
            lc.cost_usd_per_million_input_tokens,
            lc.price_usd_per_million_input_tokens,
        ]
    )
    series = [
        Series(
            f"cost per output token (batch {lc.batch:,.0f})",
            c,
            lc.cost_usd_per_million_output_tokens,
            color=COLORS["step"],
            width=3,
        ),
        Series(
            f"{lc.price.id} output price", c, lc.price_usd_per_million_output_tokens, "step", COLORS["memory"]
        ),
        Series(
            "cost per input token (prefill)",
            c,
            lc.cost_usd_per_million_input_tokens,
            color=COLORS["step"],
            dash="dash",
        ),
        Series(
            f"{lc.price.id} input price",
            c,
            lc.price_usd_per_million_input_tokens,
            "step",
            COLORS["weights"],
            dash="dash",
        ),
        vline(
            lc.crossover_context_tokens,
            lo,
            hi,
            f"KV read = compute at {lc.crossover_context_tokens:,.0f} tokens (len*)",
            COLORS["balance"],
            "dashdot",
        ),
    ]
    series += [
        vline(float(b), lo, hi, f"tier boundary {b:,} tokens", COLORS["floor"], "dot")
        for b in lc.price.tier_boundaries_tokens
    ]
    nofit = c[~lc.fits]
    if nofit.size:
        x0, x1 = float(nofit.min()), float(c.max())
        series.append(shaded_band(x0, x1, lo, hi, f"batch {lc.batch:,.0f} does not fit (> {x0:,.0f} tokens)"))
    return FigureData.single(
        Panel(
            f"{lc.deployment.model.id}: cost per token vs context, {lc.price.id}'s tiers over it",
            Axis("context", "tokens", log=True),
            Axis("USD per million tokens", log=True, range=(lo, hi)),
            tuple(series),
        )
    )


def cache(c: CacheEconomics, retentions_s: np.ndarray = CACHE_CURVE_RETENTIONS_S) -> FigureData:
    """Cost of a cache hit (hold for the retention, then fetch) per tier, against recomputing."""
    per_m = np.asarray(c.hit_usd_per_token_at(retentions_s), float) * MILLION
    recompute = c.recompute_usd_per_token * MILLION
    lo, hi = log_span([per_m, np.array([recompute])])
    series = [
        Series(
            f"{t.id}: drain time {fmt.duration(t.drain_time_s)}",
            retentions_s,
            per_m[i],
            color=PALETTE[i % len(PALETTE)],
        )
        for i, t in enumerate(c.tiers)
    ]
    series.append(
        hline(
            float(retentions_s[0]),
            float(retentions_s[-1]),
            recompute,
            f"recompute (prefill of {c.prompt_tokens:,.0f} tokens)",
            COLORS["step"],
        )
    )
    best = c.to_dict()["by_retention"]
    series.append(
        marked_points(
            "cheapest at each chosen retention",
            [b["retention_s"] for b in best],
            [b["hit_usd_per_million_tokens"].get(b["cheapest"], recompute) for b in best],
            size=11,
            hover=tuple(f"{b['retention_s']:.3g} s: {b['cheapest']}" for b in best),
        )
    )
    return FigureData.single(
        Panel(
            "Prompt cache: cost of a hit by tier vs retention",
            Axis("retention", "s", log=True),
            Axis("USD per million tokens (hold + fetch)", log=True, range=(lo, hi)),
            tuple(series),
            annotations=(
                Annotation("5 min", caching.SHORT_RETENTION_S, 0.02, y_frac=True, rotate=True),
                Annotation("1 h", caching.LONG_RETENTION_S, 0.02, y_frac=True, rotate=True),
            ),
        )
    )


def fast_mode(report: FastModeReport) -> FigureData:
    """Speed-up against price multiple: the deployment's curve up to batch 1, and the lecture's ideal."""
    ideal = report.ideal
    series: list[Series] = []
    top_x = max(100.0, ideal.price_multiple)
    dm = report.deployment
    if dm is not None:
        top_x = max(top_x, float(dm.price_multiples.max()))
        series += [
            Series(
                f"{dm.deployment.model.id}: batch {dm.normal_batch:,.0f} down to 1",
                dm.price_multiples,
                dm.speedups,
                color=COLORS["step"],
                width=3,
                hover=tuple(
                    f"batch {b:,.0f}: {m:.3g}x price -> {s:.3g}x speed"
                    for b, m, s in zip(dm.batches, dm.price_multiples, dm.speedups, strict=True)
                ),
            ),
            marked_points(
                f"{dm.requested_price_multiple:g}x price: batch {dm.fast_batch:,.0f}, "
                f"{dm.fast_speedup:.2f}x faster",
                [dm.requested_price_multiple],
                [dm.fast_speedup],
            ),
            hline(
                1.0,
                top_x,
                dm.ceiling_speedup,
                f"latency floor (batch 1): {dm.ceiling_speedup:.1f}x",
                COLORS["floor"],
            ),
        ]
    series += [
        hline(
            1.0,
            top_x,
            ideal.ceiling_speedup,
            f"lecture ideal: ceiling {ideal.ceiling_speedup:g}x",
            COLORS["compute"],
            "dot",
        ),
        marked_points(
            f"ideal: {ideal.price_multiple:g}x price -> {ideal.speedup:g}x speed",
            [ideal.price_multiple],
            [ideal.speedup],
            color=COLORS["compute"],
            marker="s",
            size=10,
        ),
    ]
    return FigureData.single(
        Panel(
            "What a higher price buys: speed-up vs price multiple",
            Axis("price multiple (cost per token / normal)", log=True),
            Axis("speed-up (normal step / step)", log=True),
            tuple(series),
        )
    )


def prices(long: LongContext | None, cache_report: CacheEconomics, fast: FastModeReport) -> FigureData:
    """``rackmath prices --plot``: long context, cache tiers and fast mode side by side."""
    parts = ([long_context(long)] if long is not None else []) + [cache(cache_report), fast_mode(fast)]
    return FigureData.join("Prices against the roofline's costs", *parts)


def fleet_latency(f: Fleet) -> FigureData:
    """Simulated TTFT and TPOT percentiles against load, and the train's worst case (D8)."""
    loads = [p.load_frac for p in f.loads]
    rows = [
        ("TTFT p50", [p.ttft_p50_s for p in f.loads], COLORS["compute"], "solid", "o"),
        ("TTFT p99", [p.ttft_p99_s for p in f.loads], COLORS["compute"], "dash", "o"),
        ("TPOT p50", [p.tpot_p50_s for p in f.loads], COLORS["weights"], "solid", "s"),
        ("TPOT p99", [p.tpot_p99_s for p in f.loads], COLORS["weights"], "dash", "s"),
    ]
    series = [
        Series(name, loads, finite_or_none([v / MS for v in values]), color=color, dash=dash, marker=m)  # type: ignore[arg-type]
        for name, values, color, dash, m in rows
    ]
    series.append(
        hline(
            min(loads),
            max(loads),
            f.train.closed_form_worst_s / MS,
            f"train worst case T + run = {fmt.seconds(f.train.closed_form_worst_s)}",
            COLORS["floor"],
            "dot",
        )
    )
    return FigureData.single(
        Panel(
            "Latency vs load (continuous batching, simulated)",
            Axis("load (fraction of capacity)", percent="%"),
            Axis("latency", "ms", log=True),
            tuple(series),
        )
    )


def fleet_batch(f: Fleet) -> FigureData:
    """Mean running batch against load, below the maximum batch."""
    loads = [p.load_frac for p in f.loads]
    return FigureData.single(
        Panel(
            f"{f.replicas:,} replicas for {fmt.si(f.traffic_tokens_per_s, 'tokens/s')}: batch vs load",
            Axis("load (fraction of capacity)", percent="%"),
            Axis("running batch", "sequences", from_zero=True),
            (
                Series(
                    "mean running batch",
                    loads,
                    [p.mean_batch for p in f.loads],
                    color=COLORS["kv"],
                    marker="o",
                ),
                hline(min(loads), max(loads), f.batch, f"max batch {f.batch:,.0f}", COLORS["floor"], "dot"),
            ),
        )
    )


def fleet(f: Fleet) -> FigureData:
    return FigureData.join("Fleet", fleet_latency(f), fleet_batch(f))


@dataclass(frozen=True)
class OvertrainCurve:
    """Lifetime compute of every model size reaching the same loss (the iso-loss curve)."""

    params: np.ndarray
    pretrain_flops: np.ndarray
    rest_flops: np.ndarray  # RL + inference

    @property
    def total_flops(self) -> np.ndarray:
        return self.pretrain_flops + self.rest_flops


def overtrain_curve(
    result: Overtraining, span: float = OVERTRAIN_CURVE_SPAN, points: int = 200
) -> OvertrainCurve:
    """Model sizes from ``span`` below to ``span`` above the equal-thirds and optimal sizes,
    each trained to ``result.loss`` (D = tokens for that loss), and their lifetime compute."""
    lo, hi = min(result.params, result.optimum_params), max(result.params, result.optimum_params)
    n = np.geomspace(lo / span, hi * span, points)
    d = sl.tokens_for_loss(n, result.loss, result.fit)
    pre, rl_flops, inf = sl.lifecycle_compute_flops(
        n, d, result.rl_tokens, result.inference_tokens, result.coefficients
    )
    return OvertrainCurve(n, np.asarray(pre, float), np.asarray(rl_flops + inf, float))


def overtrain(result: Overtraining, curve: OvertrainCurve | None = None) -> FigureData:
    """Lifetime compute against model size at the same loss: pre-training, RL + inference, total."""
    curve = curve or overtrain_curve(result)
    lo, hi = log_span([curve.pretrain_flops, curve.rest_flops, curve.total_flops])
    hi = min(hi, lo * OVERTRAIN_Y_FACTOR)
    n = curve.params
    return FigureData.single(
        Panel(
            f"Over-training at loss {result.loss:.3f}: lifetime compute vs model size",
            Axis("active parameters N (same loss)", log=True),
            Axis("FLOPs (pre-training equivalent)", log=True, range=(lo, hi)),
            (
                Series("pre-training", n, curve.pretrain_flops, color=COLORS["compute"]),
                Series("RL + inference", n, curve.rest_flops, color=COLORS["weights"]),
                Series("lifetime total", n, curve.total_flops, color=COLORS["step"], width=3),
                vline(
                    result.params, lo, hi, f"equal thirds, N = {fmt.count(result.params)}", COLORS["memory"]
                ),
                vline(
                    result.optimum_params,
                    lo,
                    hi,
                    f"exact optimum, N = {fmt.count(result.optimum_params)}",
                    COLORS["kv"],
                    "dashdot",
                ),
            ),
        )
    )


def _against_sparsity(
    study: SparsityStudy,
    title: str,
    y: Axis,
    solid: tuple[str, list[float], str],
    dashed: tuple[str, list[float], str],
    y2: Axis | None = None,
) -> FigureData:
    """Two curves against sparsity: ``(name, values, colour)`` solid with circles, then dashed
    with squares (on the right-hand axis ``y2`` when given)."""
    s = [r.sparsity for r in study.rows]
    return FigureData.single(
        Panel(
            title,
            Axis("sparsity N_total / N_active", log=True),
            y,
            (
                Series(solid[0], s, solid[1], color=solid[2], marker="o"),
                Series(
                    dashed[0],
                    s,
                    dashed[1],
                    color=dashed[2],
                    dash="dash",
                    marker="s",
                    secondary_y=y2 is not None,
                ),
            ),
            y2=y2,
        )
    )


def sparsity_cost(study: SparsityStudy) -> FigureData:
    """Cost per token against sparsity: flat at the balance batch, rising once users run out."""
    return _against_sparsity(
        study,
        "Cost per token vs sparsity",
        Axis("USD per million tokens", log=True),
        (
            "at the balance batch",
            [r.usd_per_million_tokens_at_balance for r in study.rows],
            COLORS["compute"],
        ),
        (
            f"with {study.users:,.0f} users",
            [r.usd_per_million_tokens_at_users for r in study.rows],
            COLORS["memory"],
        ),
    )


def sparsity_needs(study: SparsityStudy) -> FigureData:
    """What sparsity buys (dense-equivalent parameters) and needs (users: the balance batch)."""
    return _against_sparsity(
        study,
        "What sparsity buys and needs",
        Axis("dense-equivalent parameters", log=True),
        (
            "dense-equivalent parameters (Clark et al.)",
            [r.effective_params for r in study.rows],
            COLORS["kv"],
        ),
        ("balance batch B* (users needed)", [r.balance_batch for r in study.rows], COLORS["balance"]),
        y2=Axis("balance batch", "sequences", log=True),
    )


def sparsity(study: SparsityStudy) -> FigureData:
    return FigureData.join("Sparsity", sparsity_cost(study), sparsity_needs(study))
