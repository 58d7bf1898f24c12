"""Training drawings: the lecture's pipeline picture from a simulated schedule, and the
memory per chip by component and recomputation mode."""

from __future__ import annotations

from pathlib import Path

from rackmath.analyses.training import TrainingEstimate
from rackmath.core.pipeline import OpKind, Timeline
from rackmath.plots._files import checked_path, pyplot, save

_COLORS = {OpKind.F: "tab:blue", OpKind.B: "tab:orange", OpKind.W: "tab:green"}
_LABELS = {OpKind.F: "forward", OpKind.B: "backward", OpKind.W: "weight gradient"}


def _draw_timeline(ax: object, timeline: Timeline) -> None:
    seen: set[OpKind] = set()
    for o in timeline.ops:
        kind = o.op.kind
        ax.barh(  # type: ignore[attr-defined]
            o.stage,
            o.end - o.start,
            left=o.start,
            color=_COLORS[kind],
            alpha=1.0 if o.op.chunk % 2 == 0 else 0.6,
            edgecolor="black",
            linewidth=0.5,
            label=None if kind in seen else _LABELS[kind],
        )
        seen.add(kind)
        if timeline.microbatches * timeline.virtual_stages <= 16 and timeline.stages <= 8:
            ax.text(  # type: ignore[attr-defined]
                (o.start + o.end) / 2,
                o.stage,
                f"{kind.value}{o.op.microbatch}",
                ha="center",
                va="center",
                fontsize=7,
                color="white",
            )
    ax.set_yticks(range(timeline.stages))  # type: ignore[attr-defined]
    ax.set_yticklabels([f"stage {s}" for s in range(timeline.stages)])  # type: ignore[attr-defined]
    ax.invert_yaxis()  # type: ignore[attr-defined]
    ax.set_xlabel("time (forward of one micro-batch on one stage = 1)")  # type: ignore[attr-defined]
    v = f", v={timeline.virtual_stages}" if timeline.virtual_stages > 1 else ""
    ax.set_title(  # type: ignore[attr-defined]
        f"{timeline.schedule.value}: P={timeline.stages}, m={timeline.microbatches}{v}; "
        f"bubble {timeline.bubble_frac:.1%}"
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)  # type: ignore[attr-defined]


def save_pipeline_plot(timeline: Timeline, path: str | Path) -> Path:
    """One bar per op per stage: the lecture's pipeline drawing, from a real schedule."""
    out = checked_path(path)
    width = min(18.0, 4 + 0.35 * timeline.makespan)
    fig, ax = pyplot().subplots(figsize=(width, 1 + 0.5 * timeline.stages), constrained_layout=True)
    _draw_timeline(ax, timeline)
    return save(fig, out)


def save_training_plot(result: TrainingEstimate, timeline: Timeline, path: str | Path) -> Path:
    """Memory per chip by component for each recomputation mode, beside the schedule."""
    out = checked_path(path)
    mem = result.memory
    fig, (ax_m, ax_t) = pyplot().subplots(
        1, 2, figsize=(15, 4.8), constrained_layout=True, gridspec_kw={"width_ratios": [1, 2]}
    )
    states = (mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes) / 1e9
    names = [o.mode.value for o in result.options]
    acts = [o.activations_bytes / 1e9 for o in result.options]
    ax_m.bar(names, [mem.weights_bytes / 1e9] * len(names), label="weights", color="tab:blue")
    ax_m.bar(
        names,
        [mem.grads_bytes / 1e9] * len(names),
        bottom=mem.weights_bytes / 1e9,
        label="gradients",
        color="tab:orange",
    )
    ax_m.bar(
        names,
        [mem.optimizer_bytes / 1e9] * len(names),
        bottom=(mem.weights_bytes + mem.grads_bytes) / 1e9,
        label="optimizer states",
        color="tab:green",
    )
    ax_m.bar(names, acts, bottom=states, label="activations", color="tab:red")
    ax_m.axhline(mem.usable_bytes / 1e9, color="black", ls="--", lw=1, label="usable HBM")
    ax_m.set_ylabel("GB per chip")
    ax_m.set_title("Memory per chip by recomputation mode")
    ax_m.legend(fontsize=8)
    _draw_timeline(ax_t, timeline)
    s = result.setup
    fig.suptitle(f"{s.model.name} on {s.chips} x {s.system.chip.id}, plan {s.plan}")
    return save(fig, out)
