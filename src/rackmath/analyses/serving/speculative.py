"""Speculative decoding and MTP on a deployment: TPOT, tokens/s per user and per chip, cost.

The verify step is the deployment's own per-operator step on a decode load with ``T``
tokens per sequence (:func:`rackmath.core.loads.decode_load`; ``T = k + 1`` for a chain,
``1 + w k`` for a tree of width ``w``): on the ideal chip for a pooled
:class:`~rackmath.analyses.serving.deployment.Deployment`, on the plan's step (TP, EP and DP
communication, pipeline hops, per-chip memory) for a planned one. The draft's cost and the
accounting are :mod:`rackmath.core.speculative`:

    speedup = E[tokens per step] x t_plain / (t_verify + t_draft)

Over a batch sweep the gain falls as the step turns compute-bound; at long context it
falls where attention is bound by its FLOPs (MLA's absorbed attention), which the ``T``
queries multiply, and holds where attention is bound by the KV read, which they share.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.analyses.serving import pooled
from rackmath.analyses.serving.deployment import DecodeGrid, Deployment
from rackmath.analyses.serving.throughput import DecodeThroughput
from rackmath.core import architecture as arch
from rackmath.core import loads
from rackmath.core import speculative as spec
from rackmath.core.step import PlanStep
from rackmath.errors import InputError
from rackmath.specs import checks
from rackmath.specs.model import ModelSpec

FloatArray = NDArray[np.float64]

MAX_SPEC_DEPTH = spec.MAX_DEPTH
#: Widest tree considered: EAGLE's reference tree verifies 60 tokens with top-10 expansion;
#: beyond 16 candidates per position the verify step only grows.
MAX_TREE_WIDTH = 16


class Drafter(StrEnum):
    """What proposes the drafts, and so what a step's drafting costs
    (:mod:`rackmath.core.speculative`): an MTP module or an EAGLE head (one layer of the
    target each), a separate draft model, or n-gram prompt lookup (no model work)."""

    MTP = "mtp"
    EAGLE = "eagle"
    MODEL = "draft"
    NGRAM = "ngram"


@dataclass(frozen=True)
class Speculation:
    """``depth`` draft positions per step, each kept with the one-candidate conditional rate
    ``acceptance[i]``; ``width`` candidates per position (1: a chain) drafted by ``drafter``
    (a separate ``draft`` model for :attr:`Drafter.MODEL`). ``given``: how the acceptance
    was stated (rates, a reach curve or acceptance lengths), for the report."""

    depth: int
    acceptance: tuple[float, ...]
    draft: ModelSpec | None = None
    drafter: Drafter | None = None  # None: a draft model when ``draft`` is given, else MTP
    width: int = 1
    given: str = ""

    @property
    def kind(self) -> Drafter:
        if self.drafter is not None:
            return self.drafter
        return Drafter.MODEL if self.draft is not None else Drafter.MTP

    @property
    def rates(self) -> FloatArray:
        """Per-position rates of the tree (the chain's when ``width = 1``)."""
        return spec.tree_acceptance(self.acceptance, self.width)

    @property
    def tokens_per_step(self) -> float:
        return spec.expected_tokens_per_step(self.rates)

    @property
    def tokens_verified(self) -> int:
        return spec.tokens_verified_per_step(self.width, self.depth)

    @property
    def label(self) -> str:
        rates = ",".join(f"{a:.3g}" for a in self.acceptance)
        who = {
            Drafter.MODEL: f"draft {self.draft.id if self.draft else ''}",
            Drafter.MTP: "MTP head",
            Drafter.EAGLE: "EAGLE head",
            Drafter.NGRAM: "n-gram lookup",
        }[self.kind]
        shape = f"k = {self.depth}" + (f", tree width {self.width}" if self.width > 1 else "")
        return f"{who}, {shape}, acceptance {rates}"


def _rates(field: str, values: object, allowed: str) -> FloatArray:
    try:
        x = np.atleast_1d(np.asarray(values, float)).ravel()
    except (TypeError, ValueError):
        raise InputError(field, values, allowed) from None
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise InputError(field, values, allowed)
    return x


def speculation(
    depth: object,
    acceptance: object = None,
    draft: ModelSpec | None = None,
    *,
    reach: object = None,
    lengths: object = None,
    width: object = 1,
    drafter: Drafter | str | None = None,
    field: str = "--spec",
) -> Speculation:
    """Validate a speculation: ``1 <= depth <= MAX_DEPTH``, ``1 <= width <= MAX_TREE_WIDTH``
    and exactly one acceptance form:

    * ``acceptance``: conditional rates in [0, 1], one for every position or one per position;
    * ``reach``: the chance of keeping draft ``i``, one per position, in [0, 1] and never
      rising (a later draft is kept only if the ones before it were);
    * ``lengths``: the mean acceptance length (tokens a step, >= 1) of a chain of ``1..k``
      drafts, each at most one above the one before and rising by no more than it did before;
      or one length at ``k`` (a constant rate is solved for it).
    """
    k = checks.whole(
        f"{field} depth k",
        depth,
        maximum=spec.MAX_DEPTH,
        allowed=f"a whole number of draft tokens from 1 to {spec.MAX_DEPTH}",
    )
    w = checks.whole(
        f"{field} width",
        width,
        maximum=MAX_TREE_WIDTH,
        allowed=f"candidates per draft position from 1 (a chain) to {MAX_TREE_WIDTH}",
    )
    try:
        kind = None if drafter is None else Drafter(drafter)
    except ValueError:
        raise InputError(f"{field} drafter", drafter, ", ".join(d.value for d in Drafter)) from None
    forms = {"acceptance": acceptance, "reach": reach, "length": lengths}
    stated = [name for name, v in forms.items() if v is not None]
    if len(stated) != 1:
        raise InputError(
            f"{field} acceptance",
            ", ".join(stated) or "none",
            "one of acceptance=A[,A...] (rates), reach=P1,...,Pk or length=TAU[,...]",
        )
    if acceptance is not None:
        allowed = "rates in [0, 1] (the chance a draft token is kept), e.g. 0.8 or 0.8,0.6,0.5"
        rates = _rates(f"{field} acceptance", acceptance, allowed)
        if np.any((rates < 0) | (rates > 1)):
            raise InputError(f"{field} acceptance", acceptance, allowed)
        if rates.size not in (1, k):
            raise InputError(
                f"{field} acceptance",
                acceptance,
                f"one rate for every position or {k} rates, one per draft position",
            )
        per_position = spec.acceptance_by_position(rates, k)
        given = "rates " + ",".join(f"{a:g}" for a in rates)
    elif reach is not None:
        allowed = (
            f"{k} chances of keeping draft 1..{k}, in [0, 1] and never rising "
            "(draft i is kept only if draft i-1 was), e.g. 0.8,0.48,0.24"
        )
        p = _rates(f"{field} reach", reach, allowed)
        if p.size != k or np.any((p < 0) | (p > 1)) or np.any(np.diff(p) > 0):
            raise InputError(f"{field} reach", reach, allowed)
        per_position = spec.acceptance_from_reach(p)
        given = "reach " + ",".join(f"{x:g}" for x in p)
    else:
        allowed = (
            f"mean tokens a step of a chain of 1..{k} drafts (or one at k = {k}), each in "
            "[1, k + 1] and rising by at most 1 and by no more than the step before, e.g. 1.8,2.28,2.52"
        )
        tau = _rates(f"{field} length", lengths, allowed)
        if tau.size == 1:
            if not 1.0 <= tau[0] <= k + 1:
                raise InputError(f"{field} length", lengths, allowed)
            per_position = np.full(k, spec.constant_rate_for_length(float(tau[0]), k))
            given = f"length {tau[0]:g} at k = {k}"
        else:
            p = spec.reach_from_lengths(tau)
            if tau.size != k or np.any((p < 0) | (p > 1)) or np.any(np.diff(p) > 0):
                raise InputError(f"{field} length", lengths, allowed)
            per_position = spec.acceptance_from_reach(p)
            given = "lengths " + ",".join(f"{x:g}" for x in tau)
    if kind is Drafter.MODEL and draft is None:
        raise InputError(f"{field} draft", None, "a draft model's id, e.g. draft=llama-3.1-8b")
    return Speculation(k, tuple(float(a) for a in per_position), draft, kind, w, given)


_DRAFTER_KEYS = {"mtp": Drafter.MTP, "eagle": Drafter.EAGLE, "ngram": Drafter.NGRAM}
_LIST_KEYS = ("acceptance", "reach", "length")


def parse_speculation(text: str, resolve_model: Any) -> Speculation:
    """``"draft=MODEL,k=3,acceptance=0.7,0.6,0.5"``, ``"mtp=1,acceptance=0.85"``,
    ``"eagle=5,width=4,reach=0.7,0.5,0.35,0.25,0.18"``, ``"mtp=7,length=3.2"`` or
    ``"ngram=4,acceptance=0.5"``.

    Numbers after ``acceptance=``, ``reach=`` or ``length=`` up to the next ``key=`` are its
    values; ``resolve_model`` turns the draft's id into a :class:`ModelSpec`."""
    fields: dict[str, list[str]] = {}
    key = None
    usage = (
        "key=value pairs: draft=MODEL or mtp|eagle|ngram=K, k=K, width=W, acceptance|reach|length=X[,X...]"
    )
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if "=" in part:
            key, value = (s.strip() for s in part.split("=", 1))
            fields[key] = [value]
        elif key in _LIST_KEYS:
            fields[key].append(part)
        else:
            raise InputError("--spec", text, usage)
    known = {"draft", "k", "width", *_DRAFTER_KEYS, *_LIST_KEYS}
    unknown = set(fields) - known
    if unknown:
        raise InputError(
            "--spec", text, f"keys {', '.join(sorted(known))} (not {', '.join(sorted(unknown))})"
        )
    if not any(k in fields for k in _LIST_KEYS):
        raise InputError("--spec", text, "an acceptance, e.g. acceptance=0.8, reach=0.8,0.5 or length=2.4")
    named = [k for k in ("draft", *_DRAFTER_KEYS) if k in fields]
    if len(named) > 1:
        raise InputError("--spec", text, "one drafter: draft=MODEL, mtp=K, eagle=K or ngram=K")
    drafter = _DRAFTER_KEYS.get(named[0]) if named and named[0] != "draft" else None
    depth_text = (fields.get("k") or (fields.get(named[0]) if drafter else None) or ["1"])[0]

    def whole(text_: str) -> object:
        try:
            return int(text_)
        except ValueError:
            return text_

    values: dict[str, list[float]] = {}
    for name in _LIST_KEYS:
        if name in fields:
            try:
                values[name] = [float(a) for a in fields[name]]
            except ValueError:
                raise InputError(f"--spec {name}", ",".join(fields[name]), "numbers, e.g. 0.8,0.6") from None
    draft = resolve_model(fields["draft"][0]) if "draft" in fields else None
    return speculation(
        whole(depth_text),
        values.get("acceptance"),
        draft,
        reach=values.get("reach"),
        lengths=values.get("length"),
        width=whole(fields.get("width", ["1"])[0]),
        drafter=Drafter.MODEL if draft is not None else drafter,
    )


def from_options(
    spec_text: str | None, mtp: int | None, acceptance: float | Any | None
) -> Speculation | None:
    """The speculation ``explain``'s options ask for: ``--spec draft=MODEL,k=..,acceptance=..``
    (a draft model resolved from the catalog), or an MTP head (``--mtp K --acceptance A``, the
    two together), or none."""
    if spec_text is not None:
        from rackmath.catalog.loader import resolve_model

        return parse_speculation(spec_text, resolve_model)
    if mtp is None and acceptance is None:
        return None
    if mtp is None or acceptance is None:
        raise InputError(
            "--mtp/--acceptance", f"mtp={mtp}, acceptance={acceptance}", "both, e.g. --mtp 1 --acceptance 0.8"
        )
    return speculation(mtp, acceptance, field="--mtp")


@dataclass(frozen=True)
class SpeculativeGrid(DecodeThroughput):
    """Speculative decoding over a batch x context grid beside the plain decode step.

    Each step takes ``verify_s + draft_s`` and yields ``tokens_per_step`` tokens per
    sequence on average. ``deployment`` is the pooled deployment or a planned one (``plain``
    its :class:`~rackmath.analyses.serving.deployment.DecodeGrid`, ``verify`` its step on the
    plan or the ideal chip); ``fits``: the memory check with the verify step's activations and a
    draft model's weights."""

    deployment: Deployment
    speculation: Speculation
    batch: FloatArray
    context: FloatArray
    plain: DecodeGrid
    verify: PlanStep
    draft_s: FloatArray
    fits: NDArray[np.bool_]

    @property
    def planned(self) -> bool:
        return not self.deployment.pooled

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
    def step_tokens(self) -> FloatArray:
        """``B E``: each of the batch's sequences gains ``E`` tokens a step on average."""
        return np.asarray(self.batch * self.tokens_per_step)

    @property
    def step_band_s(self) -> tuple[FloatArray, FloatArray]:
        """The verify step's p10-p90 (:attr:`rackmath.core.step.PlanStep.step_band_s`) plus the
        drafting time, which carries no band of its own here (the draft's operators are timed
        apart, :func:`draft_step_s`): the band covers the verify step's kernel curves."""
        lo, hi = self.verify.step_band_s
        shape = self.step_s.shape
        return np.broadcast_to(lo + self.draft_s, shape), np.broadcast_to(hi + self.draft_s, shape)

    @property
    def tokens_per_s_per_user(self) -> FloatArray:
        return np.asarray(1.0 / self.tpot_s)

    @property
    def speedup(self) -> FloatArray:
        """``TPOT_plain / TPOT_spec = E t_plain / (t_verify + t_draft)``: above 1 it helps."""
        return np.asarray(self.plain.step_s / self.tpot_s)

    def break_even_batch(self, context_index: int = 0) -> float | None:
        """The smallest batch of the grid at which speculation no longer helps (None: it helps
        at every batch of the grid)."""
        worse = self.speedup[:, context_index] < 1.0
        if not worse.any():
            return None
        return float(self.batch[int(np.argmax(worse)), context_index])

    def break_even_context(self, batch_index: int = 0) -> float | None:
        """The shortest context of the grid at which speculation no longer helps (None: it
        helps at every context of the grid)."""
        worse = self.speedup[batch_index, :] < 1.0
        if not worse.any():
            return None
        return float(self.context[batch_index, int(np.argmax(worse))])

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
                        "plain_tokens_per_s_per_user": float(1.0 / self.plain.step_s[i, j]),
                        "tokens_per_s_per_chip": float(self.tokens_per_s_per_chip[i, j]),
                        "usd_per_million_output_tokens": float(self.usd_per_million_output_tokens[i, j]),
                        "fits": bool(self.fits[i, j]),
                        **self.band_at((i, j)),
                    }
                )
        d = self.deployment
        return {
            "draft": s.draft.id if s.draft is not None else s.kind.value,
            "drafter": s.kind.value,
            "on": "ideal chip" if d.pooled else str(d.plan),
            "depth": s.depth,
            "width": s.width,
            "tokens_verified_per_step": s.tokens_verified,
            "acceptance_given": s.given,
            "acceptance_by_position": list(s.acceptance),
            "tree_acceptance_by_position": [float(a) for a in s.rates],
            "reach_probability": [float(p) for p in spec.reach_probability(s.rates)],
            "tokens_per_step": self.tokens_per_step,
            "break_even_batch": self.break_even_batch(),
            "points": points,
        }


