"""`simulate`: requests through one planned replica under a serving runtime's caps."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from rackmath import api
from rackmath.analyses.deploy import simulate as sim
from rackmath.analyses.deploy.simulation_report import SimulationReport
from rackmath.analyses.deploy.slo import parse_trace
from rackmath.cli.main import app
from rackmath.cli.options import count, dump_json, efficiency_option
from rackmath.cli.output import console as cli_console
from rackmath.specs.workload import Requests
from rackmath.userfiles import read_text
from rackmath.views import fmt


def read_trace(path: Path) -> Requests:
    """``--trace FILE``: CSV rows of ``arrival_s,input_tokens,output_tokens`` (a header line is
    allowed), read as :func:`rackmath.analyses.deploy.slo.parse_trace` reads the text."""
    return parse_trace(read_text(path, "--trace"), "--trace")


@app.command("simulate")
def simulate_command(
    model: str = typer.Argument(..., help="Catalog id or alias, a config.json path, or hf:owner/name."),
    on: str = typer.Option(..., "--on", help="System id, e.g. h200-hgx."),
    chips: int | None = count(None, "--chips", help="Chips of one replica (default: tp over the plan)."),
    plan: str | None = typer.Option(None, "--plan", help="Parallel plan, e.g. tp=8 or dp=8,ep=8."),
    rate: str = typer.Option("5/s", "--rate", help="Poisson arrival rate, e.g. 5/s."),
    requests: float = typer.Option(1e4, "--requests", help="Requests to simulate (up to 1e6)."),
    input_len: str = typer.Option("lognormal:2000", "--input", help="N, uniform:LO-HI or lognormal:MEAN."),
    output_len: str = typer.Option("500", "--output", help="N, uniform:LO-HI or lognormal:MEAN."),
    runtime: str = typer.Option("vllm", "--runtime", help="vllm, sglang, trtllm or ideal."),
    max_seqs: int | None = count(None, "--max-seqs", help="Override the runtime's sequence cap."),
    max_tokens: int | None = count(None, "--max-tokens", help="Override the runtime's token budget."),
    trace: Path | None = typer.Option(None, "--trace", help="CSV of arrival_s,input_tokens,output_tokens."),
    slo: str | None = typer.Option(None, "--slo", help="Find the max rate, e.g. ttft_p99=2s,tpot_p99=50ms."),
    seed: int = count(0, "--seed", help="Random seed.", minimum=0, maximum=2**31),
    disaggregated: str | None = typer.Option(
        None, "--disaggregated", help="Simulate an xPyD fleet, e.g. 2P1D (prefill and decode replicas)."
    ),
    prefill_plan: str | None = typer.Option(
        None, "--prefill-plan", help="With --disaggregated: the prefill replicas' plan (default --plan)."
    ),
    weights: str | None = typer.Option(None, "--weights", help="Weight format (default: as shipped)."),
    kv: str | None = typer.Option(None, "--kv", help="KV-cache format (default bf16)."),
    weight_classes: str | None = typer.Option(
        None,
        "--weight-classes",
        help="Weights per tensor class, e.g. experts=nvfp4,attention=fp8 (the rest: --weights).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    efficiency: str = efficiency_option(),
) -> None:
    """Requests through one replica under a runtime's caps: TTFT, TPOT, end-to-end, max rate under SLOs."""
    report = api.simulate(
        model,
        on,
        chips=chips,
        plan=plan,
        rate=rate,
        requests=requests,
        input_len=input_len,
        output_len=output_len,
        runtime=runtime,
        max_seqs=max_seqs,
        max_tokens=max_tokens,
        trace=None if trace is None else read_trace(trace),
        slo=slo,
        seed=seed,
        disaggregated=disaggregated,
        prefill_plan=prefill_plan,
        efficiency=efficiency,
        weights=weights,
        kv=kv,
        weight_classes=weight_classes,
    )
    if as_json:
        typer.echo(dump_json(report.to_dict()))
    elif report.xpyd is None:
        _render(report.decode, report.result, report.search, cli_console())
    else:
        _render_disaggregated(report, cli_console())
    report.require_slo()


def _render_disaggregated(report: SimulationReport, c: Console) -> None:
    assert report.prefill is not None and report.xpyd is not None
    x, y = report.xpyd
    pre, dep, p = report.prefill.deployment, report.decode.deployment, report.runtime
    c.print(
        f"[bold]rackmath simulate[/] {report.model}: {x}P{y}D on {dep.system.chip.id}, prefill "
        f"{x} x {pre.chips} chips ({pre.plan}), decode {y} x {dep.chips} chips ({dep.plan}), "
        f"KV over {report.kv_tier}, as {p.name} {p.version} ran each replica"
    )
    c.print(f"  efficiency: {dep.efficiency_label}")
    _render_search(report.search, c)
    if report.result is not None:
        _render_result(report.result, c)
        if report.search is not None:
            c.print(f"[bold]Answer[/]: at most {report.result.rate_per_s:.3g} requests/s meet the SLOs")


def _render(
    rep: sim.Replica, r: sim.SimulationResult | None, search: sim.RateSearch | None, c: Console
) -> None:
    d, lim, p = rep.deployment, rep.limits, rep.runtime
    c.print(
        f"[bold]rackmath simulate[/] {d.model.id} on {d.chips} x {d.system.chip.id} ({d.plan}), "
        f"as {p.name} {p.version} ran it"
    )
    c.print(
        f"  caps: {lim.max_seqs:,} sequences, {lim.max_tokens:,} tokens/step, chunk {lim.chunk_tokens:,}; "
        f"KV pool {lim.kv_tokens:,.0f} tokens ({float(p.memory_frac(d.dims.engine_chips)):g} of "
        f"{p.kv_memory_basis} memory); "
        f"policy {p.policy}"
    )
    c.print(f"  efficiency: {d.efficiency_label}")
    _render_search(search, c)
    if r is None:
        return
    _render_result(r, c)
    if search is not None and search.best is not None:
        c.print(f"[bold]Answer[/]: at most {r.rate_per_s:.3g} requests/s meet the SLOs")


def _render_search(search: sim.RateSearch | None, c: Console) -> None:
    if search is not None:
        rates = ", ".join(f"{x.rate_per_s:.3g}" for x in search.probes if x.rate_per_s)
        limits = ", ".join(f"{k} <= {fmt.seconds(v)}" for k, v in search.slo.items())
        c.print(f"  rate search under {limits}: probed {rates} requests/s")


def _render_result(r: sim.SimulationResult, c: Console) -> None:
    t = Table(show_edge=False, header_style="bold")
    for name in ("", "p50", "p90", "p99"):
        t.add_column(name, justify="right")
    for m in ("ttft", "tpot", "e2e"):
        vals = [r.metrics[f"{m}_p{q}"] for q in (50, 90, 99)]
        t.add_row(m.upper(), *(fmt.seconds(v) if v is not None else "-" for v in vals))
    c.print(t)
    rate = f"{r.rate_per_s:.3g} requests/s offered, " if r.rate_per_s else ""
    c.print(
        f"  {r.requests:,} requests: {rate}{r.requests_per_s:.3g} served/s, "
        f"{r.output_tokens_per_s:,.0f} output tokens/s, mean decode batch {r.mean_decode_batch:.1f}, "
        f"{r.steps:,} steps"
    )
