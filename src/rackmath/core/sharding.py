"""A model's weights grouped by how a plan shards them, and pipeline stage splits.

:func:`shardable` turns a :class:`~rackmath.specs.model.ModelSpec` into a
:class:`ShardableModel` once (cached): bytes by sharding rule (TP-sharded, replicated,
routed experts, vocabulary), every layer's bytes (for stage partitioning) and the
operator model (:mod:`rackmath.core.operators`). :func:`balanced_stages` splits layers into
contiguous pipeline stages minimizing the slowest (the linear-partition problem);
:func:`stated_stages` takes the split a deployment states (``stages=16+15+15+15``), and
:func:`pipeline_fractions` charges the LM head to the last stage (:func:`pipeline_costs`).
The memory account per chip is :mod:`rackmath.core.memory`; the step, :mod:`rackmath.core.parallel`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import architecture as arch
from rackmath.core import attention as attn
from rackmath.core import operator_model as opm
from rackmath.errors import InputError
from rackmath.specs.model import WEIGHT_CLASSES, MlpKind, ModelSpec
from rackmath.specs.precision import Precision, plain_precision

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class ShardableModel:
    """A model's weight bytes grouped by how a plan shards them, plus the shapes it needs."""

    hidden: int
    num_layers: int
    num_moe_layers: int
    num_heads: int
    #: KV heads tensor parallelism can split (MLA: 1, its latent is shared by all heads)
    kv_heads: int
    experts: int  # 1 for a dense model
    experts_per_token: int
    #: attention + dense MLPs + shared experts, all layers (split tp ways)
    tp_sharded_bytes: float
    #: norm scales + routers (replicated on every chip of a stage)
    replicated_bytes: float
    #: every routed expert of every MoE layer (split max(ep, tp) ways)
    routed_expert_bytes: float
    #: one routed expert summed over the MoE layers
    expert_bytes: float
    embedding_bytes: float
    #: the output projection (the embedding itself when tied)
    head_bytes: float
    tied_embeddings: bool
    #: every layer's weight bytes, in order (for stage partitioning)
    layer_bytes: tuple[float, ...]
    #: the same model as operators (parameters and bytes by weight class)
    operators: opm.OperatorModel

    @property
    def total_bytes(self) -> float:
        head = 0.0 if self.tied_embeddings else self.head_bytes
        return (
            self.tp_sharded_bytes
            + self.replicated_bytes
            + self.routed_expert_bytes
            + self.embedding_bytes
            + head
        )


@lru_cache(maxsize=512)
def shardable(model: ModelSpec, precision: Precision | float) -> ShardableModel:
    """Group :func:`~rackmath.core.architecture.param_counts` by sharding rule, in bytes.

    ``precision``: the weights' storage format, each class at its own precision where the
    checkpoint keeps some classes unconverted (:meth:`ModelSpec.weight_precision`; gpt-oss
    keeps attention, router, embedding and head in bf16 beside mxfp4 experts), or a uniform
    number of bytes per parameter standing for that width's plain format
    (:func:`~rackmath.specs.precision.plain_precision`: 2 is bf16, 1 is fp8).
    """
    p = arch.param_counts(model)
    plain = precision if isinstance(precision, Precision) else plain_precision(precision)
    if isinstance(precision, Precision):
        formats = {c: model.weight_precision(c, precision) for c in WEIGHT_CLASSES}
    else:
        formats = dict.fromkeys(WEIGHT_CLASSES, plain)
    b = {c: f.bytes_per_element for c, f in formats.items()}
    n_layers = model.num_layers
    n_moe = model.num_moe_layers
    moe_layer = (
        (
            p.routed_experts * b["routed_experts"]
            + p.shared_experts * b["shared_experts"]
            + p.router * b["router"]
        )
        / n_moe
        if n_moe
        else 0.0
    )
    layer_bytes = tuple(  # per layer kind and width (hybrid and NAS models differ layer to layer)
        a_p * b["attention"]
        + n_p * b["norms"]
        + (moe_layer if layer.mlp is MlpKind.MOE else d_p * b["dense_mlp"])
        for layer, (a_p, d_p, n_p) in zip(model.layers, arch.layer_params(model), strict=True)
    )
    a = model.attention
    moe = model.moe if model.is_moe else None
    return ShardableModel(
        hidden=model.hidden_size,
        num_layers=n_layers,
        num_moe_layers=n_moe,
        num_heads=a.num_heads,
        kv_heads=attn.kv_shardable_heads(a),
        experts=moe.num_experts if moe else 1,
        experts_per_token=moe.experts_per_token if moe else 1,
        tp_sharded_bytes=(
            p.attention * b["attention"]
            + p.dense_mlp * b["dense_mlp"]
            + p.shared_experts * b["shared_experts"]
        ),
        replicated_bytes=p.norms * b["norms"] + p.router * b["router"],
        routed_expert_bytes=p.routed_experts * b["routed_experts"],
        expert_bytes=p.per_expert * n_moe * b["routed_experts"] if moe else 0.0,
        embedding_bytes=p.embedding * b["embedding"],
        head_bytes=(p.lm_head * b["lm_head"]) if p.lm_head else p.embedding * b["embedding"],
        tied_embeddings=p.lm_head == 0,
        layer_bytes=layer_bytes,
        operators=opm.operator_model(model, formats),
    )


