"""Kernel-level faces: ``calibrate kernels``, ``validate --kernels``, ``measure --kernels``.

The commands are options of the existing ``calibrate`` / ``validate`` / ``measure`` commands
(cli/reality_cmds.py dispatches here); this module lays out what analyses/kernel_fit.py returns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console

from rackmath.cli.options import dump_json, make_table, out_file, out_folder
from rackmath.cli.output import console as cli_console
from rackmath.errors import InputError


def _pct(s: dict[str, Any] | None) -> str:
    if not s or s.get("median_abs_error") is None:
        return "-"
    return f"{s['median_abs_error'] * 100:.1f}% / {s['p90_abs_error'] * 100:.0f}%"


def calibrate_kernels_command(
    target: str, from_file: list[Path], chips: str | None, out: Path | None, as_json: bool
) -> None:
    from rackmath.catalog.kernel_efficiency import DATA_PATH

    if target != "kernels":
        raise InputError("calibrate TARGET", target, "'kernels' (or no argument for the step calibration)")
    if out is not None:
        out_file(out, "--out", (".yaml", ".yml"))
    chip_list = [c.strip() for c in chips.split(",") if c.strip()] if chips else None
    doc = _fit_with_progress(chip_list, list(from_file) or None)
    path = out or DATA_PATH
    if out is None and (from_file or chip_list):
        # A partial refit updates only its chips in the shipped catalog.
        old = yaml.safe_load(DATA_PATH.read_text(encoding="utf-8")) if DATA_PATH.exists() else {"chips": {}}
        old["chips"].update(doc["chips"])
        old["meta"] = doc["meta"]
        old["transferred"] = doc["transferred"]
        doc = old
    header = (
        "# kernel_efficiency.yaml -- per-operator efficiencies fitted by `rackmath calibrate kernels`\n"
        "# on measured kernel latency tables (see docs/calibration.md). Data, not code: refit, do not edit.\n"
    )
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=200), encoding="utf-8")
    if as_json:
        typer.echo(dump_json(doc))
        return
    render_fit(doc, path, cli_console())


def _fit_with_progress(chips: list[str] | None, from_files: list[Path] | None) -> dict[str, Any]:
    """``calibrate_kernels`` one chip at a time under a progress bar (the chips' fits are
    independent), merged into the document one call for every chip returns."""
    from rackmath.analyses.kernel_fit import calibrate_kernels
    from rackmath.catalog import kernel_tables as kt
    from rackmath.progress import progress

    if from_files:
        with progress("Fitting kernel efficiencies", total=None):
            return calibrate_kernels(chips, from_files)
    wanted = chips or sorted(set(kt.CHIP_DIRS.values()))
    doc: dict[str, Any] = {}
    seconds = 0.0
    with progress("Fitting kernel efficiencies (chips)", total=len(wanted)) as advance:
        for chip_id in wanted:
            one = calibrate_kernels([chip_id])
            seconds += float(one["meta"]["fit_seconds"])
            doc = {**one, "chips": {**doc.get("chips", {}), **one["chips"]}}
            advance(1)
    doc["meta"] = {**doc["meta"], "fit_seconds": round(seconds, 2)}
    return doc


def render_fit(doc: dict[str, Any], path: Path, console: Console) -> None:
    """The fitted efficiencies of ``doc`` (the YAML document), one row per chip and curve."""
    table = make_table(
        ("chip", "class", "dtype", "compute", "half rows", "bandwidth", "floor", "rows"),
        left=("chip", "class", "dtype"),
        title=f"Fitted kernel efficiencies ({doc['meta']['fit_seconds']} s) -> {path}",
        keys=2,
    )
    for chip_id, entry in doc["chips"].items():
        for o in entry["ops"]:
            variant = ("" if o.get("gated", True) else " non-gated") + (
                _second_kernel(o["alternative"]) if "alternative" in o else ""
            )
            table.add_row(
                chip_id,
                o["op_class"],
                o["dtype"] + variant,
                f"{o['compute_frac']:.2f}",
                f"{o['compute_half_rows']:.3g}",
                f"{o['bandwidth_frac']:.2f}",
                f"{o['floor_s'] * 1e6:.1f} us",
                str(o["rows_used"]),
            )
        for name, c in entry.get("collectives", {}).items():
            table.add_row(
                chip_id,
                name,
                "-",
                "-",
                "-",
                f"{c['bandwidth_frac']:.2f}",
                f"{c['latency_s'] * 1e6:.1f} us",
                str(c["rows_used"]),
            )
    console.print(table)


def _second_kernel(alt: dict) -> str:
    """`` 2 kernels`` and the region the second runs in (``<= 128 tok, EP >= 2``)."""
    region = [f"<= {alt['max_tokens']:g} tok"] if "max_tokens" in alt else []
    region += [f"EP >= {alt['min_ep']:g}"] if "min_ep" in alt else []
    return " 2 kernels" + (f" (2nd: {', '.join(region)})" if region else "")


def validate_kernels_command(as_json: bool) -> None:
    from rackmath.analyses.kernel_fit import validate_kernels

    report = validate_kernels()
    if as_json:
        typer.echo(dump_json(report))
        return
    render_kernel_validation(report, cli_console())


def render_kernel_validation(report: dict[str, Any], console: Console) -> None:
    """Median / p90 |error| per chip and kernel class (``validate_kernels()``'s report)."""
    from rackmath.analyses.kernel_fit import CLASSES

    k = report["kernels"]
    classes = [c for c in CLASSES if c in k["by_op"]]
    table = make_table(
        ("chip", *(c.replace("_", "\n", 1) for c in classes)),
        left=("chip",),
        title="Kernel latency: median / p90 |error| on held-out shapes (20% per table)",
    )
    for chip_id, ops in k["by_chip"].items():
        table.add_row(chip_id, *[_pct(ops.get(c)) for c in classes])
    table.add_row("all", *[_pct(k["by_op"].get(c)) for c in classes])
    for chip_id, h in k["held_out_chips"].items():
        table.add_row(f"{chip_id} (fit on {h['fitted_on']})", *[_pct(h["by_op"].get(c)) for c in classes])
    console.print(table)
    for chip_id, v in k["held_out_version"].items():
        console.print(
            f"{chip_id}: MoE {v['tested_on']} predicted by the {v['fitted_on']} fit: {_pct(v['moe'])}"
        )


def measure_kernels_command(quick: bool, out: Path | None, as_json: bool) -> None:
    folder = out_folder(out or Path("kernel-tables"), "--out", writes="the measured tables")
    from rackmath.measure import kernels

    result = kernels.run(quick)
    paths = kernels.write(result, folder)
    if as_json:
        typer.echo(
            dump_json(
                {
                    "device": result["device"],
                    "files": [str(p) for p in paths],
                    "rows": {
                        n: len(result[n]) for n in ("gemm_perf", "generation_attention_perf", "memcpy_perf")
                    },
                }
            )
        )
        return
    typer.echo(
        f"{result['device']}: wrote {', '.join(str(p) for p in paths)}; fit them with "
        f"`rackmath calibrate kernels --from {paths[0].parent} --chips CHIP --out FILE`"
    )
