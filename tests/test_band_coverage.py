"""The p10-p90 band is validated on the project's own published rows (issue 26, part 9).

A prediction's band is the same prediction with every operator at the 10th, then the 90th
percentile of its kernel curve's held-out error (:func:`rackmath.analyses.reality.validation.predict`
with ``edge``). The kernel band alone is a kernel-level error; the end-to-end residual band
(:mod:`rackmath.analyses.reality.band_coverage`) adds the model-level term measured leave-one-source-out.
Target: about 80% of the measurements inside their band. Tolerance: 34 rows give a binomial
standard deviation of sqrt(0.8 x 0.2 / 34) = 6.9 points, so the end-to-end band must cover
between 66% and 94% (two standard deviations).
"""

from __future__ import annotations

from typing import Any

import pytest

from rackmath.analyses.reality import band_coverage as bc
from rackmath.analyses.reality import correction as co
from rackmath.analyses.reality.validation import predict
from rackmath.catalog import kernel_efficiency as ke
from rackmath.catalog.measurements import measurements

pytestmark = pytest.mark.skipif(
    not all("band" in o for o in ke.op_entries("h100-sxm")), reason="the shipped catalog predates the bands"
)


@pytest.fixture(scope="module")
def coverage() -> dict[str, Any]:
    return bc.published_band_coverage()


def test_each_band_is_centred_on_the_validation_prediction(coverage: dict[str, Any]) -> None:
    """The band's centre is the kernel column's prediction itself (the band adds no model of
    its own); its edges enclose it."""
    by_id = {s.row_id: s for s in measurements().scenarios}
    rows = coverage["rows"]["kernel"]
    assert len(rows) >= 25
    for r in rows:
        assert r["predicted"] == predict(by_id[r["id"]], co.KERNEL).value
        assert r["p10"] < r["predicted"] < r["p90"], r


def test_about_80_percent_of_the_measurements_fall_inside_the_end_to_end_band(
    coverage: dict[str, Any],
) -> None:
    cols = coverage["columns"]
    e2e = cols["loso_with_residual"]
    assert e2e["rows"] >= 25
    assert 0.66 <= e2e["inside_frac"] <= 0.94, cols
    # the kernel band alone is narrower and covers fewer (a kernel-level error only)
    assert cols["kernel"]["median_width_frac"] < e2e["median_width_frac"]
    assert cols["kernel"]["inside_frac"] <= e2e["inside_frac"]


def test_the_band_results_show_is_validated_out_of_sample(coverage: dict[str, Any]) -> None:
    """The end-to-end band a kernel-grounded result shows (the kernel band widened by the
    model's step-time misses) covers about 80% of the published rows when each row's own source
    is left out of the misses it is widened by."""
    e2e = coverage["columns"]["kernel_with_residual"]
    assert e2e["rows"] >= 25 and 0.66 <= e2e["inside_frac"] <= 0.94, coverage["columns"]


def test_a_step_ratio_counts_a_slow_step_the_same_for_a_time_and_a_rate() -> None:
    """A throughput 20% under its prediction is a step 25% longer than predicted, as a TTFT
    25% over its prediction is; widening by ratios 0.9-1.5 moves a rate's edges to
    ``predicted / 1.5`` and ``predicted / 0.9``."""
    rate = bc.RowBand(1, "a", 80.0, 100.0, 95.0, 105.0, rate=True)
    time = bc.RowBand(2, "b", 1.25, 1.0, 0.95, 1.05)
    assert bc.step_ratio(rate) == pytest.approx(1.25) and bc.step_ratio(time) == pytest.approx(1.25)
    band = bc.ErrorBand(0.9, 1.5)
    wide = bc.widened(rate, band)
    assert (wide.low, wide.high) == (pytest.approx(100 / 1.5), pytest.approx(100 / 0.9)) and wide.inside
    slow = bc.widened(time, band)
    assert (slow.low, slow.high) == (pytest.approx(0.9), pytest.approx(1.5))


def test_the_shipped_end_to_end_band_is_the_published_rows_own() -> None:
    """catalog/data/end_to_end_band.yaml is what the published rows give today (regenerate:
    ``benchmarks/kernel_validation_report.py --render``); explain's JSON carries it."""
    from rackmath.catalog.measurements import end_to_end_band

    shipped, now = end_to_end_band(), bc.published_end_to_end_band()
    assert (shipped.p10, shipped.p90, shipped.rows) == (
        pytest.approx(now.p10, abs=5e-5),
        pytest.approx(now.p90, abs=5e-5),
        now.rows,
    ), "run: .venv/bin/python benchmarks/kernel_validation_report.py --render"
    assert shipped.p10 <= 1.0 <= shipped.p90


def test_a_result_shows_both_bands_and_the_pure_roofline_neither(cli) -> None:
    """Llama-3.1-70B on 8 H100 at batch 64: the end-to-end p90 is the wider of the kernel p90
    and ``p90 ratio x step``; its throughput p10 is the batch over that step."""
    import json

    import rackmath as rm
    from rackmath.catalog.measurements import end_to_end_band

    g = rm.deployment("llama-3.1-70b", "h100-hgx").decode([64], [4096])
    point = g.band_at((0, 0))
    band, step = end_to_end_band(), float(g.step_s[0, 0])
    e2e = point["end_to_end"]
    assert e2e["step_s_p90"] == pytest.approx(max(point["step_s_p90"], band.p90 * step), rel=1e-12)
    assert e2e["step_s_p10"] == pytest.approx(min(point["step_s_p10"], band.p10 * step), rel=1e-12)
    assert e2e["tokens_per_s_p10"] == pytest.approx(64 / e2e["step_s_p90"], rel=1e-12)
    pure = rm.deployment("llama-3.1-70b", "h100-hgx", efficiency="pure").decode([64], [4096])
    assert "end_to_end" not in pure.band_at((0, 0))
    code, out, err = cli("explain", "llama-3.1-70b", "--on", "h100-hgx", "--batch", "64", "--json")
    assert code == 0, err
    assert "end-to-end" in cli("explain", "llama-3.1-70b", "--on", "h100-hgx", "--batch", "64")[1]
    assert json.dumps(e2e["how"]) in out


def test_validate_json_reports_the_coverage(cli) -> None:
    import json

    code, out, err = cli("validate", "--json")
    assert code == 0, err
    cov = json.loads(out)["band_coverage"]
    columns = {"kernel", "calibrated", "loso", "kernel_with_residual", "loso_with_residual"}
    assert set(cov["columns"]) == columns
    assert cov["nominal"] == 0.8


def test_the_docs_coverage_table_is_generated(coverage: dict[str, Any]) -> None:
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("kvr", root / "benchmarks" / "kernel_validation_report.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    text = (root / "docs" / "validation.md").read_text(encoding="utf-8")
    assert script.render_coverage(text, coverage) == text, (
        "run: .venv/bin/python benchmarks/kernel_validation_report.py --render"
    )
