"""GQA prefill attention runs on a curve per head size (``specs.efficiency.HEAD_SIZED``).

TensorRT-LLM builds its context attention per head size; on SM89 and SM120 those kernels'
rates differ by up to 2.8x at one format, so one curve per format cannot follow them. The
fit gives each head size its own curve, and an operator takes its head size's, or the nearest
one the tables time, saying so.
"""

from __future__ import annotations

import numpy as np
import pytest

from rackmath import api
from rackmath.analyses.kernels import fit as kf
from rackmath.analyses.kernels import tables as et
from rackmath.analyses.kernels.rows import fit_groups
from rackmath.catalog import kernel_efficiency as ke
from rackmath.catalog import kernel_tables as kt
from rackmath.specs.curve_rank import head_curve, nearest_head
from rackmath.specs.efficiency import (
    Curve,
    CurveKey,
    EfficiencyTable,
    OpClass,
    OpEfficiency,
)
from rackmath.specs.precision import Precision

PREFILL = OpClass.ATTENTION_PREFILL


@pytest.mark.parametrize(("head_dim", "nearest"), [(96, 128), (160, 192), (80, 64), (128, 128), (512, 256)])
def test_the_nearest_head_size_is_nearest_by_ratio(head_dim: float, nearest: int) -> None:
    """96 is 1.33x below 128 and 1.5x above 64; 160 is 1.2x below 192 and 1.25x above 128."""
    assert nearest_head((64, 128, 192, 256), head_dim) == nearest


def test_a_tie_goes_to_the_larger_head_size() -> None:
    # 90.51 = sqrt(64 x 128): as far from each by ratio
    assert nearest_head((64, 128), float(np.sqrt(64 * 128))) == 128


def test_an_operator_takes_its_own_size_else_the_nearest_else_the_curve_of_every_size() -> None:
    """The rule the step's lookup and the fit's scoring share (``curve_rank.head_curve``)."""
    assert head_curve((64, 128, 256), 128.0) == 128
    assert head_curve((64, 128, 256), 96.0) == 128
    assert head_curve((), 96.0) == 0  # a family fitted as one curve


def _sized_table() -> EfficiencyTable:
    curves = tuple(
        (CurveKey(PREFILL, "fp8", "gqa", d), Curve(OpEfficiency(compute_frac=frac), "fp8", f"table d{d}"))
        for d, frac in ((64, 0.2), (128, 0.4), (256, 0.1))
    )
    return EfficiencyTable(curves=curves, chip="l40s")


def test_an_operator_takes_its_own_head_sizes_curve() -> None:
    e, precision, kernel = _sized_table().curve(PREFILL, ("fp8",), "gqa", head_dim=128)
    assert (e.compute_frac, precision, kernel.head_dim, kernel.fallback) == (0.4, "fp8", 128, "")
    assert kernel.to_dict()["head_dim"] == 128


def test_a_head_size_the_tables_lack_runs_on_the_nearest_and_says_so() -> None:
    e, _, kernel = _sized_table().curve(PREFILL, ("fp8",), "gqa", head_dim=96)
    assert e.compute_frac == 0.4 and kernel.head_dim == 128
    assert kernel.fallback == (
        "no attention_prefill curve for head size 96 on l40s: runs on the head-128 curve "
        "(the nearest its tables time)"
    )


def test_a_format_without_sized_curves_falls_back_to_the_nearest_head_of_another() -> None:
    """bf16 is absent: the fp8 curves of the nearest head size, with the format's reason."""
    e, _, kernel = _sized_table().curve(PREFILL, ("bfloat16",), "gqa", head_dim=256)
    assert e.compute_frac == 0.1 and kernel.fmt == "fp8" and kernel.head_dim == 256
    assert "runs on the attention_prefill/gqa/fp8/head 256 curve" in kernel.fallback


