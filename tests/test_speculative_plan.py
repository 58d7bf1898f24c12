"""Speculation on the real plan (issue 25 item 2): acceptance given per position, as a reach
curve or as acceptance lengths; tree drafting; the verify step as the plan's step with
``T = 1 + w k`` tokens per sequence; the draft's cost by drafter; the worked example of
docs/serving-features.md (DeepSeek-V3 MTP on a wide-EP GB200 NVL72 plan) recomputed by hand."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rackmath.api as rm
from rackmath.analyses.serving import speculative as sp
from rackmath.analyses.serving.deployment import Deployment
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.analyses.serving.pooled import make_deployment
from rackmath.catalog.loader import resolve_model, system
from rackmath.core import loads
from rackmath.core import speculative as cs
from rackmath.errors import InputError

# the docs' worked example: DeepSeek-V3 (R1 shares its architecture) on 64 chips of a GB200
# NVL72, attention data-parallel and experts over all 64 (4 of the 256 experts per chip)
MODEL, SYSTEM, PLAN = "deepseek-v3", "gb200-nvl72", "dp=64,ep=64"


def _planned() -> Deployment:
    return plan_deployment(resolve_model(MODEL), system(SYSTEM), PLAN)


# --------------------------------------------------------------------------- acceptance forms


def test_reach_lengths_and_one_length_by_hand() -> None:
    # reach p = (0.8, 0.48, 0.24): a = (0.8, 0.48/0.8, 0.24/0.48) = (0.8, 0.6, 0.5)
    np.testing.assert_allclose(cs.acceptance_from_reach([0.8, 0.48, 0.24]), [0.8, 0.6, 0.5], rtol=1e-12)
    # tau = (1.8, 2.28, 2.52): p = (0.8, 0.48, 0.24)
    np.testing.assert_allclose(cs.reach_from_lengths([1.8, 2.28, 2.52]), [0.8, 0.48, 0.24], rtol=1e-12)
    # one length at k: the constant rate with 1 + a + ... + a^k = tau
    a = cs.constant_rate_for_length(3.2, 7)
    assert sum(a**i for i in range(8)) == pytest.approx(3.2, rel=1e-12)
    assert cs.constant_rate_for_length(1.0, 3) == pytest.approx(0.0, abs=1e-12)
    assert cs.constant_rate_for_length(4.0, 3) == pytest.approx(1.0, abs=1e-12)
    # the three forms of one curve are one speculation
    forms = [
        sp.parse_speculation("mtp=3,acceptance=0.8,0.6,0.5", resolve_model),
        sp.parse_speculation("mtp=3,reach=0.8,0.48,0.24", resolve_model),
        sp.parse_speculation("mtp=3,length=1.8,2.28,2.52", resolve_model),
    ]
    for s in forms:
        np.testing.assert_allclose(s.acceptance, [0.8, 0.6, 0.5], rtol=1e-12)
        assert s.tokens_per_step == pytest.approx(2.52, rel=1e-12)
    assert sp.parse_speculation("mtp=7,length=3.2", resolve_model).tokens_per_step == pytest.approx(3.2)


def test_tree_by_hand() -> None:
    # width 4 x depth 5 verifies 1 + 4 x 5 = 21 tokens; a = 0.6 per candidate becomes
    # 1 - 0.4^4 = 0.9744 per position, E = 1 + sum_i 0.9744^i
    s = sp.parse_speculation("eagle=5,width=4,acceptance=0.6", resolve_model)
    assert s.tokens_verified == 21 and s.kind is sp.Drafter.EAGLE
    q = 1 - 0.4**4
    assert s.tokens_per_step == pytest.approx(1 + sum(q**i for i in range(1, 6)), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8), st.integers(1, 7))
def test_a_wider_tree_never_yields_fewer_tokens(rates: list[float], width: int) -> None:
    narrow = cs.expected_tokens_per_step(cs.tree_acceptance(rates, width))
    wide = cs.expected_tokens_per_step(cs.tree_acceptance(rates, width + 1))
    assert narrow <= wide + 1e-12 <= len(rates) + 1 + 2e-12


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.01, 1.0), min_size=1, max_size=8))
def test_the_three_forms_round_trip(rates: list[float]) -> None:
    reach = np.cumprod(rates)
    np.testing.assert_allclose(cs.acceptance_from_reach(reach), rates, rtol=1e-9)
    np.testing.assert_allclose(cs.reach_from_lengths(1 + np.cumsum(reach)), reach, rtol=1e-9, atol=1e-12)


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.sampled_from([64.0, 1024.0, 8192.0]))
def test_drafts_never_kept_never_help_on_the_plan(depth: int, width: int, batch: float) -> None:
    """Acceptance 0: one token a step, and the wider verify step plus the drafter is never
    shorter than the plain step (speedup <= 1)."""
    s = sp.speculation(depth, 0.0, width=width, drafter="eagle")
    g = sp.speculative_decode(_planned(), [batch], [4096.0, 65536.0], s)
    assert s.tokens_per_step == 1.0
    assert np.all(g.speedup <= 1.0 + 1e-12)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("mtp=3,reach=0.5,0.6,0.2", "--spec reach"),  # a cumulative curve that rises
        ("mtp=3,reach=0.8,0.5", "--spec reach"),  # not one per position
        ("mtp=3,length=1.5,2.3,2.6", "--spec length"),  # rises by 0.5, then 0.8: the increments rise
        ("mtp=2,length=2.5,2.2", "--spec length"),  # a length curve that falls
        ("mtp=2,length=3.5", "--spec length"),  # above k + 1
        ("mtp=2,acceptance=1.2", "--spec acceptance"),  # a conditional rate outside [0, 1]
        ("mtp=2,acceptance=0.8,reach=0.8,0.5", "--spec acceptance"),  # two forms
        ("eagle=3,width=0,acceptance=0.8", "--spec width"),
        ("eagle=3,width=17,acceptance=0.8", "--spec width"),
        ("mtp=2,eagle=2,acceptance=0.8", "--spec"),
    ],
)
def test_curves_that_rise_are_refused_naming_the_field(text: str, field: str) -> None:
    with pytest.raises(InputError) as err:
        sp.parse_speculation(text, resolve_model)
    assert str(err.value).startswith(field) and "\n" not in str(err.value)
    with pytest.raises(InputError, match="drafter"):
        sp.speculation(2, 0.8, drafter="medusa")


# --------------------------------------------------------------------------- on the plan


def test_verify_is_the_plan_step_at_k_plus_one_tokens_by_hand() -> None:
    """t_verify = the plan's step with B (k + 1) query rows (TP/EP/DP communication included),
    t_draft = k t_plain / L (the MTP module is one layer), speedup = E t_plain / (t_verify + t_draft)."""
    dep = _planned()
    m = dep.model
    b, c = np.array([[512.0], [4096.0]]), np.array([[4096.0, 65536.0]])
    s = sp.parse_speculation("mtp=1,acceptance=0.85", resolve_model)
    g = sp.speculative_decode(dep, b[:, 0], c[0], s)
    verify = dep.step(loads.decode_load(m, b, c, 2.0, tokens_per_sequence=2.0), decode=True).step_s
    plain = dep.step(loads.decode_load(m, b, c, 2.0), decode=True).step_s
    draft = 1 * plain / m.num_layers
    np.testing.assert_allclose(g.verify.step_s, verify, rtol=1e-12)
    np.testing.assert_allclose(g.draft_s, draft, rtol=1e-12)
    np.testing.assert_allclose(g.speedup, 1.85 * plain / (verify + draft), rtol=1e-12)
    # the EP dispatch and combine of the verify step carry B (k + 1) tokens: those of a plain
    # step at twice the batch (they do not depend on the context)
    wide = dep.step(loads.decode_load(m, 2 * b, c, 2.0), decode=True)
    np.testing.assert_allclose(g.verify.ep_comm_s, np.broadcast_to(wide.ep_comm_s, g.verify.ep_comm_s.shape))
    assert np.all(g.verify.ep_comm_s > np.broadcast_to(dep.decode(b[:, 0], c[0]).step.ep_comm_s, (2, 2)))
    # the ideal chip has no communication: the plan's verify step is slower
    ideal = sp.speculative_decode(make_deployment(dep.model, dep.system, chips=dep.chips), b[:, 0], c[0], s)
    assert np.all(g.verify.step_s > ideal.verify.step_s)


def test_draft_costs_by_drafter() -> None:
    dep = _planned()
    b, c = [256.0, 1024.0], [8192.0]
    plain = dep.decode(b, c).step_s
    ngram = sp.speculative_decode(dep, b, c, sp.parse_speculation("ngram=4,acceptance=0.5", resolve_model))
    assert np.all(ngram.draft_s == 0.0)
    # a width-2 EAGLE tree drafts k layers at 2B rows
    tree = sp.speculative_decode(
        dep, b, c, sp.parse_speculation("eagle=3,width=2,acceptance=0.6", resolve_model)
    )
    at_2b = dep.decode([512.0, 2048.0], c).step_s
    np.testing.assert_allclose(tree.draft_s, 3 * at_2b / 61, rtol=1e-12)
    assert tree.verify.step_s.shape == plain.shape


def test_long_context_erases_the_gain_of_a_deep_mtp_chain() -> None:
    """MLA attention is bound by its FLOPs once k + 1 queries share the latent cache: at 8
    sequences per rank a k = 7 chain (tau = 3.2) gains at 4K tokens and loses at 128K."""
    dep = _planned()
    s = sp.parse_speculation("mtp=7,length=3.2", resolve_model)
    g = sp.speculative_decode(dep, [512.0], [4096.0, 16384.0, 32768.0, 65536.0, 131072.0], s)
    gain = g.speedup[0]
    assert gain[0] > 1.5 and gain[-1] < 1.0 and np.all(np.diff(gain) < 0)
    assert g.break_even_context() == 131072.0
    assert np.all(g.fits)
    assert g.verify.bottleneck[0, -1] == "compute"


def test_explain_with_a_plan_speculates_on_the_plan() -> None:
    d = rm.deployment(MODEL, SYSTEM, chips=64)
    r = rm.explain(d, [512], [4096], plan=PLAN, spec="mtp=1,acceptance=0.85")
    assert r.speculative is not None and r.planned is not None
    assert r.speculative.to_dict()["on"] == PLAN
    np.testing.assert_allclose(r.speculative.plain.step_s, r.planned.step_s, rtol=1e-12)
    alone = rm.explain(d, [512], [4096], spec="mtp=1,acceptance=0.85")
    assert alone.speculative is not None and alone.speculative.to_dict()["on"] == "ideal chip"


# --------------------------------------------------------------------------- the simulator


def test_the_simulators_decode_step_costs_verify_plus_draft_and_advances_e_tokens() -> None:
    """A tree speculation in the request simulator: at every (sequences, context) point of the
    step table a decode step is the plan's step with T = 1 + w k tokens per sequence plus the
    EAGLE head's k layers at w B rows; one request alone of O output tokens takes its prefill
    step and 1 + ceil((O - 1) / E) - 1 decode steps, each between the table's steps at the
    ends of its contexts (1000 and 1201 tokens: one linear piece of the table)."""
    from rackmath.analyses.deploy import simulate as sim
    from rackmath.analyses.deploy import slo
    from rackmath.catalog.runtimes import runtime
    from rackmath.specs.workload import Requests

    m = resolve_model("llama-3.1-70b")
    dep = plan_deployment(m, system("h100-hgx"), "tp=8")
    s = sp.parse_speculation("eagle=3,width=2,acceptance=0.7,0.6,0.5", resolve_model)
    assert s.tokens_verified == 7
    rep = sim.replica(dep, runtime("vllm"), max_context=1201.0, mean_context=1201.0, speculation=s)
    t = rep.table
    kv_el = dep.kv_bytes_per_element
    for c in t.context[2::3]:
        verify = dep.step(loads.decode_load(m, 1.0, c, kv_el, tokens_per_sequence=7.0), decode=True).step_s
        draft = 3 * dep.step(loads.decode_load(m, 2.0, c, kv_el), decode=True).step_s / m.num_layers
        assert float(t(1.0, 0.0, c)) == pytest.approx(float(verify + draft), rel=1e-9)
    one = Requests(np.zeros(1), np.array([1000]), np.array([201]))
    fleet = slo.Fleet(m, system("h100-hgx"), "tp=8", speculation=s)
    run = slo.serve(fleet, slo.Workload(rate_per_s=None, trace=one))
    e = s.tokens_per_step
    decode_steps = math.ceil(200 / e)
    assert run.tokens_per_step == pytest.approx(e) and run.times.steps == 1 + decode_steps
    decode_s = float(run.times.finish_s[0] - run.times.first_token_s[0])
    ends = float(t(1.0, 0.0, 1000.0)), float(t(1.0, 0.0, 1201.0))  # one linear piece of the table
    assert decode_steps * min(ends) * (1 - 1e-9) <= decode_s <= decode_steps * max(ends) * (1 + 1e-9)
    # TPOT over the 200 tokens asked for: E tokens a step
    assert float(run.times.tpot_s[0]) == pytest.approx(decode_s / 200, rel=1e-12)


# --------------------------------------------------------------------------- the search


def test_the_search_takes_acceptance_per_position() -> None:
    """``rackmath plan --mtp 3 --acceptance 0.85,0.7,0.6``: E = 1 + 0.85 + 0.85 x 0.7 +
    0.85 x 0.7 x 0.6; a decode candidate's TPOT is its cycle over that E."""
    from rackmath.analyses.deploy import candidates, plan_features
    from rackmath.analyses.deploy.candidates import Workload
    from rackmath.analyses.deploy.plan_features import PlanFeatures
    from rackmath.core import roofline as rl

    rates = plan_features.parse_acceptance("0.85,0.7,0.6")
    assert rates == (0.85, 0.7, 0.6) and plan_features.parse_acceptance("0.8") == 0.8
    f = PlanFeatures(mtp=3, acceptance=rates)
    e = 1 + 0.85 + 0.85 * 0.7 + 0.85 * 0.7 * 0.6
    assert f.tokens_per_step == pytest.approx(e, rel=1e-12)
    assert f.speculation_dict() == {
        "mtp": 3,
        "acceptance": [0.85, 0.7, 0.6],
        "tokens_per_step": f.tokens_per_step,
    }
    w = Workload(traffic_tokens_per_s=1e6, input_len=1024, output_len=1024)
    m, sy = resolve_model(MODEL), system(SYSTEM)
    per = candidates.evaluate(
        m, sy, "fp8", w, max_chips=8, batches=(1024,), efficiency=rl.PURE_ROOFLINE, routing=f, phase="decode"
    )
    flat = candidates.evaluate(
        m,
        sy,
        "fp8",
        w,
        max_chips=8,
        batches=(1024,),
        efficiency=rl.PURE_ROOFLINE,
        routing=PlanFeatures(mtp=3, acceptance=1.0),
        phase="decode",
    )
    assert per is not None and flat is not None
    # a decode pool's cycle (the verify width and the head) does not depend on the rates: E apart
    np.testing.assert_allclose(per.tpot_s * e, flat.tpot_s * 4.0, rtol=1e-12)
    with pytest.raises(InputError, match=r"^--acceptance"):
        PlanFeatures(mtp=3, acceptance=(0.8, 0.6))
    with pytest.raises(InputError, match=r"^--acceptance"):
        plan_features.parse_acceptance("0.8,1.2")


