"""The Hopper GPUs this project measured (``docs/data/h100-sxm-2026-11-26``, its rerun a day
later ``docs/data/h100-sxm-2026-11-27`` and ``docs/data/h200-2026-11-27``, ``rackmath measure
--kernels`` on lent H100 SXMs and an H200):
their own fits, the shipped curves on their rows, and the memory bound of ``rackmath
measure``'s decode sweep, which ran out of memory on the H100 before."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rackmath.analyses.kernels.compare import against_shipped, shipped_fit
from rackmath.analyses.kernels.fit import predict
from rackmath.core import work as wk
from rackmath.core.efficiency import operator_time_s
from rackmath.specs.efficiency import OpClass

pytest.importorskip("pandas")
pytest.importorskip("scipy")

DATA = Path(__file__).resolve().parents[1] / "docs" / "data"
HERE = DATA / "h100-sxm-2026-11-26"


@pytest.fixture(scope="module")
def measured():
    from rackmath.analyses.kernels.calibrate import fit_measured

    return fit_measured("h100-sxm", [HERE], bands=False)


@pytest.fixture(scope="module")
def comparison(measured):
    rows = against_shipped(measured.data, measured.fit, measured.peaks)
    return {(r["op_class"], r["format"]): r for r in rows}


def test_every_table_row_is_kept_and_fitted(measured) -> None:
    """144 GEMMs, 19 decode and 8 prefill calls, 4 copies: none faster than its bytes at HBM
    speed (the L2-flushing copies keep operands out of the cache), each class fitted."""
    rows = {cls.value: len(r.latency_s) for cls, r in measured.data.ops.items()}
    assert rows == {"gemm": 144, "attention_decode": 19, "attention_prefill": 8, "elementwise": 4}
    assert all(len(r.latency_s) == 0 for r in measured.data.rejected.values())
    assert {(f.op_class.value, f.dtype) for f in measured.fit.ops} == {
        ("gemm", "bfloat16"), ("gemm", "fp8"), ("attention_decode", "bfloat16"),
        ("attention_prefill", "bfloat16"), ("elementwise", "bfloat16"),
    }  # fmt: skip


def test_own_fit_describes_its_rows(comparison) -> None:
    """In-sample: each curve's median error on its own rows is a few percent (1.3-5.6%)."""
    for key, r in comparison.items():
        assert r["own"]["median_abs_error"] < 0.06, key


def test_shipped_bf16_gemm_holds_and_fp8_floor_does_not(comparison) -> None:
    """The shipped bf16 GEMM curve predicts cuBLAS here within 10% at the median (6.8%); the
    shipped FP8 curve, fitted on TensorRT-LLM's FP8 GEMM table (floor 12.7 us a call), predicts
    ``torch._scaled_mm`` (floor ~3 us) far too slow (+94% at the median)."""
    bf16, fp8 = comparison[("gemm", "bfloat16")], comparison[("gemm", "fp8")]
    assert bf16["shipped"]["median_abs_error"] < 0.10
    assert abs(bf16["shipped"]["median_error"]) < 0.10
    assert fp8["shipped"]["median_error"] > 0.5
    assert fp8["shipped"]["floor_s"] > 3 * fp8["own"]["floor_s"]
    assert comparison[("elementwise", "bfloat16")]["shipped"] is None  # no shipped curve: said


