"""Speculative decoding and MTP on a deployment: TPOT, tokens/s per user and per chip, cost.

The verification step is the deployment's own per-operator step on a decode load with
``k + 1`` tokens per sequence (:func:`rackmath.core.loads.decode_load`); the draft's
cost and the accounting are :mod:`rackmath.core.speculative`. Over a batch sweep the gain
``TPOT_plain / TPOT_spec`` falls as the step turns compute-bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.analyses.serving import pooled
from rackmath.analyses.serving.deployment import DecodeGrid, Deployment
from rackmath.analyses.serving.throughput import DecodeThroughput
from rackmath.core import loads
from rackmath.core import roofline as rl
from rackmath.core import speculative as spec
from rackmath.core.step import PlanStep
from rackmath.errors import InputError
from rackmath.specs import checks
from rackmath.specs.model import ModelSpec

FloatArray = NDArray[np.float64]

MAX_SPEC_DEPTH = spec.MAX_DEPTH


@dataclass(frozen=True)
class Speculation:
    """``depth`` draft tokens per step, accepted with per-position rates ``acceptance``;
    drafted by an MTP head (``draft is None``) or a separate ``draft`` model."""

    depth: int
    acceptance: tuple[float, ...]
    draft: ModelSpec | None = None

    @property
    def tokens_per_step(self) -> float:
        return spec.expected_tokens_per_step(self.acceptance)

    @property
    def label(self) -> str:
        rates = ",".join(f"{a:g}" for a in self.acceptance)
        who = f"draft {self.draft.id}" if self.draft is not None else "MTP head"
        return f"{who}, k = {self.depth}, acceptance {rates}"


def speculation(
    depth: object, acceptance: object, draft: ModelSpec | None = None, *, field: str = "--spec"
) -> Speculation:
    """Validate a speculation: ``1 <= depth <= MAX_DEPTH``; acceptance one rate in [0, 1]
    (every position) or one per position."""
    k = checks.whole(
        f"{field} depth k",
        depth,
        maximum=spec.MAX_DEPTH,
        allowed=f"a whole number of draft tokens from 1 to {spec.MAX_DEPTH}",
    )
    try:
        rates = np.atleast_1d(np.asarray(acceptance, float))
    except (TypeError, ValueError):
        raise InputError(
            f"{field} acceptance", acceptance, "rates in [0, 1], e.g. 0.8 or 0.8,0.6,0.5"
        ) from None
    if rates.size == 0 or np.any(~np.isfinite(rates)) or np.any((rates < 0) | (rates > 1)):
        raise InputError(
            f"{field} acceptance", acceptance, "rates in [0, 1] (the chance a draft token is kept), e.g. 0.8"
        )
    if rates.size not in (1, k):
        raise InputError(
            f"{field} acceptance",
            acceptance,
            f"one rate for every position or {k} rates, one per draft position",
        )
    per_position = spec.acceptance_by_position(rates, k)
    return Speculation(k, tuple(float(a) for a in per_position), draft)


def parse_speculation(text: str, resolve_model: Any) -> Speculation:
    """``"draft=MODEL,k=3,acceptance=0.7,0.6,0.5"`` or ``"mtp=1,acceptance=0.8"``.

    Numbers after ``acceptance=`` up to the next ``key=`` are its rates; ``resolve_model``
    turns the draft's id into a :class:`ModelSpec`."""
    fields: dict[str, list[str]] = {}
    key = None
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if "=" in part:
            key, value = (s.strip() for s in part.split("=", 1))
            fields[key] = [value]
        elif key == "acceptance":
            fields[key].append(part)
        else:
            raise InputError(
                "--spec", text, "key=value pairs: draft=MODEL or mtp=K, k=K, acceptance=A[,A...]"
            )
    unknown = set(fields) - {"draft", "k", "mtp", "acceptance"}
    if unknown:
        raise InputError("--spec", text, f"keys draft, k, mtp, acceptance (not {', '.join(sorted(unknown))})")
    if "acceptance" not in fields:
        raise InputError("--spec", text, "an acceptance rate, e.g. acceptance=0.8 or acceptance=0.8,0.6")
    depth_text = (fields.get("k") or fields.get("mtp") or ["1"])[0]
    try:
        depth: object = int(depth_text)
    except ValueError:
        depth = depth_text
    try:
        rates = [float(a) for a in fields["acceptance"]]
    except ValueError:
        raise InputError("--spec acceptance", ",".join(fields["acceptance"]), "numbers in [0, 1]") from None
    draft = resolve_model(fields["draft"][0]) if "draft" in fields else None
    return speculation(depth, rates, draft)


