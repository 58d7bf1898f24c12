"""A transformer's architecture as a frozen spec, one entry per layer.

Per-layer facts (attention window, dense or mixture-of-experts MLP) are resolved once
when the spec is built from a ``config.json`` (:mod:`rackmath.specs.hf_config`), so the
math never parses a layer pattern again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum

from rackmath.errors import InputError, UnknownIdError
from rackmath.specs.precision import Precision


class AttentionKind(StrEnum):
    MHA = "MHA"  # one K/V head per query head
    GQA = "GQA"  # query heads share fewer K/V heads
    MQA = "MQA"  # a single K/V head
    MLA = "MLA"  # multi-head latent attention: a low-rank latent plus a RoPE key is cached
    DSA = "DSA"  # MLA plus DeepSeek's sparse attention: an indexer picks top-k cached tokens
    CHUNKED = "chunked"  # GQA within fixed chunks of the sequence (Llama 4's local layers)
    LINEAR = "linear"  # gated delta net: a fixed recurrent state per sequence, no KV cache
    LINEAR_PROJ = "linear-proj"  # attention replaced by one h x h linear (Nemotron-NAS)
    NONE = "none"  # no attention in this layer (Nemotron-NAS no_op)


class MlpKind(StrEnum):
    DENSE = "dense"
    MOE = "moe"
    NONE = "none"  # no feed-forward block in this layer (Nemotron-NAS no_op)


@dataclass(frozen=True)
class AttentionSpec:
    kind: AttentionKind
    num_heads: int
    num_kv_heads: int
    head_dim: int  # query/key width per head (MLA: qk_nope_head_dim + qk_rope_head_dim)
    v_head_dim: int
    qkv_bias: bool = False
    output_bias: bool = False
    qk_norm: bool = False
    sinks: bool = False  # one learned logit per head (gpt-oss)
    # MLA only
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    # DSA-style sparse attention (DeepSeek-V3.2): an indexer picks ``index_top_k`` cached
    # tokens per query; None = dense attention over every held token
    index_top_k: int | None = None
    index_n_heads: int = 0
    index_head_dim: int = 0
    #: CHUNKED only: tokens per attention chunk (Llama 4: 8,192)
    chunk_size: int = 0
    #: a sigmoid gate on the attention output, one per query value (Qwen3-Next: doubles W_q)
    output_gate: bool = False
    # LINEAR only (gated delta net, Qwen3-Next): key/value heads and widths, conv kernel
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0


@dataclass(frozen=True)
class DenseMlpSpec:
    intermediate_size: int
    gated: bool = True  # SwiGLU/GeGLU: gate, up and down projections
    bias: bool = False


@dataclass(frozen=True)
class MoeSpec:
    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    num_shared_experts: int = 0
    shared_intermediate_size: int = 0  # total width of all shared experts together
    gated: bool = True
    expert_bias: bool = False
    router_bias: bool = False  # a bias per expert (gpt-oss; DeepSeek's score-correction bias)
    shared_expert_gate: bool = False  # a sigmoid gate (h x 1) on the shared expert (Qwen MoE)

    @property
    def sparsity(self) -> float:
        """Routed experts held per expert used: E / k."""
        return self.num_experts / self.experts_per_token


@dataclass(frozen=True)
class LayerSpec:
    #: Tokens this layer's attention can see (and must cache); None = the whole context.
    window: int | None
    mlp: MlpKind
    #: this layer's attention when it differs from the model's (hybrid and NAS models)
    attention: AttentionSpec | None = None
    #: this layer's dense MLP width when it differs from the model's (Nemotron-NAS)
    intermediate_size: int | None = None


class ActiveCountRule(StrEnum):
    """What a publisher's "active parameters" includes besides the blocks a token passes.

    Owners differ: most count the input embedding and the LM head, gpt-oss counts only
    the LM head (its model card, Table 1), some count neither.
    """

    EMBEDDING_AND_HEAD = "embedding_and_head"
    HEAD_ONLY = "head_only"
    NEITHER = "neither"


@dataclass(frozen=True)
class PublishedCounts:
    params_total: float
    params_active: float
    active_counts: ActiveCountRule = ActiveCountRule.EMBEDDING_AND_HEAD
    note: str = ""
    source: str = ""
    #: How far a computed count may sit from these figures: 2% by default; wider only where
    #: the owner publishes a rounded figure (Qwen3-Next's "3B activated": half a unit of the
    #: last digit, 0.5 / 3 = 17%), said in ``note``.
    tolerance_frac: float = 0.02


#: Classes of weight tensors, the components of :class:`rackmath.core.architecture.ParamCounts`
#: whose storage precision a checkpoint may set separately (``modules_to_not_convert``).
WEIGHT_CLASSES = (
    "embedding",
    "lm_head",
    "attention",
    "dense_mlp",
    "routed_experts",
    "shared_experts",
    "router",
    "norms",
)

#: Classes a quantized format leaves at 16 bits when a deployment requantizes a checkpoint
#: uniformly (``--weights fp8``): quantizers convert the linear layers inside the blocks and keep
#: the embedding, LM head, router and norms (NVIDIA's ModelOpt FP8/FP4 checkpoints: "only the
#: weights and activations of the linear operators within transformers blocks are quantized",
#: model card of nvidia/Llama-3.1-405B-Instruct-FP4; TensorRT-LLM's DeepSeek-R1 FP4 recipe
#: keeps the RouterGEMM in bf16, tech blog 1; vLLM builds MoE gates with ``quant_config=None``).
#: A deployment that converts them too says so per class (``--weight-classes lm_head=int8``).
UNQUANTIZED_CLASSES = ("embedding", "lm_head", "router", "norms")

#: The names a statement of weights per class takes (``experts=nvfp4,attention=fp8``), each
#: the classes of :data:`WEIGHT_CLASSES` it sets: ``experts`` the routed experts, ``mlp`` the
#: dense MLP, ``embeddings`` the embedding and the LM head together.
WEIGHT_CLASS_NAMES: dict[str, tuple[str, ...]] = {
    "attention": ("attention",),
    "mlp": ("dense_mlp",),
    "dense_mlp": ("dense_mlp",),
    "experts": ("routed_experts",),
    "routed_experts": ("routed_experts",),
    "shared_experts": ("shared_experts",),
    "embeddings": ("embedding", "lm_head"),
    "embedding": ("embedding",),
    "lm_head": ("lm_head",),
    "head": ("lm_head",),
    "router": ("router",),
    "norms": ("norms",),
}


#: How a model's notes record weights stated per class (:meth:`ModelSpec.with_weight_precisions`).
STATED_WEIGHTS_NOTE = "weights per class as stated: "


def parse_weight_classes(
    stated: str | Mapping[str, str | Precision], field: str = "--weight-classes"
) -> tuple[tuple[str, Precision], ...]:
    """Weights per tensor class as a deployment states them: ``"experts=nvfp4,attention=fp8"``
    (or the same as a mapping) -> ``(("attention", fp8), ("routed_experts", nvfp4))``, each
    name of :data:`WEIGHT_CLASS_NAMES` and each format of :class:`Precision` (the format
    table's bytes, block scales included); a bad name or format is one line naming both lists."""
    names = ", ".join(WEIGHT_CLASS_NAMES)
    example = "e.g. experts=nvfp4,attention=fp8,embeddings=bf16"
    if isinstance(stated, Mapping):
        pairs = [(str(k), v) for k, v in stated.items()]
    else:
        pairs = []
        for part in str(stated).replace(" ", "").split(","):
            if not part:
                continue
            key, eq, value = part.partition("=")
            if not eq or not value:
                raise InputError(field, part, f"class=format pairs joined by commas, {example}")
            pairs.append((key, value))
    if not pairs:
        raise InputError(field, str(stated), f"at least one class=format pair, {example}")
    out: dict[str, Precision] = {}
    for key, value in pairs:
        classes = WEIGHT_CLASS_NAMES.get(key.strip().lower())
        if classes is None:
            raise InputError(field, key, f"a weight class: {names} ({example})")
        try:
            precision = Precision.parse(value)
        except UnknownIdError:
            formats = ", ".join(p.value for p in Precision)
            raise InputError(field, f"{key}={value}", f"a format: {formats}") from None
        for name in classes:
            if name in out and out[name] is not precision:
                raise InputError(field, str(stated), f"one format per class ({name} is stated twice)")
            out[name] = precision
    return tuple(sorted(out.items()))


@dataclass(frozen=True)
class ModelSpec:
    id: str
    name: str
    family: str  # Hugging Face model_type
    hidden_size: int
    vocab_size: int
    tie_word_embeddings: bool
    attention: AttentionSpec
    layers: tuple[LayerSpec, ...]
    dense_mlp: DenseMlpSpec | None
    moe: MoeSpec | None
    norms_per_layer: int = 2
    native_weight_precision: Precision = Precision.BF16
    #: Classes (from :data:`WEIGHT_CLASSES`) the checkpoint stores in another precision than
    #: ``native_weight_precision``, e.g. gpt-oss keeps attention, router, embedding and LM head
    #: in bf16 while its experts are mxfp4. Pairs, so the spec stays hashable.
    weight_precision_by_class: tuple[tuple[str, Precision], ...] = ()
    #: The KV cache's format where the checkpoint's quantization config states one (ModelOpt's
    #: ``kv_cache_quant_algo``, a ``kv_cache_scheme``); None: bf16 unless a deployment says
    native_kv_precision: Precision | None = None
    num_mtp_layers: int = 0  # multi-token-prediction modules, not counted in the main model
    max_context: int | None = None
    aliases: tuple[str, ...] = ()
    published: PublishedCounts | None = None
    source: tuple[str, ...] = ()
    date: str = ""
    confidence: str = ""
    notes: tuple[str, ...] = field(default=())

    def __hash__(self) -> int:
        """The fields' hash, computed once: cached core lookups hash the spec on every call
        (61 layer specs for DeepSeek-V3, ~7 us each time). Equality stays field by field."""
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", cached)
        return cached

    def weight_precision(self, weight_class: str, default: Precision | None = None) -> Precision:
        """Storage precision of one weight class. Served as shipped (``default`` is None or
        the native precision), a class the checkpoint keeps unconverted has its own precision;
        any other ``default`` requantizes the checkpoint: a 16- or 32-bit float converts every
        class, a quantized format every class but :data:`UNQUANTIZED_CLASSES`, which keep the
        checkpoint's own 16-bit format (bf16 where the checkpoint stores them narrower).
        E.g. Llama-3.1-8B at ``fp8``: 6.98 B block parameters at 1 byte, its 1.05 B embedding
        and LM head parameters at 2 bytes."""
        if weight_class not in WEIGHT_CLASSES:
            raise ValueError(f"unknown weight class {weight_class!r}; allowed: {', '.join(WEIGHT_CLASSES)}")
        native = self.native_weight_precision
        own = dict(self.weight_precision_by_class).get(weight_class, native)
        if default is None or default is native:
            return own
        if default.is_wide or weight_class not in UNQUANTIZED_CLASSES:
            return default
        return own if own.is_wide else Precision.BF16

    def with_weight_precisions(
        self, classes: tuple[tuple[str, Precision], ...], weights: Precision | None = None
    ) -> ModelSpec:
        """The model as a deployment stores it: ``classes`` (:func:`parse_weight_classes`) in
        their stated formats, the rest in ``weights`` (a requantization as :meth:`weight_precision`
        says; default: as shipped, the checkpoint's unconverted classes kept). Served at its native precision,
        every analysis then reads each class's own bytes and runs each operator on its own
        kernel (:meth:`weight_precision`)."""
        base = self.native_weight_precision if weights is None else weights
        kept = {c: self.weight_precision(c, base) for c in WEIGHT_CLASSES}
        kept.update(classes)
        by_class = tuple(sorted((c, p) for c, p in kept.items() if p is not base))
        stated = ", ".join(f"{c} {p.value}" for c, p in classes)
        note = f"{STATED_WEIGHTS_NOTE}{stated}; the rest {base.value}"
        notes = tuple(n for n in self.notes if not n.startswith(STATED_WEIGHTS_NOTE))
        return replace(
            self, native_weight_precision=base, weight_precision_by_class=by_class, notes=(*notes, note)
        )

    @property
    def stated_weight_classes(self) -> str:
        """The weights per class a deployment stated (:meth:`with_weight_precisions`), or ''."""
        for n in self.notes:
            if n.startswith(STATED_WEIGHTS_NOTE):
                return n.removeprefix(STATED_WEIGHTS_NOTE)
        return ""

    @property
    def weight_formats(self) -> dict[str, Precision]:
        """Every weight class's storage format as served at the native precision."""
        return {c: self.weight_precision(c) for c in WEIGHT_CLASSES}

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def num_moe_layers(self) -> int:
        return sum(layer.mlp is MlpKind.MOE for layer in self.layers)

    @property
    def num_dense_mlp_layers(self) -> int:
        return sum(layer.mlp is MlpKind.DENSE for layer in self.layers)

    def layer_attention(self, layer: LayerSpec) -> AttentionSpec:
        """The attention of one layer: its own, or the model's."""
        return layer.attention or self.attention

    @property
    def is_moe(self) -> bool:
        return self.moe is not None and self.num_moe_layers > 0
