"""``rackmath models`` and ``rackmath hardware``: the catalogs as tables (or JSON)."""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console

from rackmath.analyses.catalog_facts import chip_facts, hardware_dict, model_rows
from rackmath.catalog import loader as catalog
from rackmath.cli.main import app
from rackmath.cli.options import dump_json
from rackmath.cli.output import console as cli_console
from rackmath.cli.output import make_table
from rackmath.specs.precision import Precision
from rackmath.units import GB, TB, TERA
from rackmath.views import fmt


@app.command("models")
def models_command(as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """List the catalog's models with their parameter counts and KV bytes per token."""
    rows = model_rows()
    if as_json:
        typer.echo(dump_json(rows))
        return
    table = make_table(
        (
            "id",
            "family",
            "attention",
            "layers",
            "routed k/E",
            "total",
            "active",
            "KV/token bf16",
            "weights",
        ),
        left=("id", "family", "attention"),
        title="models",
    )
    for r in rows:
        table.add_row(
            r["id"],
            r["family"],
            r["attention"],
            str(r["layers"]),
            r["experts"],
            fmt.count(r["params_total"]),
            fmt.count(r["params_active"]),
            fmt.nbytes(r["kv_bytes_per_token_bf16"]),
            r["native_weights"],
        )
    out = cli_console()
    out.print(table)
    out.print("[bold]aliases[/] (each names the model before it)")
    for r in rows:
        if r["aliases"]:
            out.print(f"  {r['id']}: {', '.join(r['aliases'])}")


#: Below this terminal width `rackmath hardware` prints the compact tables.
WIDE_COLUMNS = 132


def _narrow_hardware(console: Console, chips: dict[str, Any], systems: dict[str, Any]) -> None:
    """The chip and system tables in under 80 columns: units in the headers, fewer columns."""
    table = make_table(
        ("id", "bf16 TF/s", "fp8 TF/s", "fp4 TF/s", "HBM GB", "HBM TB/s", "$/chip-h"),
        left=("id",),
        title="chips (dense peaks; `--json` or a wider terminal shows more)",
        edge=True,
        no_wrap=True,
    )

    def tf(chip: Any, p: Precision) -> str:
        v = chip.peak_flops_per_s.get(p)
        return "-" if v is None else f"{v / TERA:,.0f}"

    for c in chips.values():
        table.add_row(
            c.id,
            tf(c, Precision.BF16),
            tf(c, Precision.FP8),
            tf(c, Precision.FP4),
            f"{c.hbm_capacity_bytes / GB:,.0f}",
            f"{c.hbm_bandwidth_bytes_per_s / TB:.1f}",
            f"{c.price_usd_per_chip_hour.value_usd:.2f}",
        )
    console.print(table)
    systable = make_table(
        ("id", "chip", "scale-up domain", "default chips"),
        left=("id", "chip"),
        title="systems",
        edge=True,
        no_wrap=True,
    )
    for sy in systems.values():
        systable.add_row(sy.id, sy.chip.id, str(sy.scale_up_domain_chips), str(sy.default_chips))
    console.print(systable)


@app.command("hardware")
def hardware_command(as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """List chips and systems with their peaks, memory, links and dated prices."""
    if as_json:
        typer.echo(dump_json(hardware_dict()))
        return
    chips = catalog.chips()
    systems = catalog.systems()
    console = cli_console()
    if console.width < WIDE_COLUMNS:
        _narrow_hardware(console, chips, systems)
        return
    table = make_table(
        (
            "id",
            "status",
            "bf16",
            "fp8",
            "fp4",
            "HBM",
            "HBM BW",
            "F/BW bf16",
            "drain",
            "scale-up/dir",
            "$/chip-h",
            "price date",
        ),
        left=("id", "status", "price date"),
        title="chips (dense peaks)",
    )
    for c in chips.values():
        peaks = c.peak_flops_per_s
        bf16 = peaks.get(Precision.BF16)
        facts = chip_facts(c)
        table.add_row(
            c.id,
            c.status,
            fmt.si(bf16, "FLOP/s") if bf16 else "-",
            fmt.si(peaks[Precision.FP8], "FLOP/s") if Precision.FP8 in peaks else "-",
            fmt.si(peaks[Precision.FP4], "FLOP/s") if Precision.FP4 in peaks else "-",
            fmt.nbytes(c.hbm_capacity_bytes),
            fmt.si(c.hbm_bandwidth_bytes_per_s, "B/s"),
            f"{facts.flop_per_byte_bf16:.0f}" if facts.flop_per_byte_bf16 is not None else "-",
            fmt.seconds(facts.hbm_drain_s),
            fmt.si(c.scale_up_bandwidth_bytes_per_s_per_direction, "B/s")
            if c.scale_up_bandwidth_bytes_per_s_per_direction
            else "-",
            fmt.usd(c.price_usd_per_chip_hour.value_usd) + c.price_usd_per_chip_hour.estimate_label,
            c.price_usd_per_chip_hour.date,
        )
    console.print(table)
    columns = ("id", "chip", "scale-up domain", "default chips", "scale-up fabric", "scale-out fabric")
    systable = make_table(columns, left=columns, title="systems")
    for s in systems.values():
        systable.add_row(
            s.id,
            s.chip.id,
            str(s.scale_up_domain_chips),
            str(s.default_chips),
            s.scale_up_fabric,
            s.scale_out_fabric,
        )
    console.print(systable)
