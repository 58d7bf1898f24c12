"""A published measurement as a scenario rackmath can predict (validated once, frozen).

A :class:`Scenario` states everything the cost model needs -- model, system, chips, plan,
precisions, batch (or maximum throughput), input and output lengths -- plus the published
``value`` already converted to SI for the whole deployment (the catalog file says how).
A :class:`UnsupportedRow` keeps a row the model cannot express yet, with the reason, so no
row is ever dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rackmath.errors import InputError
from rackmath.specs import checks
from rackmath.specs.plan import ParallelPlan
from rackmath.specs.precision import Precision


class Phase(StrEnum):
    """What the measurement times: a decode step, a prefill, a whole static batch, a
    continuously batched server at saturation, or a training step."""

    DECODE = "decode"
    PREFILL = "prefill"
    STATIC_BATCH = "static-batch"
    MAX_THROUGHPUT = "max-throughput"
    TRAINING = "training"


class Metric(StrEnum):
    """The published quantity, in SI (the suffix is the unit)."""

    DECODE_TOKENS_PER_S_PER_USER = "decode_tokens_per_s_per_user"
    DECODE_STEP_S = "decode_step_s"
    TTFT_S = "ttft_s"
    OUTPUT_TOKENS_PER_S = "output_tokens_per_s"
    INPUT_TOKENS_PER_S = "input_tokens_per_s"
    PREFILL_MFU = "prefill_mfu"
    TRAINING_MFU = "training_mfu"
    TRAINING_STEP_S = "training_step_s"
    TRAINING_HFU_FLOPS_PER_S_PER_CHIP = "training_hfu_flops_per_s_per_chip"


class KvMemoryOf(StrEnum):
    """What a KV-memory fraction is a fraction of: the memory left after the weights
    (TensorRT-LLM's ``kv_cache_free_gpu_mem_fraction``) or the whole HBM (vLLM's
    ``gpu_memory_utilization``)."""

    FREE = "free"
    TOTAL = "total"


#: TensorRT-LLM's default ``kv_cache_free_gpu_mem_fraction`` (0.9 of the memory left after
#: weights and activations; TensorRT-LLM docs, "KV cache memory").
DEFAULT_KV_MEMORY_FRAC = 0.9


@dataclass(frozen=True)
class Provenance:
    """Where a row comes from, verbatim from the reference table."""

    row_id: int
    source: str
    source_key: str  # the publishing document; calibration leaves one key out at a time
    source_section: str
    url: str
    quote: str
    confidence: str
    notes: str


@dataclass(frozen=True)
class Scenario:
    """One published measurement, stated so the cost model can predict it."""

    provenance: Provenance
    phase: Phase
    metric: Metric
    value: float  # SI, for the whole deployment (see ``conversion``)
    unit: str
    conversion: str
    # serving rows
    model_id: str = ""
    system_id: str = ""
    chips: int = 0
    plan: ParallelPlan | None = None  # None: the chips act as one ideal chip (see plan_note)
    plan_note: str = ""
    weights: Precision | None = None
    kv: Precision | None = None
    compute: Precision | None = None
    #: weights per tensor class where the deployment states them (NVFP4 experts beside FP8
    #: attention), the other classes in ``weights``
    #: (:meth:`rackmath.specs.model.ModelSpec.with_weight_precisions`); empty: none stated
    weight_classes: tuple[tuple[str, Precision], ...] = ()
    batch: int | None = None  # None: maximum throughput (KV memory and scheduler decide)
    max_batch: int | None = None  # the scheduler's cap, where the source states one
    input_tokens: int = 0
    output_tokens: int = 0
    kv_memory_frac: float = DEFAULT_KV_MEMORY_FRAC
    kv_memory_of: KvMemoryOf = KvMemoryOf.FREE
    #: The source states that the serving stack overlaps communication with computation by
    #: splitting each batch in two (SGLang/DeepSeek "two-batch overlap"); how much it hides
    #: is a fitted parameter (``FamilyParams.two_batch_overlap_frac``), not a per-row factor.
    two_batch_overlap: bool = False
    #: The engine's generation attention reads each KV head once per query head of its group
    #: (no GQA sharing: TensorRT-LLM's masked-MHA kernel before its "MMHA optimization for MQA and
    #: GQA", release of 2023-12-01): a decode step's KV reads are ``heads / kv_heads`` times the
    #: cache. A statement about the engine the row ran, never a fitted factor.
    kv_read_per_query_head: bool = False
    #: the engine's all-reduce: ``auto`` (custom or NCCL, whichever is faster) or ``nccl``
    all_reduce: str = "auto"
    # training rows
    training_run: str = ""

    def __post_init__(self) -> None:
        checks.positive(f"row {self.provenance.row_id} value", self.value, allowed="a positive number")
        if self.phase is Phase.TRAINING:
            if not self.training_run:
                raise InputError(f"row {self.provenance.row_id} training_run", "", "a training_runs.yaml id")
            return
        if not (self.model_id and self.system_id and self.chips >= 1):
            raise InputError(f"row {self.provenance.row_id}", self.model_id, "model, system and chips >= 1")
        if self.plan is not None and self.plan.chips != self.chips:
            raise InputError(f"row {self.provenance.row_id} plan", str(self.plan), f"{self.chips} chips")
        if self.input_tokens < 1 or self.output_tokens < 1:
            raise InputError(f"row {self.provenance.row_id} lengths", self.input_tokens, "tokens >= 1")
        if (self.batch is None) != (self.phase is Phase.MAX_THROUGHPUT):
            raise InputError(
                f"row {self.provenance.row_id} batch", self.batch, "null exactly for max-throughput"
            )
        checks.fraction(
            f"row {self.provenance.row_id} kv_memory_frac", self.kv_memory_frac, zero=False, allowed="(0, 1]"
        )

    @property
    def row_id(self) -> int:
        return self.provenance.row_id

    @property
    def source_key(self) -> str:
        return self.provenance.source_key


@dataclass(frozen=True)
class UnsupportedRow:
    """A published row the model cannot express yet, and why."""

    provenance: Provenance
    metric: str
    value: str
    unit: str
    reason: str

    @property
    def row_id(self) -> int:
        return self.provenance.row_id