# --------------------------------------------------------------------------- the CLI


def test_explain_spec_on_a_plan_through_the_cli(cli: Callable[..., tuple[int, str, str]]) -> None:
    import json

    code, out, _ = cli(
        "explain", MODEL, "--on", SYSTEM, "--chips", "64", "--plan", PLAN, "--batch", "512",
        "--context", "4096,131072", "--spec", "eagle=3,width=2,reach=0.7,0.42,0.21", "--json",
    )  # fmt: skip
    assert code == 0
    d = json.loads(out)["speculative"]
    assert d["on"] == PLAN and d["drafter"] == "eagle" and d["width"] == 2
    assert d["tokens_verified_per_step"] == 7
    np.testing.assert_allclose(d["acceptance_by_position"], [0.7, 0.6, 0.5], rtol=1e-12)
    tree = [1 - (1 - a) ** 2 for a in (0.7, 0.6, 0.5)]
    np.testing.assert_allclose(d["tree_acceptance_by_position"], tree, rtol=1e-12)
    e = 1 + tree[0] + tree[0] * tree[1] + tree[0] * tree[1] * tree[2]
    assert d["tokens_per_step"] == pytest.approx(e, rel=1e-12)
    for p in d["points"]:
        assert p["speedup"] == pytest.approx(
            e * p["plain_tpot_s"] / (p["verify_s"] + p["draft_s"]), rel=1e-12
        )
    code, out, err = cli("explain", MODEL, "--on", SYSTEM, "--spec", "mtp=3,length=1.5,2.3,2.6")
    assert code == 1 and (out + err).strip().startswith("error: --spec length")


