"""Held-out errors of the kernel curves and the bands they give (issue 26, parts 8 and 9).

* the held-out-value split holds out whole values, never the ends (worked example);
* a small real fit (one H100 bf16 GEMM table of 666 rows: n, k in {1024, 4096, 16384}, every
  m) is reproducible byte for byte, carries its band, and predicts held-out token counts
  within the GEMM target; the fit runs on one BLAS thread;
* a step's band is its operators' bands summed (worked number of
  :attr:`rackmath.core.step.PlanStep.step_band_s`), and explain, frames and the step-time
  chart carry it;
* a transferred chip's band is the donor's, widened (worked number of
  :func:`rackmath.analyses.kernels.tables.widened`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rackmath.analyses.kernels import tables as et
from rackmath.catalog import kernel_tables as kt
from rackmath.core import operators as ops
from rackmath.core.step import PlanStep
from rackmath.specs.efficiency import ErrorBand, Kernel, OpClass


def test_held_out_values_take_every_fourth_interior_value() -> None:
    pytest.importorskip("scipy")
    from rackmath.analyses.kernels.bands import held_out_values

    values = np.array([1, 2, 4, 8, 16, 32, 64, 4, 4, 64], float)
    held = held_out_values(values)
    assert values[held].tolist() == [4, 4, 4]  # index 2 of 1, 2, 4, ..., 64; 64 (index 6) is the last
    grid = np.arange(1.0, 12.0)  # 11 values: indices 2 and 6 held out (10 is the last but one)
    assert grid[held_out_values(grid)].tolist() == [3.0, 7.0]
    assert not held_out_values(np.array([1.0, 2.0])).any()


def _small_gemm_table(tmp_path: Path) -> Path:
    from rackmath.catalog import kernel_tables as kt

    refs = kt.discover()
    ref = kt.primary(refs, "h100-sxm", "gemm")
    assert ref is not None
    df = kt.read_table(ref.path, "gemm")
    sizes = [1024, 4096, 16384]
    sub = df[(df["gemm_dtype"] == "bfloat16") & df["n"].isin(sizes) & df["k"].isin(sizes)]
    path = tmp_path / "gemm_perf.csv"
    sub.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def small_fit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    pytest.importorskip("scipy")
    from rackmath.analyses.kernels.calibrate import calibrate_kernels, catalog_text
    from rackmath.catalog import kernel_tables as kt

    if kt.package_data_dir() is None:
        pytest.skip("aiconfigurator-core is not installed (the `kernels` extra)")
    path = _small_gemm_table(tmp_path_factory.mktemp("small"))
    return path, catalog_text(calibrate_kernels(["h100-sxm"], [path], date="2026-01-01"))


def test_a_refit_of_a_small_table_is_byte_for_byte_the_same(small_fit: tuple[Path, str]) -> None:
    from rackmath.analyses.kernels.calibrate import calibrate_kernels, catalog_text

    path, first = small_fit
    again = catalog_text(calibrate_kernels(["h100-sxm"], [path], date="2026-01-01"))
    assert again == first


def test_the_small_fit_carries_its_held_out_band(small_fit: tuple[Path, str]) -> None:
    import yaml

    _, text = small_fit
    (entry,) = yaml.safe_load(text)["chips"]["h100-sxm"]["ops"]
    assert entry["rows_used"] == 666
    band = entry["band"]
    # 74 distinct m, 18 held out (indices 2, 6, ..., 70), 9 shapes each: 162 rows
    assert band["rows"] == 162 and band["how"] == "held-out values of m"
    assert 0.8 < band["p10"] <= 1.0 <= band["p90"] < 1.25


def test_the_small_fit_predicts_held_out_token_counts_within_the_gemm_target(
    small_fit: tuple[Path, str],
) -> None:
    from rackmath.analyses.kernels import bands as kb
    from rackmath.analyses.kernels.fit import ChipData, ChipPeaks
    from rackmath.catalog import kernel_tables as kt

    path, _ = small_fit
    data = ChipData("h100-sxm")
    data.add(kt.read_table(path), path.name)
    held = kb.held_out_value_bands(data, ChipPeaks.of("h100-sxm"))
    err = np.abs(1.0 / held.by_class()["gemm"] - 1.0)
    assert err.size == 162
    assert np.median(err) <= 0.10 and np.quantile(err, 0.9) <= 0.35


def test_fits_run_on_one_blas_thread() -> None:
    pytest.importorskip("threadpoolctl")
    from threadpoolctl import threadpool_info

    from rackmath.analyses.kernels.fit import deterministic_threads

    with deterministic_threads():
        assert all(p["num_threads"] == 1 for p in threadpool_info() if p["user_api"] == "blas")


def _operator(time_s: float, band: ErrorBand) -> ops.Operator:
    t = np.float64(time_s)
    zero = np.float64(0.0)
    return ops.Operator(
        "op", OpClass.GEMM, zero, zero, zero, zero, zero, t, zero, t, np.float64(1e12), zero, 1e15,
        Kernel("test", "bfloat16", band=band),
    )  # fmt: skip


def test_step_band_worked_number() -> None:
    """Operators of 6 ms (0.9-1.2) and 4 ms (0.8-1.5) and 2 ms of exposed communication, one
    stage: 12 ms in [10.6, 15.2] ms (the PlanStep.step_band_s docstring)."""
    one = np.float64(1.0)
    step = PlanStep(
        operators=(_operator(6e-3, ErrorBand(0.9, 1.2)), _operator(4e-3, ErrorBand(0.8, 1.5))),
        tp_comm_pass_s=np.float64(2e-3),
        ep_comm_pass_s=np.float64(0.0),
        stage_s=np.float64(12e-3),
        hops=np.float64(0.0),
        hops_s=np.float64(0.0),
        pp=one,
        imbalance=one,
    )
    lo, hi = step.step_band_s
    assert float(step.step_s) == pytest.approx(12e-3)
    assert (float(lo), float(hi)) == pytest.approx((10.6e-3, 15.2e-3))


def test_a_transferred_band_is_the_donors_widened() -> None:
    band = ErrorBand(0.9, 1.2, 100, "held-out values of m")
    wide = et.widened(band, {"gemm": {"p10": 0.95, "p90": 1.10, "how": "x"}}, "gemm")
    assert (wide.p10, wide.p90) == pytest.approx((0.855, 1.32))
    assert "widened" in wide.how
    pooled = et.widened(band, {"*": {"p10": 0.9, "p90": 1.5}}, "moe")
    assert (pooled.p10, pooled.p90) == pytest.approx((0.81, 1.8))


def _shipped_bands() -> bool:
    from rackmath.catalog import kernel_efficiency as ke

    return all("band" in o for o in ke.op_entries("h100-sxm"))


@pytest.mark.skipif(not _shipped_bands(), reason="the shipped catalog predates the bands")
def test_every_shipped_curve_carries_a_band_and_transfers_widen_it() -> None:
    from rackmath.catalog import kernel_efficiency as ke

    for chip_id in ke.document()["chips"]:
        table = et.efficiency_table(chip_id)
        for key, curve in table.curves:
            b = curve.band
            # a committed table too small to hold values out says its band is in-sample
            in_sample = chip_id in kt.committed_chips() and b.how.startswith("in-sample")
            assert (b.rows >= 30 or in_sample) and b.p10 <= 1.0 <= b.p90 and b.how, (chip_id, str(key))
    own = dict(et.efficiency_table("h100-sxm").curves)
    for key, curve in et.efficiency_table("tpu-v5p").curves:
        assert curve.band.p10 <= own[key].band.p10 and curve.band.p90 >= own[key].band.p90
        assert "transfer" in curve.band.how


@pytest.mark.skipif(not _shipped_bands(), reason="the shipped catalog predates the bands")
def test_explain_json_frames_and_chart_carry_the_band(cli) -> None:
    code, out, err = cli("explain", "llama-3.1-70b", "--on", "h100-hgx", "--json")
    assert code == 0, err
    points = json.loads(out)["points"]
    for p in points:
        assert p["step_s_p10"] < p["step_s"] < p["step_s_p90"]
        assert p["tokens_per_s_p10"] < p["tokens_per_s"] < p["tokens_per_s_p90"]
        assert p["usd_per_million_output_tokens_p10"] < p["usd_per_million_output_tokens"]
        assert p["usd_per_million_output_tokens"] < p["usd_per_million_output_tokens_p90"]
        # the band is the operators' bands summed: within their widest edges
        ops_s = sum(o["time_s"] for o in p["operators"])
        lo = min(o["kernel"]["error_p10"] for o in p["operators"])
        assert p["step_s"] - p["step_s_p10"] <= (1 - lo) * ops_s * (1 + 1e-9)
    code, text, _ = cli("explain", "llama-3.1-70b", "--on", "h100-hgx")
    assert "p10-p90" in text
    from rackmath.analyses.serving.explain import explain
    from rackmath.analyses.serving.pooled import make_deployment
    from rackmath.catalog.loader import model, system
    from rackmath.views.figures import serving_charts

    d = make_deployment(model("llama-3.1-70b"), system("h100-hgx"))
    result = explain(d)
    frame = result.to_frame()
    assert {"step_s_p10", "step_s_p90", "usd_per_million_output_tokens_p90"} <= set(frame.columns)
    sweep = d.decode([1.0, 8.0, 64.0], result.contexts[:1])
    fig = serving_charts.step_time(result, sweep)
    (band,) = [s for s in fig.panels[0].series if s.name.startswith("step p10-p90")]
    assert band.kind == "fill"


def test_the_validation_hash_covers_every_kernels_module_it_imports() -> None:
    """``input_hash`` reads every file of analyses/kernels/ that the validation imports, directly
    or through another (a moved or split module must stay in :data:`INPUT_FILES`)."""
    import ast

    from rackmath.analyses.kernels import validation

    src = Path(validation.__file__).resolve().parents[2]
    seen: set[str] = set()
    todo = ["analyses/kernels/validation.py"]
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.add(rel)
        for node in ast.walk(ast.parse((src / rel).read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "rackmath.analyses.kernels"
            ):
                names = (
                    [node.module]
                    if node.module != "rackmath.analyses.kernels"
                    else [f"{node.module}.{a.name}" for a in node.names]
                )
                todo += [n.removeprefix("rackmath.").replace(".", "/") + ".py" for n in names]
    assert seen <= set(validation.INPUT_FILES), sorted(seen - set(validation.INPUT_FILES))
    assert all((src / name).is_file() for name in validation.INPUT_FILES)
