"""``rackmath explain``: the blackboard derivation for one model on one system."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rackmath.analyses.serving.energy import DEFAULT_PUE, MAX_PUE
from rackmath.analyses.serving.explain import Explanation, cheapest_fitting_point, two_batch_split_points
from rackmath.analyses.serving.speculative import MAX_SPEC_DEPTH
from rackmath.api import deployment, explain
from rackmath.cli.main import app
from rackmath.cli.options import count, dump_json, efficiency_option, number, plot_option
from rackmath.cli.output import console as cli_console
from rackmath.specs.bounds import MAX_BATCH, MAX_CHIPS, MAX_CONTEXT, MAX_USD_PER_CHIP_HOUR
from rackmath.specs.lists import number_list
from rackmath.views import fmt
from rackmath.views.derivation import Section, derivation, explanation_dict, feature_sections
from rackmath.views.narrative import reading


@app.command("explain")
def explain_command(
    model: str = typer.Argument(..., help="Catalog id or alias, a path to config.json, or hf:owner/name."),
    on: str = typer.Option(..., "--on", help="System id, e.g. gb200-nvl72 (see `rackmath hardware`)."),
    chips: int | None = count(None, "--chips", help="Chips used (default: the system's).", maximum=MAX_CHIPS),
    batch: str = typer.Option("1,8,32,128,512,1024,2048,4096,8192", "--batch", help="Comma list."),
    context: str = typer.Option("4096", "--context", help="Comma list of context lengths (tokens)."),
    weights: str | None = typer.Option(
        None,
        "--weights",
        help="Weight format (default: as shipped; quantized: head, embeddings, router, norms stay 16-bit).",
    ),
    kv: str | None = typer.Option(None, "--kv", help="KV-cache format (default bf16)."),
    compute: str | None = typer.Option(None, "--compute", help="Compute precision (selects the peak)."),
    weight_classes: str | None = typer.Option(
        None,
        "--weight-classes",
        help="Weights per tensor class, e.g. experts=nvfp4,attention=fp8 (the rest: --weights).",
    ),
    price: float | None = number(
        None,
        "--price-per-chip-hour",
        help="USD per chip-hour (default: the catalog's dated price).",
        maximum=MAX_USD_PER_CHIP_HOUR,
        positive=True,
    ),
    plan: str | None = typer.Option(
        None, "--plan", help="Parallel plan over the chips, e.g. dp=64,ep=64: adds communication and memory."
    ),
    spec: str | None = typer.Option(
        None,
        "--spec",
        help="Speculative decoding (on --plan's step when given): draft=MODEL,k=3 or mtp|eagle|ngram=K, "
        "width=W for a tree, and acceptance=A[,A...] (rates), reach=P1,..,Pk or length=TAU[,..], "
        "e.g. mtp=1,acceptance=0.85 or eagle=5,width=4,length=3.2.",
    ),
    mtp: int | None = count(
        None,
        "--mtp",
        help="Multi-token prediction: draft tokens per step from an MTP head (with --acceptance).",
        maximum=MAX_SPEC_DEPTH,
    ),
    acceptance: str | None = typer.Option(
        None, "--acceptance", help="MTP acceptance rate in [0, 1], one or one per position: 0.8 or 0.8,0.6."
    ),
    prefix_hit: float | None = number(
        None,
        "--prefix-hit",
        help="Share of each prompt found in the prefix cache, in [0, 1), e.g. 0.6.",
        minimum=0.0,
        maximum=1.0,
    ),
    prefix_tier: str = typer.Option(
        "hbm",
        "--prefix-tier",
        help="Where the cached KV lives: hbm, host-dram, cxl, ssd or hdd (catalog tiers).",
    ),
    pue: float = number(
        DEFAULT_PUE,
        "--pue",
        help="Facility PUE for joules per token and tokens/s per MW.",
        minimum=1.0,
        maximum=MAX_PUE,
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    plot: Path | None = plot_option("Write latency and cost vs batch (PNG/SVG/PDF)."),
    efficiency: str = efficiency_option(),
) -> None:
    """Where the time of a forward pass goes, the balance batch, and what a token costs."""
    batches = number_list(batch, "--batch", integer=True, maximum=MAX_BATCH)
    contexts = number_list(context, "--context", integer=True, maximum=MAX_CONTEXT)
    dep = deployment(
        model,
        on,
        chips=chips,
        weights=weights,
        kv=kv,
        compute=compute,
        usd_per_chip_hour=price,
        efficiency=efficiency,
        weight_classes=weight_classes,
    )
    result = explain(
        dep,
        batches,
        contexts,
        plan=plan,
        spec=spec,
        mtp=mtp,
        acceptance=None
        if acceptance is None
        else number_list(acceptance, "--acceptance", minimum=0.0, maximum=1.0),
        prefix_hit=prefix_hit,
        prefix_tier=prefix_tier,
        pue=pue,
    )
    if plot is not None:
        from rackmath.plots.serving import save_explain_plot

        save_explain_plot(result, plot)
    if as_json:
        typer.echo(dump_json(explanation_dict(result)))
        return
    render(result, cli_console())
    if plot is not None:
        typer.echo(f"plot written to {plot}")


def render(result: Explanation, console: Console) -> None:
    d = result.deployment
    out = console.print
    out(f"[bold]rackmath explain[/] {d.model.name} on {d.system.name} ({d.chips} x {d.system.chip.id})")
    for section in derivation(result):
        _section(section, out)
    out("\n[bold]6. Decode over batch size[/]")
    out(_table(result))
    _render_operators(result, out)
    if result.planned is not None:
        _render_plan(result, out)
    for section in feature_sections(result):
        _section(section, out)
    out("\n[bold]Reading[/]")
    out("  " + reading(result))
    out("\n[dim]Assumptions: " + " ".join(_assumptions(result)) + "[/]")


def _section(section: Section, out: Callable[..., None]) -> None:
    """One section of the derivation the analysis wrote: a bold title, then its lines."""
    out(
        f"\n[bold]{escape(section.title)}[/]" + (f" ({escape(section.subtitle)})" if section.subtitle else "")
    )
    for line in section.lines:
        out("  " + escape(line))


def _assumptions(result: Explanation) -> list[str]:
    from rackmath.analyses.serving.explain import assumptions

    return list(assumptions(result.deployment))


def _table(result: Explanation) -> Table:
    g = result.decode
    table = Table(show_edge=False, header_style="bold")
    several_contexts = g.step_s.shape[1] > 1
    for name in (
        "batch",
        *(["context"] if several_contexts else []),
        "step",
        "compute",
        "weights",
        "KV",
        "bound by",
        "tok/s/user",
        "tok/s/chip",
        "$/M out",
        "MFU",
        "fits",
    ):
        table.add_column(name, justify="right")
    for j in range(g.step_s.shape[1]):
        for i in range(g.step_s.shape[0]):
            table.add_row(
                f"{g.batch[i, j]:,.0f}",
                *([f"{g.context[i, j]:,.0f}"] if several_contexts else []),
                fmt.seconds(g.step_s[i, j]),
                fmt.seconds(g.step.compute_s[i, j]),
                fmt.seconds(g.step.weight_fetch_s[i, j]),
                fmt.seconds(g.step.kv_fetch_s[i, j]),
                str(g.step.bottleneck[i, j]),
                f"{g.tokens_per_s_per_user[i, j]:,.0f}",
                f"{g.tokens_per_s_per_chip[i, j]:,.0f}",
                fmt.usd(g.usd_per_million_output_tokens[i, j]),
                fmt.pct(g.mfu[i, j]),
                "yes" if g.fits[i, j] else "no",
            )
    return table


def _render_operators(result: Explanation, out: Callable[..., None]) -> None:
    """Where the time of one step goes, operator by operator (the analysis picks the point)."""
    i, j = result.focus_index
    g = result.decode
    point = g.step.breakdown_at((i, j))
    step = float(g.step_s[i, j])
    band = g.band_at((i, j)).get("end_to_end")
    e2e = (
        f"; end-to-end {fmt.seconds(band['step_s_p10'])}-{fmt.seconds(band['step_s_p90'])}, "
        f"widened by this model's misses on {band['rows']} published rows"
        if band
        else ""
    )
    out(
        f"\n  Where the time goes at batch {g.batch[i, j]:,.0f}, L = {g.context[i, j]:,.0f}: "
        f"step {fmt.seconds(step)} (kernel curves' p10-p90 {fmt.seconds(g.step_s_p10[i, j])}-"
        f"{fmt.seconds(g.step_s_p90[i, j])}{e2e}), blackboard bound {fmt.seconds(point['blackboard_step_s'])}"
    )
    table = Table(show_edge=False, header_style="bold")
    for name in ("operator", "curve", "time", "share", "compute", "memory", "bound by"):
        table.add_column(name, justify="left" if name in ("operator", "curve", "bound by") else "right")
    marks: dict[str, str] = {}  # fallback reason -> its footnote mark
    for op in sorted(point["operators"], key=lambda o: -o["time_s"]):
        if op["time_s"] <= 0:
            continue
        k = op["kernel"]
        mark = marks.setdefault(k["fallback"], "*" * (len(marks) + 1)) if k["fallback"] else ""
        table.add_row(
            op["name"],
            "/".join(x for x in (k["kind"], k["format"]) if x)
            + (f" d{k['head_dim']}" if k.get("head_dim") else "")
            + mark,
            fmt.seconds(op["time_s"]),
            fmt.pct(op["time_s"] / step),
            fmt.seconds(op["compute_s"]),
            fmt.seconds(op["memory_s"]),
            op["bound"],
        )
    out(table)
    shares = point["time_shares_s"]
    out(
        f"  launch floors (latency): {fmt.pct(shares['latency'] / step)} of the step; "
        f"curves: {_curve_source(point)}"
    )
    for why, mark in marks.items():
        out(f"  {mark} {why}")


def _curve_source(point: dict[str, Any]) -> str:
    """Where the operators' curves come from: the chip whose tables they are, and whether transferred."""
    kernels = [op["kernel"] for op in point["operators"]]
    chips = sorted({k["chip"] for k in kernels if k["chip"]})
    tables = sorted({k["table"] for k in kernels})
    if tables == ["pure roofline"]:
        return "pure roofline"
    transferred = any(k["transferred"] for k in kernels)
    own = sorted(
        {k["chip"] for k in kernels if k["chip"] and not k["transferred"] and k["table"] != "pure roofline"}
    )
    if transferred and own:  # a chip with some tables of its own, the donor's for the rest
        donors = sorted({k["chip"] for k in kernels if k["chip"] and k["transferred"]})
        return (
            f"{', '.join(own)}'s measured tables where it has them, {', '.join(donors)}'s for the rest "
            "(transferred, scaled by this chip's peaks)"
        )
    return f"{', '.join(chips)}'s measured tables" + (
        " (transferred, scaled by this chip's peaks)" if transferred else ""
    )


