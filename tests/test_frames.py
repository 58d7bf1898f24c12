"""Results as tables: to_frame() rows equal the result's own arrays element by element,
to_xarray() names the axes and carries units, column names follow the unit rule, the
Jupyter display is compact, and a missing extra is one clear line. Plus the progress helper."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import rackmath as rm
from rackmath import frames, progress
from rackmath.analyses.deploy import candidates
from rackmath.analyses.economics import fleet
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.catalog.loader import resolve_model, system

pd = pytest.importorskip("pandas")
xr = pytest.importorskip("xarray")

BATCH = [1, 64, 2048]
CONTEXT = [4096, 32768]


@pytest.fixture(scope="module")
def grid():
    return rm.decode(rm.deployment("deepseek-v3", "gb200-nvl72"), batch=BATCH, context=CONTEXT)


@pytest.fixture(scope="module")
def results(grid):
    """One instance of every Tabular result class."""
    planned = plan_deployment(resolve_model("deepseek-v3"), system("gb200-nvl72"), "dp=64,ep=64")
    work = candidates.Workload(traffic_tokens_per_s=1e6)
    return {
        "DecodeGrid": grid,
        "PrefillGrid": rm.prefill(grid.deployment, [1, 4], [1024, 8192]),
        "DecodeGrid (planned)": planned.decode(BATCH, CONTEXT),
        "Candidates": candidates.evaluate(resolve_model("llama-3.1-70b"), system("h100-hgx"), "fp8", work),
        "Fleet": fleet.fleet(requests=300, loads=(0.5, 0.9)),
        "PipelineResult": rm.pipeline(4, 4, "gpipe"),
        "TrainingEstimate": rm.train("llama-3.1-8b", "h100-hgx", "tp=8", tokens=1e12),
    }


def test_decode_frame_rows_are_the_grid_elements(grid):
    f = grid.to_frame()
    assert len(f) == len(BATCH) * len(CONTEXT)
    # C order: row i * n_context + j is (batch[i], context[j])
    for i, b in enumerate(BATCH):
        for j, c in enumerate(CONTEXT):
            row = f.iloc[i * len(CONTEXT) + j]
            assert (row.batch, row.context_tokens) == (b, c)
            assert row.step_s == grid.step_s[i, j]
            assert row.tokens_per_s == pytest.approx(b / grid.step_s[i, j], rel=1e-15)
            assert row.usd_per_million_output_tokens == grid.usd_per_million_output_tokens[i, j]
            assert row.mfu_frac == grid.mfu[i, j]
            assert row.bottleneck == grid.step.bottleneck[i, j]
    assert set(f.model) == {"deepseek-v3"} and set(f.chips) == {72}


def test_decode_xarray_has_named_dims_coords_and_units(grid):
    ds = grid.to_xarray()
    assert ds.step_s.dims == ("batch", "context")
    assert list(ds.batch.values) == BATCH and list(ds.context.values) == CONTEXT
    assert ds.step_s.attrs["units"] == "s" and ds.mfu_frac.attrs["units"] == "1"
    assert ds.context.attrs["units"] == "tokens"
    assert float(ds.step_s.sel(batch=64, context=32768)) == grid.step_s[1, 1]
    assert ds.attrs["model"] == "deepseek-v3" and ds.attrs["result"] == "DecodeGrid"
    # the frame and the dataset hold the same numbers
    back = ds.tokens_per_s.to_dataframe().reset_index()
    np.testing.assert_array_equal(back.tokens_per_s, grid.to_frame().tokens_per_s)


SUFFIX_BY_UNIT = {"s": "_s", "bytes": "_bytes", "1": "_frac", "USD": "_usd"}


def test_every_declared_column_resolves_and_names_carry_units(results):
    for name, result in results.items():
        assert type(result).__name__ == name.split(" ")[0]  # "DecodeGrid (planned)": a planned grid
        layout = type(result).frame_layout
        names = [c.name for c in layout.columns]
        assert len(names) == len(set(names)), name
        f = result.to_frame()
        assert list(f.columns) == names
        assert len(f) >= 1
        for col in layout.columns:
            suffix = SUFFIX_BY_UNIT.get(col.unit)
            if suffix:  # the unit, then at most a scope: memory_bytes_per_chip
                assert re.search(rf"{suffix}($|_per_[a-z]+$)", col.name), (name, col)
            if col.unit == "tokens/s":
                assert "_per_s" in col.name, (name, col)
            if col.unit.startswith("USD per 1e6"):
                assert col.name.startswith("usd_per_million_"), (name, col)
        numbers = f.select_dtypes("number")
        assert np.isfinite(numbers.to_numpy(float)).all(), name


def test_grids_and_lists_become_datasets_with_their_dims(results):
    expect = {
        "DecodeGrid": {"batch": 3, "context": 2},
        "PrefillGrid": {"batch": 2, "prompt": 2},
        "DecodeGrid (planned)": {"batch": 3, "context": 2},
        "Fleet": {"load": 2},
        "PipelineResult": {"op": 2 * 4 * 4},  # GPipe: one forward and one backward per stage and micro-batch
    }
    for name, dims in expect.items():
        ds = results[name].to_xarray()
        assert dict(ds.sizes) == dims, name
    c = results["Candidates"]
    assert dict(c.to_xarray().sizes) == {"candidate": c.size}
    assert results["Fleet"].to_xarray()["load"].values.tolist() == [0.5, 0.9]


def test_planned_frame_carries_the_plan_and_matches_the_step(results):
    g = results["DecodeGrid (planned)"]
    f = g.to_frame()
    assert set(f.plan) == {"dp=64,ep=64"} and set(f.chips) == {64}
    np.testing.assert_array_equal(f.step_s, g.step_s.ravel())
    np.testing.assert_array_equal(f.memory_bytes_per_chip, g.memory.total_bytes.ravel())


def test_pipeline_frame_reproduces_the_bubble(results):
    p = results["PipelineResult"]
    f = p.to_frame()
    busy = (f.end_time - f.start_time).sum()
    makespan = f.end_time.max() - f.start_time.min()
    # GPipe bubble (p - 1) / (m + p - 1) = 3/7, recomputed from the rows
    assert 1 - busy / (4 * makespan) == pytest.approx(3 / 7)
    assert set(f.kind) == {"F", "B"}


def test_html_is_compact(grid):
    html = grid._repr_html_()
    assert html.startswith("<p><b>DecodeGrid</b> (3 batch × 2 context)")
    assert "model=deepseek-v3" in html and "<table" in html
    big = rm.decode(grid.deployment, batch=list(range(1, 41)), context=[1024])
    assert big._repr_html_().count("<tr>") < 20  # 40 rows elided to HTML_MAX_ROWS


def test_missing_pandas_is_one_line_and_html_falls_back(grid, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(frames.MissingExtraError) as err:
        grid.to_frame()
    assert str(err.value) == "pandas is not installed; install it with: pip install 'rackmath[notebook]'"
    assert grid._repr_html_() is None


def test_progress_is_silent_off_a_terminal_and_never_nests(monkeypatch, capsys):
    monkeypatch.delenv("RACKMATH_PROGRESS", raising=False)
    assert not progress.enabled()  # pytest captures stderr: not a TTY
    assert list(progress.track(range(5), "x")) == [0, 1, 2, 3, 4]
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("RACKMATH_PROGRESS", "1")
    assert progress.enabled()
    with progress.progress("outer", total=2) as advance:
        assert not progress.enabled()  # an inner bar would be a no-op
        advance(2)
    assert progress.enabled()
    with progress.quiet():
        assert not progress.enabled()
    monkeypatch.setattr(sys, "argv", ["rackmath", "search", "--json"])
    monkeypatch.setenv("RACKMATH_PROGRESS", "")
    assert not progress.enabled()


def test_frames_and_progress_are_leaves_importing_only_errors():
    """analyses/ may import them (tests/test_layers.py) because they sit below it."""
    import ast
    from pathlib import Path

    for module in (frames, progress):
        tree = ast.parse(Path(module.__file__).read_text())
        imported = {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rackmath")
        }
        assert imported <= {"rackmath.errors"}, (module.__name__, imported)
