"""`plan`, `pareto` and `layout`: deployments over a real topology."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from rackmath import api
from rackmath.analyses.deploy import search as srch
from rackmath.analyses.deploy.candidates import (
    ASSUMPTIONS,
    DEFAULT_MAX_CHIPS,
    DEFAULT_PRECISIONS,
    DEFAULT_SYSTEMS,
    Choice,
)
from rackmath.analyses.deploy.frontier import ParetoPoint
from rackmath.analyses.deploy.layout import LayoutReport
from rackmath.cli.main import app
from rackmath.cli.options import (
    count,
    dump_json,
    efficiency_option,
    names,
    number,
    plot_option,
    plural,
)
from rackmath.cli.output import console as cli_console
from rackmath.cli.output import make_table
from rackmath.specs.bounds import (
    MAX_BATCH,
    MAX_CONTEXT,
    MAX_SEARCH_CANDIDATES,
    MAX_SEARCH_CHIPS,
    MAX_TRAFFIC,
)
from rackmath.views import fmt
from rackmath.views.fmt import efficiency_line


def _choice_row(c: Choice) -> list[str]:
    return [
        c.system,
        f"{c.precisions.weights.value}/{c.precisions.compute.value}",
        c.plan_text,
        str(c.chips),
        f"{c.batch:,}",
        fmt.seconds(c.tpot_s),
        fmt.seconds(c.ttft_s),
        f"{c.tokens_per_s_per_chip:,.0f}",
        f"{c.tokens_per_s_per_user:,.0f}",
        str(c.replicas),
        fmt.usd(c.fleet_usd_per_million_output_tokens),
        "-" if c.joules_per_token is None else f"{c.joules_per_token:.3g}",
        c.bottleneck,
    ]


_CHOICE_COLUMNS = (
    "system",
    "weights/compute",
    "plan",
    "chips",
    "batch",
    "TPOT",
    "TTFT",
    "tok/s/chip",
    "tok/s/user",
    "replicas",
    "$/M out",
    "J/tok",
    "bound by",
)


# the MoE routing and MTP options `plan` and `pareto` share
_REDUNDANT_EXPERTS = count(
    0, "--redundant-experts", help="EPLB: extra expert slots on every EP plan.", minimum=0, maximum=4096
)
_SKEW = number(
    1.0, "--skew", help="Busiest EP rank's routed load over the mean (1 balanced).", minimum=1, maximum=64
)
_TBO = typer.Option("off", "--tbo", help="Two-batch overlap: on, off or a fraction.")
_MTP = count(0, "--mtp", help="MTP draft tokens per step (0 = off).", minimum=0, maximum=16)
_ACCEPTANCE = typer.Option(
    "0.8", "--acceptance", help="MTP acceptance rate: one for every draft position, or one each (0.85,0.7)."
)


@app.command("plan")
def plan_command(
    model: str = typer.Argument(..., help="Catalog id or alias, a config.json path, or hf:owner/name."),
    traffic: float = number(
        "1M",
        "--traffic",
        help="Output tokens per second to serve (e.g. 1M; default 1M).",
        maximum=MAX_TRAFFIC,
        positive=True,
    ),
    input_len: int = count(1024, "--input-len", help="Prompt tokens per request.", maximum=MAX_CONTEXT),
    output_len: int = count(1024, "--output-len", help="Generated tokens per request.", maximum=MAX_CONTEXT),
    ttft_ms: float | None = number(
        None, "--ttft-ms", help="Time-to-first-token SLO (ms).", maximum=3.6e6, positive=True
    ),
    tpot_ms: float | None = number(
        None, "--tpot-ms", help="Time-per-output-token SLO (ms).", maximum=3.6e6, positive=True
    ),
    prefix_hit: float = number(0.0, "--prefix-hit", help="Share of each prompt found in the prefix cache."),
    hardware: str = typer.Option(",".join(DEFAULT_SYSTEMS), "--hardware", help="Comma list of system ids."),
    on: str | None = typer.Option(None, "--on", help="One system id (instead of --hardware)."),
    slo: str | None = typer.Option(
        None, "--slo", help="Limits as ttft_p99=2s,tpot_p99=50ms (instead of --ttft-ms/--tpot-ms)."
    ),
    disaggregated: bool = typer.Option(
        True, "--disaggregated/--aggregated-only", help="Also search xPyD prefill/decode pools."
    ),
    runtime: str | None = typer.Option(
        None, "--runtime", help="Fit as an engine runs it: vllm, sglang, trtllm (caps per DP engine)."
    ),
    max_chips: int = count(
        DEFAULT_MAX_CHIPS, "--max-chips", help="Most chips per replica.", maximum=MAX_SEARCH_CHIPS
    ),
    precision: str = typer.Option(",".join(DEFAULT_PRECISIONS), "--precision", help="native, fp8, fp4."),
    max_candidates: int = count(
        MAX_SEARCH_CANDIDATES,
        "--max-candidates",
        help="Work budget: most deployments evaluated.",
        maximum=1e9,
    ),
    redundant_experts: int = _REDUNDANT_EXPERTS,
    skew: float = _SKEW,
    tbo: str = _TBO,
    mtp: int = _MTP,
    acceptance: str = _ACCEPTANCE,
    weight_classes: str | None = typer.Option(
        None,
        "--weight-classes",
        help="Weights per tensor class, e.g. experts=nvfp4,attention=fp8: the native family as stated.",
    ),
    max_cp: int = count(
        1,
        "--max-cp",
        help="Also search context parallelism: cp in the powers of two up to this (1 = none).",
        maximum=64,
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    efficiency: str = efficiency_option(),
) -> None:
    """The cheapest deployment that meets the SLOs, runners-up, and why the others failed."""
    hardware_ids = [on] if on else names(hardware, "--hardware")
    result = api.plan(
        model,
        traffic=traffic,
        input_len=input_len,
        output_len=output_len,
        ttft_s=None if ttft_ms is None else ttft_ms / 1e3,
        tpot_s=None if tpot_ms is None else tpot_ms / 1e3,
        prefix_hit=prefix_hit,
        hardware=hardware_ids,
        slo=slo,
        disaggregated=disaggregated,
        runtime=runtime,
        max_chips=max_chips,
        precision=names(precision, "--precision"),
        max_candidates=max_candidates,
        redundant_experts=redundant_experts,
        skew=skew,
        tbo=tbo,
        mtp=mtp,
        acceptance=acceptance,
        efficiency=efficiency,
        weight_classes=weight_classes,
        max_cp=max_cp,
    )
    if as_json:
        typer.echo(dump_json(result.to_dict()))
    else:
        _render_plan(result, cli_console())
        cli_console().print(efficiency_line(result.efficiency))
    srch.require_feasible(result)


def _rates_text(acceptance: float | list[float]) -> str:
    """``0.8`` or ``0.85,0.7,0.6``: the acceptance as ``--acceptance`` takes it."""
    return ",".join(f"{a:g}" for a in (acceptance if isinstance(acceptance, list) else [acceptance]))


def _render_plan(r: srch.SearchResult, console: Console) -> None:
    w = r.workload
    slo = (
        ", ".join(
            x
            for x in (
                f"TTFT <= {w.ttft_s * 1e3:g} ms" if w.ttft_s else "",
                f"TPOT <= {w.tpot_s * 1e3:g} ms" if w.tpot_s else "",
            )
            if x
        )
        or "no SLO"
    )
    out = console.print
    out(
        f"[bold]rackmath plan[/] {r.model}: {w.traffic_tokens_per_s:,.0f} output tokens/s, "
        f"{w.input_len:,} in / {w.output_len:,} out"
        + (f" ({w.prefix_hit:.0%} of each prompt cached)" if w.prefix_hit else "")
        + f", {slo}"
    )
    spec_ = r.space.get("speculation")
    if spec_:
        out(
            f"  MTP: {spec_['mtp']} draft tokens a step at acceptance {_rates_text(spec_['acceptance'])}: "
            f"{spec_['tokens_per_step']:.3g} tokens per sequence a step"
        )
    out(f"  searched {r.candidates_evaluated:,} deployments on {', '.join(r.systems)}")
    if r.best:  # an infeasible search prints no empty table; its error line says why, once
        out("")
        table = make_table(("", *_CHOICE_COLUMNS), keys=2)
        table.add_row("best", *_choice_row(r.best))
        for c in r.runners_up:
            table.add_row("", *_choice_row(c))
        out(table)
    rejected = [f for f in r.families if f.best is None]
    if rejected:
        out("\n[bold]Rejected[/]")
        for f in rejected:
            out(f"  {f.system} ({f.family}): {f.binding}: {f.reason}")
    if r.best is None:
        if r.disaggregated is not None:
            out(f"\n[bold]No aggregated deployment[/] meets the SLOs: {r.infeasible_reason}")
    else:
        b = r.best
        out(
            f"\n[bold]Answer[/]: {plural(b.replicas, 'replica')} x {b.chips} {b.chip} "
            f"({b.system}, {b.plan_text}, "
            f"{b.precisions.weights.value} weights) at batch {b.batch:,}: "
            f"{fmt.usd(b.fleet_usd_per_million_output_tokens)} per million output tokens."
        )
    if r.disaggregated_note:
        d = r.disaggregated
        if d is not None:
            out(
                f"\n[bold]Disaggregated[/] {d.xpyd}: {d.chips:,} chips, TTFT {fmt.seconds(d.ttft_s)}, "
                f"TPOT {fmt.seconds(d.tpot_s)}, {fmt.usd(d.fleet_usd_per_million_output_tokens)} per million "
                "output tokens"
            )
        out(f"  {r.disaggregated_note}")
    out("\n[dim]Assumptions: " + " ".join(ASSUMPTIONS) + "[/]")


@app.command("pareto")
def pareto_command(
    model: str = typer.Argument(..., help="Catalog id or alias, a config.json path, or hf:owner/name."),
    on: str = typer.Option(..., "--on", help="System id, e.g. gb200-nvl72."),
    input_len: int = count(1024, "--input-len", help="Prompt tokens per request.", maximum=MAX_CONTEXT),
    output_len: int = count(1024, "--output-len", help="Generated tokens per request.", maximum=MAX_CONTEXT),
    precision: str = typer.Option("native", "--precision", help="native, fp8, fp4 (comma list)."),
    max_chips: int | None = count(
        None, "--max-chips", help="Most chips per replica (default: the system's).", maximum=MAX_SEARCH_CHIPS
    ),
    disaggregated: bool = typer.Option(
        False, "--disaggregated", help="Also the xPyD frontier (decode pool + its prefill share)."
    ),
    runtime: str | None = typer.Option(
        None, "--runtime", help="Fit as an engine runs it: vllm, sglang, trtllm (caps per DP engine)."
    ),
    redundant_experts: int = _REDUNDANT_EXPERTS,
    skew: float = _SKEW,
    tbo: str = _TBO,
    mtp: int = _MTP,
    acceptance: str = _ACCEPTANCE,
    plot: Path | None = plot_option("Write the frontier (PNG/SVG/PDF)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    efficiency: str = efficiency_option(),
) -> None:
    """Tokens/s per chip against tokens/s per user: the frontier over plans and batches."""
    result = api.pareto(
        model,
        on,
        input_len=input_len,
        output_len=output_len,
        precision=names(precision, "--precision"),
        max_chips=max_chips,
        disaggregated=disaggregated,
        runtime=runtime,
        redundant_experts=redundant_experts,
        skew=skew,
        tbo=tbo,
        mtp=mtp,
        acceptance=acceptance,
        efficiency=efficiency,
    )
    routing = result.routing
    if plot is not None:
        from rackmath.plots.deploy import save_pareto_plot

        save_pareto_plot(result, plot)
    if as_json:
        typer.echo(dump_json(result.to_dict()))
        return
    console = cli_console()
    console.print(
        f"[bold]rackmath pareto[/] {result.model} on {result.system}, {input_len:,} in / {output_len:,} out "
        f"({result.candidates_evaluated:,} deployments, {len(result.frontier)} on the frontier)\n"
    )
    if routing.mtp:
        console.print(
            f"MTP: {routing.mtp} draft tokens a step at acceptance {routing.acceptance_text} "
            f"({routing.tokens_per_step:.3g} tokens per sequence a step)"
        )
    console.print(_frontier_table(result.frontier, "plan"))
    if result.disaggregated_frontier:
        console.print("\n[bold]Disaggregated (xPyD)[/]: decode pool plan and batch, with its prefill share")
        console.print(_frontier_table(result.disaggregated_frontier, "decode plan"))
    console.print(efficiency_line({result.system: result.efficiency}))
    if plot is not None:
        typer.echo(f"plot written to {plot}")


@app.command("layout")
def layout_command(
    model: str = typer.Argument(..., help="Catalog id or alias, a config.json path, or hf:owner/name."),
    on: str = typer.Option(..., "--on", help="System id, e.g. gb200-nvl72."),
    batch: int = count(2048, "--batch", help="Sequences per decode step.", maximum=MAX_BATCH),
    context: int = count(4096, "--context", help="Tokens of context.", maximum=MAX_CONTEXT),
    weights: str | None = typer.Option(
        None,
        "--weights",
        help="Weight format (default: as shipped; quantized: head, embeddings, router, norms stay 16-bit).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    efficiency: str = efficiency_option(),
) -> None:
    """The lecture's layout arguments (D13-D24) for a model on a system."""
    report = api.layout(model, on, batch=batch, context=context, weights=weights, efficiency=efficiency)
    if as_json:
        typer.echo(dump_json(report.to_dict()))
        return
    render_layout(report, cli_console())