#: How section 7 names the collectives a plan's step has (each only where the step has it).
_COLLECTIVE_WORDS = (
    ("tp_all_reduce", "TP all-reduce twice per layer"),
    ("moe_tp_all_reduce", "the experts' TP all-reduce per MoE layer"),
    ("ep_dispatch", "EP all-to-all dispatch + combine per MoE layer"),
    ("cp", "the CP group's gathers and merges per layer"),
    ("pp_send", "PP hops"),
)


def _render_plan(result: Explanation, out: Callable[..., None]) -> None:
    p = result.planned
    assert p is not None
    dep = p.deployment
    out(f"\n[bold]7. With the plan {dep.plan}[/] (communication over the real topology, memory per chip)")
    combine = "added to" if dep.comm_overlap_frac == 0 else "partly overlapped with"
    names = {"cp" if op.name.startswith("cp_") else op.name for op in p.step.collectives}
    said = [text for key, text in _COLLECTIVE_WORDS if key in names] or ["no communication"]
    out(f"  {', '.join(said)}; communication is {combine} the roofline step")
    for note in dep.notes:
        out(f"  {note}")
    table = Table(show_edge=False, header_style="bold")
    several = p.step_s.shape[1] > 1
    for name in (
        "batch",
        *(["context"] if several else []),
        "step",
        "ideal",
        "TP comm",
        "EP comm",
        "bound by",
        "tok/s/chip",
        "$/M out",
        "mem/chip",
        "fits",
    ):
        table.add_column(name, justify="right")
    s = p.step
    for j in range(p.step_s.shape[1]):
        for i in range(p.step_s.shape[0]):
            table.add_row(
                f"{p.batch[i, j]:,.0f}",
                *([f"{p.context[i, j]:,.0f}"] if several else []),
                fmt.seconds(p.step_s[i, j]),
                fmt.seconds(result.decode.step_s[i, j]),
                fmt.seconds(s.tp_comm_s[i, j]),
                fmt.seconds(s.ep_comm_s[i, j]),
                str(s.bottleneck[i, j]),
                f"{p.tokens_per_s_per_chip[i, j]:,.0f}",
                fmt.usd(p.usd_per_million_output_tokens[i, j]),
                fmt.nbytes(p.memory_bytes_per_chip[i, j]),
                "yes" if p.fits[i, j] else "no",
            )
    out(table)
    for op in s.collectives:  # what each collective ran on (and how it was extrapolated)
        k = op.kernel
        table_name = k.table.split("systems/data/")[-1]  # the package path's tail
        ran = table_name if not k.fmt else f"{k.fmt} ({table_name})"
        out(f"  {op.name}: {ran}" + (f"; {k.fallback}" if k.fallback else ""))
    if dep.plan.tbo:
        n, total = two_batch_split_points(p)
        out(
            f"  Two-batch overlap splits the step into two half micro-batches at {n:,} of {total:,} points, "
            "where that is faster than one pass plus its all-to-all (each half reads the weights again)."
        )
    best = cheapest_fitting_point(p)
    if best is not None:
        bi, bj = best
        usd = p.usd_per_million_output_tokens[bi, bj]
        ideal = result.decode.usd_per_million_output_tokens[bi, bj]
        out(
            f"  Under {dep.plan} the cheapest point that fits is batch {p.batch[bi, bj]:,.0f} at "
            f"{fmt.usd(usd)} per million tokens, {usd / ideal:.1f}x the ideal chip's "
            f"{fmt.usd(ideal)}: replicated weights, "
            + ("the expert all-to-all" if "ep_dispatch" in names else "communication")
            + " and per-chip memory are the price of a real layout."
        )
