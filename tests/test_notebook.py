"""docs/notebook.ipynb runs top to bottom in a fresh Python kernel, and what it prints is
what the analyses give in this process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import rackmath as rm

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("pandas")
pytest.importorskip("xarray")

ROOT = Path(__file__).parents[1]
NOTEBOOK = ROOT / "docs" / "notebook.ipynb"
#: Seconds any one cell may take (the whole notebook runs in a few seconds).
CELL_TIMEOUT_S = 60


def _text(cell) -> str:  # type: ignore[no-untyped-def]
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif "data" in out:
            parts.append(out.data.get("text/plain", ""))
    return "".join(parts)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    # the kernel runs in docs/: make this checkout's src importable from there
    src = str(ROOT / "src")
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (src, old) if p)
    # importing streamlit (the web tests) sets MPLBACKEND=Agg, which the kernel would inherit
    backend = os.environ.pop("MPLBACKEND", None)
    try:
        nb = nbformat.read(NOTEBOOK, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs = []  # the stored outputs must not be what we check
        client = nbclient.NotebookClient(
            nb,
            timeout=CELL_TIMEOUT_S,
            startup_timeout=CELL_TIMEOUT_S,
            kernel_name="python3",
            resources={"metadata": {"path": str(NOTEBOOK.parent)}},
        )
        client.execute()
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
        if backend is not None:
            os.environ["MPLBACKEND"] = backend
    return nb


def test_notebook_runs_without_errors_and_draws_a_plot(executed):
    outputs = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert any("<b>DecodeGrid</b>" in o.get("data", {}).get("text/html", "") for o in outputs)


def test_notebook_numbers_are_the_analyses(executed):
    texts = [_text(c) for c in executed.cells if c.cell_type == "code"]
    grid = rm.decode(rm.deployment("deepseek-v3", "gb200-nvl72"), batch=[256], context=[32768])
    step = next(t for t in texts if t.startswith("(0.0"))
    assert step == f"({float(grid.step_s[0, 0])!r}, 's')"
    cheapest = texts[-1]
    # kernel-grounded by default: the 8 pooled H100s beat the 72 pooled GB200s, whose kernel
    # launch floors do not shrink with the pool (on the pure roofline the GB200 rack wins)
    llama = rm.decode(
        rm.deployment("llama-3.1-70b", "h100-hgx", weights="fp8", kv="fp8", compute="fp8"),
        batch=[256],
        context=[8192],
    )
    assert cheapest.startswith("cheapest: llama-3.1-70b on h100-hgx (ideal, fp8) at batch 256")
    assert f"${float(llama.usd_per_million_output_tokens[0, 0]):.4f} per million" in cheapest