@dataclass(frozen=True)
class SpeculativeGrid(DecodeThroughput):
    """Speculative decoding over a batch x context grid beside the plain decode step.

    Each step takes ``verify_s + draft_s`` and yields ``tokens_per_step`` tokens per
    sequence on average."""

    deployment: Deployment
    speculation: Speculation
    batch: FloatArray
    context: FloatArray
    plain: DecodeGrid
    verify: PlanStep
    draft_s: FloatArray

    @property
    def tokens_per_step(self) -> float:
        return self.speculation.tokens_per_step

    @property
    def step_s(self) -> FloatArray:
        """Seconds per speculative step: verification plus drafting."""
        return np.asarray(self.verify.step_s + self.draft_s)

    @property
    def tpot_s(self) -> FloatArray:
        return spec.time_per_output_token_s(self.verify.step_s, self.draft_s, self.tokens_per_step)

    @property
    def tokens_per_s(self) -> FloatArray:
        return np.asarray(self.batch * self.tokens_per_step / self.step_s)

    @property
    def tokens_per_s_per_user(self) -> FloatArray:
        return np.asarray(1.0 / self.tpot_s)

    @property
    def usd_per_million_output_tokens(self) -> FloatArray:
        d = self.deployment
        return rl.usd_per_million_tokens(
            self.step_s, self.batch * self.tokens_per_step, d.chips, d.usd_per_chip_hour
        )

    @property
    def speedup(self) -> FloatArray:
        """``TPOT_plain / TPOT_spec``: above 1 speculation helps each user."""
        return np.asarray(self.plain.step_s / self.tpot_s)

    @property
    def fits(self) -> NDArray[np.bool_]:
        """The plain grid's memory check with the draft model's weights added (an MTP head's
        one layer is left out: under 1/L of the weights)."""
        d = self.deployment
        extra = 0.0
        if self.speculation.draft is not None:
            from rackmath.core import architecture as arch

            extra = arch.weight_bytes_total(self.speculation.draft, d.precisions.weights)
        needed = d.weight_bytes + extra + self.batch * self.plain.kv_bytes_per_sequence
        return np.asarray(needed <= d.chips * d.usable_bytes_per_chip)

    def break_even_batch(self, context_index: int = 0) -> float | None:
        """The smallest batch of the grid at which speculation no longer helps (None: it helps
        at every batch of the grid)."""
        worse = self.speedup[:, context_index] < 1.0
        if not worse.any():
            return None
        return float(self.batch[int(np.argmax(worse)), context_index])

    def to_dict(self) -> dict[str, Any]:
        s = self.speculation
        points = []
        for i in range(self.step_s.shape[0]):
            for j in range(self.step_s.shape[1]):
                points.append(
                    {
                        "batch": int(self.batch[i, j]),
                        "context": int(self.context[i, j]),
                        "verify_s": float(self.verify.step_s[i, j]),
                        "verify_bottleneck": str(self.verify.bottleneck[i, j]),
                        "draft_s": float(self.draft_s[i, j]),
                        "tpot_s": float(self.tpot_s[i, j]),
                        "plain_tpot_s": float(self.plain.step_s[i, j]),
                        "speedup": float(self.speedup[i, j]),
                        "tokens_per_s_per_user": float(self.tokens_per_s_per_user[i, j]),
                        "tokens_per_s_per_chip": float(self.tokens_per_s_per_chip[i, j]),
                        "usd_per_million_output_tokens": float(self.usd_per_million_output_tokens[i, j]),
                        "fits": bool(self.fits[i, j]),
                    }
                )
        even = self.break_even_batch()
        return {
            "draft": s.draft.id if s.draft is not None else "mtp",
            "depth": s.depth,
            "acceptance_by_position": list(s.acceptance),
            "reach_probability": [float(p) for p in spec.reach_probability(s.acceptance)],
            "tokens_per_step": self.tokens_per_step,
            "break_even_batch": even,
            "points": points,
        }


def speculative_decode(
    deployment: Deployment, batch: ArrayLike, context: ArrayLike, s: Speculation
) -> SpeculativeGrid:
    """Plain decode, the ``k + 1``-wide verification step and the draft's time over the grid."""
    d = deployment
    plain = d.decode(batch, context)
    b, c = plain.batch[:, :1], plain.context[:1, :]
    load = loads.decode_load(
        d.model, b, c, d.precisions.kv.bytes_per_element, tokens_per_sequence=s.depth + 1
    )
    verify = d.step(load)
    if s.draft is None:
        draft_s = spec.mtp_draft_s(plain.step_s, s.depth, d.model.num_layers)
    else:
        drafter = pooled.make_deployment(
            s.draft,
            d.system,
            chips=d.chips,
            kv=d.precisions.kv,
            compute=d.precisions.compute,
            usd_per_chip_hour=d.usd_per_chip_hour,
            efficiency=d.efficiency,
            memory_reserve_frac=d.memory_reserve_frac,
        )
        draft_s = s.depth * drafter.decode(b[:, 0], c[0]).step_s
    shape = plain.step_s.shape
    return SpeculativeGrid(
        deployment=d,
        speculation=s,
        batch=plain.batch,
        context=plain.context,
        plain=plain,
        verify=verify,
        draft_s=np.broadcast_to(np.asarray(draft_s, float), shape),
    )
