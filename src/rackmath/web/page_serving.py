"""Serving page: one model on one system, decode step time and cost against batch.

Every number comes from :mod:`rackmath.analyses.serving.pooled` and :func:`rackmath.explain`;
this module lays them out. :func:`build_serving_view` is the page's whole computation
(analysis + figures) as a function of its state; ``benchmarks/bench_web.py`` times it.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from rackmath.analyses.serving.deployment import DecodeGrid, Deployment
from rackmath.analyses.serving.energy import DEFAULT_PUE, MAX_PUE, EnergyGrid, decode_energy
from rackmath.analyses.serving.explain import Explanation, assumptions
from rackmath.analyses.serving.parts import default_precisions
from rackmath.analyses.serving.speculative import MAX_SPEC_DEPTH, SpeculativeGrid, speculative_decode
from rackmath.api import deployment, explain
from rackmath.catalog import loader as catalog
from rackmath.errors import DoesNotFitError, PrecisionUnavailableError, RackmathError
from rackmath.specs.hardware import ChipSpec
from rackmath.specs.model import WEIGHT_CLASS_NAMES
from rackmath.specs.precision import Precision
from rackmath.units import GB, TB, TERA
from rackmath.views import fmt
from rackmath.views.derivation import derivation, explanation_dict, feature_sections
from rackmath.views.figures import serving_charts
from rackmath.views.narrative import reading
from rackmath.web import components as ui
from rackmath.web.commands import serving_command
from rackmath.web.render_plotly import figure as plotly_figure
from rackmath.web.state.common import CUSTOM_MODEL, MAX_BATCH, MAX_CONTEXT
from rackmath.web.state.serving import (
    DEFAULT_ACCEPTANCE,
    DEFAULT_PREFIX_TIER,
    MAX_PREFIX_HIT,
    PREFIX_TIERS,
    WEIGHT_CLASSES_LABEL,
    ServingState,
    parse_serving_query,
    parse_weight_class_text,
    serving_model,
    serving_query,
    serving_system,
)

PAGE = "serving"
#: The reading's pointer to the roofline-only view, in the page's words.
PURE_HINT = "choose the pure roofline under Efficiency to see the roofline alone"
BATCH_OPTIONS = [2**p for p in range(MAX_BATCH.bit_length())]  # 1 .. MAX_BATCH
CONTEXT_OPTIONS = [2**p for p in range(8, MAX_CONTEXT.bit_length())]  # 256 .. MAX_CONTEXT


@dataclass(frozen=True)
class ServingFeatures:
    """The page's serving features (off by default): an MTP head of ``mtp`` draft tokens
    accepted at ``acceptance`` each, a prefix-cache hit rate and the tier its KV lives in,
    and the facility PUE for energy."""

    mtp: int = 0
    acceptance: float = 0.8
    prefix_hit: float = 0.0
    prefix_tier: str = "hbm"
    pue: float = DEFAULT_PUE


@dataclass(frozen=True)
class ServingView:
    """What the page shows for one state."""

    deployment: Deployment
    explanation: Explanation
    sweep: DecodeGrid  # the dense batch sweep (the slider's whole range) at the selected context
    point: DecodeGrid  # the selected batch and context
    figures: dict[str, go.Figure]
    point_energy: EnergyGrid | None = None  # the selected point's energy (None: no TDP for the chip)
    point_speculative: SpeculativeGrid | None = None  # the selected point with speculative decoding


def serving_deployment(state: ServingState) -> Deployment:
    """The deployment the state describes (custom model and edited chip included)."""
    return _deployment(dataclasses.replace(state, batch=1, context=1))


@lru_cache(maxsize=64)
def _deployment(state: ServingState) -> Deployment:
    model = serving_model(state)
    base = catalog.system(state.system)
    compute = Precision.parse(state.compute) if state.compute else default_precisions(model, base).compute
    return deployment(
        model,
        serving_system(state, compute),
        chips=state.chips,
        weights=state.weights,
        kv=state.kv,
        compute=state.compute,
        usd_per_chip_hour=state.usd_per_chip_hour,
        efficiency=state.efficiency,
        weight_classes=state.weight_classes,
    )


@lru_cache(maxsize=64)
def _explained(
    state: ServingState, features: ServingFeatures = ServingFeatures()
) -> tuple[Explanation, DecodeGrid]:
    """The explanation and the dense sweep at one context (the batch is not part of the key)."""
    dep = serving_deployment(state)
    f = features
    result = explain(
        dep,
        contexts=[state.context],
        mtp=f.mtp or None,
        acceptance=f.acceptance if f.mtp else None,
        prefix_hit=f.prefix_hit or None,
        prefix_tier=f.prefix_tier,
        pue=f.pue,
    )
    return result, serving_charts.batch_sweep(result, top_batch=MAX_BATCH)


def build_serving_view(state: ServingState, features: ServingFeatures = ServingFeatures()) -> ServingView:
    """Analysis and figures for ``state``; raises RackmathError for impossible choices."""
    result, sweep = _explained(dataclasses.replace(state, batch=1), features)
    dep = result.deployment
    point = dep.decode([state.batch], [state.context])
    spec_point = (
        speculative_decode(dep, [state.batch], [state.context], result.speculative.speculation)
        if result.speculative is not None
        else None
    )
    figs = {
        "step-time": plotly_figure(serving_charts.step_time(result, sweep, point)),
        "cost": plotly_figure(serving_charts.cost(result, sweep, point)),
        "memory": plotly_figure(serving_charts.memory(dep, point)),
        "mfu-context": plotly_figure(serving_charts.mfu_context(result)),
    }
    return ServingView(dep, result, sweep, point, figs, decode_energy(point, features.pue), spec_point)


# --------------------------------------------------------------------------- controls


def _reset_after_system_change() -> None:
    """A new system: its default chip count and compute precision, its own chip figures."""
    system_id = st.session_state[ui.key(PAGE, "system")]
    st.session_state[ui.key(PAGE, "chips")] = catalog.system(system_id).default_chips
    st.session_state[ui.key(PAGE, "compute")] = ui.DEFAULT
    for field in ("usd_per_chip_hour", "hbm_gb", "hbm_tb_per_s", "peak_tflop_per_s"):
        st.session_state[ui.key(PAGE, field)] = None


def _weight_classes_input(errors: list[RackmathError]) -> str | None:
    """The weights of some tensor classes in another format than the rest (a deployment as
    published: gpt-oss's MXFP4 experts beside BF16 attention, an NVFP4 checkpoint's BF16 head);
    a refusal is shown in the page's words and the classes are left as the weights."""
    text = st.text_input(
        WEIGHT_CLASSES_LABEL,
        key=ui.key(PAGE, "weight_classes"),
        placeholder="experts=mxfp4,lm_head=bf16",
        help=f"class=format pairs; classes: {', '.join(WEIGHT_CLASS_NAMES)}; empty = every class "
        "in the Weights format",
    )
    try:
        return parse_weight_class_text(WEIGHT_CLASSES_LABEL, str(text))
    except RackmathError as exc:
        errors.append(exc)
        return None


