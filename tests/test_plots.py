"""plots: every module writes through one helper (format check, parent folders, errors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackmath.analyses.training.pipeline import pipeline_schedule
from rackmath.errors import InputError
from rackmath.plots.training import save_pipeline_plot


def test_a_plot_creates_its_folder(tmp_path: Path) -> None:
    out = save_pipeline_plot(pipeline_schedule("1f1b", 2, 4), tmp_path / "new" / "folder" / "p.svg")
    assert out.is_file() and out.read_text().lstrip().startswith("<?xml")


def test_an_unwritable_plot_path_is_an_input_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(InputError, match=r"--plot.*a path that can be written"):
        save_pipeline_plot(pipeline_schedule("1f1b", 2, 4), blocker / "p.png")


def test_an_unknown_plot_format_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"\.png, \.svg or \.pdf"):
        save_pipeline_plot(pipeline_schedule("1f1b", 2, 4), tmp_path / "p.xyz")


def test_the_cli_reports_an_unwritable_plot_in_one_line(cli, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code, _, err = cli("pipeline", "--stages", "2", "--microbatches", "4", "--plot", str(blocker / "p.png"))
    assert code == 1 and "--plot" in err
    assert err.count("\n") == 1 and "Traceback" not in err
