"""Validation page: rackmath's predictions against every published measurement it can express.

Every number comes from :func:`rackmath.analyses.reality.report.validate` (the pure roofline, the
calibration fitted on all rows, and leave-one-source-out; see :mod:`rackmath.analyses.reality.calibration`)
through the report's ``to_dict()``, as ``rackmath validate --json`` prints it; this module
lays it out. The report takes about 10 s and depends on nothing the user picks, so it is
computed once per server process (``st.cache_resource``) and shared by every session.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import streamlit as st

from rackmath.analyses.reality import report
from rackmath.views.figures import validation_charts
from rackmath.views.figures.common import BAND_FRAC
from rackmath.web import components as ui
from rackmath.web.commands import validation_command
from rackmath.web.state.validation import (
    VALIDATION_COLUMNS,
    ValidationState,
    parse_validation_query,
    validation_query,
)

PAGE = "validation"


@st.cache_resource(show_spinner="Predicting every published measurement (about 10 s, once per server)…")
def validation_report() -> report.ValidationReport:
    """The whole validation, once per process: its inputs are the catalog's, never the user's."""
    return report.validate()


@st.cache_resource(show_spinner=False)
def validation_dict() -> dict[str, Any]:
    """The report's ``to_dict()`` (the ``rackmath validate --json`` object), once per process."""
    return validation_report().to_dict()


def row_record(row: dict[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    """One table row: what was measured, and each column's prediction and error."""
    out: dict[str, Any] = {
        "id": row["id"],
        "model": row.get("model") or row.get("training_run"),
        "system": row.get("system") or row["chip"],
        "chip": row["chip"],
        "phase": row["phase"],
        "metric": row["metric"],
        "unit": row["unit"],
        "measured": row["measured"],
    }
    for c in columns:
        out[f"{c}_predicted"] = row[c]["predicted"]
        out[f"{c}_error_frac"] = row[c]["error_frac"]
    out["source"] = row["source_key"]
    return out


def aggregate_records(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Median and p90 |error| per column: overall, by phase, by hardware."""
    columns = report["columns"]
    agg = report["aggregates"]
    first = agg[columns[0]]
    groups = [("overall", "", "overall")]
    groups += [("phase", g, "by_phase") for g in first["by_phase"]]
    groups += [("hardware", g, "by_hardware") for g in first["by_hardware"]]

    def stats(column: str, block: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = agg[column][block] if block == "overall" else agg[column][block][name]
        return found

    out = []
    for kind, name, block in groups:
        rec: dict[str, Any] = {"group": kind, "name": name, "rows": stats(columns[0], block, name)["rows"]}
        for c in columns:
            s = stats(c, block, name)
            rec[f"{c}_median_abs_error"] = s["median_abs_error"]
            rec[f"{c}_p90_abs_error"] = s["p90_abs_error"]
        out.append(rec)
    return out


# --------------------------------------------------------------------------- page


def _controls(initial: ValidationState, report: dict[str, Any]) -> ValidationState:
    columns = list(report["columns"])
    rows = report["rows"]
    phases = sorted({r["phase"] for r in rows})
    hardware = sorted({r["chip"] for r in rows})
    ui.init_state(
        PAGE,
        {
            "columns": [c for c in initial.columns if c in columns],
            "phases": [p for p in initial.phases if p in phases],
            "hardware": [h for h in initial.hardware if h in hardware],
        },
    )
    cols = st.columns([2, 1, 1])
    chosen = cols[0].pills(
        "Predictions plotted",
        columns,
        selection_mode="multi",
        key=ui.key(PAGE, "columns"),
        format_func=lambda c: VALIDATION_COLUMNS.get(c, c),
    )
    picked_phases = cols[1].multiselect("Phases (empty = all)", phases, key=ui.key(PAGE, "phases"))
    picked_hw = cols[2].multiselect("Hardware (empty = all)", hardware, key=ui.key(PAGE, "hardware"))
    return ValidationState(tuple(chosen or ()), tuple(picked_phases), tuple(picked_hw))


def render_validation_page() -> None:
    """The Validation page: predicted vs measured, per row and in aggregate."""
    st.title("Validation")
    st.caption(
        "rackmath against published measurements (vendors' benchmarks, papers, READMEs): the pure "
        "roofline, the calibration fitted on every row (one set of physical parameters per chip family) "
        "and leave-one-source-out (each row predicted by a fit that never saw its source). "
        "Error = predicted / measured - 1."
    )
    initial, errors = parse_validation_query(st.query_params.to_dict())
    report = validation_dict()
    state = _controls(initial, report)
    ui.sync_url(validation_query(state))
    ui.show_errors(errors)
    rows = [
        r
        for r in report["rows"]
        if (not state.phases or r["phase"] in state.phases)
        and (not state.hardware or r["chip"] in state.hardware)
    ]
    st.caption(
        f"{report['rows_expressed']} rows expressed, {report['rows_unsupported']} listed unsupported; "
        f"{len(rows)} shown."
    )
    _plots(state, report, rows)
    _tables(report, rows)
    ui.cli_command(validation_command())


def _plots(state: ValidationState, report: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    if not state.columns:
        st.info("Pick at least one kind of prediction to plot.")
        return
    cols = st.columns(len(state.columns))
    for col, name in zip(cols, state.columns, strict=True):
        overall = report["aggregates"][name]["overall"]
        title = (
            f"{VALIDATION_COLUMNS.get(name, name)}: median |err| {overall['median_abs_error']:.0%}, "
            f"p90 {overall['p90_abs_error']:.0%} over all {overall['rows']} rows"
        )
        with col:
            ui.figure(PAGE, name, validation_charts.validation(rows, name, title, BAND_FRAC), "validation")
    ui.figure(
        PAGE, "errors", validation_charts.validation_errors(rows, state.columns, BAND_FRAC), "validation"
    )
    ui.png_download(
        PAGE, "validation", _png, "pure, calibrated and leave-one-source-out, as `rackmath validate --plot`"
    )


def _png(path: Path) -> Path:
    from rackmath.plots.validation import save_validation_plot

    return save_validation_plot(validation_report(), path)


def _tables(report: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    columns = list(report["columns"])
    st.markdown("##### |error|: median and 90th percentile")
    aggregates = aggregate_records(report)
    ui.table(aggregates)
    ui.downloads(PAGE, "aggregates", aggregates)
    st.markdown("##### Every row")
    records = [row_record(r, columns) for r in rows]
    ui.table(records)
    ui.downloads(PAGE, "rows", records, report)
    with st.expander(f"The {len(report['unsupported'])} rows rackmath cannot express, and why"):
        ui.table(report["unsupported"])