def _controls(initial: ServingState, errors: list[RackmathError]) -> ServingState:
    first = catalog.system(initial.system)
    chip_precisions = list(first.chip.peak_flops_per_s)
    compute0 = initial.compute
    if compute0 is not None and Precision(compute0).compute_class not in chip_precisions:
        errors.append(PrecisionUnavailableError(first.chip.id, compute0, [p.value for p in chip_precisions]))
        compute0 = None
    ui.init_state(
        PAGE,
        {
            "model": initial.model,
            "config": initial.config or "",
            "system": initial.system,
            "chips": initial.chips or first.default_chips,
            "weights": initial.weights or ui.DEFAULT,
            "weight_classes": initial.weight_classes or "",
            "kv": initial.kv or ui.DEFAULT,
            "compute": compute0 or ui.DEFAULT,
            "usd_per_chip_hour": initial.usd_per_chip_hour,
            "hbm_gb": initial.hbm_gb,
            "hbm_tb_per_s": initial.hbm_tb_per_s,
            "peak_tflop_per_s": initial.peak_tflop_per_s,
            "batch": initial.batch
            if initial.batch in BATCH_OPTIONS
            else _nearest(initial.batch, BATCH_OPTIONS),
            "context": initial.context,
            "efficiency": initial.efficiency,
        },
    )
    with st.sidebar:
        st.header("Deployment")
        model_id, config = ui.model_picker(PAGE)
        system = ui.system_picker(PAGE, _reset_after_system_change)
        chip = system.chip
        chips = st.number_input(
            "Chips",
            min_value=1,
            max_value=1_000_000,
            step=1,
            key=ui.key(PAGE, "chips"),
            help=f"default {system.default_chips}; one scale-up domain holds {system.scale_up_domain_chips}",
        )
        try:
            default = default_precisions(serving_model(ServingState(model=model_id, config=config)), system)
        except RackmathError:
            default = None
        precisions = list(Precision)
        weights = ui.precision_picker(
            PAGE, "weights", "Weights", precisions, default.weights if default else None
        )
        weight_classes = _weight_classes_input(errors)
        kv = ui.precision_picker(PAGE, "kv", "KV cache", precisions, default.kv if default else None)
        compute = ui.precision_picker(
            PAGE,
            "compute",
            "Compute (selects the peak)",
            list(chip.peak_flops_per_s),
            default.compute if default else None,
        )
        usd = ui.price_input(PAGE, chip)
        with st.expander("Edit the chip's figures"):
            st.caption(f"{chip.name}; empty = the catalog's figure ({chip.date})")
            hbm_gb = ui.optional_number(
                PAGE,
                "hbm_gb",
                "HBM capacity per chip (GB)",
                f"{chip.hbm_capacity_bytes / GB:,.1f}",
                step=8.0,
                help="decimal GB: 1 GB = 1e9 bytes",
            )
            hbm_tb = ui.optional_number(
                PAGE,
                "hbm_tb_per_s",
                "HBM bandwidth per chip (TB/s)",
                f"{chip.hbm_bandwidth_bytes_per_s / TB:,.2f}",
                step=0.5,
                help="decimal TB/s: 1e12 bytes/s",
            )
            peak = ui.optional_number(
                PAGE,
                "peak_tflop_per_s",
                "Dense peak at the compute precision (TFLOP/s)",
                _peak_label(chip, compute, default.compute if default else None),
                step=100.0,
                help="2 FLOPs per multiply-accumulate",
            )
        efficiency = st.radio(
            "Efficiency",
            ("kernel", "pure"),
            key=ui.key(PAGE, "efficiency"),
            format_func=lambda m: "kernel-grounded (fitted)" if m == "kernel" else "pure roofline (lecture)",
            help="kernel: each operator at the fraction of peak fitted on measured kernel tables "
            "(chips without tables borrow a measured chip's curves, marked transferred); "
            "pure: the lecture's roofline.",
        )
    st.subheader("Batch and context")
    left, right = st.columns(2)
    batch = left.select_slider(
        "Batch (sequences decoding together)",
        BATCH_OPTIONS,
        key=ui.key(PAGE, "batch"),
        format_func=lambda b: f"{b:,}",
    )
    context_options = sorted({*CONTEXT_OPTIONS, int(st.session_state[ui.key(PAGE, "context")])})
    context = right.select_slider(
        "Context (tokens in each sequence's KV cache)",
        context_options,
        key=ui.key(PAGE, "context"),
        format_func=lambda c: f"{c:,}",
    )
    return ServingState(
        model=model_id,
        config=config if model_id == CUSTOM_MODEL else None,
        system=system.id,
        chips=int(chips),
        weights=weights,
        weight_classes=weight_classes,
        kv=kv,
        compute=compute,
        usd_per_chip_hour=usd,
        hbm_gb=hbm_gb,
        hbm_tb_per_s=hbm_tb,
        peak_tflop_per_s=peak,
        batch=int(batch),
        context=int(context),
        efficiency=str(efficiency),
    )


