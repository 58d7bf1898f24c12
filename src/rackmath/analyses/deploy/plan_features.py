"""Features the search applies to every plan: the plan's MoE routing and MTP speculation.

:class:`PlanFeatures` travels through :func:`rackmath.analyses.deploy.candidates.evaluate`,
``search``, ``pareto``, ``best_disaggregated`` and ``frontier_points`` (the ``routing``
argument); ``plan`` and ``pareto`` build it from ``--redundant-experts``, ``--skew``,
``--tbo`` (:func:`parse_tbo`), ``--mtp`` and ``--acceptance`` (:func:`parse_acceptance`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rackmath.core import speculative as spec
from rackmath.errors import InputError
from rackmath.specs import checks
from rackmath.specs.lists import number_list


@dataclass(frozen=True)
class PlanFeatures:
    """Features applied to every searched plan: the plan's MoE routing (on plans with ``ep > 1``)
    and speculative decoding with an MTP head (on every decode step).

    ``redundant_experts`` extra expert slots (EPLB; with them an EP degree may divide
    ``E + R`` instead of ``E``), ``skew`` the busiest EP rank's routed load over the mean
    (capped at ``ep``), ``tbo_overlap_frac`` two-batch overlap (0 off, 1 on); see
    :class:`rackmath.specs.plan.ParallelPlan`. ``mtp`` draft tokens per step accepted at
    ``acceptance`` (one rate, or one per position; :mod:`rackmath.core.speculative`): the
    decode part of a step verifies ``k + 1`` tokens per sequence and the MTP head adds
    ``k t_decode / L``; a step yields ``E = 1 + a_1 + a_1 a_2 + ...`` tokens per sequence.
    The default is balanced routing, no slots, no TBO, no MTP.
    """

    redundant_experts: int = 0
    skew: float = 1.0
    tbo_overlap_frac: float = 0.0
    mtp: int = 0
    acceptance: float | tuple[float, ...] = 0.8

    def __post_init__(self) -> None:
        checks.whole(
            "--redundant-experts",
            self.redundant_experts,
            minimum=0,
            maximum=4096,
            allowed="a whole number of extra expert slots in [0, 4096]",
        )
        checks.between(
            "--skew",
            self.skew,
            1.0,
            64.0,
            allowed="busiest rank load / mean, in [1, 64] (1 balanced), e.g. 1.3",
        )
        checks.fraction(
            "--tbo", self.tbo_overlap_frac, allowed="on, off or an overlap fraction in [0, 1], e.g. --tbo on"
        )
        checks.whole(
            "--mtp",
            self.mtp,
            minimum=0,
            maximum=spec.MAX_DEPTH,
            allowed=f"a whole number of draft tokens from 0 (off) to {spec.MAX_DEPTH}",
        )
        allowed = "the chance a draft token is kept, in [0, 1], e.g. 0.8, or one per position: 0.85,0.7,0.6"
        rates = self.acceptance if isinstance(self.acceptance, tuple) else (self.acceptance,)
        for a in rates:
            checks.fraction("--acceptance", a, allowed=allowed, given=self.acceptance_text)
        if self.mtp and len(rates) not in (1, self.mtp):
            raise InputError(
                "--acceptance",
                self.acceptance_text,
                f"one rate for every position or {self.mtp} rates, one per draft position (--mtp {self.mtp})",
            )

    @property
    def acceptance_text(self) -> str:
        """The acceptance as the CLI takes it: ``0.8`` or ``0.85,0.7,0.6``."""
        rates = self.acceptance if isinstance(self.acceptance, tuple) else (self.acceptance,)
        return ",".join(f"{a:g}" for a in rates)

    @property
    def is_default(self) -> bool:
        return self == PlanFeatures()

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a sequence gains per step: 1 without MTP."""
        if not self.mtp:
            return 1.0
        return spec.expected_tokens_per_step(spec.acceptance_by_position(self.acceptance, self.mtp))

    def plan_suffix(self) -> str:
        """What an EP plan's text adds, in the plan grammar (``,redundant_experts=32,skew=1.3,tbo=on``)."""
        parts = []
        if self.redundant_experts:
            parts.append(f"redundant_experts={self.redundant_experts}")
        if self.skew != 1.0:
            parts.append(f"skew={self.skew:g}")
        if self.tbo_overlap_frac:
            o = self.tbo_overlap_frac
            parts.append("tbo=on" if o == 1.0 else f"tbo={o:g}")
        return "".join("," + p for p in parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "redundant_experts": self.redundant_experts,
            "skew": self.skew,
            "tbo_overlap_frac": self.tbo_overlap_frac,
        }

    def speculation_dict(self) -> dict[str, Any] | None:
        if not self.mtp:
            return None
        a = list(self.acceptance) if isinstance(self.acceptance, tuple) else self.acceptance
        return {"mtp": self.mtp, "acceptance": a, "tokens_per_step": self.tokens_per_step}


#: The name the MoE-routing callers use (the features began as routing only).
MoeRouting = PlanFeatures
BALANCED = MoeRouting()


def parse_acceptance(text: str) -> float | tuple[float, ...]:
    """``--acceptance 0.8`` (every draft position) or ``0.85,0.7,0.6`` (one per position)."""
    rates = number_list(text, "--acceptance", minimum=0.0, maximum=1.0)
    return rates[0] if len(rates) == 1 else tuple(rates)


def parse_tbo(text: str) -> float:
    """``--tbo on|off|FRAC`` -> the overlap fraction (one-line error otherwise)."""
    t = text.strip().lower()
    if t in ("on", "true", "yes"):
        return 1.0
    if t in ("off", "false", "no"):
        return 0.0
    try:
        value = float(t)
    except ValueError:
        raise InputError("--tbo", text, "on, off or an overlap fraction in [0, 1], e.g. --tbo on") from None
    return checks.fraction(
        "--tbo", value, allowed="on, off or an overlap fraction in [0, 1], e.g. --tbo on", given=text
    )


def routing(
    redundant_experts: int = 0,
    skew: float = 1.0,
    tbo: str | float = "off",
    mtp: int = 0,
    acceptance: float | str | Sequence[float] = 0.8,
) -> PlanFeatures:
    """The features as ``plan`` and ``pareto`` take them: ``tbo`` as text (:func:`parse_tbo`) or
    a fraction, ``acceptance`` as text (:func:`parse_acceptance`), one rate or one per position."""
    overlap = parse_tbo(tbo) if isinstance(tbo, str) else tbo
    if isinstance(acceptance, str):
        rates: float | tuple[float, ...] = parse_acceptance(acceptance)
    else:
        given = (acceptance,) if isinstance(acceptance, int | float) else tuple(acceptance)
        rates = float(given[0]) if len(given) == 1 else tuple(float(a) for a in given)
    return PlanFeatures(redundant_experts, skew, overlap, mtp, rates)
