"""Rules below the faces: every refusal the CLI makes is raised by the analysis layer, so the
Python API (``rackmath.api``, one call per command) refuses what the command refuses.

Each case drives one refusal through both faces of the same analysis: the command exits 1
with one line on stderr, and the API raises the same :class:`~rackmath.errors.RackmathError`
subclass naming the same field (an :class:`~rackmath.errors.InputError`'s field, the way the
CLI spells it). Where the analysis speaks for both, the two messages are one message. Where the
option parser refuses a typed value first (a bound the option declares, from
:mod:`rackmath.specs.bounds`), the analysis refuses the same value from Python under the same
field. ``docs/architecture.md`` ("Rules below the faces") says where each rule lives.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rackmath import api
from rackmath.analyses.deploy.search import InfeasibleError
from rackmath.analyses.deploy.simulation_report import SloUnmetError
from rackmath.cli.main import run
from rackmath.errors import DoesNotFitError, InputError, RackmathError, UnknownIdError
from rackmath.views.fmt import to_json

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SWEEP = str(EXAMPLES / "sweep-small.yaml")
TRACE = "arrival_s,input_tokens,output_tokens\n0,100,20\n0.5,200,10\n"
#: Trace files a rule reads, by the placeholder its command line names them with.
TRACES = {
    "{trace}": ("trace.csv", TRACE),
    "{unsorted}": ("unsorted.csv", "1,100,20\n0,100,20\n"),
    "{unknown-block}": (  # block 1 after block 0, then after block 2: the ids are not prefix hashes
        "blocks.jsonl",
        '{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [0, 1]}\n'
        '{"timestamp": 1, "input_length": 1024, "output_length": 1, "hash_ids": [2, 1]}\n',
    ),
}


@dataclass(frozen=True)
class Rule:
    """One refusal: the command line, the API call, the error, and whether the two faces print
    one message (False: the option parser refuses the typed value before the analysis does)."""

    id: str
    cli: tuple[str, ...]
    call: Callable[[Path], Any]
    error: type[RackmathError]
    same_message: bool = True


def _trace(tmp: Path, key: str = "{trace}") -> str:
    name, text = TRACES[key]
    path = tmp / name
    path.write_text(text)
    return str(path)


RULES = (
    # --- the model's context window (deployment.check_context) ---------------------------------
    Rule("explain-context-window", ("explain", "llama-3.1-8b", "--on", "h100-hgx", "--context", "1M"),
         lambda _: api.explain(api.deployment("llama-3.1-8b", "h100-hgx"), contexts=[1_000_000]), InputError),
    Rule("explain-plan-context-window",
         ("explain", "llama-3.1-8b", "--on", "h100-hgx", "--plan", "tp=8", "--context", "200k"),
         lambda _: api.explain(api.deployment("llama-3.1-8b", "h100-hgx"), contexts=[200_000], plan="tp=8"),
         InputError),
    Rule("plan-context-window", ("plan", "llama-3.1-8b", "--input-len", "200k"),
         lambda _: api.plan("llama-3.1-8b", input_len=200_000), InputError),
    Rule("pareto-context-window", ("pareto", "llama-3.1-8b", "--on", "h100-hgx", "--output-len", "200k"),
         lambda _: api.pareto("llama-3.1-8b", "h100-hgx", output_len=200_000), InputError),
    Rule("layout-context-window", ("layout", "llama-3.1-8b", "--on", "h100-hgx", "--context", "200k"),
         lambda _: api.layout("llama-3.1-8b", "h100-hgx", context=200_000), InputError),
    Rule("simulate-context-window", ("simulate", "llama-3.1-8b", "--on", "h100-hgx", "--input", "200000"),
         lambda _: api.simulate("llama-3.1-8b", "h100-hgx", input_len="200000"), InputError),
    Rule("fleet-context-window",
         ("fleet", "--model", "llama-3.1-8b", "--on", "h100-hgx", "--context", "200k"),
         lambda _: api.fleet(model="llama-3.1-8b", on="h100-hgx", context=200_000), InputError),
    Rule("prices-context-window",
         ("prices", "--model", "llama-3.1-8b", "--on", "h100-hgx", "--context", "200k"),
         lambda _: api.prices(model="llama-3.1-8b", on="h100-hgx", context=200_000), InputError),
    # --- weights that do not fit (pooled.require_weights_fit) ------------------------------
    Rule("explain-weights-fit", ("explain", "llama-3.1-405b", "--on", "h100-hgx", "--chips", "1"),
         lambda _: api.explain(api.deployment("llama-3.1-405b", "h100-hgx", chips=1)), DoesNotFitError),
    Rule("prices-weights-fit", ("prices", "--model", "deepseek-v3", "--on", "h100-hgx"),
         lambda _: api.prices(model="deepseek-v3", on="h100-hgx"), DoesNotFitError),
    # --- what one system holds, and the work bounds of explain -----------------------------
    Rule("explain-chips-in-system", ("explain", "llama-3.1-8b", "--on", "gb200-nvl72", "--chips", "1000"),
         lambda _: api.explain(api.deployment("llama-3.1-8b", "gb200-nvl72", chips=1000)), InputError),
    Rule("explain-batch-bound", ("explain", "llama-3.1-8b", "--on", "h100-hgx", "--batch", "2M"),
         lambda _: api.explain(api.deployment("llama-3.1-8b", "h100-hgx"), batches=[2e6]), InputError, False),
    Rule("deployment-chips-bound", ("explain", "llama-3.1-8b", "--on", "h100-hgx", "--chips", "1G"),
         lambda _: api.deployment("llama-3.1-8b", "h100-hgx", chips=10**9), InputError, False),
    Rule("deployment-price-bound",
         ("explain", "llama-3.1-8b", "--on", "h100-hgx", "--price-per-chip-hour", "1e5"),
         lambda _: api.deployment("llama-3.1-8b", "h100-hgx", usd_per_chip_hour=1e5), InputError, False),
    Rule("explain-mtp-needs-acceptance", ("explain", "deepseek-v3", "--on", "gb200-nvl72", "--mtp", "1"),
         lambda _: api.explain(api.deployment("deepseek-v3", "gb200-nvl72"), mtp=1), InputError),
    Rule("explain-spec-rising-reach",
         ("explain", "deepseek-v3", "--on", "gb200-nvl72", "--plan", "dp=64,ep=64",
          "--spec", "mtp=2,reach=0.6,0.8"),
         lambda _: api.explain(api.deployment("deepseek-v3", "gb200-nvl72"), plan="dp=64,ep=64",
                               spec="mtp=2,reach=0.6,0.8"), InputError),
    # --- plans the sequence or the layers cannot hold (planned.check_plan) ------------------
    Rule("explain-cp-beyond-chunks",
         ("explain", "llama-3.1-70b", "--on", "gb200-nvl72", "--chips", "64", "--plan", "tp=8,cp=8",
          "--context", "40"),
         lambda _: api.explain(api.deployment("llama-3.1-70b", "gb200-nvl72", chips=64), contexts=[40],
                               plan="tp=8,cp=8"), InputError),
    Rule("explain-stages-cover-layers",
         ("explain", "deepseek-v3", "--on", "gb200-nvl72", "--chips", "64", "--plan",
          "pp=4,dp=16,ep=16,stages=16+15+15+14"),
         lambda _: api.explain(api.deployment("deepseek-v3", "gb200-nvl72", chips=64),
                               plan="pp=4,dp=16,ep=16,stages=16+15+15+14"), InputError),
    # --- the deployment search (candidates, search) ----------------------------------------
    Rule("plan-precision-unsupported",
         ("plan", "llama-3.1-8b", "--precision", "fp4", "--hardware", "h100-hgx"),
         lambda _: api.plan("llama-3.1-8b", precision=["fp4"], hardware=["h100-hgx"]), InputError),
    Rule("pareto-precision-unsupported", ("pareto", "llama-3.1-8b", "--on", "h100-hgx", "--precision", "fp4"),
         lambda _: api.pareto("llama-3.1-8b", "h100-hgx", precision=["fp4"]), InputError),
    Rule("plan-precision-unknown", ("plan", "llama-3.1-8b", "--precision", "fp3"),
         lambda _: api.plan("llama-3.1-8b", precision=["fp3"]), InputError),
    Rule("plan-search-budget", ("plan", "deepseek-v3", "--max-chips", "16384"),
         lambda _: api.plan("deepseek-v3", max_chips=16384), InputError),
    Rule("plan-max-chips-bound", ("plan", "llama-3.1-8b", "--max-chips", "100000"),
         lambda _: api.plan("llama-3.1-8b", max_chips=100_000), InputError, False),
    Rule("plan-slo-limits", ("plan", "llama-3.1-8b", "--slo", "e2e_p99=5s"),
         lambda _: api.plan("llama-3.1-8b", slo="e2e_p99=5s"), InputError),
    Rule("plan-prefix-hit-range", ("plan", "llama-3.1-8b", "--prefix-hit", "1"),
         lambda _: api.plan("llama-3.1-8b", prefix_hit=1.0), InputError),
    Rule("plan-traffic-floor", ("plan", "llama-3.1-8b", "--traffic", "1e-30"),
         lambda _: api.plan("llama-3.1-8b", traffic=1e-30), InputError),
    Rule("plan-runtime-token-budget",
         ("plan", "llama-3.1-8b", "--runtime", "trtllm", "--input-len", "10000", "--output-len", "10",
          "--hardware", "h100-hgx"),
         lambda _: api.plan("llama-3.1-8b", runtime="trtllm", input_len=10_000, output_len=10,
                            hardware=["h100-hgx"]), InputError),
    Rule("plan-infeasible",
         ("plan", "llama-3.1-70b", "--traffic", "1000", "--hardware", "h100-hgx", "--max-chips", "16",
          "--tpot-ms", "0.01", "--aggregated-only"),
         lambda _: api.plan("llama-3.1-70b", traffic=1000, hardware=["h100-hgx"], max_chips=16, tpot_s=1e-5,
                            disaggregated=False, require_feasible=True), InfeasibleError),
    # --- simulate (simulation_report) ------------------------------------------------------
    Rule("simulate-default-plan", ("simulate", "llama-3.1-8b", "--on", "h100-hgx", "--chips", "3"),
         lambda _: api.simulate("llama-3.1-8b", "h100-hgx", chips=3), InputError),
    Rule("simulate-chips-of-the-plan",
         ("simulate", "llama-3.1-8b", "--on", "h100-hgx", "--chips", "4", "--plan", "tp=8"),
         lambda _: api.simulate("llama-3.1-8b", "h100-hgx", chips=4, plan="tp=8"), InputError),
    Rule("simulate-requests-bound", ("simulate", "llama-3.1-8b", "--on", "h100-hgx", "--requests", "2e6"),
         lambda _: api.simulate("llama-3.1-8b", "h100-hgx", requests=2e6), InputError),
    Rule("simulate-rate-positive", ("simulate", "llama-3.1-8b", "--on", "h100-hgx", "--rate", "0/s"),
         lambda _: api.simulate("llama-3.1-8b", "h100-hgx", rate="0/s"), InputError),
    Rule("simulate-prefix-hit-range",
         ("simulate", "llama-3.1-8b", "--on", "h100-hgx", "--prefix-hit", "1.5"),
         lambda _: api.simulate("llama-3.1-8b", "h100-hgx", prefix_hit=1.5), InputError, False),
    Rule("simulate-host-cache-bound", ("simulate", "llama-3.1-8b", "--on", "h100-hgx", "--host-cache", "-1"),
         lambda _: api.simulate("llama-3.1-8b", "h100-hgx", host_cache_bytes=-1.0), InputError, False),
    Rule("simulate-attainment-needs-slo",
         ("simulate", "llama-3.1-8b", "--on", "h100-hgx", "--attainment", "0.9"),
         lambda _: api.simulate("llama-3.1-8b", "h100-hgx", attainment=0.9), InputError),
    Rule("simulate-attainment-range",
         ("simulate", "llama-3.1-8b", "--on", "h100-hgx", "--slo", "ttft=2s", "--attainment", "1.5"),
         lambda _: api.simulate("llama-3.1-8b", "h100-hgx", slo="ttft=2s", attainment=1.5), InputError),
    Rule("simulate-trace-sorted", ("simulate", "llama-3.1-8b", "--on", "h100-hgx", "--trace", "{unsorted}"),
         lambda tmp: api.simulate("llama-3.1-8b", "h100-hgx", trace=_trace(tmp, "{unsorted}")), InputError),
    Rule("simulate-trace-block-ids",
         ("simulate", "llama-3.1-8b", "--on", "h100-hgx", "--trace", "{unknown-block}"),
         lambda tmp: api.simulate("llama-3.1-8b", "h100-hgx", trace=_trace(tmp, "{unknown-block}")),
         InputError),
    Rule("simulate-slo-unmet",
         ("simulate", "llama-3.1-8b", "--on", "h100-hgx", "--requests", "200", "--slo", "tpot_p99=1us"),
         lambda _: api.simulate("llama-3.1-8b", "h100-hgx", requests=200, slo="tpot_p99=1us",
                                require_slo=True),
         SloUnmetError),
    # --- sweep ------------------------------------------------------------------------------
    Rule("sweep-scheduler-address", ("sweep", SWEEP, "--out", "{tmp}/x.csv", "--scheduler", "tcp://foo:bar"),
         lambda _: api.sweep(SWEEP, scheduler="tcp://foo:bar"), InputError),
    Rule("sweep-points-budget", ("sweep", SWEEP, "--out", "{tmp}/x.csv", "--max-points", "10"),
         lambda _: api.sweep(SWEEP, max_points=10), InputError),
    # --- training ---------------------------------------------------------------------------
    Rule("train-ep-dispatch",
         ("train", "deepseek-v3", "--on", "h100-hgx", "--tokens", "1e12", "--ep-dispatch", "fp4"),
         lambda _: api.train("deepseek-v3", "h100-hgx", "tp=1", tokens=1e12, ep_dispatch="fp4"), InputError),
    Rule("train-chips-of-the-plan",
         ("train", "llama-3.1-8b", "--on", "h100-hgx", "--tokens", "1e12", "--plan", "tp=8", "--chips", "4"),
         lambda _: api.train("llama-3.1-8b", "h100-hgx", "tp=8", tokens=1e12, chips=4), InputError),
    Rule("train-tokens-bound", ("train", "llama-3.1-8b", "--on", "h100-hgx", "--tokens", "1e19"),
         lambda _: api.train("llama-3.1-8b", "h100-hgx", "tp=1", tokens=1e19), InputError, False),
    Rule("train-does-not-fit",
         ("train", "llama-3.1-70b", "--on", "h100-hgx", "--chips", "1", "--tokens", "1e12"),
         lambda _: api.train("llama-3.1-70b", "h100-hgx", "tp=1", tokens=1e12, chips=1, require_fit=True),
         DoesNotFitError),
    # --- prices, fleet, overtrain, sparsity -------------------------------------------------
    Rule("prices-provider", ("prices", "--provider", "acme"),
         lambda _: api.prices(provider="acme"), UnknownIdError),
    Rule("prices-as-of", ("prices", "--as-of", "1900-01-01"),
         lambda _: api.prices(as_of="1900-01-01"), InputError),
    Rule("prices-retentions", ("prices", "--retention", ",".join(f"{s}s" for s in range(1, 34))),
         lambda _: api.prices(retention_s=range(1, 34)), InputError),
    Rule("fleet-model-and-system", ("fleet", "--model", "llama-3.1-8b"),
         lambda _: api.fleet(model="llama-3.1-8b"), InputError),
    Rule("overtrain-efficiency-bound", ("overtrain", "--rl-efficiency", "1e-4"),
         lambda _: api.overtrain(rl_efficiency=1e-4), InputError, False),
    Rule("sparsity-levels-bound", ("sparsity", "--sparsity", "1,8192"),
         lambda _: api.sparsity(levels=[1, 8192]), InputError),
    Rule("sparsity-users-bound", ("sparsity", "--users", "1e7"),
         lambda _: api.sparsity(users=1e7), InputError),
    # --- measure ----------------------------------------------------------------------------
    Rule("measure-repeats", ("measure", "--quick", "--repeats", "2"),
         lambda _: api.measure(quick=True, repeats=2), InputError),
)  # fmt: skip


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(list(args))
    return code, out.getvalue(), err.getvalue()


def _field(text: str) -> str:
    """A field as both faces spell it: ``--price-per-chip-hour`` and ``price per chip-hour`` alike."""
    return text.strip().lstrip("-").replace(" ", "-").replace("_", "-")


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_the_api_refuses_what_the_cli_refuses(rule: Rule, tmp_path: Path) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in rule.cli]
    args = [_trace(tmp_path, a) if a in TRACES else a for a in args]
    code, _, err = _run(*args)
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: "), err
    with pytest.raises(rule.error) as info:
        rule.call(tmp_path)
    exc = info.value
    assert type(exc) is rule.error, type(exc)
    shown = lines[0].removeprefix("error: ")
    if rule.same_message:
        assert shown == " ".join(str(exc).split())
    if isinstance(exc, InputError):
        assert _field(shown.split(": got ")[0]) == _field(exc.field), (shown, exc.field)


def test_every_command_has_one_api_call() -> None:
    """``rackmath.api`` offers a call per command of ``cli/main.COMMANDS`` (``web`` starts a
    server; ``models`` is the catalog's ``rackmath.models``), and ``import rackmath as rm``
    reaches each (``measure`` as ``rackmath.api.measure``: ``rackmath.measure`` is a package)."""
    import rackmath as rm
    from rackmath.cli.main import COMMANDS

    for command in COMMANDS:
        if command == "web":
            continue
        if command == "models":
            assert callable(rm.models)
            continue
        assert callable(getattr(api, command)), command
        if command != "measure":
            assert getattr(rm, command) is getattr(api, command), command
    assert {r.cli[0] for r in RULES} <= set(COMMANDS)


def test_the_outcome_refusals_return_their_result_unless_asked_to_raise() -> None:
    """A valid request with no answer returns its result (which says why) unless
    ``require_...=True``: the CLI prints the report, then exits 1 with the same error."""
    result = api.plan(
        "llama-3.1-70b", traffic=1000, hardware=["h100-hgx"], max_chips=16, tpot_s=1e-5, disaggregated=False
    )
    assert result.best is None and "above the 0.01 ms SLO" in result.infeasible_reason
    with pytest.raises(InfeasibleError, match=r"above the 0\.01 ms SLO"):
        api.plan(
            "llama-3.1-70b",
            traffic=1000,
            hardware=["h100-hgx"],
            max_chips=16,
            tpot_s=1e-5,
            disaggregated=False,
            require_feasible=True,
        )


#: A command and the API call with the same arguments: the same answer, so the same JSON.
SAME_ANSWER = (
    (
        ("plan", "llama-3.1-8b", "--hardware", "h100-hgx"),
        lambda: api.plan("llama-3.1-8b", hardware=["h100-hgx"]),
    ),
    (("pareto", "llama-3.1-8b", "--on", "h100-hgx"), lambda: api.pareto("llama-3.1-8b", "h100-hgx")),
    (("layout", "llama-3.1-8b", "--on", "h100-hgx"), lambda: api.layout("llama-3.1-8b", "h100-hgx")),
    (("fleet",), api.fleet),
    (("overtrain",), api.overtrain),
    (("sparsity",), api.sparsity),
    (("prices",), api.prices),
    (
        ("simulate", "llama-3.1-8b", "--on", "h100-hgx", "--requests", "300"),
        lambda: api.simulate("llama-3.1-8b", "h100-hgx", requests=300),
    ),
    (
        ("train", "llama-3.1-8b", "--on", "h100-hgx", "--plan", "tp=8", "--tokens", "1e12"),
        lambda: api.train("llama-3.1-8b", "h100-hgx", "tp=8", tokens=1e12),
    ),
)


@pytest.mark.parametrize(("cli", "call"), SAME_ANSWER, ids=[c[0][0] for c in SAME_ANSWER])
def test_the_api_answers_what_the_command_answers(cli: tuple[str, ...], call: Callable[[], Any]) -> None:
    """The call has the command's defaults: its ``to_dict()`` is the command's ``--json``
    (which may add only the efficiency it used, ``plan`` and ``pareto``)."""
    code, out, err = _run(*cli, "--json")
    assert code == 0, err
    shown = json.loads(out)
    answered = json.loads(to_json(call().to_dict()))
    assert set(shown) - set(answered) <= {"efficiency"}
    assert {k: shown[k] for k in answered} == answered
