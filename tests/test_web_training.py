"""The Training page with AppTest: the job's numbers are ``rackmath.api.train``'s, the pipeline
drawing is the simulated timeline of ``rackmath.api.pipeline``, and impossible plans are one
message while the rest of the page goes on."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("streamlit", reason="needs the web extra: pip install 'rackmath[web]'")

from streamlit.testing.v1 import AppTest

from rackmath.analyses.training.estimate import choose_recompute
from rackmath.analyses.training.setup import CALIBRATED_TRAINING
from rackmath.api import pipeline, train
from rackmath.core.roofline import Efficiency
from rackmath.errors import DoesNotFitError
from rackmath.views import fmt
from rackmath.web.state.training import TrainingState, parse_training_query, training_query

SCRIPT = """
from rackmath.web.pages import guarded
from rackmath.web.page_training import render_training_page
guarded(render_training_page)()
"""
LLAMA3 = {"tokens": 15.6e12, "global_batch": 2048, "zero": 2}  # Llama 3 405B (docs/training.md)


def run_page(**query: str) -> AppTest:
    at = AppTest.from_string(SCRIPT, default_timeout=60)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


def ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def plots(at: AppTest) -> dict[str, dict[str, Any]]:
    specs = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    return {s["layout"]["title"]["text"]: s for s in specs}


def values(v: Any) -> Any:
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).tolist()
    return v


def test_a_job_that_does_not_fit_says_by_how_much_and_what_would() -> None:
    at = run_page(recompute="none")
    ok(at)
    r = train("llama-3.1-405b", "h100-hgx", "tp=8,pp=16,dp=64", recompute="none", **LLAMA3)
    assert not r.memory.fits
    assert metrics(at)["Fits"] == "no"
    assert metrics(at)["Short by"] == f"{r.memory.short_by_bytes / 1e9:,.1f} GB"
    best = choose_recompute(r.setup)
    assert [w.value for w in at.warning] == [
        f"Recomputation none is short by {r.memory.short_by_bytes / 1e9:.1f} GB per chip. The fastest mode "
        f"that fits is {best.mode.value}: step {fmt.seconds(best.step_s)}, {fmt.nbytes(best.total_bytes)} "
        "per chip (choose it under Recomputation)."
    ]


def test_an_infeasible_job_has_no_headline_number_and_says_it_is_infeasible() -> None:
    """On 1de8042 a job 274 GB per chip short still headlined its step time, MFU, days and a
    $48 M cost; a job that cannot run has none of them, and one error says so."""
    at = run_page(recompute="none")
    ok(at)
    r = train("llama-3.1-405b", "h100-hgx", "tp=8,pp=16,dp=64", recompute="none", **LLAMA3)
    shown = metrics(at)
    headlines = ("Step time", "MFU", "HFU", "Tokens/s", "Days", "Chip-hours", "Cost", "Total model FLOPs")
    for headline in headlines:
        assert headline not in shown, headline
    assert fmt.money(r.cost_usd) not in " ".join(shown.values())
    [error] = errors(at)
    assert error.startswith("Infeasible: this job does not fit.")
    assert f"short by {r.memory.short_by_bytes / 1e9:,.1f} GB per chip" in error
    assert shown["Total"] == fmt.nbytes(r.memory.total_bytes)  # the memory that says why stays
    assert shown["Usable"] == fmt.nbytes(r.memory.usable_bytes)


def test_the_gemm_precision_offers_only_what_training_accepts() -> None:
    """On 1de8042 the picker listed the chip's peaks (fp32, tf32, int8 ...) and training then
    refused tf32; it now lists the GEMM recipes the chip has a peak for, each of which runs."""
    at = run_page()
    ok(at)
    box = next(s for s in at.selectbox if s.label == "GEMM precision (recipe)")
    offered = [o for o in box.options if not o.startswith("default")]
    assert offered == ["bf16", "fp16", "fp8", "fp8-current", "fp8-block", "mxfp8"]  # an H100: no fp4 peak
    assert "tf32" not in " ".join(box.options)
    for recipe in offered:
        at = run_page(compute=recipe, recompute="selective")
        ok(at)
        assert errors(at) == [], recipe
        r = train("llama-3.1-405b", "h100-hgx", "tp=8,pp=16,dp=64", compute=recipe, **LLAMA3)
        assert metrics(at)["Step time"] == fmt.seconds(r.step.step_s)


def test_a_recipe_the_chip_lacks_in_the_url_is_refused_in_the_pages_words() -> None:
    at = run_page(compute="nvfp4")  # no fp4 peak on an H100
    ok(at)
    [error] = errors(at)
    assert error.startswith("GEMM precision (recipe): got 'nvfp4'") and "--" not in error
    assert metrics(at)["Step time"]  # the default recipe is used


def at_url_mfu(**query: str) -> str:
    at = run_page(**query)
    ok(at)
    return metrics(at)["MFU"]


def test_the_default_job_is_llama3_405b_and_its_numbers_are_the_apis() -> None:
    at = run_page()
    ok(at)
    assert errors(at) == []
    r = train("llama-3.1-405b", "h100-hgx", "tp=8,pp=16,dp=64", **LLAMA3)
    m = metrics(at)
    assert m["Step time"] == fmt.seconds(r.step.step_s)
    # kernel-grounded by default, as the CLI (docs/training.md); the pure roofline says 52.4%
    assert r.setup.efficiency == Efficiency() and "kernel-grounded" in r.setup.efficiency_label
    assert m["MFU"] == fmt.pct(r.mfu) == "40.0%"
    pure = train("llama-3.1-405b", "h100-hgx", "tp=8,pp=16,dp=64", efficiency="pure", **LLAMA3)
    assert fmt.pct(pure.mfu) == "52.4%" and at_url_mfu(efficiency="pure") == "52.4%"
    assert m["HFU"] == fmt.pct(r.hfu)
    assert m["Tokens/s"] == f"{r.tokens_per_s:,.0f}"
    assert m["Days"] == f"{r.total_days:,.1f}"
    assert m["Cost"] == fmt.money(r.cost_usd) == "$63.2 M"  # the whole figure is in its help
    assert fmt.money(pure.cost_usd) == "$48.3 M"  # the pure roofline's
    assert m["Activations"] == fmt.nbytes(r.memory.activation_bytes)
    # 15.6e12 tokens on an H100's 81,559 MiB: selective recompute fits (docs/training.md)
    assert r.memory.fits and m["Fits"] == "fits"
    best = choose_recompute(r.setup)
    assert best.mode.value == "selective"
    assert [v.value for v in at.success] == ["Fits; selective is the fastest recomputation mode that does."]
    options = next(d.value for d in at.dataframe if "mode" in d.value.columns)
    assert list(options["mode"]) == ["none", "selective", "full", "sqrt", "reversible"]
    np.testing.assert_allclose(options["step_s"], [o.step_s for o in r.options], rtol=1e-12)
    memory = next(s for t, s in plots(at).items() if t.startswith("Memory per chip"))
    acts = next(t for t in memory["data"] if t["name"] == "activations")
    np.testing.assert_allclose(values(acts["y"]), [o.activations_bytes / 1e9 for o in r.options], rtol=1e-12)
    assert dict(at.query_params) == training_query(TrainingState())


def test_the_calibrated_efficiency_lowers_mfu_by_the_fitted_fraction() -> None:
    at = run_page()
    at.radio(key="training.efficiency").set_value("calibrated").run()
    ok(at)
    r = train("llama-3.1-405b", "h100-hgx", "tp=8,pp=16,dp=64", efficiency=CALIBRATED_TRAINING, **LLAMA3)
    assert metrics(at)["MFU"] == fmt.pct(r.mfu) == "37.8%"  # docs/training.md, row 71 calibrated
    assert at.query_params["efficiency"] == "calibrated"


def test_a_plan_that_fits_says_so_and_recompute_changes_the_step() -> None:
    at = run_page(model="llama-3.1-70b", plan="tp=8,pp=4,dp=32", global_batch="512", trillion_tokens="15")
    ok(at)
    r = train("llama-3.1-70b", "h100-hgx", "tp=8,pp=4,dp=32", tokens=15e12, global_batch=512, zero=2)
    assert r.memory.fits and metrics(at)["Fits"] == "fits"
    at.selectbox(key="training.recompute").set_value("full").run()
    ok(at)
    full = train(
        "llama-3.1-70b",
        "h100-hgx",
        "tp=8,pp=4,dp=32",
        tokens=15e12,
        global_batch=512,
        zero=2,
        recompute="full",
    )
    assert metrics(at)["Step time"] == fmt.seconds(full.step.step_s) != fmt.seconds(r.step.step_s)
    assert at.query_params["recompute"] == "full"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"chips": "100"}, "Chips: got 100; allowed: the plan's tp x pp x dp x cp = 8192 chips"),
        ({"plan": "tp=3,pp=16,dp=64"}, "plan tp: got 3; allowed: a divisor of the 128 attention heads"),
    ],
)
def test_impossible_plans_are_one_message_and_the_pipeline_is_still_drawn(
    query: dict[str, str], message: str
) -> None:
    at = run_page(**query)
    ok(at)
    assert len(errors(at)) == 1 and errors(at)[0].startswith(message), errors(at)
    assert "Step time" not in metrics(at)
    assert len(plots(at)) == 1 and "Bubble, simulated" in metrics(at)


def test_a_bad_plan_typed_in_is_reported_once_and_fixed() -> None:
    at = run_page()
    at.text_input(key="training.plan").set_value("tp=8,pp=x").run()
    ok(at)
    assert errors(at) == ["plan pp: got 'x'; allowed: a whole number >= 1"]
    at.text_input(key="training.plan").set_value("tp=8,pp=16,dp=64").run()
    assert errors(at) == [] and "Step time" in metrics(at)


def test_the_pipeline_drawing_is_the_simulated_timeline() -> None:
    at = run_page()
    at.selectbox(key="training.pipe_schedule").set_value("gpipe")
    at.number_input(key="training.pipe_microbatches").set_value(4).run()
    ok(at)
    result = pipeline(4, 4, "gpipe")
    m = metrics(at)
    assert m["Bubble, simulated"] == f"{result.timeline.bubble_frac:.4f}" == "0.4286"  # 3/7
    assert m["Bubble, closed form"] == f"{result.closed_form_bubble_frac:.4f}"
    spec = next(s for t, s in plots(at).items() if t.startswith("gpipe"))
    bars = {t["name"]: t for t in spec["data"]}
    ops = result.timeline.ops
    forward = [o for o in ops if o.op.kind.value == "F"]
    assert values(bars["forward"]["base"]) == [o.start for o in forward]
    assert values(bars["forward"]["x"]) == [o.end - o.start for o in forward]
    assert bars["forward"]["y"] == [f"stage {o.stage}" for o in forward]
    assert sum(len(values(t["x"])) for t in spec["data"]) == len(ops)
    assert at.query_params["pipe_schedule"] == "gpipe" and at.query_params["pipe_microbatches"] == "4"


@pytest.mark.parametrize(("schedule", "v"), [("interleaved", 2), ("zb-h1", 1)])
def test_interleaved_and_zero_bubble_match_their_closed_forms(schedule: str, v: int) -> None:
    at = run_page(pipe_schedule=schedule, pipe_stages="4", pipe_microbatches="16", pipe_virtual_stages="2")
    ok(at)
    result = pipeline(4, 16, schedule, virtual_stages=v)
    assert metrics(at)["Bubble, simulated"] == f"{result.timeline.bubble_frac:.4f}"
    assert metrics(at)["Bubble, closed form"] == f"{result.closed_form_bubble_frac:.4f}"
    names = {t["name"] for s in plots(at).values() for t in s["data"]}
    assert ("weight gradient" in names) == (schedule == "zb-h1")


def test_dualpipe_is_laid_out_on_the_page_as_table_2_says() -> None:
    """P = 4, m = 8, unit times: X = (4/2 - 1)(1 + 2 - 1) = 2 -> 2 / 26; both directions drawn."""
    at = run_page(pipe_schedule="dualpipe", pipe_stages="4", pipe_microbatches="8")
    ok(at)
    result = pipeline(4, 8, "dualpipe")
    m = metrics(at)
    assert m["Bubble, simulated"] == m["Bubble, closed form"] == f"{2 / 26:.4f}"
    assert m["Micro-batches in flight (stage 0)"] == "5"  # Table 2: P + 1
    spec = next(s for t, s in plots(at).items() if t.startswith("dualpipe"))
    assert sum(len(values(t["x"])) for t in spec["data"]) == len(result.timeline.ops)
    forward = next(t for t in spec["data"] if t["name"] == "forward")
    assert {"F0.0", "F0.1"} <= set(forward["text"])  # micro-batch 0 entering at each end


def test_bad_url_values_are_reported_and_defaults_used() -> None:
    at = run_page(schedule="zigzag", zero="7", pipe_stages="0", plan="tq=8")
    ok(at)
    msgs = "\n".join(errors(at))
    assert "schedule: got 'zigzag'" in msgs
    assert "zero: got '7'" in msgs
    assert "pipe_stages: got '0'" in msgs
    assert "unknown plan dimension 'tq'" in msgs
    assert metrics(at)["MFU"] == "40.0%"  # the defaults (kernel-grounded), drawn


def test_a_state_round_trips_through_the_url() -> None:
    state = TrainingState(model="llama-3.1-8b", plan="tp=2,dp=4", zero=3, pipe_schedule="zb-h1", chips=8)
    assert parse_training_query(training_query(state)) == (state, [])


def test_the_pipeline_png_is_rackmath_pipeline_plot(tmp_path: Path) -> None:
    from rackmath.plots.training import save_pipeline_plot

    # the page hands this function, bound to the timeline it shows, to its PNG download
    path = save_pipeline_plot(pipeline(2, 2, "1f1b"), tmp_path / "pipeline.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_job_that_fits_under_no_mode_names_the_leanest() -> None:
    with pytest.raises(DoesNotFitError):
        choose_recompute(
            train("llama-3.1-405b", "h100-hgx", "tp=8,pp=2,dp=4", tokens=1e12, global_batch=64).setup
        )
    at = run_page(plan="tp=8,pp=2,dp=4", global_batch="64", trillion_tokens="1")
    ok(at)
    assert any("under any recomputation (leanest:" in e and "does not fit" in e for e in errors(at)), errors(
        at
    )
    assert "Step time" not in metrics(at)  # a job that cannot run has no headline numbers
    assert any(e.startswith("Infeasible: this job does not fit.") for e in errors(at))


def test_a_pasted_config_json_trains_like_the_catalogs() -> None:
    from rackmath.specs.hf_config import load_config_file
    from rackmath.web.state.common import encode_config

    text = (Path(__file__).parent / "data" / "hf_configs" / "llama.json").read_text()
    at = run_page(
        model="custom", cfg=encode_config(text), plan="tp=8,dp=8", global_batch="512", trillion_tokens="2"
    )
    ok(at)
    assert errors(at) == []
    spec = load_config_file(Path(__file__).parent / "data" / "hf_configs" / "llama.json")
    r = train(spec, "h100-hgx", "tp=8,dp=8", tokens=2e12, global_batch=512, zero=2)
    assert metrics(at)["Step time"] == fmt.seconds(r.step.step_s)
    assert metrics(at)["MFU"] == fmt.pct(r.mfu)


def test_the_page_shows_operators_and_mfu_conventions_from_the_analysis() -> None:
    at = run_page()
    ok(at)
    r = train("llama-3.1-405b", "h100-hgx", "tp=8,pp=16,dp=64", **LLAMA3)
    frames = [d.value for d in at.dataframe]
    conventions = next(f for f in frames if "attention" in f.columns and "flops" in f.columns)
    assert list(conventions["flops"]) == ["model", "model", "hardware", "hardware"]
    assert list(conventions["attention"]) == ["with", "without", "with", "without"]
    # a BF16 run: one peak column; model FLOPs with attention is the MFU metric
    assert conventions["vs_bf16_peak_frac"][0] == pytest.approx(r.mfu, rel=1e-12)
    operators = next(f for f in frames if "input_grad_s" in f.columns)
    assert list(operators["name"]) == [o["name"] for o in r.step.operator_rows()]
    np.testing.assert_allclose(operators["time_s"], [o["time_s"] for o in r.step.operator_rows()], rtol=1e-12)


def test_the_kernel_efficiency_on_a_tpu_says_it_is_transferred() -> None:
    at = run_page(system="tpu-v4-pod", plan="tp=8,pp=16,dp=64", efficiency="kernel", recompute="full")
    ok(at)
    plan = "tp=8,pp=16,dp=64"
    r = train("llama-3.1-405b", "tpu-v4-pod", plan, recompute="full", **LLAMA3)
    assert r.memory.fits  # 32 GB chips: only full recomputation fits
    assert r.setup.table.transferred
    assert metrics(at)["MFU"] == fmt.pct(r.mfu)
    assert any("transferred from h100-sxm" in m.value for m in at.markdown)
