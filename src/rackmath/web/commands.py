""" "Copy as CLI command": the ``rackmath ...`` command line that reproduces a view.

Each function maps a page's state to the command (``--json``, so its numbers can be read
back: ``tests/test_web_commands.py`` runs every one through the CLI and compares them with the
page's). A setting the CLI cannot take (an edited chip figure, a pasted config.json, an
uploaded trace) is named in a note, and the command uses a file name the user saves it as.
Text only: nothing here computes a number.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from rackmath.units import BILLION, MILLION, TERA
from rackmath.web.state.common import CUSTOM_MODEL
from rackmath.web.state.deployments import DeploymentsState
from rackmath.web.state.economics import NO_PRICE, EconomicsState
from rackmath.web.state.planner import CompareConfig, CompareState, FrontierState, SimulateState
from rackmath.web.state.serving import ServingState
from rackmath.web.state.training import TrainingState

#: The file name a command uses for a pasted or uploaded config.json.
CONFIG_FILE = "config.json"
#: The file name a command uses for an uploaded trace.
TRACE_FILE = "trace.csv"


@dataclass(frozen=True)
class Command:
    """Command lines (one a line) and notes on what they cannot carry."""

    lines: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return "\n".join(shlex.join(line) for line in self.lines)


def _model(model: str) -> str:
    return CONFIG_FILE if model == CUSTOM_MODEL else model


def _custom_note(model: str) -> tuple[str, ...]:
    return (f"save the pasted config.json as {CONFIG_FILE}",) if model == CUSTOM_MODEL else ()


def _opt(flag: str, value: object) -> list[str]:
    return [] if value is None else [flag, f"{value:g}" if isinstance(value, float) else str(value)]


def serving_command(s: ServingState, chips: int) -> Command:
    """``rackmath explain`` at the page's batch and context (``chips``: what the page used)."""
    line = ["rackmath", "explain", _model(s.model), "--on", s.system, "--chips", str(chips)]
    line += ["--batch", str(s.batch), "--context", str(s.context)]
    line += _opt("--weights", s.weights) + _opt("--weight-classes", s.weight_classes)
    line += _opt("--kv", s.kv) + _opt("--compute", s.compute)
    line += _opt("--price-per-chip-hour", s.usd_per_chip_hour)
    if s.mtp:
        line += ["--mtp", str(s.mtp), "--acceptance", f"{0.8 if s.acceptance is None else s.acceptance:g}"]
    if s.prefix_hit:
        line += ["--prefix-hit", f"{s.prefix_hit:g}", "--prefix-tier", s.prefix_tier or "hbm"]
    line += _opt("--pue", s.pue)
    line += ["--efficiency", "pure"] if s.efficiency == "pure" else []
    notes = _custom_note(s.model)
    if s.hbm_gb is not None or s.hbm_tb_per_s is not None or s.peak_tflop_per_s is not None:
        notes += ("the CLI takes no edited chip figures: the command uses the catalog's",)
    return Command(((*line, "--json"),), notes)


def compare_line(c: CompareConfig) -> tuple[str, ...]:
    line = ["rackmath", "explain", c.model, "--on", c.system]
    line += [*_opt("--chips", c.chips), "--batch", str(c.batch), "--context", str(c.context)]
    line += _opt("--plan", c.plan) + _opt("--weights", c.weights) + _opt("--kv", c.kv)
    line += ["--efficiency", "pure"] if c.efficiency == "pure" else []
    return (*line, "--json")


def compare_command(s: CompareState) -> Command:
    """One ``rackmath explain`` per configuration, in order (A, B, ...)."""
    return Command(tuple(compare_line(c) for c in s.shown))


def frontier_command(s: FrontierState) -> Command:
    """One ``rackmath pareto`` per system."""
    lines = []
    for system in s.systems:
        line = ["rackmath", "pareto", s.model, "--on", system]
        line += ["--input-len", str(s.input_len), "--output-len", str(s.output_len)]
        line += ["--precision", s.precision]
        line += _opt("--max-chips", s.max_chips)
        line += ["--efficiency", "pure"] if s.efficiency == "pure" else []
        lines.append((*line, "--json"))
    return Command(tuple(lines), ("published points come from the catalog's measurements.yaml",))


def simulate_command(s: SimulateState, trace: bool = False) -> Command:
    """``rackmath simulate`` with the page's workload (``trace``: an uploaded trace file) and SLO;
    with the attainment curve asked for, the command searches the rates (no ``--rate``)."""
    line = ["rackmath", "simulate", s.model, "--on", s.system, "--plan", s.plan, "--runtime", s.runtime]
    notes: tuple[str, ...] = ()
    if trace:
        line += ["--trace", TRACE_FILE]
        notes += (f"save the uploaded trace as {TRACE_FILE}",)
    else:
        line += [] if s.curve else ["--rate", f"{s.rate_per_s:g}/s", "--requests", str(s.requests)]
        line += ["--input", s.input, "--output", s.output, "--seed", str(s.seed)]
    line += ["--slo", f"ttft={s.ttft_ms:g}ms,tpot={s.tpot_ms:g}ms", "--attainment", f"{s.attainment:g}"]
    if s.prefix_hit:
        line += ["--prefix-hit", f"{s.prefix_hit:g}"]
    if s.disaggregated:
        line += ["--disaggregated", s.disaggregated, *_opt("--prefill-plan", s.prefill_plan)]
    if s.mtp:
        line += ["--mtp", str(s.mtp), "--acceptance", f"{s.acceptance:g}"]
        notes += (
            "MTP in `rackmath simulate` needs its --mtp option (the page's analysis is analyses.deploy.slo)",
        )
    line += ["--efficiency", "pure"] if s.efficiency == "pure" else []
    return Command(((*line, "--json"),), notes)