def test_a_curve_of_every_head_size_serves_any_head_size_without_a_fallback() -> None:
    """A catalog written before the split (one curve per format) still reads the same."""
    table = EfficiencyTable(
        curves=((CurveKey(PREFILL, "fp8", "gqa"), Curve(OpEfficiency(compute_frac=0.3), "fp8", "t")),)
    )
    e, _, kernel = table.curve(PREFILL, ("fp8",), "gqa", head_dim=96)
    assert (e.compute_frac, kernel.head_dim, kernel.fallback) == (0.3, 0, "")


def test_the_shipped_l40s_curves_are_one_per_head_size_and_format() -> None:
    sized = sorted(
        (o["dtype"], o["head_dim"])
        for o in ke.op_entries("l40s")
        if o["op_class"] == "attention_prefill" and o.get("kind", "gqa") == "gqa"
    )
    assert sized == [(dt, d) for dt in ("bfloat16", "fp8") for d in (64, 128, 192, 256)]
    table = et.efficiency_table("l40s")
    for d in (64, 128, 192, 256):
        _, _, kernel = table.curve(PREFILL, ("fp8",), "gqa", head_dim=d)
        assert kernel.head_dim == d and not kernel.fallback
    # MLA prefill times one head shape: one curve, no head size
    _, _, mla = table.curve(PREFILL, ("bfloat16",), "mla", head_dim=192)
    assert mla.kind == "mla" and mla.head_dim == 0 and not mla.fallback


@pytest.mark.parametrize(("model", "head_dim"), [("llama-3.1-8b", 128), ("gpt-oss-120b", 64)])
def test_a_prefill_on_the_l40s_runs_on_its_models_head_size(model: str, head_dim: int) -> None:
    d = api.deployment(model, "l40s-8", chips=1, kv="fp8")
    step = api.prefill(d, [1.0], [4096.0]).step
    (attention,) = [op for op in step.operators if op.op_class is PREFILL]
    kernel = attention.kernel
    assert kernel is not None and (kernel.fmt, kernel.kind, kernel.head_dim) == ("fp8", "gqa", head_dim)
    assert not kernel.fallback and kernel.to_dict()["head_dim"] == head_dim


@pytest.fixture(scope="module")
def l40s_fp8_prefill() -> tuple[object, kf.ChipPeaks]:
    if kt.package_data_dir() is None:
        pytest.skip("aiconfigurator-core is not installed (the `kernels` extra)")
    data = kf.load_package_chip("l40s", kinds=("context_attention",))
    r = data.ops[PREFILL]
    return r.take((r.dtype == "fp8") & (r.kind == "gqa")), kf.ChipPeaks.of("l40s")


def test_the_fit_splits_gqa_prefill_by_head_size(l40s_fp8_prefill) -> None:
    rows, _ = l40s_fp8_prefill
    groups = fit_groups(rows)
    assert [(dt, kind, d) for dt, kind, d, _ in groups] == [("fp8", "gqa", d) for d in (64, 128, 192, 256)]
    assert sum(int(m.sum()) for *_, m in groups) == len(rows)  # every row in one group
    assert all(np.all(rows.cols[m] == d) for _, _, d, m in groups)


def test_one_curve_for_every_head_size_misses_head_128_where_its_own_does_not(l40s_fp8_prefill) -> None:
    """The L40S's FP8 context kernel at head 128 runs 2.1x the head-64 kernel's rate: a curve
    fitted on all four head sizes predicts its calls a median 80%+ too slow; the shipped
    head-128 curve is within 15% at the median."""
    rows, peaks = l40s_fp8_prefill
    peak, bw = peaks.peak_flops_per_s[Precision.FP8], peaks.hbm_bytes_per_s
    at128 = rows.cols == 128
    with kf.deterministic_threads():
        pooled = kf.fit_op(rows, peak, bw)
    own = et.efficiency_table("l40s").curve(PREFILL, ("fp8",), "gqa", head_dim=128)[0]
    r128 = rows.take(at128)

    def median_error(e: OpEfficiency) -> float:
        return float(np.median(np.abs(kf.predict(e, r128, peak, bw) / r128.latency_s - 1)))

    assert median_error(pooled) > 0.5
    assert median_error(own) < 0.15
