"""Kernel-level faces: ``calibrate kernels``, ``validate --kernels``, ``measure --kernels``.

The commands are options of the existing ``calibrate`` / ``validate`` / ``measure`` commands
(cli/reality_cmds.py dispatches here); this module lays out what analyses/kernels/fit.py returns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console

from rackmath.cli.options import dump_json, out_file, out_folder
from rackmath.cli.output import console as cli_console
from rackmath.cli.output import make_table
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
    from rackmath.analyses.kernels.calibrate import (
        calibrate_kernels,
        catalog_text,
        fit_measured,
        holds_every_held_out_pair,
        measured_document,
        with_chips,
    )
    from rackmath.analyses.kernels.compare import against_shipped
    from rackmath.catalog.kernel_efficiency import DATA_PATH

    if target != "kernels":
        raise InputError("calibrate TARGET", target, "'kernels' (or no argument for the step calibration)")
    if install and out is not None:
        raise InputError("--install", "with --out", "one destination: --out FILE or --install")
    if out is not None:
        out_file(out, "--out", (".yaml", ".yml"))
    chip_list = [c.strip() for c in chips.split(",") if c.strip()] if chips else None
    shipped = yaml.safe_load(DATA_PATH.read_text(encoding="utf-8")) if DATA_PATH.exists() else {"chips": {}}
    date = shipped.get("meta", {}).get("date") if check else None
    if check and from_file:
        raise InputError(
            "--check", "with --from", "a refit of the package tables (all chips, or --chips IDS)"
        )
    comparison = None
    if from_file and chip_list and len(chip_list) == 1:
        measured = fit_measured(chip_list[0], list(from_file))
        doc = measured_document(measured, chip_list[0], date)
        comparison = against_shipped(measured.data, measured.fit, measured.peaks)
    else:
        doc = calibrate_kernels(chip_list, list(from_file) or None, date=date)
    if check:
        # a chip refitted alone (--install --chips) carries its own date: the fit does not read it
        for c, entry in doc.get("chips", {}).items():
            own = (shipped["chips"].get(c) or {}).get("date") if isinstance(entry, dict) else None
            if own and "date" in entry:
                entry["date"] = own
        if chip_list:  # a partial refit: only these chips' entries are compared
            same = all(
                catalog_text({"chips": {c: doc["chips"][c]}})
                == catalog_text({"chips": {c: shipped["chips"].get(c)}})
                for c in chip_list
            )
            if "transfer_band" in doc and holds_every_held_out_pair(chip_list):
                same = same and catalog_text({"transfer_band": doc["transfer_band"]}) == catalog_text(
                    {"transfer_band": shipped.get("transfer_band")}
                )
        else:
            same = catalog_text(doc) == DATA_PATH.read_text(encoding="utf-8")
        what = f"{', '.join(chip_list)} in " if chip_list else ""
        typer.echo(f"refit {'reproduces' if same else 'differs from'} {what}{DATA_PATH.name} ({date})")
        if not same:
            raise typer.Exit(1)
        return
    if install and (from_file or chip_list):
        doc = with_chips(shipped, doc)
    path = DATA_PATH if install else out
    if path is not None:
        path.write_text(catalog_text(doc), encoding="utf-8")
    if as_json:
        typer.echo(dump_json(doc if comparison is None else {**doc, "against_shipped": comparison}))
        return
    render_fit(doc, path, cli_console())
    if comparison is not None:
        render_comparison(comparison, chip_list[0] if chip_list else "", cli_console())


def _variant(curve: dict[str, Any]) -> str:
    """What a curve adds to its format in a table: a kernel family other than its class's usual
    one (``mla``, ``nongated``), and the head size of a curve fitted per head size (``d128``)."""
    kind = curve.get("kind")
    family = f" {kind}" if kind not in (None, "", "gqa", "gated") else ""
    return family + (f" d{curve['head_dim']}" if curve.get("head_dim") else "")


def render_comparison(rows: list[dict[str, Any]], chip_id: str, console: Console) -> None:
    """This machine's rows under its own fit (in-sample) and under the shipped curves of
    ``chip_id`` (analyses/kernels/compare.py), one row per curve."""
    table = make_table(
        ("class", "format", "rows", "own fit", "shipped", "bias", "compute"),
        left=("class", "format"),
        title=f"These rows on their own fit (in-sample) and on the shipped {chip_id} curves: "
        "|error| median / p90; bias: shipped predicted / measured - 1 (median); "
        "compute: fraction of peak, own / shipped",
        keys=2,
    )
    for r in rows:
        own, shipped = r["own"], r["shipped"]
        table.add_row(
            r["op_class"],
            r["format"] + _variant(r),
            str(r["rows"]),
            _pct(own),
            _pct(shipped) if shipped else "no curve",
            f"{shipped['median_error'] * 100:+.0f}%" if shipped else "-",
            f"{own['compute_frac']:.2f}" + (f" / {shipped['compute_frac']:.2f}" if shipped else ""),
        )
    console.print(table)


def render_fit(doc: dict[str, Any], path: Path | None, console: Console) -> None:
    """The fitted efficiencies of ``doc`` (the YAML document), one row per chip and curve;
    ``path`` where it was written (None: not written)."""
    where = (
        f"-> {path}"
        if path is not None
        else "(not written: --out FILE, or --install for the shipped catalog)"
    )
    table = make_table(
        ("chip", "class", "format", "compute", "half rows", "bandwidth", "floor", "rows"),
        left=("chip", "class", "format"),
        title=f"Fitted kernel efficiencies {where}",
        keys=2,
    )
    for chip_id, entry in doc["chips"].items():
        for o in entry["ops"]:
            variant = _variant(o) + (_second_kernel(o["alternative"]) if "alternative" in o else "")
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
                chip_id, name, "-", "-", "-", f"{c['bandwidth_frac']:.2f}", f"{c['latency_s'] * 1e6:.1f} us",
                str(c["rows_used"]),
            )  # fmt: skip
    console.print(table)


def _second_kernel(alt: dict) -> str:
    """`` 2 kernels`` and the region the second runs in (``<= 128 tok, EP >= 2``)."""
    region = [f"<= {alt['max_tokens']:g} tok"] if "max_tokens" in alt else []
    region += [f"EP >= {alt['min_ep']:g}"] if "min_ep" in alt else []
    region += [f"only at {alt['only_cols']:g} cols"] if "only_cols" in alt else []
    return " 2 kernels" + (f" (2nd: {', '.join(region)})" if region else "")


def validate_kernels_command(as_json: bool, chips: str | None = None) -> None:
    from rackmath.analyses.kernels.validation import validate_kernels

    chip_list = [c.strip() for c in chips.split(",") if c.strip()] if chips else None
    report = validate_kernels(chip_list)
    if as_json:
        typer.echo(dump_json(report))
        return
    render_kernel_validation(report["kernels"], cli_console())


def _target_mark(cls: str, s: dict[str, Any] | None, p90: bool) -> str:
    """``!`` after a figure that misses its target (median by class; p90 <= 35%)."""
    from rackmath.analyses.kernels.validation import P90_TARGET, median_target

    if not s or s.get("median_abs_error") is None:
        return ""
    miss = s["median_abs_error"] > median_target(cls) or (p90 and s["p90_abs_error"] > P90_TARGET)
    return " !" if miss else ""


def render_kernel_validation(k: dict[str, Any], console: Console) -> None:
    """The report in 80 columns: one row per chip x class (held-out shapes, held-out values),
    then the held-out chips and versions."""
    table = make_table(
        ("chip", "class", "20% shapes", "held-out values", "rows"),
        left=("chip", "class"),
        title="Kernel latency |error|, median / p90 (! misses its target)",
        keys=2,
    )
    for chip_id, ops in k["by_chip"].items():
        values = k.get("held_out_values", {}).get(chip_id, {})
        for i, cls in enumerate(ops):
            v = values.get(cls)
            table.add_row(
                chip_id if i == 0 else "",
                cls,
                _pct(ops[cls]) + _target_mark(cls, ops[cls], False),
                _pct(v) + _target_mark(cls, v, True),
                str(v["rows"]) if v else "-",
            )
        table.add_section()
    for cls, st in k["by_op"].items():
        v = k.get("held_out_values_all", {}).get(cls)
        table.add_row("all", cls, _pct(st), _pct(v), str(v["rows"]) if v else "-")
    console.print(table)
    held = make_table(
        ("chip", "fit on", "class", "median / p90"),
        left=("chip", "fit on", "class"),
        title="Held-out chips (every row, fit on another chip)",
    )
    for chip_id, h in k["held_out_chips"].items():
        for i, (cls, st) in enumerate(h["by_op"].items()):
            held.add_row(chip_id if i == 0 else "", h["fitted_on"] if i == 0 else "", cls, _pct(st))
    console.print(held)
    version = make_table(
        ("chip", "table", "fit on -> tested", "class", "median / p90"),
        left=("chip", "table", "fit on -> tested", "class"),
        title="Held-out version (newest, fit on the next older)",
    )
    for chip_id, tables in k["held_out_version"].items():
        for name, v in tables.items():
            for i, (cls, st) in enumerate(v["by_op"].items()):
                version.add_row(
                    chip_id if i == 0 else "",
                    name if i == 0 else "",
                    f"{v['fitted_on']} -> {v['tested_on'].split(' ', 1)[1]}" if i == 0 else "",
                    cls,
                    _pct(st),
                )
    console.print(version)
    missing = k.get("held_out_version_not_possible", [])
    if missing:
        console.print(f"No older version to fit on: {len(missing)} chip x table pairs (see --json).")


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
                    "rows": {n: len(result[n]) for n in kernels.TABLES},
                    "meta": result["meta"],
                }
            )
        )
        return
    typer.echo(
        f"{result['device']}: wrote {', '.join(str(p) for p in paths)}; fit them with "
        f"`rackmath calibrate kernels --from {paths[0].parent} --chips CHIP --out FILE`"
    )
