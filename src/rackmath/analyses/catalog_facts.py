"""What a face shows about one catalog entry: a model's parameters and KV bytes per token, a
chip's ridge point and HBM drain time.

The faces that list or describe the catalog (``rackmath models``, ``rackmath hardware``,
``rackmath explain``) take these numbers from here instead of calling the core themselves;
each is computed by the one core formula it names:

- parameters: :func:`rackmath.core.architecture.param_counts` (Megatron-LM's eq. 2, extended);
- KV values per token per layer and KV bytes per token (every layer holding the token):
  :func:`rackmath.core.architecture.kv_elements_per_token_per_layer` and
  :func:`~rackmath.core.architecture.kv_bytes_per_token`; Llama-3.1-70B holds
  2 x 8 KV heads x 128 = 2,048 values per token per layer, x 80 layers x 2 B = 327,680 B in bf16;
- FLOPs of one decode token at a context: :func:`~rackmath.core.architecture.decode_flops_per_token`;
- ridge point F / BW (FLOP per byte read) and drain time capacity / BW:
  :func:`rackmath.core.roofline.flop_per_byte` and :func:`~rackmath.core.roofline.hbm_drain_time_s`;
  an H100 SXM (989e12 FLOP/s bf16, 3.35e12 B/s) has a ridge of 295 FLOP/byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rackmath.core import architecture as arch
from rackmath.core import roofline as rl
from rackmath.specs.hardware import ChipSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.precision import Precision


@dataclass(frozen=True)
class ModelFacts:
    """A model's size and the KV cache one token adds (all layers holding it)."""

    params_total: int
    params_active: int  # per token (MoE: the routed k of E experts, plus the shared ones)
    kv_values_per_token_per_layer: int
    kv_bytes_per_token: float  # at the KV precision asked for


def model_facts(m: ModelSpec, kv_bytes_per_element: float = Precision.BF16.bytes_per_element) -> ModelFacts:
    """The facts of ``m`` with its KV cache held at ``kv_bytes_per_element`` (bf16: 2 B)."""
    counts = arch.param_counts(m)
    return ModelFacts(
        params_total=counts.total,
        params_active=counts.active,
        kv_values_per_token_per_layer=arch.kv_elements_per_token_per_layer(m.attention),
        kv_bytes_per_token=arch.kv_bytes_per_token(m, kv_bytes_per_element),
    )


@dataclass(frozen=True)
class ChipFacts:
    """A chip's ridge point at bf16 (None where it has no bf16 peak) and its HBM drain time."""

    flop_per_byte_bf16: float | None
    hbm_drain_s: float


def chip_facts(c: ChipSpec) -> ChipFacts:
    """The ridge point F_bf16 / BW and the time to read the whole HBM once, capacity / BW."""
    bf16 = c.peak_flops_per_s.get(Precision.BF16)
    return ChipFacts(
        flop_per_byte_bf16=None
        if bf16 is None
        else float(rl.flop_per_byte(bf16, c.hbm_bandwidth_bytes_per_s)),
        hbm_drain_s=float(rl.hbm_drain_time_s(c.hbm_capacity_bytes, c.hbm_bandwidth_bytes_per_s)),
    )


def model_rows() -> list[dict[str, Any]]:
    """``rackmath models``: one row per catalog model (parameters, bf16 KV bytes per token,
    native weights, sources), in catalog order."""
    from rackmath.catalog.loader import models

    rows: list[dict[str, Any]] = []
    for m in models().values():
        facts = model_facts(m, Precision.BF16.bytes_per_element)
        rows.append(
            {
                "id": m.id,
                "aliases": list(m.aliases),
                "family": m.family,
                "attention": m.attention.kind.value,
                "layers": m.num_layers,
                "experts": f"{m.moe.experts_per_token}/{m.moe.num_experts}" if m.is_moe and m.moe else "",
                "params_total": facts.params_total,
                "params_active": facts.params_active,
                "kv_bytes_per_token_bf16": facts.kv_bytes_per_token,
                "native_weights": m.native_weight_precision.value,
                "source": list(m.source),
                "date": m.date,
            }
        )
    return rows


def hardware_dict() -> dict[str, list[dict[str, Any]]]:
    """``rackmath hardware --json``: every chip and system as the catalog states it (a system
    names its chip by id)."""
    from rackmath.catalog.loader import chips, systems

    return {
        "chips": [c.model_dump(mode="json") for c in chips().values()],
        "systems": [
            {**s.model_dump(mode="json", exclude={"chip"}), "chip": s.chip.id} for s in systems().values()
        ],
    }