def render_layout(r: LayoutReport, console: Console) -> None:
    out = console.print
    out(f"[bold]rackmath layout[/] {r.model} on {r.system} (batch {r.batch:,}, context {r.context:,})\n")
    out(f"scale-up / scale-out bandwidth per chip per direction = {r.bandwidth_ratio:.3g}x\n")
    e = r.expert_layer
    out("[bold]1. One scale-up domain bounds the expert layer[/] (D13-D14)")
    if e is None:
        out("  dense model: no expert layer")
    else:
        a, b = e["one_domain"], e["two_domains"]
        out(f"  {e['plan']} on {e['chips']} chips; all-to-all dispatch + combine per MoE layer")
        out(
            f"  one domain : step {fmt.seconds(a['step_s'])} (EP all-to-all {fmt.seconds(a['ep_comm_s'])}, "
            f"weights {fmt.seconds(a['weight_fetch_s'])}, KV {fmt.seconds(a['kv_fetch_s'])}, "
            f"compute {fmt.seconds(a['compute_s'])})"
        )
        out(
            f"  two domains: step {fmt.seconds(b['step_s'])} "
            f"(EP all-to-all {fmt.seconds(b['ep_comm_s'])}); half the bytes cross scale-out: "
            f"step x{e['step_ratio']:.2f}, all-to-all x{e['ep_comm_ratio']:.1f}"
        )
    rr = r.rack_rule
    out("\n[bold]2. The rack-boundary rule[/] (D17): cut between racks when 2 k L_stage >= B_up/B_out")
    lec = rr["lecture"]
    out(
        f"  lecture: k = {lec['experts_per_token']}, L = {lec['layers_per_stage']}, "
        f"ratio {lec['bandwidth_ratio']:g}: 2kL / ratio = {lec['advantage']:.3g}"
    )
    for row in rr["rows"]:
        out(
            f"  k = {rr['experts_per_token']}, L_stage = {row['layers_per_stage']}: "
            f"2kL = {row['two_k_l']} vs {rr['bandwidth_ratio']:.3g} -> {row['advantage']:.2f} "
            f"({'cut is cheap' if row['cut_is_cheap'] else 'cut costs more'})"
        )
    p = r.pipelining
    out(
        f"\n[bold]3. Pipelining in inference[/] (D18, D20, D22): {p['plan_per_stage']} per stage, "
        f"micro-batch {p['microbatch']}"
    )
    t = Table(show_edge=False, header_style="bold")
    for name in (
        "stages",
        "chips",
        "batch",
        "layers/stage",
        "weights/chip",
        "KV/chip",
        "TPOT",
        f"TPOT +{p['lecture_hop_latency_s'] * 1e3:g} ms/hop",
    ):
        t.add_column(name, justify="right")
    for row in p["rows"]:
        t.add_row(
            str(row["stages"]),
            str(row["chips"]),
            f"{row['batch']:,}",
            "/".join(map(str, row["stage_layers"])),
            fmt.nbytes(row["weights_bytes_per_chip"]),
            fmt.nbytes(row["kv_bytes_per_chip"]),
            fmt.seconds(row["tpot_s"]),
            fmt.seconds(row["tpot_lecture_hops_s"]),
        )
    out(t)
    lf = p["lecture_formula"]
    out(
        f"  lecture's c = N/(E P) + b len bytes/E with E = {lf['expert_chips']}, "
        f"b = {lf['microbatch']}, len = {lf['context']:,}:"
    )
    out(
        "  "
        + "; ".join(
            f"P = {x['stages']}: {fmt.nbytes(x['bytes_per_chip'])} (KV {fmt.nbytes(x['kv_bytes_per_chip'])})"
            for x in lf["rows"]
        )
    )
    out("\n[bold]4. Scale-up size[/] (D15, D23): weight-fetch floor N_total / (S x BW)")
    for row in r.scale_up:
        out(
            f"  S = {row['scale_up_chips']:>3}: {fmt.seconds(row['weight_fetch_floor_s'])}"
            + ("" if row["fits_in_domain"] else " (the weights do not fit in one domain)")
        )
    out("\n[bold]5. Stage balance[/] (D24): best contiguous split, slowest stage / mean")
    for row in r.stage_balance:
        out(
            f"  P = {row['stages']}: layers {'/'.join(map(str, row['stage_layers']))}, "
            f"imbalance {row['imbalance_weights']:.3f}; with KV at {row['kv_context']:,} tokens: "
            f"{'/'.join(map(str, row['stage_layers_with_kv']))}, {row['imbalance_with_kv']:.3f}"
        )
    out("\n" + efficiency_line({r.system: r.efficiency}))


def _frontier_table(points: Sequence[ParetoPoint], plan_header: str) -> Table:
    table = Table(show_edge=False, header_style="bold")
    for name in ("tok/s/user", "tok/s/chip", plan_header, "chips", "batch", "precision", "$/M out"):
        table.add_column(name, justify="right")
    for p in points:
        table.add_row(
            f"{p.tokens_per_s_per_user:,.1f}",
            f"{p.tokens_per_s_per_chip:,.0f}",
            p.plan_text,
            str(p.chips),
            f"{p.batch:,}",
            p.family,
            fmt.usd(p.usd_per_million_output_tokens),
        )
    return table