def test_comparison_times_a_row_as_the_step_does(measured) -> None:
    """One FP8 row (m 1, n = k 8,192) timed by hand on the shipped curve: the GEMM's work from
    ``core.work.gemm`` (1 x 8,192 x 8,192: 134.2 MFLOP, 67.1 MB of FP8 weights) through
    ``operator_time_s``, the route the step takes, is the prediction the comparison uses."""
    f = next(f for f in shipped_fit("h100-sxm").ops if (f.op_class, f.dtype) == (OpClass.GEMM, "fp8"))
    w = wk.gemm(1.0, 8192.0 * 8192.0, 8192.0, 8192.0, weight_bytes_per_param=1.0, activation_bytes=1.0,
                in_values=8192.0, out_values=8192.0)  # fmt: skip
    assert float(w.flops) == pytest.approx(134_217_728) and float(w.weight_bytes) == pytest.approx(67_108_864)
    peak, bw = measured.peaks.peak_flops_per_s[f.precision], measured.peaks.hbm_bytes_per_s
    shape = (w.rows, w.cols, w.depth, w.calls)
    by_hand = float(operator_time_s(f.efficiency, w.flops, w.bytes, peak, bw, *shape))
    table = pd.read_csv(HERE / "gemm_perf.csv")
    row = table[(table.gemm_dtype == "fp8") & (table.m == 1) & (table.n == 8192) & (table.k == 8192)]
    measured_s = float(row.latency.iloc[0]) * 1e-3
    r = measured.data.ops[OpClass.GEMM]
    w8192 = (r.work.cols == 8192) & (r.work.depth == 8192)
    i = np.flatnonzero((r.dtype == "fp8") & (r.work.rows == 1) & w8192)
    assert float(predict(f.efficiency, r.take(i), peak, bw)[0]) == pytest.approx(by_hand, rel=1e-12)
    assert float(r.latency_s[i][0]) == pytest.approx(measured_s)
    assert by_hand > f.efficiency.floor_s and by_hand / measured_s > 1.2  # the floor's cost at decode size


@pytest.mark.parametrize("again", [HERE / "repeat", DATA / "h100-sxm-2026-11-27"], ids=["minutes", "a-day"])
def test_repeat_run_reproduces_within_a_few_percent(again: Path) -> None:
    """Five minutes later on a second H100, and a day later on a third (with a day's newer
    code): the same shapes, each table's median within 3% (0.979-1.009 measured)."""
    keys = ["m", "n", "k", "gemm_dtype", "batch_size", "isl", "num_heads", "num_key_value_heads"]
    for name in ("gemm_perf", "generation_attention_perf", "context_attention_perf", "memcpy_perf"):
        a, b = pd.read_csv(HERE / f"{name}.csv"), pd.read_csv(again / f"{name}.csv")
        shape = [c for c in keys if c in a.columns]
        assert a[shape].equals(b[shape]), name
        assert abs(np.median(b.latency / a.latency) - 1) < 0.03, name


def test_a_small_fit_pins_its_predictions_not_its_parameters() -> None:
    """The two days' 19 decode calls agree within 7% each (6.2% at most), yet their own fits'
    compute fraction lands 0.75 on one and 1.00 on the other: on so few shapes the parameters
    trade off, while the two curves predict day 1's calls within 16% of each other (median 1.7%)."""
    from rackmath.analyses.kernels.calibrate import fit_measured

    fits = [fit_measured("h100-sxm", [d], bands=False) for d in (HERE, DATA / "h100-sxm-2026-11-27")]
    rows = fits[0].data.ops[OpClass.ATTENTION_DECODE]
    assert np.all(np.abs(fits[1].data.ops[OpClass.ATTENTION_DECODE].latency_s / rows.latency_s - 1) < 0.07)
    curves = [next(f for f in m.fit.ops if f.op_class is OpClass.ATTENTION_DECODE) for m in fits]
    fracs = [c.efficiency.compute_frac for c in curves]
    assert abs(fracs[1] - fracs[0]) > 0.2
    peak, hbm = fits[0].peaks.peak_flops_per_s, fits[0].peaks.hbm_bytes_per_s
    times = [predict(c.efficiency, rows, peak[c.precision], hbm) for c in curves]
    assert np.median(np.abs(times[1] / times[0] - 1)) < 0.03
    assert np.max(np.abs(times[1] / times[0] - 1)) < 0.2


