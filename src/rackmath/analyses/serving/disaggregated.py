"""Disaggregated serving (prefill and decode pools) and its alternative, mixed batches.

Both answer with a :class:`ServingPoint` (TTFT, TPOT, throughput, cost, concurrency), so
the two designs compare field by field.

* Disaggregated: a prefill pool runs prompts under its own plan; each prompt's KV cache
  crosses the scale-out network to the decode pool
  (:func:`~rackmath.core.network.kv_transfer_s`); TTFT = prefill pass + KV transfer,
  TPOT = the decode pool's step. Prefill replicas per decode replica are sized so the
  pools keep pace: ``(B_dec / (TPOT O)) / (B_pre / t_pre)``.
* Mixed (chunked prefill): one pool whose steps carry both
  (:func:`~rackmath.core.loads.mixed_load`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rackmath.analyses.serving.deployment import Deployment
from rackmath.analyses.serving.planned import topology
from rackmath.core import loads, rack_rules
from rackmath.core import network as net
from rackmath.core import roofline as rl
from rackmath.errors import InputError
from rackmath.specs import checks


@dataclass(frozen=True)
class ServingPoint:
    """One serving design at one batch (SI units; tokens are output tokens)."""

    design: str  # "disaggregated" or "mixed"
    batch: int
    ttft_s: float
    tpot_s: float
    tokens_per_s: float  # per unit (one decode replica and its share of prefill)
    chips: float  # chips per unit (fractional prefill share included)
    usd_per_million_output_tokens: float
    max_concurrency: int
    fits: bool
    kv_transfer_s: float = 0.0
    prefill_replicas_per_decode_replica: float = 0.0

    @property
    def tokens_per_s_per_chip(self) -> float:
        return self.tokens_per_s / self.chips

    @property
    def tokens_per_s_per_user(self) -> float:
        return 1.0 / self.tpot_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "design": self.design,
            "batch": self.batch,
            "ttft_s": self.ttft_s,
            "tpot_s": self.tpot_s,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_chip": self.tokens_per_s_per_chip,
            "tokens_per_s_per_user": self.tokens_per_s_per_user,
            "chips": self.chips,
            "usd_per_million_output_tokens": self.usd_per_million_output_tokens,
            "max_concurrency": self.max_concurrency,
            "fits": self.fits,
            "kv_transfer_s": self.kv_transfer_s,
            "prefill_replicas_per_decode_replica": self.prefill_replicas_per_decode_replica,
        }


def _check_lengths(input_len: int, output_len: int) -> None:
    for name, value in (("input length", input_len), ("output length", output_len)):
        checks.whole(name, value, allowed="a whole number of tokens >= 1")


def _batch(
    dep: Deployment, batch: int | None, context: float, tokens_per_sequence: float = 1.0
) -> tuple[int, int]:
    limit = int(dep.max_concurrency(context, tokens_per_sequence))
    if batch is None:
        if limit < 1:
            raise InputError("batch", 0, f"a batch that fits: no sequence of {context:,.0f} tokens fits")
        return limit, limit
    return checks.whole("batch", batch), limit


def mixed(dep: Deployment, input_len: int, output_len: int, batch: int | None = None) -> ServingPoint:
    """One pool with chunked prefill; ``batch`` defaults to the most that fits in KV memory."""
    _check_lengths(input_len, output_len)
    context = input_len + output_len
    b, limit = _batch(dep, batch, context, 1.0 + input_len / output_len)
    load = loads.mixed_load(dep.model, float(b), input_len, output_len, dep.kv_bytes_per_element)
    step = float(dep.step(load, decode=True).step_s)
    rate = b / step
    return ServingPoint(
        design="mixed",
        batch=b,
        ttft_s=float(rack_rules.chunked_prefill_ttft_s(step, b, output_len)),
        tpot_s=step,
        tokens_per_s=rate,
        chips=float(dep.chips),
        usd_per_million_output_tokens=float(
            rl.usd_per_million_tokens(step, b, dep.chips, dep.usd_per_chip_hour)
        ),
        max_concurrency=limit,
        fits=bool(dep.memory(b, context, tokens_in_flight=load.tokens).fits),
    )


def disaggregated(
    prefill: Deployment,
    decode: Deployment,
    input_len: int,
    output_len: int,
    *,
    decode_batch: int | None = None,
    prefill_batch: int | None = None,
) -> ServingPoint:
    """Prefill pool + KV transfer + decode pool, sized to keep pace with each other.

    ``prefill_batch`` prompts per prefill pass (default: one per attention replica, ``dp``).
    """
    _check_lengths(input_len, output_len)
    if prefill_batch is None:
        prefill_batch = prefill.plan.dp
    checks.whole("prefill batch", prefill_batch)
    if prefill.model.id != decode.model.id:
        raise InputError("pools", f"{prefill.model.id} / {decode.model.id}", "the same model in both pools")
    context = input_len + output_len
    b, limit = _batch(decode, decode_batch, context)
    pre = prefill.prefill([prefill_batch], [input_len])
    t_pre = float(pre.step_s[0, 0])
    kv_seq = float(prefill.kv_bytes_per_sequence(input_len))
    links = min(prefill.chips, decode.chips)
    t_kv = float(net.kv_transfer_s(kv_seq, links, topology(decode.system)))
    tpot = float(decode.decode([b], [input_len + output_len / 2]).step_s[0, 0])
    rate = b / tpot
    prompts_needed_per_s = rate / output_len
    prompts_per_s_per_prefill_replica = prefill_batch / t_pre
    ratio = prompts_needed_per_s / prompts_per_s_per_prefill_replica
    chips = decode.chips + ratio * prefill.chips
    # each output token pays one decode step of the decode pool and its share of prefill
    usd_per_million = rl.usd_per_million_tokens(
        tpot, b, decode.chips, decode.usd_per_chip_hour
    ) + rl.usd_per_million_tokens(tpot, b, ratio * prefill.chips, prefill.usd_per_chip_hour)
    fits = bool(decode.memory(b, context).fits) and bool(np.all(pre.fits))
    return ServingPoint(
        design="disaggregated",
        batch=b,
        ttft_s=t_pre + t_kv,
        tpot_s=tpot,
        tokens_per_s=rate,
        chips=chips,
        usd_per_million_output_tokens=float(usd_per_million),
        max_concurrency=limit,
        fits=fits,
        kv_transfer_s=t_kv,
        prefill_replicas_per_decode_replica=ratio,
    )
