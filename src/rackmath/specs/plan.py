"""A parallel plan: how a model's work is split over chips.

Chips are arranged as ``pp`` pipeline stages, each of ``dp x tp x cp`` chips:

* ``tp`` tensor parallelism shards every matmul (attention heads, dense MLP) over ``tp`` chips;
* ``dp`` data parallelism replicates those shards; in MoE inference these replicas are the
  "attention data parallel" groups that sit beside expert parallelism;
* ``ep`` expert parallelism shards the routed experts of each MoE layer over ``ep`` of a
  stage's ``dp x tp`` chips (so ``ep`` divides ``dp x tp``), as Megatron-Core and large MoE
  serving stacks fold EP into the data-parallel ranks;
* ``cp`` context (sequence) parallelism splits one sequence's tokens over ``cp`` chips that
  hold the same weights (it multiplies the chips like ``dp``): in training and in a prompt's
  prefill each rank runs ``1/cp`` of the tokens and gathers the keys and values it attends to;
  in decode each rank holds ``1/cp`` of every sequence's KV cache and the partial attention
  outputs are merged by their log-sum-exp (:mod:`rackmath.core.collective_ops`);
* ``cp_comm`` how a serving CP group communicates: ``ag`` (the default: prefill all-gathers the
  KV before attention, decode all-gathers the queries and the LSEs and reduce-scatters the
  outputs, vLLM's ``ag_rs``), ``a2a`` (decode computes every sequence's queries on every CP rank
  and merges outputs and LSEs in one packed all-to-all, SGLang's DCP and vLLM's ``a2a``; prefill
  as ``ag``) or ``ring`` (prefill passes the KV around the ring under the attention blocks,
  Megatron's ``p2p``; decode as ``ag``);
* ``stages`` the layers of each pipeline stage, first to last (``stages=16+15+15+15``); unset,
  the tool balances them (the LM head counted on the last stage).

``chips = pp * dp * tp * cp``. Whether a plan suits a model (heads divisible by ``tp``,
experts by ``ep``, ``stages`` covering the layers) is checked by the analyses that know the model.

Plans as 2026 deployments state them (attention and MoE parallelised separately over the
same chips, as DeepSeek-V3's inference and SGLang/TensorRT-LLM wide-EP run them):

* ``attn_tp`` / ``attn_dp`` are the attention's tensor and data parallelism: the same
  dimensions as ``tp`` / ``dp`` (aliases in the grammar);
* ``moe_tp`` is the routed experts' tensor parallelism beside ``ep``: ``moe_tp x ep`` must
  divide the stage's ``dp x tp`` chips (the rest replicate the experts). ``0`` (the default)
  keeps the rule that needs no field: experts split ``max(ep, tp)`` ways;
* ``redundant_experts`` ``R`` adds expert slots (EPLB): each EP rank holds
  ``ceil((E + R) / ep)`` slots, so ``ep`` need not divide the expert count;
* ``skew`` is the busiest EP rank's routed load over the mean (1 = balanced, at most ``ep``);
* ``tbo`` is two-batch overlap of dispatch/combine with the other micro-batch's compute:
  ``off`` (0), ``on`` (1) or the fraction of a pass's operator time that can hide it.

``--plan attn_dp=32,ep=32,redundant_experts=32,skew=1.3,tbo=on``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from rackmath.errors import InputError, UnknownIdError
from rackmath.numbers import parse_int, parse_number
from rackmath.specs import checks

#: Largest degree of any one dimension (2^20 chips: beyond any cluster built).
MAX_PLAN_DEGREE = 2**20

#: Parallel degrees (whole numbers >= 1).
DEGREES = ("tp", "pp", "dp", "ep", "cp")

#: Names the grammar accepts for a dimension stored under another name.
ALIASES = {"attn_tp": "tp", "attn_dp": "dp"}

#: How a serving CP group communicates (see the module docstring); the first is the default.
CP_COMM = ("ag", "a2a", "ring")

_ON_OFF = {"on": 1.0, "off": 0.0, "true": 1.0, "false": 0.0}


@dataclass(frozen=True)
class ParallelPlan:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    cp: int = 1
    #: experts' tensor parallelism beside ``ep`` (0: ``max(ep, tp)`` as without the field)
    moe_tp: int = 0
    #: extra expert slots over the EP ranks (EPLB's redundant experts)
    redundant_experts: int = 0
    #: busiest EP rank's routed load over the mean (1: balanced routing)
    skew: float = 1.0
    #: two-batch overlap: fraction of a pass's operator time that hides the all-to-all (0: off)
    tbo: float = 0.0
    #: how a serving CP group communicates (:data:`CP_COMM`)
    cp_comm: str = CP_COMM[0]
    #: layers of each pipeline stage, first to last (empty: balanced by the tool)
    stages: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in DEGREES:
            checks.whole(f"plan {name}", getattr(self, name))
        for name in ("moe_tp", "redundant_experts"):
            checks.whole(
                f"plan {name}", getattr(self, name), minimum=0, allowed="a whole number >= 0 (0: not set)"
            )
        skew = self.skew
        if isinstance(skew, bool) or not isinstance(skew, int | float) or not 1.0 <= skew <= max(self.ep, 1):
            hint = (
                "1 (routing skew applies to expert-parallel ranks; set ep > 1)"
                if self.ep == 1
                else f"1 to ep = {self.ep} (busiest rank's load / mean; 1 is balanced, e.g. skew=1.3)"
            )
            raise InputError("plan skew", skew, hint)
        checks.fraction("plan tbo", self.tbo, allowed="on, off or an overlap fraction in [0, 1], e.g. tbo=on")
        stage = self.dp * self.tp * self.cp
        moe_ways = self.ep * max(self.moe_tp, 1)
        if self.moe_tp and stage % moe_ways:
            raise InputError(
                "plan moe_tp",
                self.moe_tp,
                f"moe_tp x ep = {moe_ways} must divide dp x tp x cp = {stage} "
                f"(MoE runs on the attention's chips); try moe_tp={max(stage // max(self.ep, 1), 1)}"
                if stage % self.ep == 0
                else f"moe_tp x ep = {moe_ways} must divide dp x tp x cp = {stage}",
            )
        if stage % self.ep:
            fixed = replace(self, dp=self.dp * self.ep // math.gcd(stage, self.ep))
            raise InputError(
                "plan ep",
                self.ep,
                f"a divisor of dp x tp x cp = {stage} "
                "(experts are sharded over a stage's data-parallel and tensor-parallel chips); "
                f"try --plan {fixed}",
            )
        if self.ep == 1 and self.redundant_experts:
            raise InputError(
                "plan redundant_experts",
                self.redundant_experts,
                "0 without expert parallelism (redundant slots spread hot experts over EP ranks); set ep > 1",
            )
        if self.cp_comm not in CP_COMM:
            raise InputError("plan cp_comm", self.cp_comm, ", ".join(CP_COMM))
        if self.cp == 1 and self.cp_comm != CP_COMM[0]:
            raise InputError(
                "plan cp_comm",
                self.cp_comm,
                f"{CP_COMM[0]} without context parallelism (it is how CP ranks talk); set cp > 1",
            )
        if self.stages:
            _check_stages(self.stages, self.pp)

    @property
    def chips(self) -> int:
        return self.pp * self.dp * self.tp * self.cp

    @property
    def chips_per_stage(self) -> int:
        return self.dp * self.tp * self.cp

    @property
    def expert_shards(self) -> int:
        """Ways the routed experts are split: ``moe_tp x ep`` when set, else ``max(ep, tp)``."""
        return self.moe_tp * self.ep if self.moe_tp else max(self.ep, self.tp)

    @classmethod
    def parse(cls, text: str) -> ParallelPlan:
        """``"tp=8,pp=16,dp=64"`` -> ``ParallelPlan(tp=8, pp=16, dp=64)``; also
        ``attn_dp=32,ep=32,redundant_experts=32,skew=1.3,tbo=on``; ``tp=8,cp=4,cp_comm=a2a``;
        ``pp=4,stages=16+15+15+15``."""
        known = [f.name for f in fields(cls)]
        values: dict[str, int | float | str | tuple[int, ...]] = {}
        for part in text.replace(" ", "").split(","):
            if not part:
                continue
            key, sep, raw = part.partition("=")
            key = key.lower()
            if not sep:
                raise InputError("--plan", part, "key=value pairs such as tp=8,pp=4,dp=2,ep=8")
            key = ALIASES.get(key, key)
            if key not in known:
                raise UnknownIdError("plan dimension", key, [*known, *ALIASES])
            if key in values:
                raise InputError("--plan", part, f"each of {', '.join(known)} at most once (attn_tp is tp)")
            values[key] = _parse_value(key, raw)
        stages = values.get("stages")
        if isinstance(stages, tuple) and "pp" not in values:  # the stages say how many there are
            values["pp"] = len(stages)
        return cls(**values)  # type: ignore[arg-type]

    def __str__(self) -> str:
        parts = [f"{n}={getattr(self, n)}" for n in DEGREES if getattr(self, n) > 1]
        if self.moe_tp:
            parts.append(f"moe_tp={self.moe_tp}")
        if self.redundant_experts:
            parts.append(f"redundant_experts={self.redundant_experts}")
        if self.skew != 1.0:
            parts.append(f"skew={self.skew:g}")
        if self.tbo:
            parts.append("tbo=on" if self.tbo == 1.0 else f"tbo={self.tbo:g}")
        if self.cp_comm != CP_COMM[0]:
            parts.append(f"cp_comm={self.cp_comm}")
        if self.stages:
            parts.append("stages=" + "+".join(str(n) for n in self.stages))
        return ",".join(parts) or "tp=1"


def _check_stages(stages: object, pp: int) -> tuple[int, ...]:
    """``stages``: ``pp`` whole numbers >= 1, one per stage (whether they cover a model's layers
    is the analyses' check, :func:`rackmath.analyses.serving.planned.check_stages`)."""
    example = "+".join(["16", *["15"] * (pp - 1)]) if pp > 1 else "61"
    allowed = (
        f"{pp} whole numbers >= 1 joined by +, one per pipeline stage (pp = {pp}), e.g. stages={example}"
    )
    if not isinstance(stages, tuple) or len(stages) != pp:
        raise InputError("plan stages", _stages_text(stages), allowed)
    for n in stages:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InputError("plan stages", _stages_text(stages), allowed)
    return stages


def _stages_text(stages: object) -> str:
    return "+".join(str(n) for n in stages) if isinstance(stages, tuple) else str(stages)


def _parse_value(key: str, raw: str) -> int | float | str | tuple[int, ...]:
    """One ``key=value`` of the grammar, each bad value a one-line :class:`InputError`."""
    if key == "cp_comm":
        if raw.lower() not in CP_COMM:
            raise InputError("plan cp_comm", raw, ", ".join(CP_COMM) + " (e.g. cp=4,cp_comm=a2a)")
        return raw.lower()
    if key == "stages":
        parts = raw.split("+")
        if not all(p.isdigit() for p in parts):
            raise InputError(
                "plan stages",
                raw,
                "whole numbers >= 1 joined by +, one per pipeline stage, e.g. pp=4,stages=16+15+15+15",
            )
        return tuple(int(p) for p in parts)
    if key in ("tbo", "skew"):
        if key == "tbo" and raw.lower() in _ON_OFF:
            return _ON_OFF[raw.lower()]
        allowed = (
            "on, off or an overlap fraction in [0, 1], e.g. tbo=on"
            if key == "tbo"
            else "a number >= 1 (busiest rank's load / mean; 1 is balanced), e.g. skew=1.3"
        )
        try:
            value = parse_number(raw, f"plan {key}")
        except InputError:
            raise InputError(f"plan {key}", raw, allowed) from None
        if not (0.0 <= value <= 1.0 if key == "tbo" else value >= 1.0):
            raise InputError(f"plan {key}", raw, allowed)
        return value
    minimum = 0 if key in ("moe_tp", "redundant_experts") else 1
    allowed = f"a whole number >= {minimum}"
    if not raw.strip().lstrip("+").replace("_", "").replace(".", "", 1).isalnum():
        raise InputError(f"plan {key}", raw, allowed)
    try:
        return parse_int(raw, f"plan {key}", minimum=minimum, maximum=MAX_PLAN_DEGREE)
    except InputError as exc:
        if "such as" in exc.allowed:  # not a number at all
            raise InputError(f"plan {key}", raw, allowed) from None
        raise
