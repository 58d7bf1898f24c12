"""Pipelines as run: how the layers lie on the stages, and the stage that sets the pace.

Megatron-core splits ``L`` layers evenly over ``P`` stages unless told otherwise; a run may
state the first and last stages' layers (``--decoder-first-pipeline-num-layers``,
``--decoder-last-pipeline-num-layers``: the middle stages then split the rest evenly, and
Megatron refuses a rest that does not divide), or ask the tool to balance them
(:func:`stage_layout` with ``balance``: the input embedding counted on the first stage and
the LM head and loss on the last, as Megatron's ``account_for_embedding_in_pipeline_split``
and ``account_for_loss_in_pipeline_split`` and torchtitan's
``pipeline_parallel_first/last_stage_less_layers`` do by hand).

The stage time (:func:`busiest_stage`): every per-layer operator scales with the stage's
layers; the embedding runs on the first stage only, the LM head and the loss on the last
only. The slowest stage sets the pipeline's pace; virtual stages keep each physical stage's
layers and add their own sends (:mod:`rackmath.analyses.training.comm`).

Multi-token prediction (DeepSeek-V3 §2.2): each MTP module is one more transformer layer (of
the kind of the model's last layer, as Megatron-LM's FLOP count takes it), a projection of the
normed hidden state and next-token embedding (``2h -> h``) and the shared LM head and loss run
again. Megatron places the modules with the loss on the last stage
(``pipeline_model_parallel_layout``; Megatron-Bridge's DeepSeek-V3 layouts end in
``["decoder", "mtp", "loss"]``), and so does :func:`stage_operators`.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from rackmath.core import training_step as ts
from rackmath.core.sharding import balanced_stages
from rackmath.errors import InputError

#: Operators that run on the first stage only (the input embedding) and on the last only (the
#: LM head and the loss); every other operator runs on every layer.
FIRST_STAGE_OPERATORS = ("embedding",)
LAST_STAGE_OPERATORS = ("lm_head", "loss")
#: The MTP modules' own projections (``2h -> h``), built for all of them, last stage only.
MTP_OPERATORS = ("mtp_projection",)
#: The per-layer operators of MoE layers only and of dense-MLP layers only (the rest run in
#: every layer): an MTP module's layer adds one of its own kind's.
MOE_LAYER_OPERATORS = ("router", "router_aux", "shared_experts", "routed_experts", "permute", "unpermute")
DENSE_LAYER_OPERATORS = ("dense_mlp",)

#: The LM head and loss, in layers, when the tool balances the stages without the model's
#: costs: Megatron's ``account_for_loss_in_pipeline_split`` and
#: ``account_for_embedding_in_pipeline_split`` count each as one layer (transformer_config.py
#: L137-142), as torchtitan's first/last-stage-less-layers default of 1 does.
END_COST_LAYERS = 1.0


def stage_layout(
    layers: int,
    pp: int,
    first: int | None = None,
    last: int | None = None,
    *,
    balance: bool = False,
    end_cost_layers: float = END_COST_LAYERS,
    stated: tuple[int, ...] | list[int] | None = None,
) -> tuple[int, ...] | None:
    """Transformer layers on each of ``pp`` stages, or None for the even split (``ceil(L/P)`` on
    the fullest stage).

    ``stated``: every stage's layers (Megatron's ``--pipeline-model-parallel-layout`` read per
    physical stage), which must add up to ``L``. ``first`` / ``last``: the first and last
    stages' layers as stated; the ``P - 2`` middle
    stages split the rest evenly (one given: the other ``P - 1`` stages split the rest). A rest
    that does not divide, or stated stages that do not cover the layers, is refused in one
    line. ``balance``: contiguous stages minimising the slowest
    (:func:`rackmath.core.sharding.balanced_stages`) with the embedding and the head + loss
    counted as ``end_cost_layers`` layers each on the first and last stages. Worked numbers:
    126 layers over 16 stages balanced -> first and last 7, the 14 middle stages 8 each; 126
    with ``first = last = 7`` -> the same; ``first = last = 6`` refused (114 over 14 stages).
    """
    if stated is not None:
        counts = tuple(int(n) for n in stated)
        if len(counts) != pp or sum(counts) != layers or min(counts) < 0:
            raise InputError(
                "stage-layers",
                ",".join(map(str, counts)),
                f"{pp} whole numbers (one per stage) that add up to the model's {layers} layers",
            )
        return counts
    if first is None and last is None and not balance:
        return None
    if pp == 1:
        if (first or last) and (first or last) != layers:
            raise InputError("first-stage-layers", first or last, f"the model's {layers} layers (one stage)")
        return (layers,)
    if balance:
        if first is not None or last is not None:
            raise InputError(
                "balance stages", True, "either stated first/last stage layers or balancing, not both"
            )
        costs = (end_cost_layers, *([1.0] * layers), end_cost_layers)
        split = balanced_stages(costs, pp)
        balanced = list(split.stage_layers)
        balanced[0] -= 1  # the embedding item
        balanced[-1] -= 1  # the head + loss item
        return tuple(balanced)
    for name, value in (("first-stage-layers", first), ("last-stage-layers", last)):
        if value is not None and not 0 <= value <= layers:
            raise InputError(name, value, f"0 to {layers} layers")
    given = (first or 0) + (last or 0)
    rest_stages = pp - (first is not None) - (last is not None)
    rest = layers - given
    if rest < 0 or (rest_stages == 0 and rest != 0):
        raise InputError(
            "first-stage-layers",
            f"{first} + {last}",
            f"stages that cover the {layers} layers: first + last = {layers} with {pp} stages",
        )
    if rest_stages and (rest % rest_stages or rest // rest_stages < 1):
        even = _suggest(layers, pp)
        raise InputError(
            "first-stage-layers" if first is not None else "last-stage-layers",
            f"first {first}, last {last}",
            f"the other {rest} layers split evenly over {rest_stages} stages, "
            f"e.g. first {even[0]}, last {even[1]}",
        )
    middle = rest // rest_stages if rest_stages else 0
    layout = [middle] * pp
    if first is not None:
        layout[0] = first
    if last is not None:
        layout[-1] = last
    return tuple(layout)


def _suggest(layers: int, pp: int) -> tuple[int, int]:
    """First and last stage layers that make the middle stages even (the nearest to ``L/P``)."""
    best = (layers // pp, layers // pp)
    for per in range(math.ceil(layers / pp), 0, -1):
        ends = layers - per * (pp - 2)
        if ends >= 0:
            best = (ends // 2 + ends % 2, ends // 2)
            break
    return best


def _scaled(o: ts.TrainingOperator, k: float) -> ts.TrainingOperator:
    return replace(
        o,
        forward_s=np.asarray(float(o.forward_s) * k),
        input_grad_s=np.asarray(float(o.input_grad_s) * k),
        weight_grad_s=np.asarray(float(o.weight_grad_s) * k),
        recompute_s=np.asarray(float(o.recompute_s) * k),
    )


def stage_operators(
    ops_avg: tuple[ts.TrainingOperator, ...],
    layers: int,
    pp: int,
    n_layers: int,
    *,
    first: bool,
    last: bool,
    mtp: int = 0,
    moe_layers: int = 0,
) -> tuple[ts.TrainingOperator, ...]:
    """One stage's operators from the stage-average ones (``1/P`` of everything): per-layer
    operators scale by ``n P / L`` for ``n`` layers, the embedding by ``P`` on the first stage
    and the head and loss by ``P`` on the last (0 elsewhere). ``mtp`` modules (of a model with
    ``moe_layers`` MoE layers) add to the last stage one layer each, of the last layer's kind
    (MoE when the model has MoE layers: its MoE operators by ``P / L_moe``, its shared ones by
    ``P / L``), their projections, and the head and loss once more each: ``P (1 + mtp)``."""
    mtp = mtp if last else 0
    mtp_kind = MOE_LAYER_OPERATORS if moe_layers else DENSE_LAYER_OPERATORS
    own_layers = {name: moe_layers for name in MOE_LAYER_OPERATORS}
    own_layers.update({name: layers - moe_layers for name in DENSE_LAYER_OPERATORS})

    def k(name: str) -> float:
        if name in FIRST_STAGE_OPERATORS:
            return float(pp) if first else 0.0
        if name in LAST_STAGE_OPERATORS:
            return float(pp) * (1 + mtp) if last else 0.0
        if name in MTP_OPERATORS:
            return float(pp) if last else 0.0
        per_layer = n_layers * pp / layers
        if mtp and (name in mtp_kind or name not in own_layers):
            per_layer += mtp * pp / own_layers.get(name, layers)
        return per_layer

    return tuple(_scaled(o, k(o.name)) for o in ops_avg)


def busiest_stage(
    ops_avg: tuple[ts.TrainingOperator, ...],
    layers: int,
    pp: int,
    layout: tuple[int, ...] | None = None,
    *,
    mtp: int = 0,
    moe_layers: int = 0,
) -> tuple[ts.TrainingOperator, ...]:
    """The operators of the slowest stage.

    Stated layers per stage (``layout``): the first stage with the embedding, the last with
    the head and the loss (and ``mtp`` modules, :func:`stage_operators`), the fullest middle
    stage; the slowest of them. Without a layout
    (the even split), the slower of (a) a middle stage with ``ceil(L/P)`` layers and (b) the
    end stage running the embedding, the head and the loss with ``floor(L/P)`` layers (an
    uneven split puts the spare layers elsewhere, as Llama 3 trims a layer from its first and
    last stages, §3.3.2). ``P = 1``: everything. Megatron GPT 462B (112 layers, P = 16,
    vocabulary 131,072, h 18,432): 7 layers + a head of 0.59 layers' FLOPs on the last stage.
    """
    extra = {"mtp": mtp, "moe_layers": moe_layers}
    if pp == 1:
        return stage_operators(ops_avg, layers, 1, layers, first=True, last=True, **extra) if mtp else ops_avg

    def total(st: tuple[ts.TrainingOperator, ...]) -> float:
        return sum(float(o.time_s) for o in st)

    if layout is None:
        middle = stage_operators(ops_avg, layers, pp, math.ceil(layers / pp), first=False, last=False)
        end = stage_operators(ops_avg, layers, pp, layers // pp, first=True, last=True, **extra)
        return max((end, middle), key=total)
    candidates = [
        stage_operators(ops_avg, layers, pp, layout[0], first=True, last=False),
        stage_operators(ops_avg, layers, pp, layout[-1], first=False, last=True, **extra),
    ]
    if pp > 2:
        candidates.append(stage_operators(ops_avg, layers, pp, max(layout[1:-1]), first=False, last=False))
    return max(candidates, key=total)
