"""``rackmath train`` and ``rackmath pipeline``: training step, memory and cost; schedules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from rackmath.analyses.training.estimate import TrainingEstimate
from rackmath.analyses.training.pipeline import PipelineResult, schedule_drawing
from rackmath.analyses.training.setup import CALIBRATED_TRAINING, MAX_MTP_LAYERS, TrainingSetup
from rackmath.api import pipeline, train
from rackmath.catalog.training_frameworks import CUDNN_ATTENTION, FITTED_ATTENTION
from rackmath.cli.main import app
from rackmath.cli.options import count, dump_json, efficiency_option, number, plot_option
from rackmath.cli.output import console as cli_console
from rackmath.cli.output import make_table
from rackmath.specs.bounds import MAX_CHIPS, MAX_CONTEXT, MAX_TOKENS, MAX_USD_PER_CHIP_HOUR
from rackmath.specs.efficiency import EfficiencyMode, Kernel
from rackmath.views import fmt


@app.command("train")
def train_command(
    model: str = typer.Argument(..., help="Catalog id or alias, a path to config.json, or hf:owner/name."),
    on: str = typer.Option(..., "--on", help="System id, e.g. h100-hgx (see `rackmath hardware`)."),
    tokens: float = number(
        ..., "--tokens", help="Token budget, e.g. 15e12 or 15T.", minimum=1, maximum=MAX_TOKENS
    ),
    plan: str = typer.Option("tp=1", "--plan", help="Parallel plan, e.g. tp=8,pp=16,dp=64[,ep=..,cp=..]."),
    chips: int | None = count(
        None, "--chips", help="Chips (must equal the plan's product).", maximum=MAX_CHIPS
    ),
    seq_len: int | None = count(
        None, "--seq-len", help="Tokens per sequence (default 8192).", maximum=MAX_CONTEXT
    ),
    batch: int | None = count(
        None, "--batch", help="Global batch in sequences (default ~4M tokens).", maximum=2**24
    ),
    microbatch: int = count(1, "--microbatch", help="Sequences per micro-batch.", maximum=2**16),
    schedule: str = typer.Option("1f1b", "--schedule", help="gpipe, 1f1b, interleaved, zb-h1 or dualpipe."),
    virtual_stages: int = count(
        1, "--virtual-stages", help="Model chunks per stage (interleaved).", maximum=64
    ),
    recompute: str | None = typer.Option(
        None,
        "--recompute",
        help="The framework's policy: none, selective, full, sqrt, reversible (default: its own).",
    ),
    optimizer: str = typer.Option(
        "adam-mixed", "--optimizer", help="adam-mixed, adam-fp32, adam-bf16, sgd-mixed."
    ),
    zero: int | None = count(
        None, "--zero", help="ZeRO stage 0-3 (3 = FSDP; default: the framework's, 1).", minimum=0, maximum=3
    ),
    framework: str | None = typer.Option(
        None,
        "--framework",
        help="megatron-core, megatron-bridge, torchtitan, torchtitan-compile, maxtext, llm-foundry "
        "(default: generic).",
    ),
    compute: str | None = typer.Option(
        None,
        "--compute",
        help="GEMM recipe: bf16, fp16, fp8 (delayed), fp8-current, fp8-block, mxfp8, nvfp4 (default bf16).",
    ),
    ep_overlap: float | None = number(
        None,
        "--ep-overlap",
        help="Share of the EP all-to-all hidden under compute (dualpipe: 1).",
        minimum=0.0,
        maximum=1.0,
    ),
    routing_skew: float = number(
        1.0,
        "--routing-skew",
        help="Busiest expert rank's tokens over the mean (>= 1).",
        minimum=1.0,
        maximum=64.0,
    ),
    ep_max_nodes: int | None = count(
        None,
        "--ep-max-nodes",
        help="Node-limited routing: each token to at most this many nodes (DeepSeek-V3: 4).",
        maximum=4096,
    ),
    ep_dispatch: str = typer.Option(
        "bf16", "--ep-dispatch", help="bf16, or fp8 (dispatch in FP8, combine in BF16, as DeepSeek-V3)."
    ),
    bucket_mb: float | None = number(
        None,
        "--bucket-mb",
        help="Data-parallel bucket in MB (default: one layer).",
        maximum=1e6,
        positive=True,
    ),
    mtp_layers: int = count(
        0,
        "--mtp-layers",
        help="Multi-token-prediction modules trained with the model, on the last stage (DeepSeek-V3: 1).",
        minimum=0,
        maximum=MAX_MTP_LAYERS,
    ),
    efficiency: str = efficiency_option(),
    price: float | None = number(
        None, "--price-per-chip-hour", help="USD per chip-hour.", maximum=MAX_USD_PER_CHIP_HOUR, positive=True
    ),
    calibrated: bool = typer.Option(
        False,
        "--calibrated",
        help=f"The pure roofline at the flops_frac {CALIBRATED_TRAINING.flops_frac:g} fitted over published "
        "runs (instead of --efficiency).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    plot: Path | None = plot_option("Write memory breakdown and schedule (PNG/SVG/PDF)."),
) -> None:
    """Step time, MFU, memory per chip and the cost of a token budget under a parallel plan."""
    result = train(
        model,
        on,
        plan,
        tokens=tokens,
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
        usd_per_chip_hour=price,
        efficiency=CALIBRATED_TRAINING if calibrated else efficiency,
        ep_overlap_frac=ep_overlap,
        routing_skew=routing_skew,
        ep_max_domains=ep_max_nodes,
        ep_dispatch=ep_dispatch,
        bucket_bytes=None if bucket_mb is None else bucket_mb * 1e6,
        framework=framework,
        mtp_layers=mtp_layers,
    )
    if plot is not None:
        from rackmath.plots.training import save_training_plot

        s = result.setup
        shown = schedule_drawing(s.schedule, s.plan.pp, s.microbatches, virtual_stages=s.virtual_stages)
        save_training_plot(result, shown, plot)
    if as_json:
        typer.echo(dump_json(result.to_dict()))
    else:
        render_train(result, cli_console())
        if plot is not None:
            typer.echo(f"plot written to {plot}")
    result.require_fit()  # the report shows which recomputation modes would fit; the exit says it failed


def attention_kernel_text(k: Kernel, kernel_name: str) -> str:
    """The attention core's kernel in one line: the framework's kernel on its measured table
    (and the donor chip when transferred), or the fitted curve and why."""
    if k.fallback:
        return f"the fitted curve ({k.fmt}); {k.fallback}"
    if kernel_name == CUDNN_ATTENTION:
        where = f"{k.chip}'s, transferred" if k.transferred else k.chip
        return f"{kernel_name} ({k.fmt}) on cuDNN's measured training table ({where})"
    if kernel_name == FITTED_ATTENTION:
        return f"the {k.chip} prefill-attention curve ({k.fmt})"
    return f"{kernel_name}: the {k.chip} prefill-attention curve ({k.fmt}) at its published rate ratio"


def mtp_text(modules: int) -> str:
    """The MTP modules in the FLOPs line: each a layer, a projection and the head again."""
    if not modules:
        return ""
    return f", + {modules} MTP module{'s' if modules > 1 else ''} on the last stage"


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
    if not mem.fits:
        out(
            f"  [bold]does not fit[/]: {fmt.nbytes(mem.total_bytes)} per chip of "
            f"{fmt.nbytes(mem.usable_bytes)} usable, short by {fmt.nbytes(mem.short_by_bytes)}; "
            "no cost is quoted (the recomputation modes below show what would fit)"
        )
    out(f"  framework {s.profile.label} ({s.profile.name})")
    out(
        f"  FLOPs per token: model {fmt.si(r.model_flops_per_token, 'FLOP')} "
        f"(6N + attention{mtp_text(s.mtp_layers)}) "
        f"+ recompute {fmt.si(r.recompute_flops_per_token, 'FLOP')}; "
        f"GEMMs {s.recipe.value}, attention {s.attention_precision.value}"
    )
    out(f"  efficiency: {s.efficiency_label}")
    core = next((o for o in st.operators if o.name == "attention"), None)
    if core is not None and core.kernel is not None and s.efficiency.mode is EfficiencyMode.KERNEL:
        out(f"  attention core: {attention_kernel_text(core.kernel, s.profile.attention_kernel)}")
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
    if st.dp_interference_s or st.interference_mb_s:
        parts = [
            f"{fmt.seconds(t)} {where}"
            for t, where in (
                (st.dp_interference_s, "a step beside DP"),
                (st.interference_mb_s, "a micro-batch beside EP, CP, PP and FSDP traffic"),
            )
            if t
        ]
        out(f"  compute slowed by the SMs hidden traffic holds: {', '.join(parts)}")
    rate = (
        f"  {r.tokens_per_s:,.0f} tokens/s, MFU {fmt.pct(r.mfu)}, HFU {fmt.pct(r.hfu)} "
        f"(vs the {s.compute.value} peak)"
    )
    if mem.fits:
        rate += (
            f"; {fmt.si(s.tokens, '')} tokens: {r.steps:,.0f} steps, {r.total_days:,.1f} days, "
            f"{r.chip_hours:,.0f} chip-hours, {fmt.usd(r.cost_usd)} at "
            f"{fmt.usd(s.usd_per_chip_hour)}/chip-hour"
        )
    out(rate + ("" if mem.fits else " if it fit"))
    if st.ep_mb_s or st.fsdp_exposed_mb_s:
        out(
            f"  EP all-to-all exposed {fmt.seconds(st.ep_exposed_mb_s)} of {fmt.seconds(st.ep_mb_s)} per "
            f"micro-batch (overlap {_ep_overlap(s)}, skew {s.routing_skew:g}); FSDP exposed "
            f"{fmt.seconds(st.fsdp_exposed_mb_s)} per micro-batch over {st.dp_buckets} buckets; "
            f"prefetch hides {fmt.seconds(st.dp_hidden_s)} of DP traffic per step"
        )
    render_operators(r, console)
    out("[bold]Utilisation by convention[/]")
    for c in r.conventions:
        out(f"  {c.label:<45} {fmt.pct(c.value):>7}")
    out("[bold]Memory per chip[/]")
    verdict = "fits" if mem.fits else f"short by {mem.short_by_bytes / 1e9:.1f} GB"
    out(
        f"  weights {fmt.nbytes(mem.weights_bytes)} + grads {fmt.nbytes(mem.grads_bytes)} + optimizer "
        f"{fmt.nbytes(mem.optimizer_bytes)} + activations {fmt.nbytes(mem.activation_bytes)} "
        f"({mem.in_flight_microbatches:g} micro-batches in flight) = {fmt.nbytes(mem.total_bytes)} "
        f"of {fmt.nbytes(mem.usable_bytes)} usable: {verdict}"
    )
    out("  by recomputation mode:")
    modes = make_table(
        ("recompute", "activations", "total", "extra FLOPs", "step", "fits"), left=("recompute",)
    )
    for o in r.options:
        modes.add_row(
            o.mode.value,
            fmt.nbytes(o.activations_bytes),
            fmt.nbytes(o.total_bytes),
            "+" + fmt.pct(o.extra_flops_frac),
            fmt.seconds(o.step_s),
            "yes" if o.fits else "no",
        )
    out(modes)
    for note in s.notes:
        out(f"[dim]  note: {note}[/]")


#: The seconds an operator row of ``render_operators`` shows, in column order.
_OPERATOR_TIMES = ("forward_s", "input_grad_s", "weight_grad_s", "recompute_s", "time_s")


def render_operators(r: TrainingEstimate, console: Console) -> None:
    """Where the step's busy time goes, operator by operator (seconds per step)."""
    out = console.print
    out("[bold]Operators[/] (per step on the busiest chip)")
    table = make_table(
        ("operator", "prec", "bound", "forward", "input grad", "weight grad", "recompute", "total"),
        left=("operator", "prec", "bound"),
    )
    for o in r.step.operator_rows():
        table.add_row(
            o["name"],
            o["precision"],
            o["bound"],
            *(fmt.seconds(o[k]) for k in _OPERATOR_TIMES),
        )
    out(table)


