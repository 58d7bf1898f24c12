"""Predictions of published measurements, as a gate: aggregate error bounds (never per-row
values), failing groups gathered before asserting; the end-to-end correction is physical,
few-parameter, pooled over every chip, and never scores a source it was fitted on.

Columns (docs/validation.md): the pure roofline; kernel-grounded with no end-to-end fit;
kernel-grounded plus the end-to-end correction (per-prefill and per-sequence host time,
scheduler occupancy) in-sample; that correction leave-one-source-out (LOSO).
The targets are asserted: LOSO median 15% and p90 35% (issue 12: 9.5% / 32.9% on 2026-11-26),
and the kernel-grounded column with no end-to-end fit at a median of 12% (issue 26: 10.6%).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from rackmath.analyses.reality import calibration as cal
from rackmath.analyses.reality import correction as co
from rackmath.analyses.reality import report as validation_report
from rackmath.analyses.reality import validation as val
from rackmath.analyses.reality.report import ValidationReport
from rackmath.catalog.measurements import measurements

TARGET_MEDIAN, TARGET_P90 = 0.15, 0.35
# Just above the figures of 2026-11-26 (issue 26: MLA, formats, split-KV, collectives as
# operators, host time per engine; the refit of that day): pure roofline 56.2% / 90.4%, kernel
# 11.8% / 36.2%, kernel + correction 8.2% / 27.7%, LOSO 9.5% / 32.9%; worst LOSO phase median
# 16.7% (training). On 2026-11-24: kernel 14.8% / 37.5%, kernel + correction 10.2% / 29.2%,
# LOSO 11.6% / 31.6%, worst phase 20.1%. Before (2026-11-23): kernel 15.1% / 42.8%,
# kernel + correction 11.1% / 36.2%, LOSO 11.1% / 37.6%; earlier still kernel 20.9% / 51.8%,
# LOSO 15.3% / 47.8%. The family-scalar calibration these columns replace scored LOSO
# 22.9% / 42.8% (its own gates live with `rackmath calibrate`).
# Raised on 2026-11-26 by issue 23's model change, the honest figure: the training step's own
# kernels (FlashAttention's backward at 2.5x the forward's FLOPs and 0.866 of its rate on an
# H100: Llama 3 128K -28.2% -> -34.4%) and each run's framework as stated (Megatron 462B's
# README turns TP overlap on: -1.5% -> +13.6%) give kernel 13.8% / 36.2%, kernel + correction
# 9.1% / 32.0%, LOSO 10.0% / 34.7% (issue 26's 12% kernel target is not met on this set).
# Then TP overlap pipelined per collective (each exposes its first 1/tp piece; Megatron 462B
# +13.6% -> +11.4%): kernel 12.7% / 36.2%.
# Lower them when the model improves; never raise them without a model or data change to point to.
# Then (2026-11-26, later) a quantized format converts the blocks' matmuls and leaves the head,
# embedding, router and norms at 16 bits (docs/validation.md item 9), and the training rows' own
# frameworks (item 8): kernel 10.6% / 36.2%, kernel + correction 7.6% / 26.2%, LOSO 10.0% / 32.8%.
# Raised on 2026-11-27 by a model change, GQA prefill curves per head size (kernel 10.6% / 36.5% ->
# 10.7% / 36.9%; LOSO 9.4% / 32.7% -> 9.3% / 32.7%): the in-sample correction's per-sequence host
# time moved one grid step, 4.6 us -> 10 us, on an objective 0.1% lower there (1.5987 against
# 1.6005 at the old point), and the in-sample median with it, 7.2% -> 9.1% (p90 25.9% -> 25.8%).
# The objective is that flat along this parameter; the LOSO column is the figure to trust.
GATES = {  # column: (median bound, p90 bound)
    "kernel": (0.12, 0.37),  # issue 26's target: 12%
    "calibrated": (0.095, 0.27),
    "loso": (0.105, 0.335),
}
PHASE_LOSO_MEDIAN_BOUND = 0.17


@pytest.fixture(scope="module")
def report() -> ValidationReport:
    return validation_report.validate()


def test_every_expressed_row_is_predicted(report: ValidationReport) -> None:
    failed = {c: report.failed(c) for c in report.columns}
    assert failed == {c: [] for c in report.columns}


def test_aggregate_errors_within_the_gates(report: ValidationReport) -> None:
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


def test_loso_meets_the_targets(report: ValidationReport) -> None:
    st = report.stats("loso")
    assert st.median_abs_error <= TARGET_MEDIAN and st.p90_abs_error <= TARGET_P90


def test_kernel_grounding_and_the_correction_are_worth_having(report: ValidationReport) -> None:
    roof, kernel, calibrated, loso = (report.stats(c) for c in ("roofline", "kernel", "calibrated", "loso"))
    assert kernel.median_abs_error < roof.median_abs_error / 2  # the kernel tables alone, no fit
    assert calibrated.median_abs_error < kernel.median_abs_error
    assert loso.p90_abs_error >= calibrated.p90_abs_error  # out of sample is not better


def test_the_report_has_four_columns_and_its_groups(report: ValidationReport) -> None:
    assert report.columns == ("roofline", "kernel", "calibrated", "loso")
    d = report.to_dict()
    block = d["aggregates"]["kernel"]
    assert set(block["by_architecture"]) == {"dense", "moe"}
    assert set(block["by_generation"]) == {val.scenario_family(s) for s in measurements().scenarios}
    assert sum(g["rows"] for g in block["by_phase"].values()) == len(report.rows)
    # every row says which efficiency it ran on; TPU rows borrow the H100's curves
    tpu = [r for r in d["rows"] if r["chip"] == "tpu-v4"]
    assert tpu and all(r["efficiency"]["transferred_from"] == "h100-sxm" for r in tpu)
    assert all(r["efficiency"]["transferred_from"] is None for r in d["rows"] if r["chip"] == "h100-sxm")
    # the kernel column is the correction's starting point: the same model with no correction
    for r in report.rows:
        assert r.column("kernel") == val.predict(r.scenario, co.KERNEL)


def test_the_roofline_is_optimistic_where_no_communication_is_involved(report: ValidationReport) -> None:
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


def test_correction_is_few_pooled_and_physical(report: ValidationReport) -> None:
    c = report.calibration
    assert c.families == ()  # pooled over every chip: no per-chip or per-family scalar
    p = co.correction_parameters(c)
    assert set(p) == {"overhead_prefill_s_per_pass", "overhead_decode_s_per_sequence", "concurrency_frac"}
    assert 0 <= p["overhead_prefill_s_per_pass"] <= 0.1  # host time per prefill: under 100 ms
    assert 0 <= p["overhead_decode_s_per_sequence"] <= 1e-3  # per sequence per step: under 1 ms
    assert 0.4 <= p["concurrency_frac"] <= 1.0
    untouched = replace(c.pooled, **{k: co.START[k] for k in p})
    assert untouched == co.KERNEL.pooled  # nothing else moved from the kernel-grounded model


def test_weight_only_formats_run_on_their_dequantizing_kernels(report: ValidationReport) -> None:
    """gpt-fast on one A100 (rows 1-3: bf16, int8, int4 weight-only): the int8_wo / int4_wo
    GEMM fits make int4's predicted gain over int8 smaller than the 2x its bytes alone give,
    as measured (196.8 / 155.6 = 1.26x), with no end-to-end dequantization parameter."""
    step = {r.scenario.row_id: 1.0 / r.column("kernel").value for r in report.rows}
    assert 1.0 < step[2] / step[3] < 1.5


def test_correction_loso_never_fits_on_the_source_it_scores() -> None:
    keys = ("gpt-fast", "trtllm-perf-legacy", "pope-2022")
    rows = [s for s in measurements().scenarios if s.source_key in keys]
    loso = co.correction_loso(rows)
    for key, fit in loso.fits.items():
        held = {s.row_id for s in rows if s.source_key == key}
        assert held and not held & set(fit.fitted_on)
        for s in rows:
            if s.row_id in held:
                assert loso.predictions[s.row_id] == val.predict(s, fit)


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


def test_held_out_values_cannot_leak_into_the_corrections_prediction() -> None:
    """Scale every measured value of a held-out source by 10: its LOSO predictions must not move."""
    keys = ("gpt-fast", "llama3-paper", "trtllm-perf-legacy")
    rows = [s for s in measurements().scenarios if s.source_key in keys]
    base = co.correction_loso(rows)
    for key in keys:
        changed = [replace(s, value=s.value * 10) if s.source_key == key else s for s in rows]
        moved = co.correction_loso(changed)
        for s in rows:
            if s.source_key == key:
                assert moved.predictions[s.row_id].value == base.predictions[s.row_id].value


def test_a_stated_kv_read_per_query_head_reads_the_cache_once_per_query_head() -> None:
    """Row 20 (Llama-2-70B FP8 on one H200, TensorRT-LLM v0.5.0) as one decode step at batch
    512 and context 128 on the pure roofline: stating that the engine's generation attention
    reads each KV head once per query head adds (64/8 - 1) = 7 more reads of the cache, by
    hand 7 x 512 x 128 tokens x (80 layers x 8 KV heads x 128 x 2 x 1 byte) / 4.8 TB/s
    = 7 x 10.74 GB / 4.8 TB/s = 15.7 ms. The flag slows the attention kernel's traffic, so its
    queries and outputs (512 x 64 heads x 256 values x 2 B x 80 layers = 1.34 GB) move 8 times
    slower too: + 7 x 1.34 GB / 4.8 TB/s = 2.0 ms. An MHA model (Llama-2-7B, row 12) does not move."""
    from rackmath.catalog.loader import system
    from rackmath.specs.scenario import Metric, Phase

    rows = {s.row_id: s for s in measurements().scenarios}
    s20 = replace(rows[20], phase=Phase.DECODE, metric=Metric.DECODE_STEP_S, output_tokens=1)
    # a decode-step row: the mean over contexts I .. I + O - 1 is the one step at context I
    flagged = val.predict(s20, val.PURE_ROOFLINE).value
    plain = val.predict(replace(s20, kv_read_per_query_head=False), val.PURE_ROOFLINE).value
    assert rows[20].kv_read_per_query_head and rows[14].kv_read_per_query_head
    kv_bytes = 512 * 128 * 80 * 8 * 128 * 2 * 1.0
    queries_and_outputs = 512 * 64 * (128 + 128) * 2.0 * 80
    bw = system("h200-hgx").chip.hbm_bandwidth_bytes_per_s
    assert flagged - plain == pytest.approx(7 * (kv_bytes + queries_and_outputs) / bw, rel=0.01)
    s12 = rows[12]
    assert s12.kv_read_per_query_head
    assert (
        val.predict(s12, val.PURE_ROOFLINE).value
        == val.predict(replace(s12, kv_read_per_query_head=False), val.PURE_ROOFLINE).value
    )


def test_training_rows_are_the_training_analysis_metric() -> None:
    """One copy of the training metric: a training row's prediction is the training analysis's
    estimate read under the run's own convention (training_runs.predicted_metric), pure and
    kernel-grounded (the per-operator training step on the chip's kernel tables)."""
    from rackmath.analyses.training import estimate as T
    from rackmath.analyses.training import runs as runs_analysis
    from rackmath.analyses.training.runs import predicted_metric
    from rackmath.catalog.training_runs import training_runs

    runs = {r.measurement_id: r for r in training_runs() if r.measurement_id}
    rows = [s for s in measurements().scenarios if s.training_run]
    assert len(rows) == 7
    for s in rows:
        run = runs[s.row_id]
        pure = predicted_metric(run, T.estimate(runs_analysis.run_setup(run, "pure")))
        kernel = predicted_metric(run, T.estimate(runs_analysis.run_setup(run)))
        assert val.predict(s, val.PURE_ROOFLINE).value == pytest.approx(pure, rel=1e-12)
        assert val.predict(s, co.KERNEL).value == pytest.approx(kernel, rel=1e-12)
