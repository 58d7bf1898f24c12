"""`plan`, `pareto` and `layout`: deployments over a real topology."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from rackmath.analyses.deploy import candidates, plan_features
from rackmath.analyses.deploy import search as srch
from rackmath.analyses.deploy.candidates import (
    ASSUMPTIONS,
    BATCH_GRID,
    DEFAULT_MAX_CHIPS,
    DEFAULT_PRECISIONS,
    DEFAULT_SYSTEMS,
    PRECISION_CHOICES,
    Choice,
    Workload,
)
from rackmath.analyses.deploy.frontier import ParetoPoint, pareto
from rackmath.analyses.deploy.layout import LayoutReport, layout
from rackmath.analyses.deploy.plan_features import PlanFeatures
from rackmath.analyses.deploy.simulate import parse_slo
from rackmath.catalog.loader import resolve_model
from rackmath.catalog.loader import system as catalog_system
from rackmath.catalog.runtimes import runtime as catalog_runtime
from rackmath.cli.main import app
from rackmath.cli.options import (
    MAX_BATCH,
    MAX_CONTEXT,
    MAX_TRAFFIC,
    check_context,
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
from rackmath.errors import InputError, RackmathError
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.views import fmt
from rackmath.views.fmt import efficiency_line


class InfeasibleError(RackmathError):
    """A valid request no deployment in the searched space can meet."""


#: Work budget of `plan`: (plans x batches x precision families) deployments evaluated.
MAX_SEARCH_CANDIDATES = 3_000_000
#: Most chips per replica the search and the frontier consider.
MAX_SEARCH_CHIPS = 2**14


def _check_search_size(
    model: ModelSpec,
    systems: list[SystemSpec],
    precisions: list[str],
    max_chips: int,
    budget: int,
    redundant_experts: int = 0,
) -> None:
    """Refuse a search whose candidate count exceeds ``budget`` before doing it."""
    plans = sum(
        len(candidates.enumerate_plans(model, s, max_chips=max_chips, redundant_experts=redundant_experts))
        for s in systems
    )
    total = plans * len(BATCH_GRID) * len(precisions)
    if total > budget:
        raise InputError(
            "--max-chips",
            max_chips,
            f"a search within the budget of {budget:,} deployments (this one has {total:,}): lower "
            "--max-chips, name fewer --hardware or --precision, or raise --max-candidates",
        )


def _check_precisions(model: ModelSpec, systems: list[SystemSpec], precisions: list[str]) -> None:
    """Refuse precision families that no searched system has a peak for (nothing to search)."""
    for name in precisions:
        if name not in PRECISION_CHOICES:
            raise InputError("--precision", name, ", ".join(PRECISION_CHOICES))
    if any(candidates.precision_family(p, model, s) is not None for s in systems for p in precisions):
        return
    have = "; ".join(
        f"{s.id} has {', '.join(p for p in PRECISION_CHOICES if candidates.precision_family(p, model, s))}"
        for s in systems
    )
    raise InputError("--precision", ",".join(precisions), f"a precision the systems support ({have})")


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
_ACCEPTANCE = number(
    0.8, "--acceptance", help="MTP acceptance rate per draft position.", minimum=0, maximum=1
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
    acceptance: float = _ACCEPTANCE,
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    efficiency: str = efficiency_option(),
) -> None:
    """The cheapest deployment that meets the SLOs, runners-up, and why the others failed."""
    spec = resolve_model(model)
    check_context(spec, input_len + output_len, "--input-len + --output-len")
    systems = [catalog_system(s) for s in ([on] if on else names(hardware, "--hardware"))]
    precisions = names(precision, "--precision")
    _check_precisions(spec, systems, precisions)
    routing = PlanFeatures(redundant_experts, skew, plan_features.parse_tbo(tbo), mtp, acceptance)
    factor = 3 if disaggregated else 1  # the pools evaluate decode and prefill candidates too
    _check_search_size(spec, systems, precisions, max_chips, max_candidates // factor, redundant_experts)
    ttft_s = None if ttft_ms is None else ttft_ms / 1e3
    tpot_s = None if tpot_ms is None else tpot_ms / 1e3
    if slo is not None:
        limits = parse_slo(slo)
        unknown = set(limits) - {"ttft_p99", "tpot_p99"}
        if unknown:
            allowed = "ttft_p99 and tpot_p99 limits (plan has no queueing; see simulate)"
            raise InputError("--slo", slo, allowed)
        ttft_s, tpot_s = limits.get("ttft_p99", ttft_s), limits.get("tpot_p99", tpot_s)
    work = Workload(
        traffic_tokens_per_s=traffic,
        input_len=input_len,
        output_len=output_len,
        ttft_s=ttft_s,
        tpot_s=tpot_s,
    )
    result = srch.search(
        spec,
        systems,
        work,
        precisions=tuple(precisions),
        max_chips=max_chips,
        disaggregated=disaggregated,
        runtime=None if runtime is None else catalog_runtime(runtime),
        efficiency=efficiency,
        routing=routing,
    )
    if as_json:
        typer.echo(dump_json(result.to_dict()))
    else:
        _render_plan(result, cli_console())
        cli_console().print(efficiency_line(result.efficiency))
    if result.best is None and result.disaggregated is None:
        raise InfeasibleError(f"no deployment meets the SLOs; {result.infeasible_reason}")


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
        f"{w.input_len:,} in / {w.output_len:,} out, {slo}"
    )
    spec_ = r.space.get("speculation")
    if spec_:
        out(
            f"  MTP: {spec_['mtp']} draft tokens a step at acceptance {spec_['acceptance']:g}: "
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
    acceptance: float = _ACCEPTANCE,
    plot: Path | None = plot_option("Write the frontier (PNG/SVG/PDF)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    efficiency: str = efficiency_option(),
) -> None:
    """Tokens/s per chip against tokens/s per user: the frontier over plans and batches."""
    spec, sys_ = resolve_model(model), catalog_system(on)
    check_context(spec, input_len + output_len, "--input-len + --output-len")
    precisions = names(precision, "--precision")
    _check_precisions(spec, [sys_], precisions)
    cap = max_chips or max(sys_.scale_up_domain_chips, 64)
    routing = PlanFeatures(redundant_experts, skew, plan_features.parse_tbo(tbo), mtp, acceptance)
    _check_search_size(spec, [sys_], precisions, cap, MAX_SEARCH_CANDIDATES, redundant_experts)
    result = pareto(
        spec,
        sys_,
        input_len=input_len,
        output_len=output_len,
        precisions=tuple(precisions),
        max_chips=max_chips,
        disaggregated=disaggregated,
        runtime=None if runtime is None else catalog_runtime(runtime),
        efficiency=efficiency,
        routing=routing,
    )
    if plot is not None:
        from rackmath.plots.deploy import save_pareto_plot

        save_pareto_plot(result, plot)
    if as_json:
        features = {"moe_routing": routing.to_dict(), "speculation": routing.speculation_dict()}
        typer.echo(dump_json({**result.to_dict(), **features}))
        return
    console = cli_console()
    console.print(
        f"[bold]rackmath pareto[/] {result.model} on {result.system}, {input_len:,} in / {output_len:,} out "
        f"({result.candidates_evaluated:,} deployments, {len(result.frontier)} on the frontier)\n"
    )
    if routing.mtp:
        console.print(
            f"MTP: {routing.mtp} draft tokens a step at acceptance {routing.acceptance:g} "
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
    weights: str | None = typer.Option(None, "--weights", help="Weight format (default: as shipped)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    efficiency: str = efficiency_option(),
) -> None:
    """The lecture's layout arguments (D13-D24) for a model on a system."""
    spec = resolve_model(model)
    check_context(spec, context, "--context")
    system = catalog_system(on)
    report = layout(spec, system, batch=batch, context=context, weights=weights, efficiency=efficiency)
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
