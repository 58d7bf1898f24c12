"""Sparsity: what a sparser mixture of experts buys and costs on a given system (D5, D11).

For a fixed active size ``N_active`` and sparsity ``s = N_total / N_active``:
quality from Clark et al. 2022 (dense-equivalent parameters, reading ``s`` as the expert
count at top-1 routing); the balance batch ``B* = r s`` (:func:`rackmath.core.roofline.balance_batch`);
the memory for the weights and ``B*`` sequences of KV; the chips that memory needs; the
traffic to fill those batches; and the cost per token at balance and at a stated number of
concurrent users. At balance the cost per token does not depend on ``s`` (it is the compute
cost), so sparsity is "a pure win for bandwidth until you run out of users or memory".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rackmath.analyses.serving.deployment import Deployment
from rackmath.core import architecture as arch
from rackmath.core import roofline as rl
from rackmath.core import scaling_laws as sl
from rackmath.errors import InputError
from rackmath.frames import Record
from rackmath.specs import checks
from rackmath.specs.bounds import MAX_BATCH, MAX_CONTEXT

FloatArray = NDArray[np.float64]

DEFAULT_SPARSITIES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
DEFAULT_USERS = 2000
#: Input ranges: at most 32 levels of N_total / N_active up to 4,096 (past every MoE built),
#: and an active size from 1M to 1,000T parameters.
MAX_LEVELS = 32
MAX_SPARSITY = 4096
PARAMS_ACTIVE_RANGE = (1e6, 1e15)


@dataclass(frozen=True)
class SparsityRow(Record):
    derived_fields = ("memory_bytes", "users_needed")

    sparsity: float
    params_total: float
    effective_params: float
    balance_batch: float
    weight_bytes: float
    kv_bytes_at_balance: float
    chips: int
    step_at_balance_s: float
    tokens_per_s_at_balance: float
    usd_per_million_tokens_at_balance: float
    batch_at_users: float
    step_at_users_s: float
    usd_per_million_tokens_at_users: float

    @property
    def memory_bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes_at_balance

    @property
    def users_needed(self) -> float:
        """Users it takes to fill a balanced batch: one sequence each."""
        return self.balance_batch


#: What the study's step times run on: the lecture's closed-form roofline at every sparsity (a
#: model that does not exist has no operators to ground on kernel curves).
EFFICIENCY = {
    "mode": "pure",
    "label": "pure roofline (the lecture's closed forms, at every hypothetical sparsity)",
    "transferred_from": None,
    "source": "pure roofline",
}


@dataclass(frozen=True)
class SparsityStudy:
    deployment: Deployment  # supplies the chip, precisions, price, active size and KV per token
    params_active: float
    kv_bytes_per_token: float
    context: float
    users: float
    rows: tuple[SparsityRow, ...]
    fit: sl.RoutedFit

    def to_dict(self) -> dict[str, Any]:
        d = self.deployment
        return {
            "model": d.model.id,
            "chip": d.system.chip.id,
            "usd_per_chip_hour": d.usd_per_chip_hour,
            "weights": d.precisions.weights.value,
            "params_active": self.params_active,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "context": self.context,
            "users": self.users,
            "routed_fit": {
                **{k: getattr(self.fit, k) for k in ("a", "b", "c", "d", "e_start", "e_max")},
                "source": self.fit.source,
            },
            "rows": [r.to_dict() for r in self.rows],
            "efficiency": EFFICIENCY,
        }


def sparsity_study(
    deployment: Deployment,
    *,
    sparsities: tuple[float, ...] | list[float] = DEFAULT_SPARSITIES,
    context: float = 4096,
    users: float = DEFAULT_USERS,
    params_active: float | None = None,
    fit: sl.RoutedFit = sl.CLARK_SBASE_FIT,
) -> SparsityStudy:
    """One row per sparsity; chips are the fewest of ``deployment``'s chip that hold the
    weights plus ``B*`` sequences of KV at ``context`` (after the memory reserve)."""
    s = np.asarray(sparsities, float)
    if not 0 < s.size <= MAX_LEVELS or np.any(~np.isfinite(s)) or np.any(s < 1) or np.any(s > MAX_SPARSITY):
        allowed = f"1 to {MAX_LEVELS} numbers from 1 to {MAX_SPARSITY:,} (N_total / N_active)"
        raise InputError("--sparsity", ",".join(f"{x:g}" for x in s), allowed)
    for name, value, most in (("--context", context, MAX_CONTEXT), ("--users", users, MAX_BATCH)):
        checks.between(name, value, 1, most)
    d = deployment
    chip = d.system.chip
    n_active = float(params_active if params_active is not None else d.params.active)
    checks.between("--params-active", n_active, *PARAMS_ACTIVE_RANGE)
    bpw = d.precisions.weights.bytes_per_element
    kv_tok = arch.kv_bytes_per_token(d.model, d.precisions.kv.bytes_per_element)
    flops_chip = chip.peak_flops(d.precisions.compute)
    bw_chip = chip.hbm_bandwidth_bytes_per_s
    usable = d.usable_bytes_per_chip
    rows = []
    for sp in s:
        n_total = sp * n_active
        b_star = float(rl.balance_batch(n_total, n_active, flops_chip, bw_chip, bpw))
        weights = n_total * bpw
        kv = b_star * context * kv_tok
        chips = max(1, int(np.ceil((weights + kv) / usable)))

        def step(batch: float, n_total: float = n_total, chips: int = chips) -> float:
            t = rl.step_times(
                flops=batch * sl.INFERENCE_FLOPS_PER_PARAM_TOKEN * n_active,
                weight_bytes=n_total * bpw,
                kv_bytes=batch * context * kv_tok,
                peak_flops_per_s=chips * flops_chip,
                bandwidth_bytes_per_s=chips * bw_chip,
                efficiency=d.efficiency,
            )
            return float(t.step_s)

        t_bal = step(b_star)
        b_users = min(float(users), b_star)
        t_users = step(b_users)
        rows.append(
            SparsityRow(
                sparsity=float(sp),
                params_total=n_total,
                effective_params=float(sl.effective_params(n_active, sp, fit)),
                balance_batch=b_star,
                weight_bytes=weights,
                kv_bytes_at_balance=kv,
                chips=chips,
                step_at_balance_s=t_bal,
                tokens_per_s_at_balance=b_star / t_bal,
                usd_per_million_tokens_at_balance=float(
                    rl.usd_per_million_tokens(t_bal, b_star, chips, d.usd_per_chip_hour)
                ),
                batch_at_users=b_users,
                step_at_users_s=t_users,
                usd_per_million_tokens_at_users=float(
                    rl.usd_per_million_tokens(t_users, b_users, chips, d.usd_per_chip_hour)
                ),
            )
        )
    return SparsityStudy(
        deployment=d,
        params_active=n_active,
        kv_bytes_per_token=kv_tok,
        context=float(context),
        users=float(users),
        rows=tuple(rows),
        fit=fit,
    )