def _peak_label(chip: ChipSpec, compute: str | None, default: Precision | None) -> str:
    precision = Precision(compute) if compute else default
    if precision is None or precision.compute_class not in chip.peak_flops_per_s:
        return "none at this precision"
    return f"{chip.peak_flops_per_s[precision.compute_class] / TERA:,.0f} ({precision.compute_class.value})"


def _nearest(value: int, options: list[int]) -> int:
    return min(options, key=lambda o: abs(np.log(o) - np.log(value)))


# --------------------------------------------------------------------------- page


def render_serving_page() -> None:
    """The Serving page: controls in the sidebar, numbers and plots in the main area."""
    st.title("Serving")
    st.caption(
        "One decode step of a model on a system: where the time goes, the balance batch, "
        "the latency floor, what a token costs and what fits in memory."
    )
    initial, errors = parse_serving_query(st.query_params.to_dict())
    state = _controls(initial, errors)
    features = _feature_controls(initial)
    state = with_features(state, features)
    ui.sync_url(serving_query(state))
    ui.show_errors(errors)
    if state.model == CUSTOM_MODEL and not (state.config or "").strip():
        st.info("Paste a Hugging Face config.json in the sidebar, or upload one, to see its numbers.")
        return
    try:
        view = build_serving_view(state, features)
    except DoesNotFitError as exc:
        ui.show_error(exc)
        dep = serving_deployment(state)
        ui.figure(
            PAGE,
            "memory",
            serving_charts.memory(dep, dep.decode([state.batch], [state.context])),
            "serving",
        )
        return
    except RackmathError as exc:
        ui.show_error(exc)
        return
    _numbers(view, state)
    _features(view, state)
    _plots(view)
    _tables(view)
    ui.cli_command(serving_command(state, view.deployment.chips))