def test_decode_sweep_skips_what_does_not_fit() -> None:
    """``rackmath measure``'s CUDA sweep on an 80 GB H100: the 4,096 x 512 point holds the
    weights (1.70 GB), a 68.7 GB KV cache and one layer's KV expanded to 16 heads (2 x 17.2 GB)
    = 104.8 GB, over 0.7 of 85.0 GB: skipped (it ran out of memory there before); 4,096 x 256
    (53.3 GB) is timed. The committed run skipped exactly that point."""
    from rackmath.analyses.reality.measure import MEMORY_SHARE, decode_memory_bytes
    from rackmath.measure import torch_bench as tb

    config = tb.CUDA_CONFIG.hf_config()
    # untied embedding and head, 16 layers of attention (q 16 x 128, k and v 4 x 128, out) and
    # a gated MLP of 5,632, two norms a layer and a final one: 852,559,872 parameters
    params = 2 * 32000 * 2048 + 16 * (2048 * 24 * 128 + 2048**2 + 3 * 2048 * 5632 + 2 * 2048) + 2048
    assert params == 852_559_872  # what the committed run's JSON reports
    tokens = 4097 * 512
    by_hand = params * 2 + 2 * 16 * 4 * 128 * tokens * 2 + 2 * 2 * 16 * 128 * tokens * 2
    point = decode_memory_bytes(config, "bf16", 4096, 512)
    assert point == pytest.approx(by_hand) == pytest.approx(104.809e9, rel=1e-4)
    budget = MEMORY_SHARE * 85_017_493_504
    assert point > budget > decode_memory_bytes(config, "bf16", 4096, 256)
    run = json.loads((HERE / "decode-measure.json").read_text())
    assert run["skipped"] == [{"context": 4096, "batch": 512}] and len(run["points"]) == 29


@pytest.mark.parametrize(
    ("chip", "folder", "expected"),
    [("h100-sxm", "h100-sxm-2026-11-26", 1.031), ("h200", "h200-2026-11-27", 1.030)],
)
def test_split_accumulation_ratio_is_the_committed_measurement(
    chip: str, folder: str, expected: float
) -> None:
    """``training_kernels.yaml``'s Hopper FP8 backward slowdown is, per measured chip, the
    median split / fast accumulation ratio of its committed run (100 shapes), to 3 digits."""
    from rackmath.catalog import training_frameworks as tf

    acc = pd.read_csv(DATA / folder / "fp8-accumulation" / "fp8_accumulation.csv")
    wide = acc.pivot_table(index=["m", "n", "k"], columns="mode", values="latency")
    assert len(wide) == 100
    median = float((wide["fp8-split-accum"] / wide["fp8-fast-accum"]).median())
    r = tf.split_accumulation(chip, "fp8-current")
    assert r is not None and r.value == round(median, 3) == expected and not r.transferred
    assert folder in r.source


def test_split_accumulation_elsewhere() -> None:
    from rackmath.catalog import training_frameworks as tf

    h800 = tf.split_accumulation("h800", "fp8")
    assert h800 is not None and h800.transferred and h800.value == 1.031  # the H100's, same SM90 cores
    assert tf.split_accumulation("h100-sxm", "bf16") is None  # no FP8: nothing split
    assert tf.split_accumulation("b200", "fp8-current") is None  # Blackwell: not measured, not charged
    assert tf.split_accumulation("h100-sxm", "fp8-block") is None  # DeepGEMM promotes in its kernel