# ----------------------------------------------------------------------------- stages


@dataclass(frozen=True)
class StageSplit:
    """Contiguous layers per stage minimizing the slowest stage (for one ``P``)."""

    starts: tuple[int, ...]  # first layer of each stage
    stage_costs: tuple[float, ...]
    stage_layers: tuple[int, ...]

    @property
    def imbalance(self) -> float:
        """Slowest stage over the mean stage: 1.0 is a perfect split."""
        costs = np.asarray(self.stage_costs)
        return float(costs.max() / costs.mean())

    @property
    def heaviest_frac(self) -> float:
        """The slowest stage's share of the total cost."""
        return float(max(self.stage_costs) / sum(self.stage_costs))


def balanced_stages(costs: tuple[float, ...] | list[float], stages: int) -> StageSplit:
    """Split a sequence of layer costs into ``stages`` contiguous parts, minimizing the max.

    Dynamic programming over prefix sums (the linear-partition problem):
    ``best[p][i] = min_j max(best[p-1][j], sum(costs[j:i]))``, O(P L^2). Layers that cost
    differently (dense vs MoE MLPs, sliding-window vs global attention) leave an
    imbalance even when ``L`` divides by ``P``: one reason pipelining constrains
    architectures (D24).
    """
    c = np.asarray(costs, float)
    n = c.size
    if not 1 <= stages <= n:
        raise InputError("pipeline stages", stages, f"1 to {n} (the number of layers)")
    prefix = np.concatenate([[0.0], np.cumsum(c)])
    best = np.full((stages + 1, n + 1), np.inf)
    cut = np.zeros((stages + 1, n + 1), dtype=int)
    best[0, 0] = 0.0
    for p in range(1, stages + 1):
        for i in range(p, n - (stages - p) + 1):
            j = np.arange(p - 1, i)
            candidates = np.maximum(best[p - 1, j], prefix[i] - prefix[j])
            k = int(np.argmin(candidates))
            best[p, i] = candidates[k]
            cut[p, i] = j[k]
    starts: list[int] = []
    end = n
    for p in range(stages, 0, -1):
        begin = int(cut[p, end])
        starts.append(begin)
        end = begin
    starts.reverse()
    ends = [*starts[1:], n]
    return StageSplit(
        starts=tuple(starts),
        stage_costs=tuple(float(prefix[e] - prefix[s]) for s, e in zip(starts, ends, strict=True)),
        stage_layers=tuple(e - s for s, e in zip(starts, ends, strict=True)),
    )


def stated_stages(costs: tuple[float, ...] | list[float], stages: tuple[int, ...]) -> StageSplit:
    """The split a deployment states: ``stages[i]`` consecutive layers on stage ``i``, first to
    last (vLLM's ``VLLM_PP_LAYER_PARTITION``, SGLang's ``--pp-layer-partition``), with the cost
    of each. ``sum(stages)`` must be the number of layers (:func:`check_stated_stages`)."""
    c = np.asarray(costs, float)
    if sum(stages) != c.size:
        check_stated_stages(stages, c.size, _split(tuple(costs), len(stages)).stage_layers)
    ends = np.cumsum(stages)
    starts = ends - np.asarray(stages)
    prefix = np.concatenate([[0.0], np.cumsum(c)])
    return StageSplit(
        starts=tuple(int(x) for x in starts),
        stage_costs=tuple(float(prefix[e] - prefix[s]) for s, e in zip(starts, ends, strict=True)),
        stage_layers=tuple(stages),
    )


