"""Speculative decoding, prefix caching and energy: hand derivations of the worked examples
in docs/serving-features.md, invariants, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rackmath as rm
from rackmath.analyses.serving import energy, pooled, prefix
from rackmath.analyses.serving import speculative as sp
from rackmath.analyses.serving.deployment import Deployment
from rackmath.catalog import economics as ce
from rackmath.catalog.loader import chip, resolve_model
from rackmath.catalog.power import chip_power
from rackmath.core import energy as en
from rackmath.core import loads
from rackmath.core import roofline as rl
from rackmath.core import speculative as cs
from rackmath.errors import InputError, UnknownIdError


def _dep(model: str = "llama-3.1-70b", system: str = "h200-hgx", **kw: object) -> Deployment:
    return rm.deployment(model, system, efficiency=rl.PURE_ROOFLINE, **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- speculative


def test_expected_tokens_per_step_by_hand() -> None:
    # 1 + 0.8 + 0.8*0.6 + 0.8*0.6*0.5 = 2.52
    assert cs.expected_tokens_per_step([0.8, 0.6, 0.5]) == pytest.approx(2.52, rel=1e-12)
    # one rate a at every position: (1 - a^(k+1)) / (1 - a) (Leviathan et al. 2023, eq. 1)
    a, k = 0.7, 3
    rates = cs.acceptance_by_position(a, k)
    assert cs.expected_tokens_per_step(rates) == pytest.approx((1 - a ** (k + 1)) / (1 - a), rel=1e-12)
    assert cs.expected_tokens_per_step([]) == 1.0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=16))
def test_tokens_per_step_between_one_and_k_plus_one(rates: list[float]) -> None:
    e = cs.expected_tokens_per_step(rates)
    assert 1.0 <= e <= len(rates) + 1 + 1e-12


def test_verification_reads_weights_once_and_computes_k_plus_one_tokens() -> None:
    """A dense model at batch 8: the k+1 = 4 wide step reads the same weights and KV as the
    plain step and runs 4x the GEMM FLOPs (attention at the mean context L + 1.5)."""
    d = _dep()
    m = d.model
    plain = d.step(loads.decode_load(m, [[8.0]], [[4096.0]], 2.0))
    wide = d.step(loads.decode_load(m, [[8.0]], [[4096.0]], 2.0, tokens_per_sequence=4))
    assert wide.weight_bytes.item() == pytest.approx(plain.weight_bytes.item(), rel=1e-12)
    assert wide.kv_read_bytes.item() == pytest.approx(plain.kv_read_bytes.item(), rel=1e-12)
    for name in ("attention_qkv", "dense_mlp", "lm_head"):
        f_plain = np.asarray(next(op.flops for op in plain.operators if op.name == name)).item()
        f_wide = np.asarray(next(op.flops for op in wide.operators if op.name == name)).item()
        assert f_wide == pytest.approx(4 * f_plain, rel=1e-12)
    att = np.asarray(next(op.flops for op in wide.operators if op.name == "attention")).item()
    hand = 4 * 8 * float(rm.core.architecture.decode_attention_flops_per_token(m, 4096 + 1.5))
    assert att == pytest.approx(hand, rel=1e-12)


def test_mtp_tpot_by_hand_and_the_gain_shrinks_with_batch() -> None:
    d = _dep()
    s = sp.speculation(1, 0.8)
    g = sp.speculative_decode(d, [1, 16, 256, 4096], [256], s)
    # TPOT = (t_verify + k t_plain / L) / (1 + a)
    hand = (g.verify.step_s + 1 * g.plain.step_s / d.model.num_layers) / 1.8
    np.testing.assert_allclose(g.tpot_s, hand, rtol=1e-12)
    np.testing.assert_allclose(g.tokens_per_s, g.batch * 1.8 / g.step_s, rtol=1e-12)
    gain = g.speedup[:, 0]
    assert gain[0] > 1.7  # memory-bound: nearly the full 1.8x
    assert np.all(np.diff(gain) < 0)
    # compute-bound at batch 4096: the GEMMs take twice the time for twice the tokens (the
    # attention core stays bound by the KV read, shared by both queries), and the gain is gone
    for name in ("attention_qkv", "dense_mlp", "lm_head"):
        t_plain = next(op.time_s for op in g.plain.step.operators if op.name == name)[-1, 0]
        t_wide = next(op.time_s for op in g.verify.operators if op.name == name)[-1, 0]
        assert t_wide == pytest.approx(2 * t_plain, rel=1e-9)
    assert gain[-1] < 1.0
    assert g.break_even_batch() == 256


def test_draft_model_cost_is_k_plain_steps_of_the_draft() -> None:
    d = _dep()
    s = sp.parse_speculation("draft=llama-3.1-8b,k=3,acceptance=0.8,0.6,0.5", resolve_model)
    assert s.acceptance == (0.8, 0.6, 0.5) and s.tokens_per_step == pytest.approx(2.52)
    g = sp.speculative_decode(d, [1, 64], [4096], s)
    drafter = pooled.make_deployment(
        resolve_model("llama-3.1-8b"), d.system, chips=d.chips, efficiency=rl.PURE_ROOFLINE
    )
    np.testing.assert_allclose(g.draft_s, 3 * drafter.decode([1, 64], [4096]).step_s, rtol=1e-12)


@pytest.mark.parametrize(
    ("depth", "acceptance", "field"),
    [
        (3, 1.2, "acceptance"),
        (3, -0.1, "acceptance"),
        (3, [0.8, 0.5], "acceptance"),
        (0, 0.8, "depth"),
        (cs.MAX_DEPTH + 1, 0.8, "depth"),
    ],
)
def test_bad_speculation_names_the_field(depth: int, acceptance: object, field: str) -> None:
    with pytest.raises(InputError, match=field):
        sp.speculation(depth, acceptance)


def test_bad_spec_text() -> None:
    with pytest.raises(InputError, match="acceptance"):
        sp.parse_speculation("k=2", resolve_model)
    with pytest.raises(InputError, match="keys"):
        sp.parse_speculation("k=2,acceptance=0.5,speed=3", resolve_model)


# --------------------------------------------------------------------------- prefix caching


def test_prefix_hit_by_hand() -> None:
    """Llama 3.1 70B, 8,192-token prompt, h = 0.5 from host DRAM: 4,096 cached tokens x
    327,680 B = 1.342 GB over 51.2 GB/s = 26.2 ms; the suffix prefills 4,096 tokens."""
    d = _dep()
    tiers = prefix.default_cache_tiers(d, ce.memory_tiers())
    r = prefix.prefix_prefill(d, [8192], prefix.prefix_cache(0.5, "host-dram", tiers), tiers)
    kv_token = 2 * 8 * 128 * 80 * 2
    assert kv_token == 327_680
    assert r.cached_kv_bytes[0, 0] == pytest.approx(4096 * kv_token, rel=1e-12)
    assert r.load_s[0, 0] == pytest.approx(4096 * kv_token / 51.2e9, rel=1e-12)
    assert r.ttft_s[0, 0] == pytest.approx(r.warm.step_s[0, 0] + 4096 * kv_token / 51.2e9, rel=1e-12)
    # GEMM work halves exactly; the suffix's attention covers pairs 4097..8192: 3/4 of them
    qkv = [
        np.asarray(next(op.flops for op in step.operators if op.name == "attention_qkv")).item()
        for step in (r.cold.step, r.warm)
    ]
    assert qkv[1] == pytest.approx(qkv[0] / 2, rel=1e-12)
    att = [
        np.asarray(next(op.flops for op in step.operators if op.name == "attention")).item()
        for step in (r.cold.step, r.warm)
    ]
    pairs = lambda n: n * (n + 1) / 2  # noqa: E731
    assert att[1] / att[0] == pytest.approx((pairs(8192) - pairs(4096)) / pairs(8192), rel=1e-12)
    # the suffix reads the prefix's KV once
    kv_read = np.asarray(next(op.kv_read_bytes for op in r.warm.operators if op.name == "attention")).item()
    assert kv_read == pytest.approx(4096 * kv_token, rel=1e-12)


def test_prefix_hit_value_and_hold_cost_tier_by_tier() -> None:
    d = _dep()
    tiers = prefix.default_cache_tiers(d, ce.memory_tiers())
    r = prefix.prefix_prefill(d, [8192], prefix.prefix_cache(0.5, "hbm", tiers), tiers)
    rows = {row["tier"]: row for row in r.tier_values()}
    usd_per_s = d.chips * d.usd_per_chip_hour / 3600
    ddr = rows["ddr5"]
    saved = (r.cold.step_s[0, 0] - r.warm.step_s[0, 0] - 4096 * 327_680 / 51.2e9) * usd_per_s / 4096
    assert ddr["saved_usd_per_million_hit_tokens"] == pytest.approx(saved * 1e6, rel=1e-9)
    assert rows["hbm"]["load_s"] == 0.0
    # HBM's hold cost per token-hour: the token's share of one GPU's HBM at the rental
    hbm_hold = 327_680 / d.system.chip.hbm_capacity_bytes * d.usd_per_chip_hour
    assert rows["hbm"]["hold_usd_per_million_tokens_per_hour"] == pytest.approx(hbm_hold * 1e6, rel=1e-9)
    assert ddr["break_even_retention_s"] == pytest.approx(
        ddr["saved_usd_per_million_hit_tokens"] / ddr["hold_usd_per_million_tokens_per_hour"] * 3600,
        rel=1e-12,
    )


@pytest.mark.parametrize("hit", [-0.1, 1.0, 1.5, float("nan")])
def test_bad_hit_rate(hit: float) -> None:
    tiers = prefix.default_cache_tiers(_dep(), ce.memory_tiers())
    with pytest.raises(InputError, match="--prefix-hit"):
        prefix.prefix_cache(hit, "hbm", tiers)


def test_unknown_tier_lists_the_known_ones() -> None:
    tiers = prefix.default_cache_tiers(_dep(), ce.memory_tiers())
    with pytest.raises(UnknownIdError, match="host-dram"):
        prefix.prefix_cache(0.5, "tape", tiers)


# --------------------------------------------------------------------------- energy


def test_power_worked_number() -> None:
    # 105 W floor, 700 W TDP, u = 0.5: 402.5 W; 1 ms of it at PUE 1.2 = 0.483 J
    assert en.power_w(105.0, 700.0, 0.5) == pytest.approx(402.5)
    assert float(en.joules_per_token(402.5e-3, 1.0, 1.2)) == pytest.approx(0.483)
    assert float(en.tokens_per_s_per_megawatt(0.5)) == pytest.approx(2e6)


def test_pure_roofline_draws_tdp_and_energy_per_token_by_hand() -> None:
    """Under the pure roofline every operator saturates its bound resource: the step draws
    TDP, so J/token = PUE x TDP x chips x t_step / B."""
    d = _dep()
    g = d.decode([1, 64, 512], [4096])
    e = energy.decode_energy(g, pue=1.2)
    assert e is not None
    tdp = chip("h200").tdp_w
    np.testing.assert_allclose(e.it_power_w / d.chips, tdp, rtol=1e-9)
    np.testing.assert_allclose(e.joules_per_token, 1.2 * tdp * d.chips * g.step_s / g.batch, rtol=1e-9)
    np.testing.assert_allclose(e.tokens_per_s_per_mw, 1e6 / e.joules_per_token, rtol=1e-12)


def test_slower_kernels_draw_between_floor_and_tdp() -> None:
    d = rm.deployment(
        "llama-3.1-70b",
        "h200-hgx",
        efficiency=rl.Efficiency(flops_frac=0.5, bandwidth_frac=0.8, overhead_s=1e-4),
    )
    g = d.decode([1, 64, 4096], [4096])
    e = energy.decode_energy(g)
    assert e is not None
    p = chip_power(d.system.chip)
    assert p is not None and not p.idle_estimate and p.idle_w == pytest.approx(80.3)
    per_chip = e.it_power_w / d.chips
    assert np.all(per_chip > p.idle_w) and np.all(per_chip < p.max_w)


def test_chip_without_tdp_has_no_energy_and_estimates_are_marked() -> None:
    assert chip_power(chip("tpu-v5e")) is None
    p = chip_power(chip("h100-sxm"))
    assert p is not None and p.idle_estimate and p.idle_w == pytest.approx(0.15 * 700)


@pytest.mark.parametrize("pue", [0.9, 3.5, float("inf")])
def test_bad_pue(pue: float) -> None:
    with pytest.raises(InputError, match="--pue"):
        energy.check_pue(pue)


# --------------------------------------------------------------------------- faces


def test_explain_json_carries_the_features_and_the_derivation(cli) -> None:
    import json

    code, out, _ = cli(
        "explain", "llama-3.1-70b", "--on", "h200-hgx", "--batch", "1,64", "--mtp", "1",
        "--acceptance", "0.8", "--prefix-hit", "0.5", "--prefix-tier", "host-dram", "--pue", "1.3", "--json",
    )  # fmt: skip
    assert code == 0
    d = json.loads(out)
    assert d["speculative"]["tokens_per_step"] == pytest.approx(1.8)
    assert d["speculative"]["depth"] == 1 and d["speculative"]["draft"] == "mtp"
    assert d["prefix"]["tier"] == "ddr5" and d["prefix"]["points"][0]["cached_tokens"] == 2048
    assert d["energy"]["pue"] == 1.3 and d["energy"]["idle_w_per_chip"] == pytest.approx(80.3)
    point = d["points"][0]
    assert point["tokens_per_s_per_mw"] == pytest.approx(1e6 / point["joules_per_token"], rel=1e-12)
    keys = [s["key"] for s in d["derivation"]]
    assert keys[:3] == ["model", "hardware", "step"] and keys[-3:] == ["speculative", "prefix", "energy"]


def test_explain_text_draws_the_analysis_sections(cli) -> None:
    from rackmath.analyses.serving.explain import explain
    from rackmath.views.derivation import derivation

    code, out, _ = cli("explain", "llama-3.1-8b", "--on", "h100-hgx", "--chips", "1")
    assert code == 0
    result = explain(rm.deployment("llama-3.1-8b", "h100-hgx", chips=1))
    for section in derivation(result):
        assert section.title in out
    # the line with the balance batch, as the analysis wrote it (Rich may wrap long lines)
    assert derivation(result)[4].lines[1].split("=")[0].strip() in out


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--mtp", "1", "--acceptance", "1.5"), "--acceptance"),
        (("--mtp", "0", "--acceptance", "0.5"), "--mtp"),
        (("--mtp", "2"), "--mtp/--acceptance"),
        (("--spec", "k=2,acceptance=0.5,0.4,0.3"), "--spec acceptance"),
        (("--spec", "draft=nonesuch,k=2,acceptance=0.5"), "model"),
        (("--prefix-hit", "1.2"), "--prefix-hit"),
        (("--prefix-hit", "1"), "--prefix-hit"),
        (("--prefix-hit", "0.5", "--prefix-tier", "tape"), "prefix tier"),
        (("--pue", "0.5"), "--pue"),
    ],
)
def test_explain_bad_feature_input_is_one_line(cli, args: tuple[str, ...], field: str) -> None:
    code, out, err = cli("explain", "llama-3.1-8b", "--on", "h100-hgx", *args)
    assert code == 1
    message = (out + err).strip()
    assert field in message and "Traceback" not in message and len(message.splitlines()) == 1


def test_web_serving_page_shows_energy_and_mtp_from_the_analysis() -> None:
    pytest.importorskip("streamlit", reason="needs the web extra")
    from streamlit.testing.v1 import AppTest

    from rackmath.web import APP_PATH

    at = AppTest.from_file(str(APP_PATH), default_timeout=60)
    for k, v in {"model": "llama-3.1-8b", "system": "h100-hgx", "batch": "64", "context": "4096"}.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    at.number_input(key="serving.mtp").set_value(1).run()
    assert not at.exception, [e.value for e in at.exception]
    shown = {m.label: m.value for m in at.metric}
    dep = rm.deployment("llama-3.1-8b", "h100-hgx")
    g = sp.speculative_decode(dep, [64], [4096], sp.speculation(1, 0.8))
    e = energy.decode_energy(dep.decode([64], [4096]))
    assert e is not None
    assert shown["Tokens per step"] == "1.80"
    assert shown["Gain over plain decode"] == f"{g.speedup[0, 0]:.2f}x"
    assert shown["Joules per token"] == f"{e.joules_per_token[0, 0]:,.3g}"
    assert shown["Tokens/s per MW"] == f"{e.tokens_per_s_per_mw[0, 0]:,.0f}"


def test_plan_candidates_carry_energy_between_the_floor_and_tdp() -> None:
    """The search's hook: J per output token of a mixed step lies between the chips' floor
    and their TDP drawn for the whole step, times the default PUE."""
    from rackmath.analyses.deploy import candidates
    from rackmath.catalog.loader import system

    sys_ = system("h100-hgx")
    c = candidates.evaluate(
        resolve_model("llama-3.1-8b"),
        sys_,
        "native",
        candidates.Workload(traffic_tokens_per_s=1e4, input_len=1024, output_len=1024),
        max_chips=8,
    )
    assert c is not None and c.joules_per_token is not None
    p = chip_power(sys_.chip)
    assert p is not None
    lo = en.DEFAULT_PUE * p.idle_w * c.chips * c.tpot_s / c.batch
    hi = en.DEFAULT_PUE * p.max_w * c.chips * c.tpot_s / c.batch
    assert np.all(c.joules_per_token >= lo * (1 - 1e-9)) and np.all(c.joules_per_token <= hi * (1 + 1e-9))


def test_prices_prompt_cache_gains_the_prefix_hit(cli) -> None:
    import json

    code, out, _ = cli("prices", "--prefix-hit", "0.5", "--prefix-tier", "host-dram", "--json")
    assert code == 0
    hit = json.loads(out)["caching"]["prefix"]
    assert hit["tier"] == "ddr5" and hit["points"][0]["cached_tokens"] == 4096
    assert [t["tier"] for t in hit["tiers"]] == ["hbm", "ddr5", "cxl", "flash", "disk"]
    code, out, err = cli("prices", "--prefix-hit", "0.5", "--prefix-tier", "tape")
    assert code == 1 and "prefix tier" in (out + err)


def test_docs_worked_numbers() -> None:
    """The figures docs/serving-features.md quotes, recomputed by hand."""
    d = _dep()
    m = d.model
    bw = 8 * 4.8e12
    embedding = 128_256 * 8_192 * 2
    weights = rm.core.architecture.weight_bytes_total(m, d.precisions.weights)
    kv_512 = 512 * 327_680
    g = sp.speculative_decode(d, [1, 256], [512], sp.speculation(1, 0.8))
    hand_plain = (weights - embedding + kv_512) / bw
    assert hand_plain == pytest.approx(3.624e-3, rel=1e-3)
    assert g.plain.step_s[0, 0] == pytest.approx(hand_plain, rel=2e-3)  # + activations and norms
    assert g.tpot_s[0, 0] == pytest.approx(
        (g.verify.step_s[0, 0] + g.plain.step_s[0, 0] / 80) / 1.8, rel=1e-12
    )
    assert g.tpot_s[0, 0] == pytest.approx(2.039e-3, rel=2e-3)
    assert g.speedup[1, 0] == pytest.approx(0.99, abs=0.005)
    # energy: batch 64 at L = 8,192 draws TDP for the whole step under the pure roofline
    dec = d.decode([1, 64], [8192])
    e = energy.decode_energy(dec)
    assert e is not None
    assert e.joules_per_token[1, 0] == pytest.approx(1.2 * 700 * 8 * dec.step_s[1, 0] / 64, rel=1e-9)
    assert e.joules_per_token[1, 0] == pytest.approx(0.855, rel=2e-3)
    assert e.joules_per_token[0, 0] == pytest.approx(24.8, rel=2e-3)


def test_cxl_offload_tier_loads_at_its_bandwidth() -> None:
    """CXL memory (Micron CZ120, 36 GB/s) sits between host DRAM and flash; 4,096 cached
    Llama 3.1 70B tokens (1.342 GB) load in 37.3 ms."""
    d = _dep()
    tiers = prefix.default_cache_tiers(d, ce.memory_tiers())
    assert [t.id for t in tiers] == ["hbm", "ddr5", "cxl", "flash", "disk"]
    r = prefix.prefix_prefill(d, [8192], prefix.prefix_cache(0.5, "cxl", tiers), tiers)
    assert r.load_s[0, 0] == pytest.approx(4096 * 327_680 / 36e9, rel=1e-12)
    assert r.load_s[0, 0] == pytest.approx(37.3e-3, rel=1e-3)


def test_explain_on_a_chip_without_tdp_says_so(cli) -> None:
    code, out, _ = cli("explain", "llama-3.1-8b", "--on", "tpu-v5e-pod", "--chips", "8")
    assert code == 0 and "tpu-v5e has no published TDP" in out and "J per token" not in out