def _feature_controls(initial: ServingState) -> ServingFeatures:
    """Sidebar controls for speculative decoding, prefix caching and energy (seeded from the URL)."""
    ui.init_state(
        PAGE,
        {
            "mtp": initial.mtp or 0,
            "acceptance": DEFAULT_ACCEPTANCE if initial.acceptance is None else initial.acceptance,
            "prefix_hit": initial.prefix_hit or 0.0,
            "prefix_tier": initial.prefix_tier or DEFAULT_PREFIX_TIER,
            "pue": DEFAULT_PUE if initial.pue is None else initial.pue,
        },
    )
    with st.sidebar:
        st.header("Serving features")
        mtp = st.number_input(
            "MTP draft tokens per step (0 = off)",
            min_value=0,
            max_value=MAX_SPEC_DEPTH,
            step=1,
            key=ui.key(PAGE, "mtp"),
            help="an MTP head (one extra layer of the target per draft token); verification is one "
            "decode step with k + 1 tokens per sequence",
        )
        acceptance = st.slider(
            "Acceptance rate per draft position",
            min_value=0.0,
            max_value=1.0,
            step=0.05,
            key=ui.key(PAGE, "acceptance"),
            disabled=mtp == 0,
        )
        hit = st.slider(
            "Prefix-cache hit rate (0 = off)",
            min_value=0.0,
            max_value=MAX_PREFIX_HIT,
            step=0.05,
            key=ui.key(PAGE, "prefix_hit"),
            help="share of each prompt whose KV is already cached: only the suffix is prefilled",
        )
        tier = st.selectbox(
            "Where the cached KV lives",
            list(PREFIX_TIERS),
            key=ui.key(PAGE, "prefix_tier"),
            disabled=hit == 0,
        )
        pue = st.number_input(
            "Facility PUE",
            min_value=1.0,
            max_value=MAX_PUE,
            step=0.05,
            key=ui.key(PAGE, "pue"),
            help="facility power over IT power, for joules per token and tokens/s per MW",
        )
    return ServingFeatures(int(mtp), float(acceptance), float(hit), str(tier), float(pue))


def with_features(state: ServingState, f: ServingFeatures) -> ServingState:
    """``state`` carrying the features for the URL (defaults and off features left out)."""
    return dataclasses.replace(
        state,
        mtp=f.mtp or None,
        acceptance=f.acceptance if f.mtp and f.acceptance != DEFAULT_ACCEPTANCE else None,
        prefix_hit=f.prefix_hit or None,
        prefix_tier=f.prefix_tier if f.prefix_hit and f.prefix_tier != DEFAULT_PREFIX_TIER else None,
        pue=f.pue if f.pue != DEFAULT_PUE else None,
    )


