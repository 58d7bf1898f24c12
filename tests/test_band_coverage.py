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


def test_validate_json_reports_the_coverage(cli) -> None:
    import json

    code, out, err = cli("validate", "--json")
    assert code == 0, err
    cov = json.loads(out)["band_coverage"]
    assert set(cov["columns"]) == {"kernel", "calibrated", "loso", "loso_with_residual"}
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
