"""Every result reads as a tidy table: the summary results (explain, search, Pareto, balance,
validation) as well as the grids. Each frame's values are the result's own, row for row."""

from __future__ import annotations

import numpy as np
import pytest

import rackmath as rm
from rackmath.analyses.deploy import frontier, search
from rackmath.analyses.deploy.candidates import Workload
from rackmath.analyses.reality import report as validation_report
from rackmath.analyses.serving import explain, pooled
from rackmath.catalog.loader import resolve_model, system

pytest.importorskip("pandas")


def test_explanation_frame_is_the_decode_grid_with_its_balance_figures() -> None:
    d = rm.deployment("deepseek-v3", "gb200-nvl72", chips=64)
    ex = explain.explain(d, batches=(1, 64, 4096), contexts=(4096, 32768))
    frame = ex.to_frame()
    assert len(frame) == 3 * 2
    np.testing.assert_array_equal(frame["step_s"].to_numpy(), ex.decode.step_s.ravel())
    np.testing.assert_array_equal(frame["blackboard_step_s"].to_numpy(), ex.decode.blackboard_step_s.ravel())
    assert set(frame["balance_batch"]) == {ex.balance.balance_batch}
    ds = ex.to_xarray()
    assert dict(ds.sizes) == {"batch": 3, "context": 2}
    assert ds["step_s"].attrs["units"] == "s"


def test_search_frame_ranks_the_best_first() -> None:
    w = Workload(traffic_tokens_per_s=1e5, input_len=1024, output_len=512)
    result = search.search(resolve_model("llama-3.1-8b"), [system("h100-hgx")], w, runners_up=3)
    assert result.best is not None
    frame = result.to_frame()
    assert len(frame) == 1 + len(result.runners_up)
    assert frame["usd_per_million_output_tokens"].iloc[0] == result.best.usd_per_million_output_tokens
    assert frame["plan"].iloc[0] == result.best.plan_text


def test_frontier_frame_has_one_row_per_point() -> None:
    f = frontier.pareto(resolve_model("llama-3.1-8b"), system("h100-hgx"))
    frame = f.to_frame()
    assert len(frame) == len(f.frontier)
    per_user = frame["tokens_per_s_per_user"].to_numpy()
    assert list(per_user) == [p.tokens_per_s_per_user for p in f.frontier]


def test_balance_point_frame_has_one_row_per_context() -> None:
    d = rm.deployment("llama-3.1-70b", "h100-hgx")
    b = pooled.balance(d, [1024, 8192])
    frame = b.to_frame()
    assert len(frame) == 2
    assert set(frame["dense_balance_batch"]) == {b.dense_balance_batch}
    np.testing.assert_array_equal(frame["balance_batch_with_kv"].to_numpy(), b.balance_batch_with_kv)


def test_validation_frame_carries_each_rows_errors() -> None:
    report = validation_report.validate()
    frame = report.to_frame()
    assert len(frame) == len(report.rows)
    np.testing.assert_allclose(
        frame["roofline_error_frac"].to_numpy(), report.errors("roofline"), equal_nan=True
    )
    np.testing.assert_allclose(frame["loso_error_frac"].to_numpy(), report.errors("loso"), equal_nan=True)
