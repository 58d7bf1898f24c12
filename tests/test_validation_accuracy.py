"""Predictions of published measurements, as a gate: aggregate error bounds (never per-row
values), failing groups gathered before asserting; calibration is physical, few-parameter,
and never scores a source it was fitted on.

Gates (fractions): the calibrated in-sample error and the leave-one-source-out error must
stay within the bounds below, which sit a little above today's figures (docs/validation.md:
calibrated 13.0% / 29.8%, LOSO 22.3% / 45.4%, worst LOSO phase median 30.3% in decode).
The issue's targets (median 15%, p90 35%) are recorded beside them: the in-sample fit meets
both; LOSO meets neither yet, and this file says so rather than loosening what it measures.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from rackmath.analyses import calibration as cal
from rackmath.analyses import validation as val
from rackmath.catalog.measurements import measurements

TARGET_MEDIAN, TARGET_P90 = 0.15, 0.35
# Just above the figures of 2026-11-23 under the per-operator step (pure roofline 59.2% /
# 118.2%, calibrated 13.7% / 23.2%, LOSO 22.9% / 42.8%; LOSO decode median 39.1%, the worst
# phase). The per-operator sum (max per operator, not per layer) moved two gates up from
# 2026-11-22's per-layer max (LOSO p90 41.3% -> 42.8%, decode median 32.8% -> 39.1%) while the
# pure roofline improved (64.3% / 139.9% -> 59.2% / 118.2%): the family calibration's flat
# scalars cannot place efficiency per operator, which kernel-grounded curves are to do.
# Lower them when the model improves; never raise them without a model or data change to point to.
GATES = {  # column: (median bound, p90 bound)
    "calibrated": (0.14, 0.25),
    "loso": (0.23, 0.43),
}
PHASE_LOSO_MEDIAN_BOUND = 0.40


@pytest.fixture(scope="module")
def report() -> val.ValidationReport:
    return val.validate()


def test_every_expressed_row_is_predicted(report: val.ValidationReport) -> None:
    failed = {c: report.failed(c) for c in report.columns}
    assert failed == {c: [] for c in report.columns}


def test_aggregate_errors_within_the_gates(report: val.ValidationReport) -> None:
    problems = []
    for column, (median_bound, p90_bound) in GATES.items():
        st = report.stats(column)
        if not st.median_abs_error <= median_bound:
            problems.append(f"{column} median {st.median_abs_error:.3f} > {median_bound}")
        if not st.p90_abs_error <= p90_bound:
            problems.append(f"{column} p90 {st.p90_abs_error:.3f} > {p90_bound}")
    for phase in report.group_names("phase"):
        st = report.stats("loso", {"phase": phase})
        if not st.median_abs_error <= PHASE_LOSO_MEDIAN_BOUND:
            problems.append(f"loso phase {phase} median {st.median_abs_error:.3f}")
    assert not problems, problems


def test_in_sample_fit_meets_the_targets(report: val.ValidationReport) -> None:
    st = report.stats("calibrated")
    assert st.median_abs_error <= TARGET_MEDIAN and st.p90_abs_error <= TARGET_P90


def test_calibration_is_worth_having(report: val.ValidationReport) -> None:
    roof, calibrated, loso = (report.stats(c) for c in ("roofline", "calibrated", "loso"))
    assert calibrated.median_abs_error < roof.median_abs_error / 2
    assert loso.median_abs_error < roof.median_abs_error / 2
    assert loso.median_abs_error >= calibrated.median_abs_error  # out of sample is not better


def test_the_roofline_is_optimistic_where_no_communication_is_involved(report: val.ValidationReport) -> None:
    """The pure roofline is a speed limit: single-chip throughput is never under-predicted
    and latency never over-predicted (communication models can err either way)."""
    wrong = []
    for r in report.rows:
        s = r.scenario
        if s.phase.value == "training" or s.chips != 1:
            continue
        e = r.error("roofline")
        faster_is_higher = s.metric.value not in ("decode_step_s", "ttft_s")
        if (faster_is_higher and e < 0) or (not faster_is_higher and e > 0):
            wrong.append((s.row_id, e))
    assert not wrong, wrong


def test_parameters_are_few_and_physical(report: val.ValidationReport) -> None:
    c = report.calibration
    families = {val.scenario_family(s) for s in measurements().scenarios}
    assert {name for name, _ in c.families} == families
    n_params = len(c.pooled.to_dict()) * (1 + len(c.families))
    assert n_params < len(report.rows) * 2  # no per-row factors
    for _, p in [("pooled", c.pooled), *c.families]:
        assert 0 < p.bandwidth_frac <= 1 and 0 < p.flops_frac_decode <= 1
        assert 0 < p.flops_frac_prefill <= 1 and 0 < p.flops_frac_training <= 1
        assert p.overhead_decode_s_per_layer >= 0 and p.overhead_prefill_s_per_layer >= 0
        assert 0 < p.kv_bandwidth_frac <= 1 and 0 <= p.two_batch_overlap_frac <= 1
        assert 0 <= p.dequant_bytes_per_weight <= 1  # byte-equivalents per weight: below a bf16 read


def test_weight_only_formats_pay_for_dequantization(report: val.ValidationReport) -> None:
    """gpt-fast on one A100 (rows 1-3: bf16, int8, int4 weight-only): the fitted conversion
    cost makes int4's predicted gain over int8 smaller than the 2x its bytes alone give, as
    measured (196.8 / 155.6 = 1.26x)."""
    step = {r.scenario.row_id: 1.0 / r.column("calibrated").value for r in report.rows}
    assert report.calibration.pooled.dequant_bytes_per_weight > 0
    assert 1.0 < step[2] / step[3] < 2.0


def test_loso_never_fits_on_the_source_it_scores() -> None:
    rows = measurements().scenarios
    loso = cal.leave_one_source_out(rows)
    for key, held in loso.held_out.items():
        assert held and not set(held) & set(loso.fits[key].fitted_on)
        for s in rows:
            if s.row_id in held:
                assert loso.predictions[s.row_id] == val.predict(s, loso.fits[key])


def test_held_out_values_cannot_leak_into_their_prediction() -> None:
    """Scale every measured value of a held-out source by 10: its LOSO predictions must not move."""
    keys = ("gpt-fast", "llama3-paper", "pope-2022")
    rows = [s for s in measurements().scenarios if s.source_key in keys]
    base = cal.leave_one_source_out(rows)
    for key in keys:
        changed = [replace(s, value=s.value * 10) if s.source_key == key else s for s in rows]
        moved = cal.leave_one_source_out(changed)
        for s in rows:
            if s.source_key == key:
                assert moved.predictions[s.row_id].value == base.predictions[s.row_id].value