# --------------------------------------------------------------------------- the sweep


def test_the_sweep_adds_speculation_columns_point_by_point() -> None:
    pytest.importorskip("pandas")
    from rackmath.analyses.deploy import sweep as sw

    spec = {
        "models": [MODEL],
        "systems": [SYSTEM],
        "plans": ["dp=8,ep=8", "ideal"],
        "batch": [8, 256],
        "context": [4096, 65536],
        "speculation": "mtp=2,reach=0.85,0.6",
    }
    f = sw.sweep(spec).frame
    assert len(f) == 2 * 2 * 2 and set(sw.SPECULATION_COLUMNS) <= set(f.columns)
    s = sp.parse_speculation("mtp=2,reach=0.85,0.6", resolve_model)
    dep = plan_deployment(resolve_model(MODEL), system(SYSTEM), "dp=8,ep=8")
    g = sp.speculative_decode(dep, [8, 256], [4096, 65536], s)
    rows = f[f.plan == "dp=8,ep=8"]
    np.testing.assert_allclose(rows.batch, g.batch.ravel())
    np.testing.assert_allclose(rows.spec_speedup, g.speedup.ravel(), rtol=1e-12)
    np.testing.assert_allclose(rows.spec_tpot_s, g.tpot_s.ravel(), rtol=1e-12)
    np.testing.assert_allclose(rows.spec_speedup, rows.step_s * 2.45 / rows.spec_step_s, rtol=1e-12)
    with pytest.raises(InputError, match="speculation"):
        sw.parse_spec({**spec, "speculation": "mtp=2,reach=0.6,0.85"})