@app.command("pipeline")
def pipeline_command(
    stages: int = count(..., "--stages", help="Pipeline stages P.", maximum=2**16),
    microbatches: int = count(..., "--microbatches", help="Micro-batches m per step.", maximum=2**16),
    schedule: str = typer.Option(
        "1f1b", "--schedule", help="gpipe, 1f1b, interleaved, zb-h1 or dualpipe (P even, m >= 2P)."
    ),
    virtual_stages: int = count(
        1, "--virtual-stages", help="Model chunks per stage (interleaved).", maximum=64
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    plot: Path | None = plot_option("Write the timeline (PNG/SVG/PDF)."),
) -> None:
    """Lay out a pipeline schedule: bubble fraction (simulated and closed form), timeline."""
    result = pipeline(stages, microbatches, schedule, virtual_stages=virtual_stages)
    if plot is not None:
        from rackmath.plots.training import save_pipeline_plot

        save_pipeline_plot(result, plot)
    if as_json:
        typer.echo(dump_json(result.to_dict()))
        return
    render_pipeline(result, cli_console())
    if plot is not None:
        typer.echo(f"plot written to {plot}")


def render_closed_forms(rows: Any, console: Console) -> None:
    out = console.print
    out("[bold]Closed forms[/] (unit op times; bubble = idle share of stage-time)")
    for r in rows:
        v = f" v={r['virtual_stages']}" if r["virtual_stages"] > 1 else ""
        out(
            f"  {r['schedule'] + v:<16} bubble {r['bubble_frac']:.4f}, in flight "
            f"{r['in_flight_microbatches']:g}: {r['closed_form']}"
        )
        out(f"  {'':<16} [dim]{r['source']}[/]")


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
                f"{o.op.kind.value}{o.op.microbatch}"
                + (f".{o.op.chunk}" if t.virtual_stages > 1 or t.schedule.value == "dualpipe" else "")
                for o in t.ops
                if o.stage == s
            )
            out(f"  stage {s}: {row}")
    render_closed_forms(r.closed_forms, console)


def _ep_overlap(s: TrainingSetup) -> str:
    """How the expert all-to-all hides: Megatron's combined 1F1B pairs each with one block."""
    return "each under its paired block, combined 1F1B" if s.ep_overlap_paired else f"{s.ep_overlap_frac:g}"