def check_stated_stages(
    stages: tuple[int, ...], layers: int, balanced: tuple[int, ...], owner: str = ""
) -> None:
    """Stated stages must cover the ``layers`` exactly; refused in one line naming the field and
    a split that works (``balanced``: the tool's own)."""
    if sum(stages) != layers:
        of = f"{owner}'s " if owner else "the "
        raise InputError(
            "plan stages",
            "+".join(str(n) for n in stages),
            f"{len(stages)} stages whose layers sum to {of}{layers} layers (these cover {sum(stages)}), "
            f"e.g. stages={'+'.join(str(n) for n in balanced)}",
        )


def pipeline_costs(m: ShardableModel) -> tuple[float, ...]:
    """What each layer costs a pipeline stage per micro-batch pass, in weight bytes read, with
    the LM head's bytes on the last layer (the last stage runs the head on every pass) and the
    embedding on none (the first stage holds it but reads only the looked-up rows).

    The stage a layer lands on always holds it with its neighbours, so charging the head to the
    last layer charges it to the last stage in any contiguous split: :func:`balanced_stages` on
    these costs balances the stages with the head counted, and gives the last stage fewer
    layers where the head weighs (Llama 3.1 8B's head is 2.4 layers' bytes)."""
    costs = list(m.layer_bytes)
    costs[-1] += m.head_bytes
    return tuple(costs)


@lru_cache(maxsize=256)
def _split(costs: tuple[float, ...], stages: int) -> StageSplit:
    return balanced_stages(costs, stages)


def pipeline_split(m: ShardableModel, pp: int, stages: tuple[int, ...] = ()) -> StageSplit:
    """The stages a plan runs: the stated ``stages`` or, unset, the balanced split of
    :func:`pipeline_costs` (LM head on the last stage) over ``pp`` stages."""
    costs = pipeline_costs(m)
    return stated_stages(costs, stages) if stages else _split(costs, int(pp))


def pipeline_fractions(
    m: ShardableModel, pp: ArrayLike, stages: tuple[int, ...] = ()
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """For each ``pp``: (the slowest stage's share of a pass's cost, head included, so that the
    step's ``imbalance = P x`` it; that stage split's heaviest share of the layers' weights, for
    the memory account; its most layers over ``L``, for the KV held).

    Worked number (DeepSeek-V3, fp8, 61 layers over 4 stages): the split and the figures are
    ``docs/plans.md``'s, recomputed in ``tests/test_pipeline_cp.py``. ``pp = 1``: ``(1, 1, 1)``.
    """
    p = np.asarray(pp, int)
    out: dict[int, tuple[float, float, float]] = {}
    layer_bytes = np.asarray(m.layer_bytes, float)
    for v in np.unique(p):
        split = pipeline_split(m, int(v), stages)
        ends = np.cumsum(split.stage_layers)
        weights = [float(layer_bytes[s:e].sum()) for s, e in zip(split.starts, ends, strict=True)]
        out[int(v)] = (
            split.heaviest_frac,
            max(weights) / float(layer_bytes.sum()),
            max(split.stage_layers) / len(layer_bytes),
        )
    if p.ndim == 0:
        return tuple(np.asarray(x, float) for x in out[int(p)])  # type: ignore[return-value]
    columns = [np.vectorize(lambda v, j=j: out[int(v)][j], otypes=[float])(p) for j in range(3)]
    return columns[0], columns[1], columns[2]


def stage_fractions(layer_costs: tuple[float, ...], pp: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """(heaviest stage's share of the layer cost, its share of the layers) for each ``pp``."""
    p = np.asarray(pp, int)
    values = np.unique(p)
    cost_frac = {int(v): _split(layer_costs, int(v)).heaviest_frac for v in values}
    splits = {int(v): _split(layer_costs, int(v)) for v in values}
    layer_frac = {int(v): max(s.stage_layers) / len(layer_costs) for v, s in splits.items()}
    lookup_c = np.vectorize(cost_frac.__getitem__, otypes=[float])
    lookup_l = np.vectorize(layer_frac.__getitem__, otypes=[float])
    return np.asarray(lookup_c(p), float), np.asarray(lookup_l(p), float)


def layer_costs_bytes(
    model: ModelSpec,
    m: ShardableModel,
    *,
    batch: float,
    context: float,
    kv_bytes_per_element: float,
) -> tuple[float, ...]:
    """Bytes each layer moves in a decode step: its weights plus ``B x`` its KV at ``context``.

    A sliding-window layer caches ``min(context, window)`` tokens, a global one all of
    them, so at long context global layers dominate (D24).
    """
    kv = arch.kv_bytes_per_layer(model, context, kv_bytes_per_element)  # per layer kind
    return tuple(w + batch * k for w, k in zip(m.layer_bytes, kv, strict=True))
