"""``rackmath sweep SPEC.yaml --out results.parquet``: a cartesian sweep into one table."""

from __future__ import annotations

from pathlib import Path

import typer

from rackmath import api
from rackmath.analyses.deploy import sweep as sw
from rackmath.cli.main import app
from rackmath.cli.options import dump_json, out_file
from rackmath.cli.output import console as cli_console
from rackmath.views.fmt import efficiency_line

#: Table formats ``--out`` writes, by file extension.
OUT_FORMATS = (".parquet", ".csv")
#: Skipped combinations listed in the text summary (all of them are in ``--json``).
SHOWN_SKIPPED = 10


@app.command("sweep")
def sweep_command(
    spec_file: Path = typer.Argument(..., help="YAML spec: models, systems, plans, precisions, batch, ..."),
    out: Path = typer.Option(..., "--out", help="Output table: .parquet (needs pyarrow) or .csv."),
    max_points: int = typer.Option(
        sw.DEFAULT_MAX_POINTS, "--max-points", help="Refuse sweeps with more points than this."
    ),
    chunk_points: int = typer.Option(sw.DEFAULT_CHUNK_POINTS, "--chunk-points", help="Points per chunk."),
    scheduler: str | None = typer.Option(
        None, "--scheduler", help="Run the chunks on a Dask scheduler, e.g. tcp://127.0.0.1:8786."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a summary as JSON."),
) -> None:
    """Evaluate every combination of a spec (each batch x context grid in one vectorized call)."""
    out_file(out, "--out", OUT_FORMATS)
    suffix = out.suffix.lower()
    result = api.sweep(spec_file, max_points=max_points, chunk_points=chunk_points, scheduler=scheduler)
    if suffix == ".parquet":
        from rackmath.frames import require

        require("pyarrow")
        result.frame.to_parquet(out, index=False)
    else:
        result.frame.to_csv(out, index=False)
    summary = {
        "out": str(out),
        "points": result.points,
        "columns": list(result.frame.columns),
        "chunks": result.chunks,
        "where": result.where,
        "efficiency": result.efficiency,
        "skipped": [{"combination": vars(c), "reason": why} for c, why in result.skipped],
    }
    if as_json:
        typer.echo(dump_json(summary))
        return
    console = cli_console()
    console.print(f"{result.points:,} points in {result.chunks} chunk(s) ({result.where}) -> {out}")
    console.print(efficiency_line(result.efficiency), markup=False)
    for combo, why in result.skipped[:SHOWN_SKIPPED]:
        console.print(
            f"  skipped {combo.model} on {combo.system}, {combo.plan}, {combo.precision}: {why}",
            soft_wrap=True,
            markup=False,
        )
    if len(result.skipped) > SHOWN_SKIPPED:
        console.print(f"  ... and {len(result.skipped) - SHOWN_SKIPPED} more skipped (see --json)")
