"""Every command's tables are readable at 80 columns, and whole in a file.

Each command runs in-process with ``COLUMNS=80``; no line of its stdout may be longer than
80 characters and none may hold "…" (Rich's mark for a cut cell). The ids a reader types
next (models, chips, kernel classes) must appear whole. Written to a file (no terminal, no
``COLUMNS``) the output is as wide as :data:`rackmath.cli.output.FILE_COLUMNS` and cuts
nothing either. Error lines (stderr) are one line by design and are not measured.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.table import Table

from rackmath.cli import output
from rackmath.cli.main import run

WIDTH = 80

#: (command line, exit code): one per command that prints a table or a report.
COMMANDS: tuple[tuple[str, int], ...] = (
    ("explain deepseek-v3 --on gb200-nvl72 --chips 64 --plan dp=64,ep=64 --context 4096,32768", 0),
    ("explain llama-3.1-8b --on h100-hgx --chips 1 --mtp 1 --acceptance 0.8 --prefix-hit 0.5", 0),
    ("models", 0),
    ("hardware", 0),
    ("plan llama-3.1-70b --traffic 1000 --hardware h100-hgx --max-chips 16", 0),
    ("plan llama-3.1-70b --traffic 1000 --hardware h100-hgx --max-chips 16 --tpot-ms 0.01", 1),
    ("pareto llama-3.1-70b --on h100-hgx --max-chips 16 --disaggregated", 0),
    ("layout deepseek-v3 --on gb200-nvl72", 0),
    ("simulate llama-3.1-70b --on h100-hgx --plan tp=8 --rate 5/s --requests 2000", 0),
    ("prices", 0),
    ("fleet", 0),
    ("overtrain", 0),
    ("sparsity", 0),
    (
        "train qwen3-30b-a3b --on h100-hgx --plan ep=8,dp=8 --tokens 1e12 --seq-len 4096 "
        "--batch 16 --recompute full --compute fp8",
        0,
    ),
    ("pipeline --stages 4 --microbatches 8 --schedule dualpipe", 0),
    ("validate", 0),
    ("calibrate", 0),
)


def _run(args: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(args)
    return code, out.getvalue()


def _assert_fits(text: str, width: int = WIDTH) -> None:
    assert text.strip(), "no output"
    long = [line for line in text.splitlines() if len(line) > width]
    assert not long, f"{len(long)} lines over {width} columns, e.g. {long[0]!r}"
    assert "…" not in text, [line for line in text.splitlines() if "…" in line][:3]


@pytest.mark.parametrize(
    ("command", "code"), COMMANDS, ids=[c.split()[0] + str(i) for i, (c, _) in enumerate(COMMANDS)]
)
def test_each_command_fits_80_columns(monkeypatch: pytest.MonkeyPatch, command: str, code: int) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    got, text = _run(command.split())
    assert got == code, text[-500:]
    _assert_fits(text)


def test_sweep_fits_80_columns(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("pandas")
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    spec = Path(__file__).parents[1] / "examples" / "sweep-small.yaml"
    code, text = _run(["sweep", str(spec), "--out", str(tmp_path / "x.csv")])
    assert code == 0, text
    _assert_fits(text)
    assert "skipped llama-3.1-70b on h100-hgx" in text


def test_models_shows_every_id_and_alias_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    from rackmath.catalog import loader as catalog

    monkeypatch.setenv("COLUMNS", str(WIDTH))
    _, text = _run(["models"])
    _assert_fits(text)
    first_cells = {line.split("│")[0].strip() for line in text.splitlines() if "│" in line}
    for model in catalog.models().values():
        assert model.id in first_cells, model.id  # whole, in the id column of its row
        for alias in model.aliases:
            assert alias in text, alias


def test_file_output_is_never_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """No COLUMNS, not a terminal: the console is FILE_COLUMNS wide and splits, never cuts."""
    monkeypatch.delenv("COLUMNS", raising=False)
    assert output.console().width == output.FILE_COLUMNS
    _, text = _run(
        ["explain", "deepseek-v3", "--on", "gb200-nvl72", "--chips", "64", "--plan", "dp=64,ep=64"]
    )
    _assert_fits(text, output.FILE_COLUMNS)
    for header in ("tok/s/user", "$/M out", "mem/chip", "bound by"):
        assert header in text


def _kernel_doc() -> dict[str, Any]:
    """The installed kernel-efficiency document: what `calibrate kernels` writes and prints."""
    from rackmath.catalog.kernel_efficiency import DATA_PATH

    doc: dict[str, Any] = yaml.safe_load(Path(DATA_PATH).read_text(encoding="utf-8"))
    return doc


def _kernel_report(doc: dict[str, Any]) -> dict[str, Any]:
    """A `validate --kernels` report of the real shape: every chip of ``doc`` with every class
    it has curves or collectives for (the report's class keys, MLA and collectives included)."""
    from rackmath.analyses.kernels.bands import comm_key

    stat = {"median_abs_error": 0.123, "p90_abs_error": 0.456, "rows": 10}

    def classes(entry: dict[str, Any]) -> list[str]:
        pairs = {(o["op_class"], o.get("kind")) for o in entry["ops"]}
        ops = {c + (f"/{k}" if k in ("mla", "dsa") else "") for c, k in pairs}
        return sorted(ops) + [comm_key(name) for name in entry.get("collectives", {})]

    by_chip = {chip: dict.fromkeys(classes(entry), stat) for chip, entry in doc["chips"].items()}
    every = sorted({c for per in by_chip.values() for c in per})
    version = {"fitted_on": "trtllm 1.3.0rc20", "tested_on": "trtllm 1.3.0rc23", "by_op": {"moe": stat}}
    return {
        "kernels": {
            "by_op": dict.fromkeys(every, stat),
            "by_chip": by_chip,
            "held_out_values": by_chip,
            "held_out_values_all": dict.fromkeys(every, stat),
            "held_out_chips": {"h200": {"fitted_on": "h100-sxm", "by_op": by_chip["h200"]}},
            "held_out_version": {"gb200": {"moe": version}},
        }
    }


@pytest.mark.parametrize("width", [WIDTH, output.FILE_COLUMNS])
def test_kernel_tables_fit_and_keep_every_class(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    """`calibrate kernels` and `validate --kernels` render their tables (from the installed
    fit and a report of the real shape) without cutting a chip id or a kernel class."""
    from rackmath.cli.kernel_cmds import render_fit, render_kernel_validation

    doc = _kernel_doc()
    renders: list[Callable[[Any], None]] = [
        lambda c: render_fit(doc, Path("kernel_efficiency.yaml"), c),
        lambda c: render_kernel_validation(_kernel_report(doc)["kernels"], c),
    ]
    for render in renders:
        buf = io.StringIO()
        console = output.FittingConsole(file=buf, width=width, highlight=False)
        render(console)
        text = buf.getvalue()
        _assert_fits(text, width)
        for chip in doc["chips"]:
            assert chip in text, chip
    buf = io.StringIO()
    render_fit(doc, Path("x.yaml"), output.FittingConsole(file=buf, width=width, highlight=False))
    classes = {o["op_class"] for entry in doc["chips"].values() for o in entry["ops"]}
    assert "attention_decode" in classes and all(c in buf.getvalue() for c in classes)


def test_a_wide_table_splits_into_parts_that_repeat_the_keys() -> None:
    """Six columns of 20 characters at 80 columns: parts that each fit, each with the key
    column, every cell printed once per part it belongs to, nothing cut."""
    table = output.make_table(("id", *(f"c{i}" for i in range(6))), left=("id",))
    for r in range(3):
        table.add_row(f"row-{r}-identifier", *(f"{r}{i}".rjust(20, "x") for i in range(6)))
    buf = io.StringIO()
    console = output.FittingConsole(file=buf, width=WIDTH, highlight=False)
    parts = output.fit_table(console, table)
    assert len(parts) == 3  # 3 x (id + two 20-wide columns) fit 80; id + three do not
    assert [len(p.columns) for p in parts] == [3, 3, 3]
    assert all(output.natural_width(console, p) <= WIDTH for p in parts)
    console.print(table)
    text = buf.getvalue()
    _assert_fits(text)
    assert text.count("row-1-identifier") == 3
    for r in range(3):
        for i in range(6):
            assert text.count(f"{r}{i}".rjust(20, "x")) == 1


def test_a_table_that_fits_is_printed_as_it_is() -> None:
    table = Table("a", "b")
    table.add_row("1", "2")
    console = output.FittingConsole(file=io.StringIO(), width=WIDTH)
    assert output.fit_table(console, table) == [table]


def test_an_indented_line_wraps_under_its_indent() -> None:
    buf = io.StringIO()
    console = output.FittingConsole(file=buf, width=40, highlight=False)
    console.print("    " + " ".join(["word"] * 20))
    lines = buf.getvalue().splitlines()
    assert len(lines) > 1 and all(line.startswith("    word") for line in lines)
    assert all(len(line) <= 40 and line == line.rstrip() for line in lines)
