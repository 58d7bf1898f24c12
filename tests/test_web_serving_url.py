"""The Serving page's speculative / prefix / energy controls live in its URL, with bounded parsers."""

from __future__ import annotations

from pathlib import Path

import pytest

import rackmath as rm
from rackmath.analyses.serving import energy
from rackmath.core import roofline as rl
from rackmath.web.state.serving import ServingState, parse_serving_query, serving_query


@pytest.mark.parametrize(
    ("key", "text", "allowed"),
    [
        ("mtp", "17", "from 0 to 16"),
        ("mtp", "-1", "from 0 to 16"),
        ("acceptance", "1.5", "from 0 to 1"),
        ("acceptance", "nan", "from 0 to 1"),
        ("prefix_hit", "0.99", "from 0 to 0.95"),
        ("prefix_tier", "tape", "hbm, host-dram, cxl, ssd, hdd"),
        ("pue", "0.9", "from 1 to 3"),
        ("pue", "inf", "from 1 to 3"),
    ],
)
def test_bad_feature_parameters_are_one_line_and_left_at_default(key: str, text: str, allowed: str) -> None:
    state, errors = parse_serving_query({key: text})
    assert len(errors) == 1 and key in str(errors[0]) and allowed in str(errors[0])
    assert getattr(state, key) is None


def test_features_round_trip_and_defaults_stay_out_of_the_url() -> None:
    from rackmath.web.page_serving import ServingFeatures, features_of, with_features

    base = ServingState()
    assert with_features(base, ServingFeatures()) == base  # nothing on: the URL is unchanged
    f = ServingFeatures(mtp=2, acceptance=0.7, prefix_hit=0.5, prefix_tier="cxl", pue=1.3)
    state = with_features(base, f)
    q = serving_query(state)
    assert {k: q[k] for k in ("mtp", "acceptance", "prefix_hit", "prefix_tier", "pue")} == {
        "mtp": "2",
        "acceptance": "0.7",
        "prefix_hit": "0.5",
        "prefix_tier": "cxl",
        "pue": "1.3",
    }
    back, errors = parse_serving_query(q)
    assert errors == [] and features_of(back) == f
    # an acceptance with MTP off, a tier with no hits: not carried (they change nothing shown)
    off = with_features(base, ServingFeatures(acceptance=0.5, prefix_tier="ssd"))
    assert off == base


def test_page_reads_the_features_from_the_url_and_keeps_them() -> None:
    pytest.importorskip("streamlit", reason="needs the web extra")
    from streamlit.testing.v1 import AppTest

    from rackmath.web import APP_PATH

    at = AppTest.from_file(str(APP_PATH), default_timeout=60)
    query = {"model": "llama-3.1-8b", "system": "h100-hgx", "batch": "64", "context": "4096"}
    query |= {"efficiency": "pure", "mtp": "2", "acceptance": "0.7", "pue": "1.5"}
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.number_input(key="serving.mtp").value == 2
    assert at.slider(key="serving.acceptance").value == pytest.approx(0.7)
    shown = {m.label: m.value for m in at.metric}
    assert shown["Tokens per step"] == "2.19"  # 1 + 0.7 + 0.7^2
    dep = rm.deployment("llama-3.1-8b", "h100-hgx", efficiency=rl.PURE_ROOFLINE)
    e = energy.decode_energy(dep.decode([64], [4096]), 1.5)
    assert e is not None and shown["Joules per token"] == f"{e.joules_per_token[0, 0]:,.3g}"
    for k in ("mtp", "acceptance", "pue"):
        assert at.query_params[k] == query[k]


