"""A parallel plan: how a model's work is split over chips.

Chips are arranged as ``pp`` pipeline stages, each of ``dp x tp`` chips:

* ``tp`` tensor parallelism shards every matmul (attention heads, dense MLP) over ``tp`` chips;
* ``dp`` data parallelism replicates those shards; in MoE inference these replicas are the
  "attention data parallel" groups that sit beside expert parallelism;
* ``ep`` expert parallelism shards the routed experts of each MoE layer over ``ep`` of a
  stage's ``dp x tp`` chips (so ``ep`` divides ``dp x tp``), as Megatron-Core and large MoE
  serving stacks fold EP into the data-parallel ranks;
* ``cp`` context (sequence) parallelism splits long sequences in training; it multiplies
  the chips like ``dp``.

``chips = pp * dp * tp * cp``. Whether a plan suits a model (heads divisible by ``tp``,
experts by ``ep``, layers by ``pp``) is checked by the analyses that know the model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from rackmath.errors import InputError, UnknownIdError
from rackmath.numbers import parse_int

#: Largest degree of any one dimension (2^20 chips: beyond any cluster built).
MAX_PLAN_DEGREE = 2**20


@dataclass(frozen=True)
class ParallelPlan:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    cp: int = 1

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"plan {f.name}", value, "a whole number >= 1")
        stage = self.dp * self.tp * self.cp
        if stage % self.ep:
            fixed = replace(self, dp=self.dp * self.ep // math.gcd(stage, self.ep))
            raise InputError(
                "plan ep",
                self.ep,
                f"a divisor of dp x tp x cp = {stage} "
                "(experts are sharded over a stage's data-parallel and tensor-parallel chips); "
                f"try --plan {fixed}",
            )

    @property
    def chips(self) -> int:
        return self.pp * self.dp * self.tp * self.cp

    @property
    def chips_per_stage(self) -> int:
        return self.dp * self.tp * self.cp

    @classmethod
    def parse(cls, text: str) -> ParallelPlan:
        """``"tp=8,pp=16,dp=64"`` -> ``ParallelPlan(tp=8, pp=16, dp=64)``."""
        known = [f.name for f in fields(cls)]
        values: dict[str, int] = {}
        for part in text.replace(" ", "").split(","):
            if not part:
                continue
            key, sep, raw = part.partition("=")
            key = key.lower()
            if not sep:
                raise InputError("--plan", part, "key=value pairs such as tp=8,pp=4,dp=2,ep=8")
            if key not in known:
                raise UnknownIdError("plan dimension", key, known)
            if key in values:
                raise InputError("--plan", part, f"each of {', '.join(known)} at most once")
            if not raw.strip().lstrip("+").replace("_", "").replace(".", "", 1).isalnum():
                raise InputError(f"plan {key}", raw, "a whole number >= 1")
            try:
                values[key] = parse_int(raw, f"plan {key}", minimum=1, maximum=MAX_PLAN_DEGREE)
            except InputError as exc:
                if "such as" in exc.allowed:  # not a number at all
                    raise InputError(f"plan {key}", raw, "a whole number >= 1") from None
                raise
        return cls(**values)

    def __str__(self) -> str:
        return (
            ",".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self) if getattr(self, f.name) > 1)
            or "tp=1"
        )
