"""`simulate`: requests through one planned replica under a serving runtime's caps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from rackmath import api
from rackmath.analyses.deploy import rate_search
from rackmath.analyses.deploy import simulate as sim
from rackmath.analyses.deploy import slo as slo_
from rackmath.analyses.deploy.simulation_report import SimulationReport
from rackmath.analyses.serving.speculative import MAX_SPEC_DEPTH
from rackmath.cli.main import app
from rackmath.cli.options import count, dump_json, efficiency_option, number, plot_option
from rackmath.cli.output import console as cli_console
from rackmath.views import fmt


@app.command("simulate")
def simulate_command(
    model: str = typer.Argument(..., help="Catalog id or alias, a config.json path, or hf:owner/name."),
    on: str = typer.Option(..., "--on", help="System id, e.g. h200-hgx."),
    chips: int | None = count(None, "--chips", help="Chips of one replica (default: tp over the plan)."),
    plan: str | None = typer.Option(None, "--plan", help="Parallel plan, e.g. tp=8 or dp=8,ep=8."),
    rate: str | None = typer.Option(
        None, "--rate", help="Poisson arrival rate, e.g. 5/s (default 5/s; with --slo: search the rates)."
    ),
    requests: float = typer.Option(1e4, "--requests", help="Requests to simulate (up to 1e6)."),
    input_len: str = typer.Option("lognormal:2000", "--input", help="N, uniform:LO-HI or lognormal:MEAN."),
    output_len: str = typer.Option("500", "--output", help="N, uniform:LO-HI or lognormal:MEAN."),
    runtime: str = typer.Option(
        "vllm", "--runtime", help="vllm, sglang, trtllm, trtllm-chunked, trtllm-0.18 or ideal."
    ),
    max_seqs: int | None = count(None, "--max-seqs", help="Override the runtime's sequence cap."),
    max_tokens: int | None = count(None, "--max-tokens", help="Override the runtime's token budget."),
    trace: Path | None = typer.Option(
        None, "--trace", help="CSV of arrival_s,input_tokens,output_tokens, or Mooncake JSON lines."
    ),
    slo: str | None = typer.Option(
        None, "--slo", help="Limits, e.g. ttft_p99=2s,tpot_p99=50ms or ttft=2s,tpot=50ms."
    ),
    attainment: float | None = number(
        None, "--attainment", help="Share of requests meeting every limit (default 0.99 for bare limits)."
    ),
    prefix_hit: float | None = number(
        None,
        "--prefix-hit",
        help="Share of each prompt found in the prefix cache (0-1).",
        minimum=0.0,
        maximum=1.0,
    ),
    host_cache: float = number(
        0.0, "--host-cache", help="Host memory for KV evicted from HBM, bytes (e.g. 512G).", minimum=0.0
    ),
    host_link: float | None = number(
        None,
        "--host-link",
        help="Each chip's host link, bytes/s per direction (default: the catalog's).",
        positive=True,
    ),
    seed: int = count(0, "--seed", help="Random seed.", minimum=0, maximum=2**31),
    disaggregated: str | None = typer.Option(
        None, "--disaggregated", help="Simulate an xPyD fleet, e.g. 2P1D (prefill and decode replicas)."
    ),
    prefill_plan: str | None = typer.Option(
        None, "--prefill-plan", help="With --disaggregated: the prefill replicas' plan (default --plan)."
    ),
    weights: str | None = typer.Option(
        None,
        "--weights",
        help="Weight format (default: as shipped; quantized: head, embeddings, router, norms stay 16-bit).",
    ),
    kv: str | None = typer.Option(None, "--kv", help="KV-cache format (default bf16)."),
    weight_classes: str | None = typer.Option(
        None,
        "--weight-classes",
        help="Weights per tensor class, e.g. experts=nvfp4,attention=fp8 (the rest: --weights).",
    ),
    plot: Path | None = plot_option("Write the attainment curve (with --slo) or the latency CDFs."),
    mtp: int = count(
        0, "--mtp", help="MTP draft tokens a decode step (0: none).", minimum=0, maximum=MAX_SPEC_DEPTH
    ),
    acceptance: float = number(
        0.8, "--acceptance", help="With --mtp: acceptance per draft.", minimum=0.0, maximum=1.0
    ),
    spec: str | None = typer.Option(
        None, "--spec", help="Speculation in full, e.g. eagle=3,width=2,acceptance=0.7,0.6,0.5."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    efficiency: str = efficiency_option(),
) -> None:
    """Requests through a replica under a runtime's caps: TTFT, TPOT, ITL, SLO attainment, goodput."""
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
        trace=trace,
        slo=slo,
        attainment=attainment,
        prefix_hit=prefix_hit,
        host_cache_bytes=host_cache,
        host_link_bytes_per_s=host_link,
        seed=seed,
        disaggregated=disaggregated,
        prefill_plan=prefill_plan,
        efficiency=efficiency,
        weights=weights,
        kv=kv,
        weight_classes=weight_classes,
        mtp=mtp,
        acceptance=acceptance,
        spec=spec,
    )
    if plot is not None:
        _save_plot(report, plot)
    if as_json:
        typer.echo(dump_json(report.to_dict()))
    elif report.search is not None:
        _render_search(report.search, cli_console())
    else:
        assert report.run is not None
        _render_run(report.run, cli_console())
    report.require_slo()