def test_hopper_fp8_backward_gemms_take_the_split_accumulation() -> None:
    """Llama 3.1 8B on an H100 HGX, FP8 current scaling under Megatron-Bridge (Transformer
    Engine's recipe splits dgrad and wgrad), kernel-grounded: every GEMM's dgrad and wgrad take
    1.031x what they take without it, the forward unchanged; pure roofline: 1. The generic step
    (no framework stated) does not assume it."""
    import rackmath as rm
    from rackmath.analyses.training import estimate as T
    from rackmath.analyses.training import setup
    from rackmath.specs.plan import ParallelPlan

    def make(efficiency: str, framework: str | None):
        return setup.make_training(
            rm.model("llama-3.1-8b"), rm.system("h100-hgx"), ParallelPlan.parse("dp=8"), tokens=1e9,
            seq_len=4096, global_batch=64, recompute="none", efficiency=efficiency, compute="fp8-current",
            framework=framework,
        )  # fmt: skip

    assert make("kernel", None).split_accumulation is None

    def step(efficiency: str, split: bool):
        s = make(efficiency, "megatron-bridge")
        assert s.split_accumulation is not None
        if not split:
            from dataclasses import replace

            s = replace(s, split_accumulation=None)
        return {o.name: o for o in T.estimate(s).step.operators if o.op_class.value == "gemm"}

    with_split, without = step("kernel", True), step("kernel", False)
    assert with_split
    for name, o in with_split.items():
        base = without[name]
        assert float(o.forward_s) == pytest.approx(float(base.forward_s), rel=1e-12)
        assert float(o.input_grad_s) == pytest.approx(1.031 * float(base.input_grad_s), rel=1e-12)
        assert float(o.weight_grad_s) == pytest.approx(1.031 * float(base.weight_grad_s), rel=1e-12)
        assert "split accumulation x1.031" in o.backward
    pure, pure_without = step("pure", True), step("pure", False)
    for name, o in pure.items():
        assert float(o.input_grad_s) == pytest.approx(float(pure_without[name].input_grad_s), rel=1e-12)


def test_the_h200_tables_tell_the_same_story() -> None:
    """The same sweep on a lent H200, fitted as ``h200``: every row kept, each own curve within
    a few percent in-sample, the shipped bf16 GEMM within 10% at the median, the shipped FP8
    GEMM's floor (12.6 us) several times cuBLASLt's; H200 and H100 GEMMs at the same clocks
    within a few percent of each other (same GH100 compute, 778 and 777 TFLOP/s bf16 on the
    largest)."""
    from rackmath.analyses.kernels.calibrate import fit_measured

    m = fit_measured("h200", [DATA / "h200-2026-11-27"], bands=False)
    assert sum(len(r.latency_s) for r in m.data.ops.values()) == 144 + 19 + 8 + 4
    assert all(len(r.latency_s) == 0 for r in m.data.rejected.values())
    rows = {(r["op_class"], r["format"]): r for r in against_shipped(m.data, m.fit, m.peaks)}
    assert all(r["own"]["median_abs_error"] < 0.08 for r in rows.values())
    assert rows[("gemm", "bfloat16")]["shipped"]["median_abs_error"] < 0.10
    fp8 = rows[("gemm", "fp8")]
    assert fp8["shipped"]["median_error"] > 0.5 and fp8["shipped"]["floor_s"] > 3 * fp8["own"]["floor_s"]
    h100 = pd.read_csv(HERE / "gemm_perf.csv")
    h200 = pd.read_csv(DATA / "h200-2026-11-27" / "gemm_perf.csv")
    big = (h100.m >= 4096) & (h100.n >= 4096) & (h100.k >= 4096)  # compute-bound: same silicon
    assert np.median(h200.latency[big] / h100.latency[big]) == pytest.approx(1.0, abs=0.05)


def test_calibrate_from_prints_the_comparison_and_names_its_tables(cli) -> None:
    """``calibrate kernels --from FILE --chips h100-sxm --json`` on the H100's GEMM table: the
    fitted document (its meta names the measured table, not the package) plus
    ``against_shipped``, one row per curve (the whole folder's text is docs/calibration.md's
    transcript)."""
    table = str(HERE / "gemm_perf.csv")
    code, stdout, err = cli("calibrate", "kernels", "--from", table, "--chips", "h100-sxm", "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["meta"]["tables"] == "gemm_perf.csv" and "package" not in doc["meta"]
    rows = {(r["op_class"], r["format"]): r for r in doc["against_shipped"]}
    assert set(rows) == {("gemm", "bfloat16"), ("gemm", "fp8")}
    assert rows[("gemm", "fp8")]["shipped"]["fitted_on"] == "h100-sxm"
    assert all("band" in o for o in doc["chips"]["h100-sxm"]["ops"])  # the document keeps its bands
