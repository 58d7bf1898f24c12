"""``rackmath validate``, ``rackmath calibrate`` and ``rackmath measure``: the reality check."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from rackmath.cli.main import app
from rackmath.cli.options import count, dump_json, plot_option
from rackmath.cli.output import console as cli_console
from rackmath.views import fmt


def _pct(x: float | None) -> str:
    return "n/a" if x is None or x != x else f"{x * 100:+.0f}%"


def _abs_pct(x: float) -> str:
    return "n/a" if x != x else f"{x * 100:.0f}%"


@app.command("validate")
def validate_command(
    plot: Path | None = plot_option("Write predicted vs measured (PNG/SVG/PDF)."),
    as_json: bool = typer.Option(False, "--json", help="Print every row and the aggregates as JSON."),
    measurements_file: Path | None = typer.Option(
        None,
        "--measurements",
        help="Your own rows (YAML, the catalog's measurements.yaml schema); a scenario's model "
        "may be a catalog id, hf:owner/name or a config.json path relative to the file.",
    ),
    kernels: bool = typer.Option(False, "--kernels", help="Kernel-level validation on measured tables."),
    chips: str | None = typer.Option(None, "--chips", help="--kernels: comma-separated chip ids."),
) -> None:
    """Predict every published measurement; show the error of the pure roofline, of the
    kernel-grounded model, and of it with the end-to-end correction (in-sample and
    leave-one-source-out)."""
    if kernels:
        from rackmath.cli.kernel_cmds import validate_kernels_command

        return validate_kernels_command(as_json, chips)
    from rackmath.analyses.reality.report import validate

    report = validate(measurements_file)
    if plot is not None:
        from rackmath.plots.validation import save_validation_plot

        save_validation_plot(report, plot)
    if as_json:
        typer.echo(dump_json(report.to_dict()))
        return
    console = cli_console()
    rows = Table(title="Published measurements: predicted vs measured (error = predicted / measured - 1)")
    for col in (
        "id",
        "source",
        "model / run",
        "hardware",
        "phase",
        "metric",
        "measured",
        "roofline",
        "kernel",
        "corrected",
        "LOSO",
    ):
        rows.add_column(
            col,
            justify="left" if col in ("source", "model / run", "hardware", "phase", "metric") else "right",
        )
    for r in report.rows:
        s = r.scenario
        what = s.training_run or f"{s.model_id} {s.plan or f'{s.chips} chips'}"
        row = r.to_dict()
        donor = row["efficiency"]["transferred_from"]
        rows.add_row(
            str(s.row_id),
            s.source_key,
            what,
            row["chip"] + (f" (transferred from {donor})" if donor else ""),
            s.phase.value,
            s.metric.value,
            f"{s.value:.4g}",
            *(_pct(r.error(c)) for c in ("roofline", "kernel", "calibrated", "loso")),
        )
    console.print(rows)
    agg = Table(title="|error|: median / 90th percentile")
    agg.add_column("group")
    for col in report.columns:
        agg.add_column(col, justify="right")
    groups = [("overall", None)] + [(f"phase {g}", {"phase": g}) for g in report.group_names("phase")]
    groups += [(f"generation {g}", {"family": g}) for g in report.group_names("family")]
    groups += [(g, {"architecture": g}) for g in report.group_names("architecture")]
    groups += [(f"chip {g}", {"chip": g}) for g in report.group_names("chip")]
    for label, where in groups:
        cells = []
        for c in report.columns:
            st = report.stats(c, where)
            cells.append(f"{_abs_pct(st.median_abs_error)} / {_abs_pct(st.p90_abs_error)} ({st.rows})")
        agg.add_row(label, *cells)
    console.print(agg)
    if report.band_coverage is not None:
        cov = report.band_coverage["columns"]
        cells = [f"{c} {_abs_pct(v['inside_frac'])} of {v['rows']}" for c, v in cov.items() if v["rows"]]
        console.print("Measurements inside their p10-p90 band (nominal 80%): " + "; ".join(cells))
    console.print(f"{len(report.rows)} rows expressed, {len(report.unsupported)} listed unsupported:")
    for u in report.unsupported:
        console.print(f"  row {u.row_id} ({u.provenance.source_key}): {u.reason}")
    if plot is not None:
        typer.echo(f"plot written to {plot}")


@app.command("calibrate")
def calibrate_command(
    target: str | None = typer.Argument(None, help="'kernels': fit per-operator efficiencies."),
    exclude_source: list[str] = typer.Option(
        [], "--exclude-source", help="Leave a source_key out of the fit (repeatable)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print parameters and errors as JSON."),
    from_file: list[Path] = typer.Option([], "--from", help="kernels: fit this parquet/CSV table."),
    chips: str | None = typer.Option(None, "--chips", help="kernels: comma-separated chip ids."),
    out: Path | None = typer.Option(None, "--out", help="kernels: write the YAML here."),
    install: bool = typer.Option(
        False, "--install", help="kernels: replace the shipped catalog (catalog/data/kernel_efficiency.yaml)."
    ),
    check: bool = typer.Option(
        False,
        "--check",
        help=(
            "kernels: refit and compare with the shipped catalog byte for byte (exit 1 if not); "
            "with --chips, only their entries."
        ),
    ),
) -> None:
    """Fit the physical parameters per chip family, and report leave-one-source-out error."""
    if target is not None:
        from rackmath.cli.kernel_cmds import calibrate_kernels_command

        return calibrate_kernels_command(target, from_file, chips, out, as_json, install=install, check=check)
    from rackmath.analyses.reality.calibration import calibrate

    result = calibrate(tuple(exclude_source))
    if as_json:
        typer.echo(dump_json(result.to_dict()))
        return
    console = cli_console()
    c = result.calibration
    table = Table(title=f"Calibration ({c.note}; {len(c.fitted_on)} rows)")
    names = list(c.pooled.to_dict())
    table.add_column("family")
    for n in names:
        table.add_column(n, justify="right")
    for family, p in [("(pooled)", c.pooled), *c.families]:
        table.add_row(family, *[_param(n, v) for n, v in p.to_dict().items()])
    console.print(table)
    d = result.to_dict()
    for key, label in (
        ("roofline", "pure roofline"),
        ("calibrated_in_sample", "calibrated, in-sample"),
        ("leave_one_source_out", "leave-one-source-out"),
    ):
        st = d[key]
        console.print(
            f"{label:>24}: median |error| {_abs_pct(st['median_abs_error'])}, "
            f"p90 {_abs_pct(st['p90_abs_error'])} over {st['rows']} rows"
        )
    loso = Table(title="Leave-one-source-out: each source predicted by a fit that never saw it")
    for col in ("source", "rows", "median |error|", "p90 |error|"):
        loso.add_column(col)
    for key, st in d["loso_by_source"].items():
        loso.add_row(key, str(st["rows"]), _abs_pct(st["median_abs_error"]), _abs_pct(st["p90_abs_error"]))
    console.print(loso)


def _param(name: str, value: float | str | None) -> str:
    if value is None:
        return "catalog"
    if isinstance(value, str):  # the efficiency mode the scalars multiply
        return str(value)
    if name.endswith("_s") or name.endswith("_per_layer"):
        return fmt.seconds(value) if value > 0 else "0"
    return f"{value:.3g}"


@app.command("measure")
def measure_command(
    quick: bool = typer.Option(False, "--quick", help="The small CI configuration (a 16M-parameter model)."),
    plot: Path | None = plot_option("Write step time vs batch (PNG/SVG/PDF)."),
    as_json: bool = typer.Option(False, "--json", help="Print ceilings and every step as JSON."),
    repeats: int | None = count(
        None,
        "--repeats",
        help="Timed repeats per point (median reported; 3 or more).",
        minimum=1,
        maximum=1000,
    ),
    kernels: bool = typer.Option(False, "--kernels", help="Time a GEMM/attention/copy sweep as a table."),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="--kernels: the folder to write gemm_perf.csv, generation_attention_perf.csv, "
        "context_attention_perf.csv and memcpy_perf.csv into (default kernel-tables; created "
        "inside an existing folder).",
    ),
) -> None:
    """Measure this machine's matmul FLOP/s and copy bandwidth, time real decode steps of a
    random-weight transformer, and predict them with rackmath."""
    if kernels:
        from rackmath.cli.kernel_cmds import measure_kernels_command

        return measure_kernels_command(quick, out, as_json)
    from rackmath.api import measure

    result = measure(quick, repeats)
    if plot is not None:
        from rackmath.plots.validation import save_measure_plot

        save_measure_plot(result, plot)
    if as_json:
        typer.echo(dump_json(result.to_dict()))
        return
    d = result.to_dict()
    console = cli_console()
    peaks = ", ".join(f"{p} {fmt.si(v, 'FLOP/s')}" for p, v in d["ceilings"]["matmul_flops_per_s"].items())
    console.print(
        f"device {d['device']} ({d['threads']} threads); matmul {peaks}; "
        f"copy {fmt.si(d['ceilings']['copy_bandwidth_bytes_per_s'], 'B/s')}"
    )
    console.print(
        f"model: {fmt.count(d['params'])} parameters in {d['dtype']}; "
        f"fixed overhead fitted on one point: {fmt.seconds(d['overhead_s'])}"
    )
    table = Table(title="Decode step: measured vs predicted from the measured ceilings")
    for col in (
        "context",
        "batch",
        "measured",
        "roofline",
        "roofline + overhead",
        "measured / roofline",
        "bound",
    ):
        table.add_column(col, justify="right")
    for p in d["points"]:
        table.add_row(
            str(p["context"]),
            str(p["batch"]),
            fmt.seconds(p["measured_step_s"]),
            fmt.seconds(p["predicted_step_s"]),
            fmt.seconds(p["predicted_with_overhead_step_s"]),
            f"{p['ratio_measured_over_predicted']:.2f}",
            p["bottleneck"],
        )
    console.print(table)
    if d["skipped"]:
        pairs = ", ".join(f"{s['context']} x {s['batch']}" for s in d["skipped"])
        console.print(f"not timed (more memory than this device has): context x batch {pairs}")
    for k in d["knee"]:
        if k["balance_batch"] is None or k["measured_knee_batch"] is None:
            console.print(f"context {k['context']}: no knee within the sweep")
            continue
        console.print(
            f"context {k['context']}: rackmath's knee (compute = memory) at batch "
            f"{k['balance_batch']:.0f}; measured knee at batch {k['measured_knee_batch']:.0f}"
        )
    if plot is not None:
        typer.echo(f"plot written to {plot}")
