"""``rackmath train`` and ``rackmath pipeline``: training step, memory and cost; schedules."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from rackmath import fmt
from rackmath.analyses.training import (
    CALIBRATED_TRAINING,
    PURE_ROOFLINE,
    PipelineResult,
    TrainingEstimate,
)
from rackmath.api import pipeline, train
from rackmath.cli.main import app
from rackmath.cli.options import dump_json, number_list, positive


@app.command("train")
def train_command(
    model: str = typer.Argument(..., help="Catalog id or alias, a path to config.json, or hf:owner/name."),
    on: str = typer.Option(..., "--on", help="System id, e.g. h100-hgx (see `rackmath hardware`)."),
    tokens: str = typer.Option(..., "--tokens", help="Token budget, e.g. 15e12 or 15000000M."),
    plan: str = typer.Option("tp=1", "--plan", help="Parallel plan, e.g. tp=8,pp=16,dp=64[,ep=..,cp=..]."),
    chips: int | None = typer.Option(None, "--chips", help="Chips (must equal the plan's product)."),
    seq_len: int | None = typer.Option(None, "--seq-len", help="Tokens per sequence (default 8192)."),
    batch: int | None = typer.Option(None, "--batch", help="Global batch in sequences (default ~4M tokens)."),
    microbatch: int = typer.Option(1, "--microbatch", help="Sequences per micro-batch."),
    schedule: str = typer.Option("1f1b", "--schedule", help="gpipe, 1f1b, interleaved or zb-h1."),
    virtual_stages: int = typer.Option(1, "--virtual-stages", help="Model chunks per stage (interleaved)."),
    recompute: str = typer.Option(
        "selective", "--recompute", help="none, selective, full, sqrt, reversible."
    ),
    optimizer: str = typer.Option(
        "adam-mixed", "--optimizer", help="adam-mixed, adam-fp32, adam-bf16, sgd-mixed."
    ),
    zero: int = typer.Option(1, "--zero", help="ZeRO stage 0-3 (3 = FSDP)."),
    compute: str | None = typer.Option(None, "--compute", help="Compute precision (default bf16)."),
    price: float | None = typer.Option(None, "--price-per-chip-hour", help="USD per chip-hour."),
    calibrated: bool = typer.Option(
        False,
        "--calibrated",
        help=f"Use the fitted flops_frac {CALIBRATED_TRAINING.flops_frac} (default: pure).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    plot: Path | None = typer.Option(None, "--plot", help="Write memory breakdown and schedule (PNG/SVG)."),
) -> None:
    """Step time, MFU, memory per chip and the cost of a token budget under a parallel plan."""
    result = train(
        model,
        on,
        plan,
        tokens=number_list(tokens, "--tokens")[0],
        chips=chips,
        seq_len=seq_len,
        global_batch=batch,
        microbatch=microbatch,
        schedule=schedule,
        virtual_stages=virtual_stages,
        recompute=recompute,
        optimizer=optimizer,
        zero=zero,
        compute=compute,
        usd_per_chip_hour=positive(price, "--price-per-chip-hour"),
        efficiency=CALIBRATED_TRAINING if calibrated else PURE_ROOFLINE,
    )
    if plot is not None:
        from rackmath.plots.training import save_training_plot

        s = result.setup
        shown = pipeline(
            s.plan.pp, min(s.microbatches, 2 * s.plan.pp), s.schedule.value, virtual_stages=s.virtual_stages
        )
        save_training_plot(result, shown.timeline, plot)
    if as_json:
        typer.echo(dump_json(result.to_dict()))
        return
    render_train(result, Console(highlight=False, width=110))
    if plot is not None:
        typer.echo(f"plot written to {plot}")


def render_train(r: TrainingEstimate, console: Console) -> None:
    s, st, mem = r.setup, r.step, r.memory
    out = console.print
    out(
        f"[bold]rackmath train[/] {s.model.name} on {s.chips} x {s.system.chip.id} ({s.system.id}), "
        f"plan {s.plan}"
    )
    out(
        f"  batch {s.global_batch:,} x {s.seq_len:,} tokens = {s.tokens_per_step:,} per step; "
        f"{s.microbatches} micro-batches of {s.microbatch}; schedule {s.schedule.value}"
        + (f" (v={s.virtual_stages})" if s.virtual_stages > 1 else "")
        + f"; recompute {s.recompute.value}; {s.optimizer.value}, ZeRO-{int(s.zero)}; {s.compute.value}"
    )
    out(
        f"  FLOPs per token: model {fmt.si(r.model_flops_per_token, 'FLOP')} "
        f"(6N + attention) + recompute {fmt.si(r.recompute_flops_per_token, 'FLOP')}; "
        f"flops_frac {s.efficiency.flops_frac:g}"
    )
    out("[bold]Step[/]")
    out(
        f"  compute {fmt.seconds(st.compute_s)}, bubble {fmt.pct(st.bubble_frac)} -> pipeline "
        f"{fmt.seconds(st.pipeline_s)}; per micro-batch TP {fmt.seconds(st.tp_mb_s)}, CP "
        f"{fmt.seconds(st.cp_mb_s)}, EP {fmt.seconds(st.ep_mb_s)}, PP {fmt.seconds(st.pp_mb_s)}"
    )
    out(
        f"  DP {fmt.seconds(st.dp_s)} ({fmt.seconds(st.dp_exposed_s)} exposed), optimizer "
        f"{fmt.seconds(st.optimizer_s)}  => step {fmt.seconds(st.step_s)} "
        f"(bounds {fmt.seconds(st.lower_bound_s)} .. {fmt.seconds(st.upper_bound_s)})"
    )
    out(
        f"  {r.tokens_per_s:,.0f} tokens/s, MFU {fmt.pct(r.mfu)}, HFU {fmt.pct(r.hfu)}; "
        f"{fmt.si(s.tokens, '')} tokens: {r.steps:,.0f} steps, {r.total_days:,.1f} days, "
        f"{r.chip_hours:,.0f} chip-hours, {fmt.usd(r.cost_usd)} at {fmt.usd(s.usd_per_chip_hour)}/chip-hour"
    )
    out("[bold]Memory per chip[/]")
    verdict = "fits" if mem.fits else f"short by {mem.short_by_bytes / 1e9:.1f} GB"
    out(
        f"  weights {fmt.nbytes(mem.weights_bytes)} + grads {fmt.nbytes(mem.grads_bytes)} + optimizer "
        f"{fmt.nbytes(mem.optimizer_bytes)} + activations {fmt.nbytes(mem.activations_bytes)} "
        f"({mem.in_flight_microbatches:g} micro-batches in flight) = {fmt.nbytes(mem.total_bytes)} "
        f"of {fmt.nbytes(mem.usable_bytes)} usable: {verdict}"
    )
    out("  by recomputation mode:")
    for o in r.options:
        out(
            f"    {o.mode.value:<10} activations {fmt.nbytes(o.activations_bytes):>9}, total "
            f"{fmt.nbytes(o.total_bytes):>9}, +{fmt.pct(o.extra_flops_frac):>6} FLOPs, step "
            f"{fmt.seconds(o.step_s):>8}  {'fits' if o.fits else 'does not fit'}"
        )
    for note in s.notes:
        out(f"[dim]  note: {note}[/]")


@app.command("pipeline")
def pipeline_command(
    stages: int = typer.Option(..., "--stages", help="Pipeline stages P."),
    microbatches: int = typer.Option(..., "--microbatches", help="Micro-batches m per step."),
    schedule: str = typer.Option("1f1b", "--schedule", help="gpipe, 1f1b, interleaved or zb-h1."),
    virtual_stages: int = typer.Option(1, "--virtual-stages", help="Model chunks per stage (interleaved)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    plot: Path | None = typer.Option(None, "--plot", help="Write the timeline (PNG/SVG)."),
) -> None:
    """Lay out a pipeline schedule: bubble fraction (simulated and closed form), timeline."""
    result = pipeline(stages, microbatches, schedule, virtual_stages=virtual_stages)
    if plot is not None:
        from rackmath.plots.training import save_pipeline_plot

        save_pipeline_plot(result.timeline, plot)
    if as_json:
        typer.echo(dump_json(result.to_dict()))
        return
    render_pipeline(result, Console(highlight=False, width=110))
    if plot is not None:
        typer.echo(f"plot written to {plot}")


def render_pipeline(r: PipelineResult, console: Console) -> None:
    t = r.timeline
    out = console.print
    v = f", v = {t.virtual_stages}" if t.virtual_stages > 1 else ""
    out(f"[bold]rackmath pipeline[/] {t.schedule.value}: P = {t.stages}, m = {t.microbatches}{v}")
    out(
        f"  bubble fraction {t.bubble_frac:.4f} simulated, {r.closed_form_bubble_frac:.4f} closed form; "
        f"makespan {t.makespan:g} forward-times"
    )
    peak = [t.peak_in_flight(s) for s in range(t.stages)]
    out(f"  micro-batches in flight per stage (peak): {', '.join(f'{p:g}' for p in peak)}")
    if t.microbatches * t.virtual_stages <= 16 and t.stages <= 8:
        for s in range(t.stages):
            row = " ".join(
                f"{o.op.kind.value}{o.op.microbatch}" + (f".{o.op.chunk}" if t.virtual_stages > 1 else "")
                for o in t.ops
                if o.stage == s
            )
            out(f"  stage {s}: {row}")
