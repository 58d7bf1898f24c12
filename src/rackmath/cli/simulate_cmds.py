"""`simulate`: requests through one planned replica under a serving runtime's caps."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from rackmath.analyses.deploy import simulate as sim
from rackmath.analyses.deploy.slo import Workload
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.catalog.loader import resolve_model
from rackmath.catalog.loader import system as catalog_system
from rackmath.catalog.runtimes import runtime as catalog_runtime
from rackmath.cli.main import app
from rackmath.cli.options import check_context, count, dump_json, efficiency_option
from rackmath.cli.output import console as cli_console
from rackmath.errors import InputError, RackmathError
from rackmath.numbers import parse_number
from rackmath.specs import checks
from rackmath.specs.workload import LengthDist, Requests, check_trace
from rackmath.units import SECONDS_PER_HOUR, SECONDS_PER_MINUTE
from rackmath.userfiles import read_text
from rackmath.views import fmt


class SloUnmetError(RackmathError):
    """No arrival rate meets the SLOs on this replica."""


def parse_rate(text: str) -> float:
    """``5/s``, ``5``, ``300/min`` -> requests per second (> 0)."""
    t = text.strip().lower()
    scale = 1.0
    for suffix, s in (("/s", 1.0), ("/min", 1 / SECONDS_PER_MINUTE), ("/h", 1 / SECONDS_PER_HOUR)):
        if t.endswith(suffix):
            t, scale = t[: -len(suffix)], s
            break
    value = parse_number(t, "--rate") * scale
    return checks.positive("--rate", value, allowed="requests per second > 0 (e.g. 5/s)", given=text)


def read_trace(path: Path) -> Requests:
    """CSV rows of ``arrival_s,input_tokens,output_tokens`` (a header line is allowed)."""
    rows = [r for r in csv.reader(io.StringIO(read_text(path, "--trace"))) if r and r[0].strip()]
    if rows and not rows[0][0].strip().lstrip("-").replace(".", "", 1).replace("e", "", 1).isdigit():
        rows = rows[1:]
    if not rows or any(len(r) < 3 for r in rows):
        raise InputError("--trace", str(path), "CSV rows of arrival_s,input_tokens,output_tokens")
    try:
        cols = [[float(r[j]) for r in rows] for j in range(3)]
    except ValueError as exc:
        raise InputError("--trace", str(path), f"numbers in every row ({exc})") from None
    return check_trace(*cols)


def _default_plan(heads: int, chips: int | None, domain: int) -> str:
    """Without --plan: tensor parallel over --chips (which must divide the heads), else over the
    largest divisor of the heads that fits one scale-up domain."""
    if chips is not None:
        if heads % chips:
            allowed = f"a --plan over the {chips} chips (without one, tp = --chips must divide {heads} heads)"
            raise InputError("--plan", None, allowed)
        return f"tp={chips}"
    return f"tp={max(t for t in range(1, min(heads, domain) + 1) if heads % t == 0)}"


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
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    efficiency: str = efficiency_option(),
) -> None:
    """Requests through one replica under a runtime's caps: TTFT, TPOT, end-to-end, max rate under SLOs."""
    spec, system = resolve_model(model), catalog_system(on)
    the_plan = plan or _default_plan(spec.attention.num_heads, chips, system.scale_up_domain_chips)
    dep = plan_deployment(spec, system, the_plan, efficiency=efficiency)
    if chips is not None and chips != dep.chips:
        raise InputError("--chips", chips, f"the plan's {dep.chips} chips ({the_plan})")
    profile = catalog_runtime(runtime).with_overrides(max_seqs=max_seqs, max_tokens=max_tokens)
    checks.whole_valued("--requests", requests, maximum=sim.MAX_REQUESTS)
    if trace is not None:
        reqs = read_trace(trace)
        i_max, o_max = float(reqs.input_tokens.max()), float(reqs.output_tokens.max())
        i_mean, o_mean = float(reqs.input_tokens.mean()), float(reqs.output_tokens.mean())
        dists = None
    else:
        i_dist = LengthDist.parse(input_len, "--input")
        o_dist = LengthDist.parse(output_len, "--output")
        i_max, o_max, i_mean, o_mean = i_dist.max_tokens, o_dist.max_tokens, i_dist.mean, o_dist.mean
        dists = (i_dist, o_dist)
    check_context(spec, i_max + o_max, "--input + --output")
    rep = sim.replica(dep, profile, max_context=i_max + o_max, mean_context=i_mean + o_mean)
    payload: dict[str, object] = {"model": spec.id, **rep.describe()}
    if disaggregated is not None:
        x, y = sim.parse_xpyd(disaggregated)
        pre_dep = dep
        if prefill_plan is not None:
            pre_dep = plan_deployment(spec, system, prefill_plan, efficiency=efficiency)
        pre = sim.replica(pre_dep, profile, max_context=i_max + 1, mean_context=i_mean + 1)
        fleet_search = None
        if slo is not None:
            if dists is None:
                raise InputError(
                    "--slo", slo, "a Poisson workload (--rate with --input/--output), not --trace"
                )
            fleet_search = sim.max_rate_disaggregated(
                pre,
                rep,
                x,
                y,
                *dists,
                sim.parse_slo(slo),
                requests=min(int(requests), sim.SEARCH_REQUESTS),
                seed=seed,
            )
            fleet_result = fleet_search.best
            _, tier = sim.kv_transfer_times_s(pre, rep, x, y, [i_mean])
        else:
            if dists is None:
                reqs_, r_ = reqs, None
            else:
                r_ = parse_rate(rate)
                reqs_ = Workload(r_, int(requests), *dists, seed).draw()
            fleet_result, tier = sim.disaggregated_run(pre, rep, x, y, reqs_, r_)
        payload = {
            "model": spec.id,
            "disaggregated": f"{x}P{y}D",
            "kv_tier": tier,
            "prefill": pre.describe(),
            "decode": rep.describe(),
        }
        if fleet_search is not None:
            payload["rate_search"] = fleet_search.to_dict()
        else:
            assert fleet_result is not None
            payload["result"] = fleet_result.to_dict()
        if as_json:
            typer.echo(dump_json(payload))
        else:
            c = cli_console()
            c.print(
                f"[bold]rackmath simulate[/] {spec.id}: {x}P{y}D on {system.chip.id}, prefill "
                f"{x} x {pre_dep.chips} chips ({pre_dep.plan}), decode {y} x {dep.chips} chips ({dep.plan}), "
                f"KV over {tier}, as {profile.name} {profile.version} ran each replica"
            )
            c.print(f"  efficiency: {dep.efficiency_label}")
            _render_search(fleet_search, c)
            if fleet_result is not None:
                _render_result(fleet_result, c)
                if fleet_search is not None:
                    c.print(
                        f"[bold]Answer[/]: at most {fleet_result.rate_per_s:.3g} requests/s meet the SLOs"
                    )
        if fleet_search is not None and fleet_search.best is None:
            _slo_unmet(
                fleet_search, slo, f"{x}P{y}D of {dep.chips} x {system.chip.id} ({dep.plan})", profile.id
            )
        return
    search = None
    if slo is not None:
        if dists is None:
            raise InputError("--slo", slo, "a Poisson workload (--rate with --input/--output), not --trace")
        limits = sim.parse_slo(slo)
        search = sim.max_rate(
            rep, *dists, limits, requests=min(int(requests), sim.SEARCH_REQUESTS), seed=seed
        )
        payload["rate_search"] = search.to_dict()
        result = search.best
    else:
        if dists is None:
            result = sim.run(rep, reqs)
        else:
            r = parse_rate(rate)
            result = sim.run(rep, Workload(r, int(requests), *dists, seed).draw(), r)
        payload["result"] = result.to_dict()
    if as_json:
        typer.echo(dump_json(payload))
    else:
        _render(rep, result, search, cli_console())
    if search is not None and search.best is None:
        _slo_unmet(search, slo, f"{dep.chips} x {system.chip.id} ({dep.plan})", profile.id)


def _slo_unmet(search: sim.RateSearch, slo: str | None, what: str, runtime: str) -> None:
    reached = ", ".join(f"{k} {fmt.seconds(v)}" for k, v in search.best_reached.items() if v is not None)
    raise SloUnmetError(
        f"--slo: no arrival rate meets {slo} on {what} under {runtime}; the best reached at the "
        f"lightest load is {reached} (loosen the SLO or use a bigger plan)"
    )


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
