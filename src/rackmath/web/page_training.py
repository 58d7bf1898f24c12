"""Training page: step time, MFU, memory per chip and cost of a job; a pipeline schedule drawn.

Every number comes from :mod:`rackmath.analyses.training.estimate` through :func:`rackmath.api.train`
(``make_training`` + ``estimate``, ``recompute_options``, ``choose_recompute``) and
:func:`rackmath.api.pipeline` (the simulated :class:`~rackmath.core.pipeline.Timeline` and
its closed forms), as ``rackmath train`` and ``rackmath pipeline`` do; this module lays
them out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import streamlit as st

from rackmath.analyses.training.estimate import RecomputeOption, TrainingEstimate, choose_recompute
from rackmath.analyses.training.pipeline import PipelineResult, schedule_drawing
from rackmath.analyses.training.setup import CALIBRATED_TRAINING, gemm_recipes
from rackmath.api import pipeline, train
from rackmath.catalog import loader as catalog
from rackmath.errors import DoesNotFitError, InputError, RackmathError
from rackmath.plots.training import save_pipeline_plot
from rackmath.units import GB, TERA
from rackmath.views import fmt
from rackmath.views.figures import training_charts
from rackmath.web import components as ui
from rackmath.web.commands import training_command
from rackmath.web.state.common import CUSTOM_MODEL, MAX_CONTEXT, model_of
from rackmath.web.state.training import (
    EFFICIENCIES,
    MAX_PIPE_MICROBATCHES,
    MAX_PIPE_STAGES,
    OPTIMIZERS,
    PIPELINE_SCHEDULES,
    RECOMPUTE_MODES,
    TRAIN_SCHEDULES,
    TrainingState,
    parse_training_query,
    training_query,
)

PAGE = "training"


@dataclass(frozen=True)
class TrainingView:
    estimate: TrainingEstimate
    fastest_fitting: RecomputeOption | None  # None: no recomputation mode fits
    no_fit: DoesNotFitError | None


@lru_cache(maxsize=64)
def training_view(state: TrainingState) -> TrainingView:
    """The estimate for the job the state describes; raises RackmathError for impossible plans."""
    result = train(
        model_of(state.model, state.config),
        state.system,
        state.plan,
        tokens=state.trillion_tokens * TERA,
        chips=state.chips,
        seq_len=state.seq_len,
        global_batch=state.global_batch,
        microbatch=state.microbatch,
        schedule=state.schedule,
        virtual_stages=state.virtual_stages,
        recompute=state.recompute,
        optimizer=state.optimizer,
        zero=state.zero,
        compute=state.compute,
        usd_per_chip_hour=state.usd_per_chip_hour,
        efficiency=CALIBRATED_TRAINING if state.efficiency == "calibrated" else state.efficiency,
    )
    try:
        return TrainingView(result, choose_recompute(result.setup), None)
    except DoesNotFitError as exc:
        return TrainingView(result, None, exc)


@lru_cache(maxsize=64)
def pipeline_view(schedule: str, stages: int, microbatches: int, virtual_stages: int) -> PipelineResult:
    """A schedule simulated with unit op times (``virtual_stages`` only counts when interleaved)."""
    v = virtual_stages if schedule == "interleaved" else 1
    return pipeline(stages, microbatches, schedule, virtual_stages=v)


# --------------------------------------------------------------------------- controls


def _k(field: str) -> str:
    return ui.key(PAGE, field)


def _reset_after_system_change() -> None:
    st.session_state[_k("compute")] = ui.DEFAULT
    st.session_state[_k("usd_per_chip_hour")] = None


def _controls(initial: TrainingState, errors: list[RackmathError]) -> TrainingState:
    offered = gemm_recipes(catalog.system(initial.system))
    if initial.compute is not None and initial.compute not in offered:
        errors.append(
            InputError(
                "GEMM precision (recipe)",
                initial.compute,
                f"one {initial.system} has a peak for: {', '.join(offered)}",
            )
        )
        initial = dataclasses.replace(initial, compute=None)
    ui.init_state(
        PAGE,
        {
            "model": initial.model,
            "config": initial.config or "",
            "system": initial.system,
            "plan": initial.plan,
            "chips": initial.chips,
            "trillion_tokens": initial.trillion_tokens,
            "seq_len": initial.seq_len,
            "global_batch": initial.global_batch,
            "microbatch": initial.microbatch,
            "schedule": initial.schedule,
            "virtual_stages": initial.virtual_stages,
            "recompute": initial.recompute,
            "optimizer": initial.optimizer,
            "zero": initial.zero,
            "compute": initial.compute or ui.DEFAULT,
            "usd_per_chip_hour": initial.usd_per_chip_hour,
            "efficiency": initial.efficiency,
            "pipe_schedule": initial.pipe_schedule,
            "pipe_stages": initial.pipe_stages,
            "pipe_microbatches": initial.pipe_microbatches,
            "pipe_virtual_stages": initial.pipe_virtual_stages,
        },
    )
    with st.sidebar:
        st.header("Training job")
        model_id, config = ui.model_picker(PAGE)
        system = ui.system_picker(PAGE, _reset_after_system_change)
        chip = system.chip
        plan = st.text_input(
            "Parallel plan",
            key=_k("plan"),
            help="tp, pp, dp, ep, cp, e.g. tp=8,pp=16,dp=64; chips = tp x pp x dp x cp",
        )
        chips = st.number_input(
            "Chips",
            min_value=1,
            max_value=10_000_000,
            value=None,
            step=8,
            key=_k("chips"),
            placeholder="the plan's product",
            help="must equal the plan's tp x pp x dp x cp",
        )
        tokens = st.number_input(
            "Token budget (trillions)",
            step=1.0,
            format="%.4g",
            key=_k("trillion_tokens"),
            min_value=ui.least(PAGE, "trillion_tokens"),
            max_value=ui.most(PAGE, "trillion_tokens"),
        )
        cols = st.columns(2)
        seq_len = cols[0].number_input(
            "Sequence (tokens)", min_value=1, max_value=MAX_CONTEXT, step=1024, key=_k("seq_len")
        )
        batch = cols[1].number_input(
            "Global batch (sequences)", min_value=1, max_value=10_000_000, step=64, key=_k("global_batch")
        )
        cols = st.columns(2)
        microbatch = cols[0].number_input(
            "Micro-batch (sequences)", min_value=1, max_value=1_000_000, step=1, key=_k("microbatch")
        )
        zero = cols[1].selectbox(
            "ZeRO stage", [0, 1, 2, 3], key=_k("zero"), help="3 = FSDP (weights sharded too)"
        )
        cols = st.columns(2)
        schedule = cols[0].selectbox("Schedule", TRAIN_SCHEDULES, key=_k("schedule"))
        virtual = cols[1].number_input(
            "Virtual stages",
            min_value=1,
            max_value=64,
            step=1,
            key=_k("virtual_stages"),
            help="model chunks per stage (interleaved only; at least 2 there)",
        )
        cols = st.columns(2)
        recompute = cols[0].selectbox("Recomputation", RECOMPUTE_MODES, key=_k("recompute"))
        optimizer = cols[1].selectbox("Optimizer", OPTIMIZERS, key=_k("optimizer"))
        compute = ui.choice_picker(
            PAGE,
            "compute",
            "GEMM precision (recipe)",
            gemm_recipes(system),
            "bf16",
            help=f"the recipes {chip.name} has a catalog peak for; attention stays in bf16",
        )
        usd = ui.price_input(PAGE, chip)
        efficiency = st.radio(
            "Achievable FLOPs",
            EFFICIENCIES,
            key=_k("efficiency"),
            horizontal=True,
            format_func=lambda e: {
                "kernel": "kernel-grounded",
                "pure": "pure roofline",
                "calibrated": f"calibrated ({CALIBRATED_TRAINING.flops_frac:g} of peak)",
            }[e],
            help=(
                "kernel (the default): the chip's kernel-fitted efficiency per operator class (transferred "
                "from the nearest chip where it has no tables, and said so); pure: the lecture's roofline; "
                "calibrated: the roofline at one flops_frac fitted on published training runs "
                "(docs/training.md)"
            ),
        )
    return TrainingState(
        model=model_id,
        config=config if model_id == CUSTOM_MODEL else None,
        system=system.id,
        plan=str(plan),
        chips=None if chips is None else int(chips),
        trillion_tokens=float(tokens),
        seq_len=int(seq_len),
        global_batch=int(batch),
        microbatch=int(microbatch),
        schedule=str(schedule),
        virtual_stages=int(virtual),
        recompute=str(recompute),
        optimizer=str(optimizer),
        zero=int(zero),
        compute=compute,
        usd_per_chip_hour=usd,
        efficiency=str(efficiency),
        pipe_schedule=initial.pipe_schedule,
        pipe_stages=initial.pipe_stages,
        pipe_microbatches=initial.pipe_microbatches,
        pipe_virtual_stages=initial.pipe_virtual_stages,
    )


def _pipeline_controls(state: TrainingState) -> TrainingState:
    cols = st.columns(4)
    schedule = cols[0].selectbox("Schedule", PIPELINE_SCHEDULES, key=_k("pipe_schedule"))
    stages = cols[1].number_input(
        "Stages P", min_value=1, max_value=MAX_PIPE_STAGES, step=1, key=_k("pipe_stages")
    )
    microbatches = cols[2].number_input(
        "Micro-batches m", min_value=1, max_value=MAX_PIPE_MICROBATCHES, step=1, key=_k("pipe_microbatches")
    )
    virtual = cols[3].number_input(
        "Chunks per stage v (interleaved)",
        min_value=2,
        max_value=8,
        step=1,
        key=_k("pipe_virtual_stages"),
        disabled=schedule != "interleaved",
    )
    return dataclasses.replace(
        state,
        pipe_schedule=str(schedule),
        pipe_stages=int(stages),
        pipe_microbatches=int(microbatches),
        pipe_virtual_stages=int(virtual),
    )


# --------------------------------------------------------------------------- page


def render_training_page() -> None:
    """The Training page: the job in the sidebar; its numbers, memory and a pipeline drawing."""
    st.title("Training")
    st.caption(
        "Step time, MFU, memory per chip and the cost of a token budget under a parallel plan; "
        "how much recomputation (or reversible layers) buys; and what a pipeline schedule looks like."
    )
    initial, errors = parse_training_query(st.query_params.to_dict())
    state = _controls(initial, errors)
    messages = st.container()
    job = st.container()
    st.subheader("Pipeline schedule")
    state = _pipeline_controls(state)
    ui.sync_url(training_query(state))
    with messages:
        ui.show_url_errors(PAGE, errors)
    with job:
        if state.model == CUSTOM_MODEL and not (state.config or "").strip():
            st.info(
                "Paste a Hugging Face config.json in the sidebar, or upload one, to estimate its training."
            )
        else:
            try:
                _job(training_view(state))
            except RackmathError as exc:
                ui.show_error(exc)
    try:
        _pipeline(
            pipeline_view(
                state.pipe_schedule, state.pipe_stages, state.pipe_microbatches, state.pipe_virtual_stages
            )
        )
    except RackmathError as exc:
        ui.show_error(exc)
    ui.cli_command(training_command(state))


def _job(view: TrainingView) -> None:
    r = view.estimate
    s, stp, mem = r.setup, r.step, r.memory
    st.markdown(
        f"**{s.model.name}** on **{s.chips:,} x {s.system.chip.name}** ({s.system.id}), plan `{s.plan}`: "
        f"batch {s.global_batch:,} x {s.seq_len:,} tokens = {s.tokens_per_step:,} per step, "
        f"{s.microbatches} micro-batches of {s.microbatch}; {s.schedule.value}"
        + (f" (v = {s.virtual_stages})" if s.virtual_stages > 1 else "")
        + f"; recompute {s.recompute.value}; {s.optimizer.value}, ZeRO-{int(s.zero)}; "
        f"GEMMs {s.recipe.value}, attention {s.attention_precision.value}; efficiency: {s.efficiency_label}"
    )
    for note in s.notes:
        st.caption(f"Note: {note}")
    if not mem.fits:
        _infeasible(view)
        return
    cols = list(st.columns(4))
    cols[0].metric(
        "Step time",
        fmt.seconds(stp.step_s),
        help=f"bounds {fmt.seconds(stp.lower_bound_s)} (all overlapped) .. {fmt.seconds(stp.upper_bound_s)}",
    )
    cols[1].metric(
        "MFU",
        fmt.pct(r.mfu),
        help=f"model FLOPs (6N + attention) per second over the {s.compute.value} peak (others below)",
    )
    cols[2].metric("HFU", fmt.pct(r.hfu), help="recomputed FLOPs count too")
    cols[3].metric("Tokens/s", f"{r.tokens_per_s:,.0f}")
    cols = list(st.columns(4))
    cols[0].metric("Days", f"{r.total_days:,.1f}", help=f"{r.steps:,.0f} steps of {fmt.seconds(stp.step_s)}")
    cols[1].metric("Chip-hours", f"{r.chip_hours:,.0f}")
    cols[2].metric(
        "Cost",
        fmt.money(r.cost_usd),
        help=f"{fmt.usd(r.cost_usd)} at {fmt.usd(s.usd_per_chip_hour)}/chip-hour",
    )
    cols[3].metric("Total model FLOPs", f"{r.total_flops:.3g}", help="tokens x model FLOPs per token (FLOP)")
    st.markdown("##### Utilisation, by convention")
    st.caption(
        "Sources state MFU differently: model FLOPs (6N + attention) or hardware FLOPs (recompute "
        "counted), with or without the attention core, over the BF16 peak or the peak of the GEMMs' "
        "precision. Every published row in the validation says which one it uses."
    )
    ui.table(_conventions(r))
    st.markdown("##### Where the time goes, operator by operator")
    st.caption(
        "Seconds per step on the busiest chip: forward, input gradient, weight gradient (the half "
        "zero-bubble schedules defer) and recompute, each at its operator's own precision and roofline."
    )
    operators = stp.operator_rows()
    ui.table(operators)
    ui.downloads(PAGE, "operators", operators)
    _memory(view)
    with st.expander("Where the step goes"):
        parts = stp.to_dict()
        ui.table([{"part": k, "value": fmt.column(k, v)} for k, v in parts.items()])
        ui.downloads(PAGE, "step", [parts])
    ui.png_download(
        PAGE, "training", _training_png(r), "memory by mode and the schedule, as `rackmath train --plot`"
    )


def _infeasible(view: TrainingView) -> None:
    """A job that does not fit: no headline time, cost or MFU (they would describe a job that
    cannot run), the shortfall, what would fit, and the memory that says why."""
    r = view.estimate
    mem = r.memory
    st.error(
        f"Infeasible: this job does not fit. It needs {fmt.nbytes(mem.total_bytes)} per chip and "
        f"{fmt.nbytes(mem.usable_bytes)} is usable: short by {mem.short_by_bytes / GB:,.1f} GB per chip. "
        "No step time, cost or utilisation is shown for a job that cannot run.",
        icon=":material/block:",
    )
    _memory(view)


def _memory(view: TrainingView) -> None:
    r = view.estimate
    s, mem = r.setup, r.memory
    st.markdown("##### Memory per chip")
    cols = list(st.columns(4))
    cols[0].metric("Weights", fmt.nbytes(mem.weights_bytes))
    cols[1].metric("Gradients", fmt.nbytes(mem.grads_bytes))
    cols[2].metric("Optimizer states", fmt.nbytes(mem.optimizer_bytes))
    cols[3].metric(
        "Activations",
        fmt.nbytes(mem.activation_bytes),
        help=f"{mem.in_flight_microbatches:g} micro-batches in flight on the busiest stage",
    )
    cols = list(st.columns(4))
    cols[0].metric("Total", fmt.nbytes(mem.total_bytes))
    cols[1].metric(
        "Usable", fmt.nbytes(mem.usable_bytes), help=f"HBM {fmt.nbytes(mem.capacity_bytes)} less the reserve"
    )
    cols[2].metric("Fits", "fits" if mem.fits else "no")
    if not mem.fits:
        cols[3].metric("Short by", f"{mem.short_by_bytes / GB:,.1f} GB", help="per chip")
    if view.fastest_fitting is not None:
        best = view.fastest_fitting
        if mem.fits and best.mode is s.recompute:
            st.success(f"Fits; {s.recompute.value} is the fastest recomputation mode that does.")
        elif mem.fits:
            st.info(
                f"Fits. The fastest mode that fits is {best.mode.value}: step {fmt.seconds(best.step_s)}, "
                f"{fmt.nbytes(best.total_bytes)} per chip."
            )
        else:
            st.warning(
                f"Recomputation {s.recompute.value} is short by {mem.short_by_bytes / GB:.1f} GB per chip. "
                f"The fastest mode that fits is {best.mode.value}: step {fmt.seconds(best.step_s)}, "
                f"{fmt.nbytes(best.total_bytes)} per chip (choose it under Recomputation)."
            )
    elif view.no_fit is not None:
        ui.show_error(view.no_fit)
    left, right = st.columns(2)
    with left:
        ui.figure(PAGE, "memory", training_charts.training_memory(r), "training")
    with right:
        ui.figure(PAGE, "recompute", training_charts.recompute_step(r), "training")
    st.markdown("##### Recompute or reverse")
    options = [o.to_dict() for o in r.options]
    ui.table(options)
    ui.downloads(PAGE, "recompute", options, r.to_dict())


def _conventions(r: TrainingEstimate) -> list[dict[str, Any]]:
    """One row per numerator (model / hardware x with / without attention), one column per peak."""
    rows: dict[tuple[str, bool], dict[str, Any]] = {}
    for c in r.conventions:
        row = rows.setdefault(
            (c.flops, c.attention), {"flops": c.flops, "attention": "with" if c.attention else "without"}
        )
        row[f"vs_{c.peak}_peak_frac"] = c.value
    return list(rows.values())


def _training_png(result: TrainingEstimate) -> Callable[[Path], Path]:
    def draw(path: Path) -> Path:
        from rackmath.plots.training import save_training_plot

        s = result.setup
        shown = schedule_drawing(s.schedule, s.plan.pp, s.microbatches, virtual_stages=s.virtual_stages)
        return save_training_plot(result, shown, path)

    return draw


def _pipeline(result: PipelineResult) -> None:
    t = result.timeline
    cols = list(st.columns(4))
    cols[0].metric("Bubble, simulated", f"{t.bubble_frac:.4f}")
    cols[1].metric("Bubble, closed form", f"{result.closed_form_bubble_frac:.4f}")
    cols[2].metric("Makespan", f"{t.makespan:g}", help="in forward times of one micro-batch on one stage")
    cols[3].metric(
        "Micro-batches in flight (stage 0)",
        f"{t.peak_in_flight(0):g}",
        help=f"closed form {result.closed_form_in_flight:g}",
    )
    ui.figure(
        PAGE,
        "pipeline",
        training_charts.pipeline(result.timeline, result.closed_form_bubble_frac),
        "pipeline",
    )
    d = result.to_dict()
    with st.expander(f"The {len(d['ops'])} ops"):
        ui.table(d["ops"])
        ui.downloads(PAGE, "pipeline", d["ops"], d)
    ui.png_download(PAGE, "pipeline", partial(save_pipeline_plot, result), "as `rackmath pipeline --plot`")