def draft_step_s(
    d: Deployment,
    s: Speculation,
    batch: ArrayLike,
    context: ArrayLike,
    plain_s: ArrayLike,
) -> FloatArray:
    """Seconds of drafting per step, broadcast over ``batch`` and ``context`` (a grid's column
    and row, or the simulator's table axes): none for n-gram lookup; ``k`` layers of the
    target at ``B w`` rows for an MTP module or EAGLE head (``plain_s``, the plain step at
    ``B``, when ``w = 1``; else the deployment's own step at ``B w``); ``k`` plain decode
    steps of a draft model at ``B w`` on the same chips (the pooled chip: a small draft runs
    replicated or tensor-parallel beside the target)."""
    kind = s.kind
    plain = np.asarray(plain_s, float)
    if kind is Drafter.NGRAM:
        return np.zeros_like(plain)
    rows = np.asarray(batch, float) * s.width
    base = d
    if kind is Drafter.MODEL:
        assert s.draft is not None
        drafter = pooled.make_deployment(
            s.draft,
            base.system,
            chips=base.chips,
            kv=base.precisions.kv,
            compute=base.precisions.compute,
            usd_per_chip_hour=base.usd_per_chip_hour,
            efficiency=base.efficiency,
            memory_reserve_frac=base.memory_reserve_frac,
        )
        load = loads.decode_load(s.draft, rows, context, base.precisions.kv.bytes_per_element)
        return np.asarray(s.depth * drafter.step(load).step_s)
    if s.width > 1:
        load = loads.decode_load(d.model, rows, context, base.precisions.kv.bytes_per_element)
        step = d.step(load, decode=True)
        plain = step.step_s
    return spec.draft_layer_s(plain, s.depth, d.model.num_layers)