def features_of(state: ServingState) -> ServingFeatures:
    """The features a (URL) state states; what it leaves out is off or the default."""
    return ServingFeatures(
        mtp=state.mtp or 0,
        acceptance=DEFAULT_ACCEPTANCE if state.acceptance is None else state.acceptance,
        prefix_hit=state.prefix_hit or 0.0,
        prefix_tier=state.prefix_tier or DEFAULT_PREFIX_TIER,
        pue=DEFAULT_PUE if state.pue is None else state.pue,
    )


def _features(view: ServingView, state: ServingState) -> None:
    """Energy at the selected point, and speculative decoding / prefix caching when on."""
    e, g = view.point_energy, view.point_speculative
    if e is not None:
        st.markdown("##### Energy at the selected point")
        cols = st.columns(4)
        cols[0].metric("Joules per token", f"{e.joules_per_token[0, 0]:,.3g}")
        cols[1].metric("Tokens/s per MW", f"{e.tokens_per_s_per_mw[0, 0]:,.0f}")
        cols[2].metric("Average W per chip", f"{e.it_power_w[0, 0] / view.deployment.chips:,.0f}")
        cols[3].metric(
            "Chip floor-ceiling",
            f"{e.power.idle_w:,.0f}-{e.power.max_w:,.0f} W",
            help=("idle floor estimated as a share of TDP; " if e.power.idle_estimate else "")
            + e.power.idle_source,
        )
    if g is not None:
        st.markdown(f"##### Speculative decoding ({g.speculation.label})")
        cols = st.columns(4)
        cols[0].metric("Tokens per step", f"{g.tokens_per_step:.2f}")
        cols[1].metric(
            "TPOT", fmt.seconds(float(g.tpot_s[0, 0])), help="(t_verify + t_draft) / tokens per step"
        )
        cols[2].metric("Tokens/s per user", f"{g.tokens_per_s_per_user[0, 0]:,.1f}")
        cols[3].metric("Gain over plain decode", f"{g.speedup[0, 0]:.2f}x")
    for section in feature_sections(view.explanation):
        with st.expander(f"{section.title}: {section.subtitle}", expanded=section.key != "energy"):
            st.markdown("\n".join(f"- {line}" for line in section.lines))