def test_page_energy_for_llama_70b_on_8_h200() -> None:
    """docs/serving-features.md (its generated table): the J/token the page shows,
    kernel-grounded, recomputed by hand
    from the analysis's step and average power (J = PUE x P x chips x t / B)."""
    pytest.importorskip("streamlit", reason="needs the web extra")
    from streamlit.testing.v1 import AppTest

    from rackmath.web import APP_PATH

    doc = (Path(__file__).resolve().parents[1] / "docs" / "serving-features.md").read_text(encoding="utf-8")
    documented = {}  # context -> (J/token, W a chip) of the doc's kernel-grounded rows at batch 64
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 7 and cells[0] == "kernel" and cells[1] == "64":
            documented[int(cells[2].replace(",", ""))] = (float(cells[5]), float(cells[4]))
    assert set(documented) == {8192, 4096}
    dep = rm.deployment("llama-3.1-70b", "h200-hgx", chips=8, efficiency="kernel")
    for ctx, (j_doc, w_doc) in documented.items():
        g = dep.decode([64], [ctx])
        e = energy.decode_energy(g)
        assert e is not None
        w_chip = float(e.it_power_w[0, 0]) / 8
        by_hand = 1.2 * w_chip * 8 * float(g.step_s[0, 0]) / 64
        assert float(e.joules_per_token[0, 0]) == pytest.approx(by_hand, rel=1e-9)
        assert 80.3 < w_chip < 700.0  # between the H200's measured floor and its TDP
        # the documented figures, as printed (3 significant digits and 0.1 W)
        assert by_hand == pytest.approx(j_doc, abs=0.0005) and w_chip == pytest.approx(w_doc, abs=0.05)
    at = AppTest.from_file(str(APP_PATH), default_timeout=60)
    query = {"model": "llama-3.1-70b", "system": "h200-hgx", "chips": "8", "batch": "64", "context": "4096"}
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = {m.label: m.value for m in at.metric}
    g = dep.decode([64], [4096])
    e = energy.decode_energy(g)
    assert e is not None
    assert shown["Joules per token"] == f"{e.joules_per_token[0, 0]:,.3g}" == f"{documented[4096][0]:.3g}"


def test_weights_per_class_parse_like_the_cli_and_stay_in_the_url() -> None:
    state, errors = parse_serving_query(
        {"model": "gpt-oss-120b", "weight_classes": "Experts=MXFP4, lm_head=bf16"}
    )
    assert errors == [] and state.weight_classes == "experts=mxfp4,lm_head=bf16"
    assert serving_query(state)["weight_classes"] == "experts=mxfp4,lm_head=bf16"
    bad, errors = parse_serving_query({"weight_classes": "experts=fp5"})
    assert bad.weight_classes is None and len(errors) == 1
    assert str(errors[0]).startswith("Weights per tensor class") and "--" not in str(errors[0])
    assert "a format:" in str(errors[0])


def test_page_runs_a_deployment_stated_per_class() -> None:
    """gpt-oss-120b on one B200 as published: MXFP4 experts, the rest BF16. The page's step is
    the API's with the same classes, and differs from all-BF16 weights."""
    pytest.importorskip("streamlit", reason="needs the web extra")
    from streamlit.testing.v1 import AppTest

    from rackmath.views import fmt
    from rackmath.web import APP_PATH

    query = {"model": "gpt-oss-120b", "system": "b200-hgx", "chips": "1", "batch": "64", "context": "4096"}
    query |= {"weights": "bf16", "weight_classes": "experts=mxfp4"}
    at = AppTest.from_file(str(APP_PATH), default_timeout=60)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.text_input(key="serving.weight_classes").value == "experts=mxfp4"
    shown = {m.label: m.value for m in at.metric}
    stated = rm.deployment(
        "gpt-oss-120b", "b200-hgx", chips=1, weights="bf16", weight_classes="experts=mxfp4"
    )
    plain = rm.deployment("gpt-oss-120b", "b200-hgx", chips=1, weights="bf16")
    step = float(stated.decode([64], [4096]).step_s[0, 0])
    assert shown["Step time"] == fmt.seconds(step)
    assert step < float(plain.decode([64], [4096]).step_s[0, 0])  # a quarter of the expert bytes
    assert at.query_params["weight_classes"] == "experts=mxfp4"