def _save_plot(report: SimulationReport, plot: Path) -> None:
    from rackmath.plots.deploy import save_attainment_plot, save_latency_plot

    if report.search is not None:
        save_attainment_plot(report.search, plot)
    else:
        assert report.run is not None
        save_latency_plot(report.run, plot)


def _header(setup: dict[str, Any], c: Console) -> None:
    if "decode" in setup:
        pools = [("prefill", setup["prefill"]), ("decode", setup["decode"])]
        what = f"{setup['disaggregated']}, KV over {setup['kv_tier']}"
        c.print(f"[bold]rackmath simulate[/] {setup['model']}: {what}")
    else:
        pools = [("replica", setup)]
        c.print(f"[bold]rackmath simulate[/] {setup['model']}")
    for name, pool in pools:
        d, rt = pool["deployment"], pool["runtime"]
        chunked = "" if rt["chunked_prefill"] else " (prefill not chunked)"
        c.print(
            f"  {name}: {d['chips']} x {d['chip']} ({d['plan_text']}), as {rt['name']} {rt['version']} "
            f"ran it: {rt['max_seqs']:,} sequences, {rt['max_tokens']:,} tokens/step, chunk "
            f"{rt['chunk_tokens']:,}{chunked}; KV pool {rt['kv_pool_tokens']:,.0f} tokens "
            f"({rt['kv_memory_frac']:g} of {rt['kv_memory_basis']} memory); policy {rt['policy']}"
        )
        c.print(f"  efficiency: {d['efficiency']['label']}")
        host = pool.get("host_tier")
        if host:
            c.print(
                f"  host tier: {host['kv_tokens']:,.0f} tokens of KV, loaded over {host['link']} at "
                f"{fmt.seconds(host['load_s_per_token'] * 1e3)} per 1,000 tokens"
            )


def _latency_table(r: sim.SimulationResult, c: Console) -> None:
    t = Table(show_edge=False, header_style="bold")
    for name in ("", "p50", "p90", "p99"):
        t.add_column(name, justify="right")
    for m in sim.METRICS:
        vals = [r.metrics[f"{m}_p{q}"] for q in sim.PERCENTILES]
        t.add_row(m.upper(), *(fmt.seconds(v) if v is not None else "-" for v in vals))
    c.print(t)


def _throughput_line(r: sim.SimulationResult, c: Console) -> None:
    rate = f"{r.rate_per_s:.3g} requests/s offered, " if r.rate_per_s else ""
    c.print(
        f"  {r.requests:,} requests: {rate}{r.requests_per_s:.3g} served/s, "
        f"{r.output_tokens_per_s:,.0f} output tokens/s, mean decode batch {r.mean_decode_batch:.1f}, "
        f"{r.steps:,} steps"
    )
    if r.prefix_hit_frac is not None:
        host = "" if not r.host_hit_frac else f", {r.host_hit_frac:.1%} loaded back from the host tier"
        c.print(f"  prefix cache: {r.prefix_hit_frac:.1%} of prompt tokens found cached{host}")


def _attainment_lines(a: slo_.Attainment, s: slo_.Slo, c: Console) -> None:
    shares = ", ".join(f"{k} {v:.1%}" for k, v in a.met_frac.items())
    together = "" if a.all_frac is None else f"; all together {a.all_frac:.1%}"
    c.print(f"  SLO {s.describe()}: within each limit {shares}{together}")
    c.print(
        f"  goodput {a.goodput_requests_per_s:.3g} requests/s ({a.goodput_output_tokens_per_s:,.0f} output "
        f"tokens/s) of {a.requests_per_s:.3g} served; the SLO is {'met' if a.meets_slo else 'missed'}"
    )


def _render_run(run: slo_.SloRun, c: Console) -> None:
    _header(run.setup, c)
    _latency_table(run.result, c)
    _throughput_line(run.result, c)
    if run.attainment is not None and run.slo is not None:
        _attainment_lines(run.attainment, run.slo, c)


def _render_search(found: rate_search.SloSearch, c: Console) -> None:
    _header(found.setup, c)
    c.print(f"  attainment curve under {found.slo.describe()} (capacity {found.capacity_rate_per_s:.3g}/s):")
    t = Table(show_edge=False, header_style="bold")
    keys = [lim.key for lim in found.slo.limits]
    for name in ("rate/s", "measured", "all", *keys, "goodput/s", "SLO"):
        t.add_column(name, justify="right")
    for p in found.points:
        a = p.attainment
        t.add_row(
            f"{p.rate_per_s:.3g}",
            f"{a.requests:,}",
            "-" if a.all_frac is None else f"{a.all_frac:.1%}",
            *(f"{a.met_frac[k]:.1%}" for k in keys),
            f"{a.goodput_requests_per_s:.3g}",
            "met" if a.meets_slo else "missed",
        )
    c.print(t)
    if found.best is not None:
        b = found.best
        w = b.window
        c.print(
            f"  at {b.rate_per_s:.3g}/s: warm-up {fmt.seconds(w.warmup_s)} not counted, "
            f"{fmt.seconds(w.measure_s)} measured ({b.attainment.requests:,} requests), "
            f"tail {fmt.seconds(w.tail_s)}"
        )
        _latency_table(b.result, c)
        _throughput_line(b.result, c)
        _attainment_lines(b.attainment, found.slo, c)
        c.print(f"[bold]Answer[/]: at most {b.rate_per_s:.3g} requests/s meet the SLO")
