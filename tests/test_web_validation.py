"""The Validation page with AppTest: its rows, points and aggregates are ``validate()``'s.

The report is computed once here (about 10 s) and once by the page (cached per process with
``st.cache_resource``; its second computation reuses the predictions' own caches).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest

pytest.importorskip("streamlit", reason="needs the web extra: pip install 'rackmath[web]'")

from streamlit.testing.v1 import AppTest

from rackmath.analyses.reality import report as validation_report
from rackmath.analyses.reality import validation
from rackmath.analyses.reality.report import ValidationReport
from rackmath.catalog.measurements import measurements
from rackmath.web.state.validation import ValidationState, parse_validation_query, validation_query

SCRIPT = """
from rackmath.web.pages import guarded
from rackmath.web.page_validation import render_validation_page
guarded(render_validation_page)()
"""


@pytest.fixture(scope="module")
def report() -> ValidationReport:
    return validation_report.validate()


def run_page(**query: str) -> AppTest:
    at = AppTest.from_string(SCRIPT, default_timeout=120)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


def ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def plots(at: AppTest) -> list[dict[str, Any]]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def values(v: Any) -> Any:
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).tolist()
    return v


def points(spec: dict[str, Any], phase: str) -> list[tuple[float, float]]:
    t = next(t for t in spec["data"] if t["name"] == phase)
    return list(zip(values(t["x"]), values(t["y"]), strict=True))


def test_the_plots_and_tables_are_the_validation_report(report: ValidationReport) -> None:
    at = run_page()
    ok(at)
    assert errors(at) == []
    pure, calibrated, per_row = plots(at)
    for spec, column in ((pure, "roofline"), (calibrated, "calibrated")):
        st = report.stats(column)
        assert (
            f"median |err| {st.median_abs_error:.0%}, p90 {st.p90_abs_error:.0%}"
            in spec["layout"]["title"]["text"]
        )
        # each metric is divided by a power of ten near its unit's median measured value
        by_unit: dict[str, list[float]] = {}
        for r in report.rows:
            by_unit.setdefault(r.scenario.unit, []).append(r.scenario.value)
        scale = {u: 10 ** np.floor(np.log10(np.median(v))) for u, v in by_unit.items()}
        expected = [
            (r.scenario.value / scale[r.scenario.unit], r.column(column).value / scale[r.scenario.unit])
            for r in report.rows
            if r.scenario.phase.value == "decode" and r.column(column).ok
        ]
        np.testing.assert_allclose(points(spec, "decode"), expected, rtol=1e-12)
        # readable: the axes span a few decades, not the 16 between ms and FLOP/s
        lo, hi = spec["layout"]["xaxis"]["range"]
        assert 1 < hi - lo < 8
    band = next(t for t in pure["data"] if t["name"] == "±20%")
    x, y = values(band["x"]), values(band["y"])
    assert y[0] == pytest.approx(1.2 * x[0]) and y[2] == pytest.approx(0.8 * x[2])
    errs = {t["name"]: values(t["y"]) for t in per_row["data"]}
    low, high = per_row["layout"]["yaxis"]["range"]
    assert (low, high) == (-1.0, 2.0)
    assert all(low <= e <= high for e in errs["roofline"])  # beyond the axis: drawn at its edge
    assert sorted(errs["calibrated"]) == pytest.approx(
        sorted(e for e in report.errors("calibrated") if np.isfinite(e))
    )
    aggregates, rows = at.dataframe[0].value, at.dataframe[1].value
    overall = aggregates[aggregates["group"] == "overall"].iloc[0]
    for column in ("roofline", "calibrated", "loso"):
        st = report.stats(column)
        assert overall[f"{column}_median_abs_error"] == pytest.approx(st.median_abs_error)
        assert overall[f"{column}_p90_abs_error"] == pytest.approx(st.p90_abs_error)
    h100 = aggregates[(aggregates["group"] == "hardware") & (aggregates["name"] == "h100-sxm")].iloc[0]
    assert h100["loso_median_abs_error"] == pytest.approx(
        report.stats("loso", {"chip": "h100-sxm"}).median_abs_error
    )
    assert list(rows["id"]) == [r.scenario.row_id for r in report.rows]
    np.testing.assert_allclose(rows["measured"], [r.scenario.value for r in report.rows])
    first = report.rows[0]
    assert rows["calibrated_predicted"].iloc[0] == pytest.approx(first.column("calibrated").value)
    assert rows["roofline_error_frac"].iloc[0] == pytest.approx(first.error("roofline"))
    assert f"{len(report.rows)} rows expressed, {len(report.unsupported)} listed unsupported" in "".join(
        c.value for c in at.caption
    )


def test_filters_pick_rows_and_the_url_keeps_them() -> None:
    at = run_page()
    at.multiselect(key="validation.phases").set_value(["decode", "training"])
    at.multiselect(key="validation.hardware").set_value(["a100-80gb"]).run()
    ok(at)
    data = measurements()
    expected = [
        s.row_id
        for s in data.scenarios
        if s.phase.value in ("decode", "training") and validation.scenario_chip(s) == "a100-80gb"
    ]
    assert list(at.dataframe[1].value["id"]) == expected
    assert f"{len(expected)} shown" in "".join(c.value for c in at.caption)
    assert at.query_params["phases"] == "decode,training" and at.query_params["hardware"] == "a100-80gb"


def test_leave_one_source_out_alone(report: ValidationReport) -> None:
    at = run_page(columns="loso")
    ok(at)
    specs = plots(at)
    assert len(specs) == 2  # the scatter and the per-row errors
    st = report.stats("loso")
    assert specs[0]["layout"]["title"]["text"].startswith(
        f"leave-one-source-out: median |err| {st.median_abs_error:.0%}"
    )


def test_bad_url_values_are_reported() -> None:
    at = run_page(columns="pure", phases="decoding", hardware="h100")
    ok(at)
    msgs = "\n".join(errors(at))
    assert "columns: got 'pure'" in msgs and "phases: got 'decoding'" in msgs
    assert "unknown chip 'h100'" in msgs
    assert len(plots(at)) == 3  # the defaults: pure and calibrated, and the errors


def test_a_state_round_trips_through_the_url() -> None:
    state = ValidationState(columns=("loso",), phases=("prefill",), hardware=("h200", "tpu-v4"))
    assert parse_validation_query(validation_query(state)) == (state, [])
