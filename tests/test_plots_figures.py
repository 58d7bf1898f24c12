"""The figure data (rackmath.views.figures) and its two renderers.

The analyses compute every curve; the renderers draw every series they are given, under
the same names, and nothing else.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rackmath.analyses.economics import overtrain, sparsity
from rackmath.analyses.serving import explain as explain_analysis
from rackmath.api import deployment, explain, pipeline
from rackmath.core import scaling_laws as sl
from rackmath.plots.render_mpl import draw, save_figure
from rackmath.views.figure_spec import FigureData
from rackmath.views.figures import economics_charts, serving_charts, training_charts, validation_charts
from rackmath.views.figures.common import ERROR_AXIS_FRAC, SWEEP_PAST_BALANCE
from rackmath.web.render_plotly import figure as plotly_figure

SECONDS_PER_HOUR = 3600.0


@pytest.fixture(scope="module")
def mixtral():  # type: ignore[no-untyped-def]
    return explain(deployment("mixtral-8x7b", "h100-hgx"), contexts=[4096])


def test_the_sweep_reaches_past_the_balance_batch(mixtral) -> None:  # type: ignore[no-untyped-def]
    sweep = serving_charts.batch_sweep(mixtral)
    b = sweep.batch[:, 0]
    knee = float(mixtral.balance.balance_batch_with_kv[0])
    knee = knee if np.isfinite(knee) else float(mixtral.balance.balance_batch)
    top = max(float(np.max(mixtral.batches)), SWEEP_PAST_BALANCE * knee)
    assert b[0] == 1 and b[-1] == pytest.approx(top, abs=0.5)
    assert np.all(np.diff(b) > 0)


def test_compute_only_cost_is_compute_time_rented(mixtral) -> None:  # type: ignore[no-untyped-def]
    sweep = serving_charts.batch_sweep(mixtral)
    d = mixtral.deployment
    expected = (
        sweep.step.compute_s[:, 0]
        * d.chips
        * d.usd_per_chip_hour
        / SECONDS_PER_HOUR
        / sweep.batch[:, 0]
        * 1e6
    )
    np.testing.assert_allclose(
        serving_charts.compute_only_usd_per_million(mixtral, sweep), expected, rtol=1e-12
    )
    # the full cost can never be below the compute-only cost
    assert np.all(sweep.usd_per_million_output_tokens[:, 0] >= expected * (1 - 1e-12))


def test_the_cheapest_fitting_batch_is_the_brute_force_minimum(mixtral) -> None:  # type: ignore[no-untyped-def]
    sweep = serving_charts.batch_sweep(mixtral)
    usd, fits = sweep.usd_per_million_output_tokens[:, 0], sweep.fits[:, 0]
    brute = min((u, i) for i, (u, f) in enumerate(zip(usd, fits, strict=True)) if f)[1]
    assert explain_analysis.cheapest_fitting(sweep) == brute
    assert fits[brute] and not fits[-1]  # the sweep runs past the KV limit of 8 x H100
    marker = next(
        s for s in serving_charts.cost(mixtral, sweep).panel.series if s.name.startswith("cheapest")
    )
    assert marker.x == [sweep.batch[brute, 0]]


def test_the_overtraining_curve_is_lowest_at_the_exact_optimum() -> None:
    r = overtrain.overtrain()
    curve = economics_charts.overtrain_curve(r, points=2001)
    best = curve.params[int(np.argmin(curve.total_flops))]
    step = (curve.params[1] / curve.params[0]) ** 1.5
    assert r.optimum_params / step <= best <= r.optimum_params * step
    # every point reaches the same loss: L(N, D(N)) = loss
    fit = r.fit
    d = sl.tokens_for_loss(curve.params, r.loss, fit)
    loss = fit.E + fit.A / curve.params**fit.alpha + fit.B / d**fit.beta
    np.testing.assert_allclose(loss[np.isfinite(d)], r.loss, rtol=1e-9)


def test_validation_errors_beyond_the_axis_sit_on_its_edge() -> None:
    rows = [
        {"id": 1, "phase": "decode", "model": "m", "metric": "tpot", "roofline": {"error_frac": 1e15}},
        {"id": 2, "phase": "decode", "model": "m", "metric": "tpot", "roofline": {"error_frac": -0.1}},
    ]
    s = next(
        s
        for s in validation_charts.validation_errors(rows, ["roofline"]).panel.series
        if s.name == "roofline"
    )
    assert list(s.y) == [ERROR_AXIS_FRAC[1], -0.1]
    assert s.hover is not None and "beyond the axis" in s.hover[0] and "beyond" not in s.hover[1]


def _all_figures(mixtral) -> list[FigureData]:  # type: ignore[no-untyped-def]
    dep = mixtral.deployment
    sweep = serving_charts.batch_sweep(mixtral)
    point = dep.decode([64], [4096])
    r = overtrain.overtrain()
    study = sparsity.sparsity_study(dep, sparsities=[1, 4, 16], context=4096, users=500)
    return [
        serving_charts.step_time(mixtral, sweep, point),
        serving_charts.cost(mixtral, sweep, point),
        serving_charts.memory(dep, point),
        serving_charts.mfu_context(mixtral),
        economics_charts.overtrain(r),
        economics_charts.sparsity_cost(study),
        economics_charts.sparsity_needs(study),
        training_charts.pipeline(pipeline(4, 8, "interleaved", virtual_stages=2).timeline),
    ]


def test_both_renderers_draw_every_series_by_name(mixtral) -> None:  # type: ignore[no-untyped-def]
    for fd in _all_figures(mixtral):
        names = [s.name for s in fd.panel.series]
        assert [t.name for t in plotly_figure(fd).data] == names, fd.title
        fig = draw(fd)
        axes = fig.axes
        labels = [h for ax in axes for h in ax.get_legend_handles_labels()[1]]
        # Matplotlib lists lines before bars in a legend: compare as multisets
        assert sorted(labels) == sorted(s.name for s in fd.panel.series if s.legend), fd.title
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_log_axes_carry_the_panel_range_in_decades(mixtral) -> None:  # type: ignore[no-untyped-def]
    fd = serving_charts.step_time(mixtral, serving_charts.batch_sweep(mixtral))
    lo, hi = fd.panel.y.range or (0.0, 0.0)
    assert plotly_figure(fd).layout.yaxis.range == pytest.approx((np.log10(lo), np.log10(hi)))


def test_a_figure_file_is_written(tmp_path: Path, mixtral) -> None:  # type: ignore[no-untyped-def]
    out = save_figure(serving_charts.explain(mixtral), tmp_path / "explain.svg")
    text = out.read_text()
    assert "Step time vs batch" in text and "Cost per token vs batch" in text
