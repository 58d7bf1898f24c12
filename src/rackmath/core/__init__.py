"""Core math: pure, vectorized functions. No I/O, no printing, no catalog lookups."""

from rackmath.core import architecture, roofline
from rackmath.core.architecture import (
    ParamCounts,
    decode_flops_per_token,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    param_counts,
    prefill_flops_per_sequence,
)
from rackmath.core.roofline import (
    PURE_ROOFLINE,
    Efficiency,
    StepTimes,
    balance_batch,
    balance_batch_exact,
    dense_balance_batch,
    expected_distinct_experts,
    flop_per_byte,
    hbm_drain_time_s,
    latency_floor_s,
    max_batch,
    step_times,
    usd_per_million_tokens,
    utilization,
    weight_bytes_read,
)

__all__ = [
    "PURE_ROOFLINE",
    "Efficiency",
    "ParamCounts",
    "StepTimes",
    "architecture",
    "balance_batch",
    "balance_batch_exact",
    "decode_flops_per_token",
    "dense_balance_batch",
    "expected_distinct_experts",
    "flop_per_byte",
    "hbm_drain_time_s",
    "kv_bytes_per_sequence",
    "kv_bytes_per_token",
    "latency_floor_s",
    "max_batch",
    "param_counts",
    "prefill_flops_per_sequence",
    "roofline",
    "step_times",
    "usd_per_million_tokens",
    "utilization",
    "weight_bytes_read",
]
