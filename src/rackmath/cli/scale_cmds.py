"""``rackmath fleet | overtrain | sparsity``: how big a fleet, how far past Chinchilla, how sparse.

Each parses its options into specs, calls one analysis and renders its result; ``--json``
prints the result's ``to_dict()`` and ``--plot FILE`` draws it (rackmath.plots.economics).
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from rackmath import api
from rackmath.analyses.economics import fleet, overtrain, sparsity
from rackmath.analyses.economics import overtrain as ot
from rackmath.cli.main import app
from rackmath.cli.options import count, duration, efficiency_option, emit, number, one, plot_option, plural
from rackmath.cli.output import make_table
from rackmath.specs.bounds import MAX_CONTEXT, MAX_TRAFFIC, MAX_USD_PER_CHIP_HOUR
from rackmath.specs.lists import number_list
from rackmath.units import SECONDS_PER_DAY, SECONDS_PER_HOUR
from rackmath.views import fmt

_JSON = typer.Option(False, "--json", help="Print the result as JSON.")
_PLOT = plot_option()


# ----------------------------------------------------------------------------- fleet
@app.command("fleet")
def fleet_command(
    traffic: float = number(
        "500M", "--traffic", help="Global output tokens per second.", maximum=MAX_TRAFFIC, positive=True
    ),
    batch: int = count(
        fleet.LECTURE_BATCH, "--batch", help="Sequences per replica (max batch).", maximum=fleet.MAX_BATCH
    ),
    step: float | None = duration(
        None, "--step", help="Decode step time (default 15.625ms), e.g. 20ms.", maximum_s=SECONDS_PER_HOUR
    ),
    model: str | None = typer.Option(None, "--model", help="Take step times from this model's roofline..."),
    on: str | None = typer.Option(None, "--on", help="...on this system."),
    context: int = count(4096, "--context", help="Context for roofline step times.", maximum=MAX_CONTEXT),
    chips_per_replica: int | None = count(
        None, "--chips-per-replica", help="Default 72 or the system's.", maximum=2**18
    ),
    price: float | None = number(
        None, "--price-per-chip-hour", help="USD per chip-hour.", maximum=MAX_USD_PER_CHIP_HOUR, positive=True
    ),
    output_tokens: int = count(
        fleet.DEFAULT_OUTPUT_TOKENS,
        "--output-tokens",
        help="Tokens per request.",
        maximum=fleet.MAX_OUTPUT_TOKENS,
    ),
    loads: str = typer.Option("0.2,0.5,0.8,0.95", "--loads", help="Simulated loads, fractions of capacity."),
    requests: int = count(
        6000, "--requests", help="Arrivals simulated per load (at least).", maximum=fleet.MAX_REQUESTS
    ),
    seed: int = count(0, "--seed", help="Random seed.", minimum=0, maximum=2**32 - 1),
    max_sim_requests: int = count(
        fleet.MAX_SIMULATED_REQUESTS,
        "--max-sim-requests",
        help="Work budget: simulated arrivals.",
        maximum=1e9,
    ),
    max_sim_steps: int = count(
        fleet.MAX_SIMULATED_STEPS, "--max-sim-steps", help="Work budget: simulated decode steps.", maximum=1e9
    ),
    as_json: bool = _JSON,
    plot: Path | None = _PLOT,
    efficiency: str = efficiency_option(),
) -> None:
    """Replicas, chips and dollars for a traffic; batching as a train; a simulation under load."""
    result = api.fleet(
        traffic=traffic,
        batch=batch,
        step_s=step,
        model=model,
        on=on,
        context=context,
        chips_per_replica=chips_per_replica,
        usd_per_chip_hour=price,
        output_tokens=output_tokens,
        loads=number_list(loads, "--loads", minimum=1e-6, maximum=fleet.MAX_LOAD_FRAC, most=fleet.MAX_LOADS),
        requests=requests,
        seed=seed,
        max_sim_requests=max_sim_requests,
        max_sim_steps=max_sim_steps,
        efficiency=efficiency,
    )
    from rackmath.plots.economics import save_fleet_plot

    emit(result, as_json, plot, save_fleet_plot, _render_fleet)


def _render_fleet(f: fleet.Fleet, console: Console) -> None:
    out = console.print
    out("[bold]rackmath fleet[/]\n")
    out(
        f"  one replica: {f.batch:,.0f} sequences / {fmt.seconds(f.step_s)} per step = "
        f"{f.tokens_per_s_per_replica:,.0f} tokens/s   ({f.source})"
    )
    if f.efficiency is not None:
        out(f"  efficiency: {f.efficiency['label']}")
    out(
        f"  traffic {fmt.si(f.traffic_tokens_per_s, 'tokens/s')} -> {plural(f.replicas, 'replica')} x "
        f"{f.chips_per_replica} chips = "
        f"{f.chips:,} chips; {fmt.usd(f.usd_per_day)}/day at {fmt.usd(f.usd_per_chip_hour)}/chip-hour "
        f"({fmt.usd(f.usd_per_million_tokens)} per million tokens)"
    )
    t = f.train
    out(
        f"\n  batching as a train (D8): a batch departs every T = {fmt.seconds(t.interval_s)} and runs "
        f"{fmt.seconds(t.run_s)}: "
        f"worst latency T + run = {fmt.seconds(t.closed_form_worst_s)} (simulated "
        f"{fmt.seconds(t.worst_latency_s)}), "
        f"mean T/2 + run = {fmt.seconds(t.closed_form_mean_s)} (simulated {fmt.seconds(t.mean_latency_s)})"
    )
    out(
        f"  each replica receives {f.requests_per_s_per_replica:,.1f} requests/s of {f.output_tokens} "
        "tokens; "
        f"filling {f.batch:,.0f} slots takes {fmt.seconds(f.batch_fill_time_s)}"
    )
    out(
        f"\n  continuous batching simulated (Poisson arrivals; capacity {f.capacity_requests_per_s:,.1f} "
        "requests/s):"
    )
    table = make_table(
        (
            "load",
            "req/s",
            "done",
            "TTFT p50",
            "TTFT p99",
            "TPOT p50",
            "TPOT p99",
            "mean batch",
            "tokens/s",
        )
    )
    for p in f.loads:
        table.add_row(
            f"{p.load_frac:.0%}",
            f"{p.arrival_rate_per_s:,.1f}",
            fmt.pct(p.completed_frac),
            fmt.seconds(p.ttft_p50_s),
            fmt.seconds(p.ttft_p99_s),
            fmt.seconds(p.tpot_p50_s),
            fmt.seconds(p.tpot_p99_s),
            f"{p.mean_batch:,.0f}",
            f"{p.tokens_per_s:,.0f}",
        )
    out(table)


# ----------------------------------------------------------------------------- overtrain
@app.command("overtrain")
def overtrain_command(
    params: float = number(
        "100B",
        "--params",
        help="Active parameters N.",
        minimum=ot.PARAMS_RANGE[0],
        maximum=ot.PARAMS_RANGE[1],
    ),
    tokens_per_s: float = number(
        "50M",
        "--tokens-per-s",
        help="Inference traffic served by this model.",
        minimum=ot.TOKENS_PER_S_RANGE[0],
        maximum=ot.TOKENS_PER_S_RANGE[1],
    ),
    duration_s: float = duration(
        "60d", "--duration", help="How long the model serves (60d, 1y...).", maximum_s=ot.DURATION_RANGE_S[1]
    ),
    rl_flops: float = number(
        3.0,
        "--rl-flops",
        help="RL FLOPs per parameter-token (2..6).",
        minimum=ot.RL_FLOPS_RANGE[0],
        maximum=ot.RL_FLOPS_RANGE[1],
    ),
    rl_efficiency: float = number(
        "1/3",
        "--rl-efficiency",
        help="RL hardware efficiency vs pre-training.",
        minimum=ot.EFFICIENCY_RANGE[0],
        maximum=ot.EFFICIENCY_RANGE[1],
    ),
    inference_efficiency: float = number(
        "1/3",
        "--inference-efficiency",
        help="Inference efficiency.",
        minimum=ot.EFFICIENCY_RANGE[0],
        maximum=ot.EFFICIENCY_RANGE[1],
    ),
    tokens_per_param: float = number(
        ot.CHINCHILLA_TOKENS_PER_PARAM,
        "--tokens-per-param",
        help="Chinchilla ratio.",
        minimum=ot.TOKENS_PER_PARAM_RANGE[0],
        maximum=ot.TOKENS_PER_PARAM_RANGE[1],
    ),
    as_json: bool = _JSON,
    plot: Path | None = _PLOT,
) -> None:
    """How far past Chinchilla to pre-train a model that will serve heavy traffic."""
    result = api.overtrain(
        params=params,
        tokens_per_s=tokens_per_s,
        duration_s=duration_s,
        rl_flops=rl_flops,
        rl_efficiency=rl_efficiency,
        inference_efficiency=inference_efficiency,
        tokens_per_param=tokens_per_param,
    )
    from rackmath.plots.economics import save_overtrain_plot

    emit(result, as_json, plot, save_overtrain_plot, _render_overtrain)


def _render_overtrain(r: overtrain.Overtraining, console: Console) -> None:
    out = console.print
    d = r.to_dict()
    k = r.coefficients
    out("[bold]rackmath overtrain[/]\n")
    out(
        f"  D_inf = {fmt.si(r.tokens_per_s, 'tokens/s')} x {r.duration_s / SECONDS_PER_DAY:g} days = "
        f"{r.inference_tokens:.3g} tokens"
    )
    out(
        f"  equal thirds: {k.pre:g} N D_pre = {k.rl:g}/{k.rl_efficiency:.3g} N D_RL = "
        f"{k.inference:g}/{k.inference_efficiency:.3g} N D_inf"
    )
    out(
        f"    -> D_pre = {r.pretrain_tokens:.3g}, D_RL = {r.rl_tokens:.3g} (D_pre = "
        f"{d['pretrain_over_rl']:.2f} D_RL)"
    )
    out(
        f"  Chinchilla for N = {fmt.count(r.params)}: {r.chinchilla_tokens:.3g} tokens -> over-trained "
        f"{r.overtraining_factor:,.0f}x; loss {r.loss:.4f} ({r.fit.source})"
    )
    f = d["compute_optimal_at_same_pretrain_compute"]
    out(
        f"  the same pre-training compute spent compute-optimally: N = {fmt.count(f['params'])}, D = "
        f"{f['tokens']:.3g} "
        f"({f['tokens_per_param']:.0f} tokens/param), loss {f['loss']:.4f}"
    )
    o = d["exact_optimum_at_same_loss"]
    out(
        f"  exact optimum at the same loss: N = {fmt.count(o['params'])}, D_pre = "
        f"{o['pretrain_tokens']:.3g}; "
        f"pre-training share {o['pretrain_share_frac']:.1%} (power law p A = q B with q = "
        f"{o['local_exponent_q']:.2f}: "
        f"{o['power_law_pretrain_share_frac']:.1%}); equal thirds cost {o['equal_thirds_excess_frac']:.2%} "
        "more"
    )


# ----------------------------------------------------------------------------- sparsity
@app.command("sparsity")
def sparsity_command(
    model: str = typer.Option(
        "deepseek-v3", "--model", help="Supplies active size, KV per token, precisions."
    ),
    on: str = typer.Option("gb200-nvl72", "--on", help="System (its chip and price)."),
    levels: str = typer.Option("1,2,4,8,16,32,64", "--sparsity", help="N_total / N_active levels."),
    params_active: str | None = typer.Option(None, "--params-active", help="Override N_active."),
    context: str = typer.Option("4096", "--context", help="Context per sequence (tokens)."),
    users: str = typer.Option("2000", "--users", help="Concurrent sequences available."),
    as_json: bool = _JSON,
    plot: Path | None = _PLOT,
) -> None:
    """What a sparser MoE buys (quality) and costs (batch, memory, traffic) on a system."""
    result = api.sparsity(
        model=model,
        on=on,
        levels=number_list(levels, "--sparsity"),
        context=one(context, "--context"),
        users=one(users, "--users"),
        params_active=one(params_active, "--params-active") if params_active else None,
    )
    from rackmath.plots.economics import save_sparsity_plot

    emit(result, as_json, plot, save_sparsity_plot, _render_sparsity)


def _render_sparsity(r: sparsity.SparsityStudy, console: Console) -> None:
    out = console.print
    d = r.deployment
    out(
        f"[bold]rackmath sparsity[/] N_active = {fmt.count(r.params_active)} ({d.model.id}), "
        f"{d.system.chip.id} at {fmt.usd(d.usd_per_chip_hour)}/chip-hour, {r.context:,.0f} tokens, "
        f"{r.users:,.0f} users\n"
    )
    t = make_table(
        (
            "N_tot/N_act",
            "N_total",
            "dense-equiv.",
            "B* (users)",
            "memory",
            "chips",
            "tokens/s",
            "$/M at B*",
            "batch",
            "$/M at users",
        )
    )
    for row in r.rows:
        t.add_row(
            f"{row.sparsity:g}",
            fmt.count(row.params_total),
            fmt.count(row.effective_params),
            f"{row.balance_batch:,.0f}",
            fmt.nbytes(row.memory_bytes),
            str(row.chips),
            f"{row.tokens_per_s_at_balance:,.0f}",
            fmt.usd(row.usd_per_million_tokens_at_balance),
            f"{row.batch_at_users:,.0f}",
            fmt.usd(row.usd_per_million_tokens_at_users),
        )
    out(t)
    out(
        "\n  At its balance batch every sparsity costs the same per token, while quality rises:"
        " a pure win for bandwidth until you run out of users (B* = r x sparsity concurrent sequences) or "
        "memory."
        f"\n  [dim]Quality: {r.fit.source}; sparsity read as the expert count at top-1 routing.[/]"
    )
    out(f"  efficiency: {sparsity.EFFICIENCY['label']}")