def _numbers(view: ServingView, state: ServingState) -> None:
    d, r, p = view.deployment, view.explanation, view.point
    st.markdown(
        f"**{d.model.name}** on **{d.chips} x {d.system.chip.name}** — weights "
        f"{d.precisions.weights.value}, KV {d.precisions.kv.value}, compute {d.precisions.compute.value}, "
        f"{fmt.usd(d.usd_per_chip_hour)}/chip-hour"
    )
    for note in d.notes:
        st.warning(note)
    if d.efficiency.mode == "kernel":
        pure_s = float(d.pure().decode([state.batch], [state.context]).step_s[0, 0])
        st.caption(
            f"Efficiency: {d.efficiency_label}. The pure roofline (the lecture's number) gives "
            f"{fmt.seconds(pure_s)} per step at this point."
        )
        if d.transferred_from:
            own = "own tables" in d.efficiency_table.source  # a few curves of its own (MI300X)
            st.info(
                f"transferred: {d.system.chip.id} has "
                + ("measured kernel tables for a few curves only" if own else "no measured kernel tables")
                + f"; it runs on {d.transferred_from}'s fitted curves"
                + (" for the rest," if own else "")
                + " scaled by its own peaks."
            )
    else:
        st.caption("Efficiency: pure roofline (the lecture's numbers).")
    st.markdown(f"##### At batch {state.batch:,} and {state.context:,} tokens of context")
    cols = st.columns(6)
    cols[0].metric("Step time", fmt.seconds(float(p.step_s[0, 0])))
    cols[1].metric("Tokens/s per user", f"{p.tokens_per_s_per_user[0, 0]:,.1f}")
    cols[2].metric("Tokens/s (all chips)", f"{p.tokens_per_s[0, 0]:,.0f}")
    cols[3].metric("$ per M output tokens", fmt.usd(float(p.usd_per_million_output_tokens[0, 0])))
    cols[4].metric("Bound by", str(p.step.bottleneck[0, 0]))
    cols[5].metric("MFU", fmt.pct(float(p.mfu[0, 0])))
    if not bool(p.fits[0, 0]):
        st.warning(
            f"Batch {state.batch:,} does not fit at {state.context:,} tokens: the KV cache needs more "
            f"HBM than is left after the weights. The largest batch that fits is {r.max_batch[0]:,.0f}."
        )
    st.markdown("##### The deployment")
    b_star = float(r.balance.balance_batch_with_kv[0])
    cols = st.columns(6)
    cols[0].metric(
        "Balance batch B*",
        f"{b_star:,.0f}" if np.isfinite(b_star) else "none",
        help="weight fetch + KV fetch = compute, at this context (exact, MoE routing included)",
    )
    cols[1].metric(
        "B* without KV",
        f"{r.balance.balance_batch:,.0f}",
        help=f"dense {r.balance.dense_balance_batch:,.0f} x sparsity {r.balance.sparsity:.1f}",
    )
    cols[2].metric("Latency floor", fmt.seconds(r.latency_floor_s), help="all weights read once per step")
    cols[3].metric("Largest batch that fits", f"{r.max_batch[0]:,.0f}")
    cols[4].metric("HBM drain time", fmt.seconds(r.hbm_drain_time_s), help="HBM capacity / bandwidth")
    cols[5].metric(
        "$ per M input tokens",
        fmt.usd(float(r.prefill.usd_per_million_input_tokens[0, 0])),
        help="prefill of one prompt of this context",
    )
    st.markdown("##### Reading")
    st.markdown(reading(r, view.point, pure_hint=PURE_HINT))
    with st.expander("How these numbers come"):
        for section in derivation(r):
            title = f"**{section.title}**" + (f" ({section.subtitle})" if section.subtitle else "")
            st.markdown(title + "\n" + "\n".join(f"- `{line}`" for line in section.lines))
        st.markdown("**Assumptions**\n" + "\n".join(f"- {a}" for a in assumptions(d)))


def _plots(view: ServingView) -> None:
    left, right = st.columns(2)
    with left:
        ui.figure(PAGE, "step-time", view.figures["step-time"], "serving")
    with right:
        ui.figure(PAGE, "cost", view.figures["cost"], "serving")
    left, right = st.columns(2)
    with left:
        ui.figure(PAGE, "memory", view.figures["memory"], "serving")
    with right:
        ui.figure(PAGE, "mfu-context", view.figures["mfu-context"], "serving")
    cols = st.columns(2)
    cols[0].download_button(
        "Plots as PNG (matplotlib)",
        lambda: _png(view.explanation),
        "serving.png",
        "image/png",
        key=ui.key(PAGE, "png"),
        on_click="ignore",
        icon=":material/image:",
        help="The step-time and cost plots drawn by rackmath.plots (the same file as `explain --plot`).",
    )
    cols[1].download_button(
        "Plot data (JSON)",
        ui.figures_json(view.figures),
        "serving-plots.json",
        "application/json",
        key=ui.key(PAGE, "plots.json"),
        on_click="ignore",
        icon=":material/download:",
    )


def _png(result: Explanation) -> bytes:
    from rackmath.plots.serving import save_explain_plot

    with tempfile.TemporaryDirectory() as tmp:
        return save_explain_plot(result, Path(tmp) / "serving.png").read_bytes()


def _tables(view: ServingView) -> None:
    full = explanation_dict(view.explanation)
    st.markdown("##### Over batch size")
    rows = [{k: v for k, v in row.items() if k != "operators"} for row in full["points"]]
    ui.table(rows)
    ui.downloads(PAGE, "serving", rows, full)
    point = view.point.step.breakdown_at((0, 0))
    st.markdown(
        f"##### Where the time goes at the selected point: step "
        f"{fmt.seconds(float(view.point.step_s[0, 0]))}, blackboard bound "
        f"{fmt.seconds(point['blackboard_step_s'])}"
    )
    ui.table(sorted(point["operators"], key=lambda op: -op["time_s"]))
