"""``rackmath prices``: what API prices reveal about the hardware under them.

It parses its options into specs, calls the price analyses and renders their report;
``--json`` prints the report's ``to_dict()`` and ``--plot FILE`` draws it
(rackmath.plots.economics). ``rackmath fleet | overtrain | sparsity`` live in
``scale_cmds.py``.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from rackmath import api
from rackmath.analyses.economics import prices
from rackmath.cli.main import app
from rackmath.cli.options import efficiency_option, emit, number, one, plot_option
from rackmath.cli.output import make_table
from rackmath.numbers import parse_duration
from rackmath.views import fmt

_JSON = typer.Option(False, "--json", help="Print the result as JSON.")
_PLOT = plot_option()


# ----------------------------------------------------------------------------- prices
@app.command("prices")
def prices_command(
    provider: str | None = typer.Option(
        None, "--provider", help="Only this provider (anthropic, google, ...)."
    ),
    prices_file: Path | None = typer.Option(None, "--prices", help="Your own prices (YAML, catalog schema)."),
    as_of: str | None = typer.Option(
        None, "--as-of", help="Date prices are aged to (YYYY-MM-DD; default today)."
    ),
    ref_model: str = typer.Option("deepseek-v3", "--model", help="Reference model for roofline costs."),
    on: str = typer.Option("gb200-nvl72", "--on", help="Reference system."),
    batch: str = typer.Option("2000", "--batch", help="Decode batch of the output/input reference."),
    context: str = typer.Option("8192", "--context", help="Context of the output/input reference (tokens)."),
    long_model: str = typer.Option(
        "gemini-3.1-pro", "--long-context", help="Priced model whose tiers to draw."
    ),
    long_batch: str = typer.Option("64", "--long-batch", help="Decode batch for the cost-vs-context curve."),
    cache_model: str = typer.Option(
        "claude-opus-4.6", "--cache-model", help="Priced model for cache prices."
    ),
    retention: str = typer.Option(
        "1s,10s,1m,5m,1h,1d", "--retention", help="Retentions (20ms, 5m, 1h, 2d...)."
    ),
    amortization: str = typer.Option("3y", "--amortization", help="Memory purchase amortization period."),
    prompt_tokens: str = typer.Option(
        "8192", "--prompt-tokens", help="Prompt length a cache miss recomputes (and a cache hit stores)."
    ),
    prefix_hit: float | None = number(
        None,
        "--prefix-hit",
        help="Share of the prompt found in the prefix cache, in [0, 1): TTFT and what a hit is worth.",
        minimum=0.0,
        maximum=1.0,
    ),
    prefix_tier: str = typer.Option(
        "hbm", "--prefix-tier", help="Where that cached KV lives: hbm, host-dram, cxl, ssd or hdd."
    ),
    fast_model: str = typer.Option("claude-opus-4.6", "--fast-model", help="Priced model with a fast mode."),
    fast_context: str = typer.Option("4096", "--fast-context", help="Context for the fast-mode sweep."),
    as_json: bool = _JSON,
    plot: Path | None = _PLOT,
    efficiency: str = efficiency_option(),
) -> None:
    """What API prices reveal: output/input, long-context tiers, prompt caches, fast modes."""
    report = api.prices(
        provider=provider,
        prices_file=prices_file,
        as_of=as_of,
        model=ref_model,
        on=on,
        batch=one(batch, "--batch"),
        context=one(context, "--context"),
        long_context=long_model,
        long_batch=one(long_batch, "--long-batch"),
        cache_model=cache_model,
        retention_s=[parse_duration(r, "--retention") for r in retention.split(",")],
        amortization_s=parse_duration(amortization, "--amortization"),
        prompt_tokens=one(prompt_tokens, "--prompt-tokens"),
        prefix_hit=prefix_hit,
        prefix_tier=prefix_tier,
        fast_model=fast_model,
        fast_context=one(fast_context, "--fast-context"),
        efficiency=efficiency,
    )
    from rackmath.plots.economics import save_prices_plot

    emit(report, as_json, plot, save_prices_plot, _render_prices)


def _usd_m(value: float | None) -> str:
    return "-" if value is None else fmt.usd(value)


def _render_prices(r: prices.PricesReport, console: Console) -> None:
    out = console.print
    s = r.survey
    out(f"[bold]rackmath prices[/] as of {s.as_of.isoformat()} (oldest price {s.oldest_days} days old)\n")
    t = make_table(
        (
            "model",
            "in $/M",
            "out $/M",
            "out/in",
            "decode util",
            "miss/hit",
            "write 5m",
            "write 1h",
            ">200K in/out",
            "age (d)",
        ),
        left=("model",),
    )
    for p, row in zip(s.prices, s.to_dict()["prices"], strict=True):
        b = p.base
        hi = p.tiers[-1] if len(p.tiers) > 1 else None
        t.add_row(
            p.id,
            fmt.usd(b.input_usd_per_million_tokens),
            fmt.usd(b.output_usd_per_million_tokens),
            f"{b.output_over_input:.1f}x",
            fmt.pct(row["implied_decode_utilization_frac"]),
            f"{b.miss_over_hit:.0f}x" if b.miss_over_hit else "-",
            _usd_m(b.cache_write_5m_usd_per_million_tokens),
            _usd_m(b.cache_write_1h_usd_per_million_tokens),
            f"{fmt.usd(hi.input_usd_per_million_tokens)}/{fmt.usd(hi.output_usd_per_million_tokens)}"
            if hi
            else "-",
            str(p.age_days(s.as_of)),
        )
    out(t)
    rr = s.roofline
    d = rr.deployment
    out(
        "\n[bold]1. Output over input[/] (D34): a price ratio r says decode runs at ~1/r of prefill's "
        "utilization"
    )
    out(
        f"  roofline, {d.model.id} on {d.chips} x {d.system.chip.id} at batch {rr.batch:,.0f}, "
        f"{rr.context:,.0f} tokens: output {fmt.usd(rr.usd_per_million_output_tokens)}/M vs input "
        f"{fmt.usd(rr.usd_per_million_input_tokens)}/M = {rr.output_over_input:.1f}x; decode MFU "
        f"{fmt.pct(rr.decode_mfu)} vs prefill {fmt.pct(rr.prefill_mfu)}"
    )
    out(f"  efficiency: {d.efficiency_label}")
    lc = r.long_context
    if lc is not None:
        x = lc.to_dict()
        out(
            f"\n[bold]2. Long-context tiers[/] (D30, D31): {lc.price.id}, boundary at "
            f"{', '.join(f'{b:,}' for b in lc.price.tier_boundaries_tokens)} tokens"
        )
        out(
            f"  len* = N_active / (r x KV bytes/token); a boundary at 200K with N_active = "
            f"{fmt.count(lc.params_active_assumed)}, r = {lc.balance_ratio_assumed:g} implies "
            + ", ".join(f"{v:,.0f} B" for v in lc.boundary_implied_kv_bytes_per_token)
            + " of KV per token"
        )
        out(
            f"  {d.model.id}: {lc.kv_bytes_per_token:,.0f} B/token -> its own crossover at "
            f"{lc.crossover_context_tokens:,.0f} tokens"
        )
        out(
            f"  at batch {lc.batch:,.0f}: price "
            f"{'stays above' if lc.above_cost_everywhere else 'falls BELOW'} cost at every length; "
            f"thinnest output margin {x['min_output_margin_frac']:+.0%} at "
            f"{x['min_output_margin_context']:,.0f} tokens, "
            f"input {x['min_input_margin_frac']:+.0%} at {x['min_input_margin_context']:,.0f}"
        )
    c = r.caching
    cd = c.to_dict()
    out(
        f"\n[bold]3. Prompt caches[/] (D35, D36): {fmt.nbytes(c.kv_bytes_per_token)} of KV per token "
        f"cached (a prompt of {c.prompt_tokens:,.0f} tokens); "
        f"recompute (prefill) {fmt.usd(cd['recompute_usd_per_million_tokens'])}/M"
    )
    ct = make_table(
        ("tier", "drain time", "lecture", "hold $/M/s", "fetch $/M", "wins after", "cost basis"),
        left=("tier", "cost basis"),
    )
    for tier in cd["tiers"]:
        ct.add_row(
            tier["id"],
            fmt.duration(tier["drain_time_s"]),
            fmt.duration(tier["lecture_drain_time_s"]),
            f"{tier['hold_usd_per_million_tokens_per_s']:.3g}",
            f"{tier['fetch_usd_per_million_tokens']:.3g}",
            fmt.duration(tier["crossover_from_previous_s"]),
            tier["cost_basis"],
        )
    out(ct)
    out(
        "  cheapest by retention: "
        + ", ".join(f"{fmt.duration(b['retention_s'])} -> {b['cheapest']}" for b in cd["by_retention"])
    )
    m = cd["lecture_mapping"]
    out(f"  the lecture's mapping: 5 min -> {m['300s']}, 1 h -> {m['3600s']}")
    pr = cd["pricing"]
    if pr and pr["miss_over_hit"]:
        write = pr["cache_write_5m_usd_per_million_tokens"]
        premium = (
            f"a write premium of {fmt.usd(write - pr['input_usd_per_million_tokens'])}/M"
            if write is not None
            else "no separate write price (writes are billed as input)"
        )
        out(
            f"  {pr['priced_model']}: a miss costs {pr['miss_over_hit']:.0f}x a hit (input "
            f"{fmt.usd(pr['input_usd_per_million_tokens'])} = recompute, "
            f"read {fmt.usd(pr['cache_read_usd_per_million_tokens'])}); at cost, recompute is "
            f"{pr['cost_recompute_over_hit_5m']:.0f}x a 5-min hit, "
            f"and holding 5 min costs {pr['cheapest_hold_5m_usd_per_million_tokens']:.2g} $/M against "
            f"{premium}"
        )
    if c.prefix is not None:
        from rackmath.views.derivation import prefix_section

        for line in prefix_section(c.prefix).lines:
            out("  " + line)
    f = r.fast_mode
    fd = f.to_dict()
    i = fd["ideal"]
    out(
        f"\n[bold]4. Fast mode[/] (D12): normal at {i['normal_batch_over_balance']:g} B* runs "
        f"{i['normal_batch_over_balance']:g} x t_floor; "
        f"at B*/{i['price_multiple']:g} it runs at the floor: {i['speedup']:.2f}x the speed for "
        f"{i['price_multiple_from_roofline']:.2f}x the price"
    )
    out(
        f"  ceiling: no price buys more than {i['ceiling_speedup']:.2f}x; a slow mode (bigger batch) saves "
        f"{i['slow_mode_saving_frac']:.0%}"
    )
    if fd["published"]:
        p = fd["published"]
        out(
            f"  published ({p['priced_model']}, {p['date']}): {p['price_multiple']:.0f}x price, up to "
            f"{p['speedup_max']:g}x faster"
        )
    dd = fd["deployment"]
    if dd:
        out(
            f"  on {dd['model']} ({dd['chips']} x chips, {dd['context']:,.0f} tokens): normal batch "
            f"{dd['normal_batch']:,.0f}; "
            f"{dd['requested_price_multiple']:g}x price -> batch {dd['fast_batch']:,.0f}, "
            f"{dd['fast_speedup']:.2f}x faster; "
            f"batch 1 ceiling {dd['ceiling_speedup']:.1f}x; slow mode saves {dd['slow_mode_saving_frac']:.1%}"
        )