def training_command(s: TrainingState) -> Command:
    """``rackmath train`` for the job and ``rackmath pipeline`` for the drawn schedule."""
    line = ["rackmath", "train", _model(s.model), "--on", s.system, "--plan", s.plan]
    line += ["--tokens", f"{s.trillion_tokens * TERA!r}", *_opt("--chips", s.chips)]
    line += ["--seq-len", str(s.seq_len), "--batch", str(s.global_batch)]
    line += ["--microbatch", str(s.microbatch)]
    line += ["--schedule", s.schedule, "--recompute", s.recompute, "--optimizer", s.optimizer]
    line += ["--zero", str(s.zero)]
    line += ["--virtual-stages", str(s.virtual_stages)] if s.virtual_stages > 1 else []
    line += _opt("--compute", s.compute) + _opt("--price-per-chip-hour", s.usd_per_chip_hour)
    line += ["--calibrated"] if s.efficiency == "calibrated" else []
    line += ["--efficiency", "pure"] if s.efficiency == "pure" else []
    pipe = ["rackmath", "pipeline", "--stages", str(s.pipe_stages)]
    pipe += ["--microbatches", str(s.pipe_microbatches)]
    pipe += ["--schedule", s.pipe_schedule]
    if s.pipe_schedule == "interleaved":
        pipe += ["--virtual-stages", str(s.pipe_virtual_stages)]
    return Command(((*line, "--json"), (*pipe, "--json")), _custom_note(s.model))


def deployments_command(s: DeploymentsState) -> Command:
    """``rackmath plan`` for the search and ``rackmath pareto`` for the frontier shown."""
    line = ["rackmath", "plan", _model(s.model), "--traffic", f"{s.traffic_tokens_per_s:g}"]
    line += ["--input-len", str(s.input_len), "--output-len", str(s.output_len)]
    line += _opt("--ttft-ms", s.ttft_ms) + _opt("--tpot-ms", s.tpot_ms)
    line += ["--hardware", ",".join(s.systems), "--precision", ",".join(s.precisions)]
    line += ["--max-chips", str(s.max_chips), "--aggregated-only"]
    front = ["rackmath", "pareto", _model(s.model), "--on", s.frontier_system]
    front += ["--input-len", str(s.input_len), "--output-len", str(s.output_len)]
    front += ["--precision", ",".join(s.precisions)]
    return Command(((*line, "--json"), (*front, "--json")), _custom_note(s.model))


def validation_command() -> Command:
    return Command((("rackmath", "validate", "--json"),))


def economics_command(s: EconomicsState, as_of: str) -> Command:
    """The command of the open tab: ``prices`` (prices, caches, fast modes), ``fleet``,
    ``overtrain`` or ``sparsity``; ``as_of`` is the date the page ages prices to."""
    ref = ["--model", s.model, "--on", s.system]
    if s.tab in ("prices", "caches", "fast"):
        p, c, f = s.prices, s.caches, s.fast
        line = ["rackmath", "prices", *ref, "--batch", str(p.batch), "--context", str(p.context)]
        line += ["--long-context", p.long_price, "--long-batch", str(p.long_batch)]
        line += ["--cache-model", c.price, "--retention", c.retentions]
        line += ["--amortization", f"{c.amortization_years!r}y", "--prompt-tokens", str(c.prompt_tokens)]
        notes: tuple[str, ...] = ()
        if f.price != NO_PRICE:
            line += ["--fast-model", f.price]
        else:
            notes += (
                "the CLI's fast modes read a priced model; `none` (the lecture's 2.5x and 6x) is the page's",
            )
        if f.normal_over_balance is not None or f.price_multiple is not None:
            notes += ("the CLI takes the fast mode's k and m from the priced model, not typed",)
        line += ["--fast-context", str(f.context), "--as-of", as_of]
        return Command(((*line, "--json"),), notes)
    if s.tab == "fleet":
        t = s.fleet
        line = ["rackmath", "fleet", "--traffic", f"{t.traffic_tokens_per_s!r}", "--batch", str(t.batch)]
        if t.step_source == "roofline":
            line += [*ref, "--context", str(t.context)]
        else:
            line += ["--step", f"{t.step_ms!r}ms"]
        line += _opt("--chips-per-replica", t.chips_per_replica)
        line += [] if t.usd_per_chip_hour is None else ["--price-per-chip-hour", f"{t.usd_per_chip_hour!r}"]
        line += ["--output-tokens", str(t.output_tokens), "--loads", t.loads]
        line += ["--requests", str(t.requests), "--seed", str(t.seed)]
        return Command(((*line, "--json"),))
    if s.tab == "overtrain":
        o = s.overtrain
        line = ["rackmath", "overtrain", "--params", f"{o.params_billions * BILLION!r}"]
        line += ["--tokens-per-s", f"{o.tokens_per_s_millions * MILLION!r}"]
        line += ["--duration", f"{o.duration_days!r}d"]
        line += ["--rl-flops", f"{o.rl_flops_per_param_token!r}"]
        line += ["--rl-efficiency", f"{o.rl_efficiency_frac!r}"]
        line += ["--inference-efficiency", f"{o.inference_efficiency_frac!r}"]
        line += ["--tokens-per-param", f"{o.tokens_per_param!r}"]
        return Command(((*line, "--json"),))
    q = s.sparsity
    line = ["rackmath", "sparsity", *ref, "--sparsity", q.sparsities]
    if q.params_active_billions is not None:
        line += ["--params-active", f"{q.params_active_billions * BILLION!r}"]
    line += ["--context", str(q.context), "--users", str(q.users)]
    return Command(((*line, "--json"),))
