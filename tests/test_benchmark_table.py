"""The README's benchmark table is generated from benchmarks/results/, never typed."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_readme", ROOT / "benchmarks" / "render_readme.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_block_equals_the_scripts_output() -> None:
    script = _script()
    readme = (ROOT / "README.md").read_text()
    assert script.BEGIN in readme and script.END in readme
    assert script.render(readme) == readme, "run: python benchmarks/render_readme.py"
    assert script.main(["--check"]) == 0


def test_the_table_follows_the_recorded_results(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    script = _script()
    results = tmp_path / "results"
    shutil.copytree(ROOT / "benchmarks" / "results", results)
    search = json.loads((results / "search.json").read_text())
    search["single_system"]["candidates"] = 12_345
    search["single_system"]["wall_s"] = 0.5
    search["single_system"]["candidates_per_s"] = 12_345 / 0.5
    (results / "search.json").write_text(json.dumps(search))
    monkeypatch.setattr(script, "RESULTS", results)
    table = script.table()
    # 12,345 candidates in 500 ms is 24.69 k/s, printed as 25 k/s
    assert "12,345 candidates in 500.0 ms (25 k/s)" in table
    assert script.render((ROOT / "README.md").read_text()) != (ROOT / "README.md").read_text()