def test_a_speculative_point_carries_its_band_from_the_verify_step() -> None:
    """The band of a speculative step is the verify step's kernel band plus the drafting time,
    and its throughput and price count the E tokens each sequence gains a step (before, the
    edges collapsed to the step and counted one token a sequence)."""
    dep = _planned()
    s = sp.parse_speculation("mtp=1,acceptance=0.85", resolve_model)
    g = sp.speculative_decode(dep, [512.0], [4096.0], s)
    lo, hi = g.verify.step_band_s
    draft, step = float(g.draft_s[0, 0]), float(g.step_s[0, 0])
    p10, p90 = float(lo[0, 0]) + draft, float(hi[0, 0]) + draft
    assert p10 < step < p90  # kernel-grounded: the verify operators carry held-out bands
    point = g.to_dict()["points"][0]
    assert (point["step_s_p10"], point["step_s_p90"]) == pytest.approx((p10, p90), rel=1e-12)
    tokens = 512.0 * 1.85  # E = 1 + 0.85 for one MTP draft
    assert point["tokens_per_s_per_chip_p10"] == pytest.approx(tokens / p90 / dep.chips, rel=1e-12)
    assert point["tokens_per_s_per_chip"] == pytest.approx(tokens / step / dep.chips, rel=1e-12)
    e2e = point["end_to_end"]  # the published rows' ratios widen it
    assert e2e["step_s_p90"] >= p90 and e2e["step_s_p90"] == pytest.approx(
        max(p90, e2e["step_ratio_p90"] * step)
    )