def speculative_decode(
    deployment: Deployment, batch: ArrayLike, context: ArrayLike, s: Speculation
) -> SpeculativeGrid:
    """Plain decode, the ``T``-wide verify step and the draft's time over the grid; on the
    ideal chip for a pooled deployment, on the plan's step for a planned one."""
    d = deployment
    plain = d.decode(batch, context)
    b, c = plain.batch[:, :1], plain.context[:1, :]
    t = float(s.tokens_verified)
    base = d
    load = loads.decode_load(d.model, b, c, base.precisions.kv.bytes_per_element, tokens_per_sequence=t)
    extra = 0.0 if s.draft is None else arch.weight_bytes_total(s.draft, base.precisions.weights)
    verify = d.step(load, decode=True)
    memory = d.memory(b, c, tokens_in_flight=b * t)
    # a draft model's weights spread over the chips (one rank holds its share)
    fits = memory.total_bytes + extra * d.rank_chips / d.chips <= memory.usable_bytes
    draft_s = draft_step_s(d, s, b, c, plain.step_s)
    shape = plain.step_s.shape
    return SpeculativeGrid(
        deployment=d,
        speculation=s,
        batch=plain.batch,
        context=plain.context,
        plain=plain,
        verify=verify,
        draft_s=np.broadcast_to(np.asarray(draft_s, float), shape),
        fits=np.broadcast_to(np.asarray(fits, bool), shape),
    )
