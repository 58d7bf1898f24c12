"""Training frameworks as frozen specs: the defaults a framework runs the same math with.

A published training number is what its framework reached: Megatron-core's CLI leaves the
data-parallel overlap off, Megatron-Bridge's recipes turn it on, torchtitan shards every block
with FSDP2 and runs eager unless compiled, MaxText leaves overlap to XLA and rematerialises
everything by default, llm-foundry runs FSDP FULL_SHARD with activation checkpointing. A
:class:`TrainingFramework` holds those defaults, each with the file and line it was read from
(``catalog/data/training_frameworks.yaml``); a run states its framework and any setting it
changes (:meth:`TrainingFramework.with_settings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from rackmath.errors import InputError

#: rackmath's memory accounts a framework policy's activations are counted under
#: (:class:`rackmath.core.training.Recompute`).
MEMORY_MODES = ("none", "selective", "full", "sqrt", "reversible")
#: How context parallelism exchanges keys and values: a ring of sends overlapped with the
#: attention blocks (``p2p``), an all-gather of K and V (``all_gather``), or all-to-alls of
#: Q, K, V and the output over heads (``a2a``, Ulysses).
CP_COMM_TYPES = ("p2p", "all_gather", "a2a")
#: When pipeline sends overlap compute: never, only with virtual stages (Megatron-core forces
#: the overlap off without them), or always.
P2P_OVERLAP = ("never", "with_virtual_stages", "always")
#: Transformer Engine's names of the GEMMs a TP collective overlaps with (``initialize_ub``):
#: the row-parallel forwards reduce-scatter their output (``proj_fprop``, ``fc2_fprop``), the
#: column-parallel backwards all-gather their input and reduce-scatter its gradient in bulk
#: (``qkv_dgrad``, ``qkv_wgrad``, ``fc1_dgrad``, ``fc1_wgrad``).
TP_OVERLAP_GEMMS = ("proj_fprop", "fc2_fprop", "qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")
#: The attention kernel a framework runs: the chip's fitted prefill-attention curve,
#: FlashAttention-2 (PyTorch SDPA's flash backend, the flash_attn package's v2 kernels), or
#: cuDNN's fused attention (Transformer Engine's FusedAttention) on its measured training tables.
ATTENTION_KERNELS = ("fitted", "flash-attention-2", "cudnn-fused")
#: The expert dispatcher: the chip's fitted DeepEP / NCCL curves, or HybridEP at its
#: measured bandwidth (Megatron's flex dispatcher with ``moe_flex_dispatcher_backend hybridep``).
EP_DISPATCHERS = ("fitted", "hybridep")
#: Settings a run may change (:meth:`TrainingFramework.with_settings`).
SETTINGS = (
    "dp_grad_overlap",
    "dp_param_gather_overlap",
    "bucket_params",
    "tp_comm_overlap",
    "ep_comm_overlap",
    "p2p_overlap",
    "cp_comm",
    "fused_cross_entropy",
    "fused_elementwise",
    "fp8_attention",
    "tp_overlap_margin_sms",
    "fused_grouped_mlp",
    "attention_kernel",
    "ep_dispatcher",
    "fp8_split_accumulation",
)


@dataclass(frozen=True)
class RecomputePolicy:
    """A framework's recomputation policy under its own name: which shares of each forward it
    re-runs (attention core, GEMMs, element-wise passes) and which memory account holds its
    activations."""

    name: str
    memory: str
    attention: float
    gemm: float
    elementwise: float
    source: str = ""

    def __post_init__(self) -> None:
        if self.memory not in MEMORY_MODES:
            raise ValueError(f"recompute policy {self.name!r}: memory {self.memory!r} not in {MEMORY_MODES}")
        for share in (self.attention, self.gemm, self.elementwise):
            if not 0.0 <= share <= 1.0:
                raise ValueError(f"recompute policy {self.name!r}: shares must lie in [0, 1]")


@dataclass(frozen=True)
class TrainingFramework:
    """A training framework's defaults (see the module docstring); ``sources`` names the file and
    line of each setting."""

    id: str
    name: str
    version: str
    date: str
    #: data-parallel gradient reduce overlapped with the backward, bucket by bucket
    dp_grad_overlap: bool
    #: the distributed optimizer's (or FSDP's) parameter all-gather overlapped with the forward
    dp_param_gather_overlap: bool
    #: parameters per data-parallel bucket: ``max(bucket_params, bucket_params_per_dp_rank x dp)``;
    #: 0 = one bucket per transformer block (FSDP wrapping)
    bucket_params: float
    bucket_params_per_dp_rank: float
    #: tensor-parallel all-gathers and reduce-scatters overlapped with their GEMMs
    tp_comm_overlap: bool
    #: the expert all-to-all overlapped with another micro-batch's compute
    ep_comm_overlap: bool
    p2p_overlap: str
    cp_comm: str
    recompute: tuple[RecomputePolicy, ...]
    default_recompute: str
    #: the cross-entropy loss fused into one pass over the logits
    fused_cross_entropy: bool
    #: the activation, residual and rotary kernels fused (bias-activation and RoPE fusions,
    #: ``torch.compile``, XLA)
    fused_elementwise: bool
    #: the framework's GEMM recipe names, mapped to rackmath's (float8 rowwise -> fp8-block)
    gemm_recipes: Mapping[str, str] = field(default_factory=dict)
    #: the ZeRO stage data parallelism runs at unless the run states one (FSDP: 3)
    default_zero: int = 1
    #: the attention core in FP8 when the GEMMs are (Transformer Engine's FP8 dot-product
    #: attention: Megatron's and Bridge's ``fp8_dot_product_attention``, default off)
    fp8_attention: bool = False
    #: SMs each overlapped TP collective keeps from its GEMM (``set_sm_margin``), by Transformer
    #: Engine's GEMM name (:data:`TP_OVERLAP_GEMMS`); those absent keep none
    tp_overlap_margin_sms: Mapping[str, int] = field(default_factory=dict)
    #: the routed experts as one fused grouped MLP (Transformer Engine's op fuser with
    #: ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1``: FC1's grouped GEMM with the GLU in its epilogue;
    #: SM100-class chips under an MXFP8 or NVFP4 recipe)
    fused_grouped_mlp: bool = False
    #: the norm before a dense block's QKV and first MLP projections quantises its own output
    #: (Transformer Engine's ``LayerNormLinear``; :func:`rackmath.core.training_step.cast_bytes`)
    fused_norm_quantize: bool = False
    #: the attention kernel it runs (:data:`ATTENTION_KERNELS`; ``fitted``: the chip's curve)
    attention_kernel: str = "fitted"
    #: the expert dispatcher (:data:`EP_DISPATCHERS`; ``fitted``: the chip's curves)
    ep_dispatcher: str = "fitted"
    #: per-tensor FP8's backward GEMMs (dgrad, wgrad) ask for split (full-precision)
    #: accumulation, which Hopper charges (``training_kernels.yaml`` ``fp8_split_accumulation``):
    #: Transformer Engine's recipes and torchao's float8 by default
    fp8_split_accumulation: bool = False
    sources: Mapping[str, str] = field(default_factory=dict)
    notes: str = ""
    #: settings a run changed from the framework's defaults (``with_settings``)
    changed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.p2p_overlap not in P2P_OVERLAP:
            raise ValueError(f"{self.id}: p2p_overlap {self.p2p_overlap!r} not in {P2P_OVERLAP}")
        if self.ep_dispatcher not in EP_DISPATCHERS:
            raise ValueError(f"{self.id}: ep_dispatcher {self.ep_dispatcher!r} not in {EP_DISPATCHERS}")
        if self.attention_kernel not in ATTENTION_KERNELS:
            raise ValueError(
                f"{self.id}: attention_kernel {self.attention_kernel!r} not in {ATTENTION_KERNELS}"
            )
        if self.cp_comm not in CP_COMM_TYPES:
            raise ValueError(f"{self.id}: cp_comm {self.cp_comm!r} not in {CP_COMM_TYPES}")
        if self.default_recompute not in self.recompute_names:
            raise ValueError(
                f"{self.id}: default_recompute {self.default_recompute!r} is not one of its policies"
            )

    @property
    def recompute_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.recompute)

    def policy(self, name: str | None) -> RecomputePolicy:
        """The recompute policy ``name`` (the framework's default for None); a name the
        framework lacks is one line naming the field and the framework's own names."""
        key = self.default_recompute if name is None else str(name).strip().lower()
        for p in self.recompute:
            if p.name == key:
                return p
        raise InputError("recompute", name, f"one of {self.id}'s policies: {', '.join(self.recompute_names)}")

    def gemm_recipe(self, name: str) -> str:
        """rackmath's GEMM recipe for the framework's name (the name itself when it has none)."""
        return self.gemm_recipes.get(str(name).strip().lower(), str(name))

    def bucket_params_for(self, dp: int) -> float | None:
        """Parameters per data-parallel bucket at ``dp`` ranks; None for one per block."""
        if self.bucket_params <= 0:
            return None
        return max(self.bucket_params, self.bucket_params_per_dp_rank * dp)

    def with_settings(self, settings: Mapping[str, Any]) -> TrainingFramework:
        """The framework with a run's stated settings (``tp_comm_overlap: true``, ...); an unknown
        setting or value is one line naming it and what would work."""
        if not settings:
            return self
        kw: dict[str, Any] = {}
        for key, value in settings.items():
            if key not in SETTINGS:
                raise InputError("framework setting", key, f"one of {', '.join(SETTINGS)}")
            if key == "p2p_overlap" and value not in P2P_OVERLAP:
                raise InputError("p2p_overlap", value, f"one of {', '.join(P2P_OVERLAP)}")
            if key == "ep_dispatcher" and value not in EP_DISPATCHERS:
                raise InputError("ep_dispatcher", value, f"one of {', '.join(EP_DISPATCHERS)}")
            if key == "attention_kernel" and value not in ATTENTION_KERNELS:
                raise InputError("attention_kernel", value, f"one of {', '.join(ATTENTION_KERNELS)}")
            if key == "cp_comm" and value not in CP_COMM_TYPES:
                raise InputError("cp_comm", value, f"one of {', '.join(CP_COMM_TYPES)}")
            if key == "tp_overlap_margin_sms":
                if not isinstance(value, Mapping) or not all(
                    k in TP_OVERLAP_GEMMS and isinstance(n, int) and n >= 0 for k, n in value.items()
                ):
                    raise InputError(
                        "tp_overlap_margin_sms",
                        value,
                        f"a mapping of {', '.join(TP_OVERLAP_GEMMS)} to whole numbers of SMs >= 0",
                    )
                kw[key] = dict(value)
                continue
            if key == "bucket_params":
                kw["bucket_params"] = float(value)
                kw["bucket_params_per_dp_rank"] = 0.0
                continue
            kw[key] = value
        changed = tuple(sorted({*self.changed, *settings}))
        return replace(self, changed=changed, **kw)

    @property
    def label(self) -> str:
        """``megatron-bridge 26.08`` (+ the settings a run changed)."""
        tail = f" (run sets {', '.join(self.changed)})" if self.changed else ""
        return f"{self.id} {self.version}{tail}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "version": self.version,
            "dp_grad_overlap": self.dp_grad_overlap,
            "dp_param_gather_overlap": self.dp_param_gather_overlap,
            "bucket_params": self.bucket_params,
            "bucket_params_per_dp_rank": self.bucket_params_per_dp_rank,
            "tp_comm_overlap": self.tp_comm_overlap,
            "ep_comm_overlap": self.ep_comm_overlap,
            "fp8_attention": self.fp8_attention,
            "tp_overlap_margin_sms": dict(self.tp_overlap_margin_sms),
            "fused_grouped_mlp": self.fused_grouped_mlp,
            "fused_norm_quantize": self.fused_norm_quantize,
            "attention_kernel": self.attention_kernel,
            "ep_dispatcher": self.ep_dispatcher,
            "fp8_split_accumulation": self.fp8_split_accumulation,
            "p2p_overlap": self.p2p_overlap,
            "cp_comm": self.cp_comm,
            "recompute_policies": list(self.recompute_names),
            "fused_cross_entropy": self.fused_cross_entropy,
            "fused_elementwise": self.fused_elementwise,
            "changed_by_run": list(self.changed),
        }
