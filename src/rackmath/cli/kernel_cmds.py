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
from rich.table import Table

from rackmath.cli.options import dump_json
from rackmath.errors import InputError


def _pct(s: dict[str, Any] | None) -> str:
    if not s or s.get("median_abs_error") is None:
        return "-"
    return f"{s['median_abs_error'] * 100:.1f}% / {s['p90_abs_error'] * 100:.0f}%"


def calibrate_kernels_command(
    target: str,
    from_file: list[Path],
    chips: str | None,
    out: Path | None,
    as_json: bool,
    *,
    install: bool = False,
    check: bool = False,
) -> None:
    from rackmath.analyses.kernel_calibrate import calibrate_kernels, catalog_text
    from rackmath.catalog.kernel_efficiency import DATA_PATH

    if target != "kernels":
        raise InputError("calibrate TARGET", target, "'kernels' (or no argument for the step calibration)")
    if install and out is not None:
        raise InputError("--install", "with --out", "one destination: --out FILE or --install")
    if out is not None and not out.parent.is_dir():
        raise InputError("--out", str(out), "a file in an existing folder")
    chip_list = [c.strip() for c in chips.split(",") if c.strip()] if chips else None
    shipped = yaml.safe_load(DATA_PATH.read_text(encoding="utf-8")) if DATA_PATH.exists() else {"chips": {}}
    date = shipped.get("meta", {}).get("date") if check else None
    doc = calibrate_kernels(chip_list, list(from_file) or None, date=date)
    if check:
        if from_file or chip_list:
            raise InputError("--check", "with --from or --chips", "a full refit of the package tables")
        same = catalog_text(doc) == DATA_PATH.read_text(encoding="utf-8")
        typer.echo(f"refit {'reproduces' if same else 'differs from'} {DATA_PATH.name} ({date})")
        if not same:
            raise typer.Exit(1)
        return
    if install and (from_file or chip_list):
        # A partial refit updates only its chips in the shipped catalog.
        shipped["chips"].update(doc["chips"])
        shipped["meta"] = doc["meta"]
        shipped["transferred"] = doc["transferred"]
        doc = shipped
    path = DATA_PATH if install else out
    if path is not None:
        path.write_text(catalog_text(doc), encoding="utf-8")
    if as_json:
        typer.echo(dump_json(doc))
        return
    where = (
        f"-> {path}"
        if path is not None
        else "(not written: --out FILE, or --install for the shipped catalog)"
    )
    table = Table(title=f"Fitted kernel efficiencies {where}")
    for col in ("chip", "class", "format", "compute", "half rows", "bandwidth", "floor", "rows"):
        table.add_column(col)
    for chip_id, entry in doc["chips"].items():
        for o in entry["ops"]:
            variant = (f" {o['kind']}" if o.get("kind") not in (None, "", "gqa", "gated") else "") + (
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
    Console().print(table)


def _second_kernel(alt: dict) -> str:
    """`` 2 kernels`` and the region the second runs in (``<= 128 tok, EP >= 2``)."""
    region = [f"<= {alt['max_tokens']:g} tok"] if "max_tokens" in alt else []
    region += [f"EP >= {alt['min_ep']:g}"] if "min_ep" in alt else []
    return " 2 kernels" + (f" (2nd: {', '.join(region)})" if region else "")


def validate_kernels_command(as_json: bool) -> None:
    from rackmath.analyses.kernel_validation import CLASSES, validate_kernels

    report = validate_kernels()
    if as_json:
        typer.echo(dump_json(report))
        return
    k = report["kernels"]
    table = Table(title="Kernel latency: median / p90 |error| on held-out shapes (20% per table)")
    table.add_column("chip")
    classes = [c for c in CLASSES if c in k["by_op"]]
    for c in classes:
        table.add_column(c, justify="right")
    for chip_id, ops in k["by_chip"].items():
        table.add_row(chip_id, *[_pct(ops.get(c)) for c in classes])
    table.add_row("all", *[_pct(k["by_op"].get(c)) for c in classes])
    for chip_id, h in k["held_out_chips"].items():
        table.add_row(f"{chip_id} (fit on {h['fitted_on']})", *[_pct(h["by_op"].get(c)) for c in classes])
    console = Console()
    console.print(table)
    for chip_id, v in k["held_out_version"].items():
        console.print(
            f"{chip_id}: MoE {v['tested_on']} predicted by the {v['fitted_on']} fit: {_pct(v['moe'])}"
        )


def measure_kernels_command(quick: bool, out: Path | None, as_json: bool) -> None:
    from rackmath.measure import kernels

    result = kernels.run(quick)
    paths = kernels.write(result, out or Path("kernel-tables"))
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
