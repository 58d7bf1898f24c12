"""Speculative decoding and multi-token prediction (MTP): tokens per step and time per token.

A draft proposes ``k`` tokens; the target verifies them in one wider decode step (each
sequence runs ``k + 1`` query tokens: :func:`rackmath.core.loads.decode_load` with
``tokens_per_sequence = k + 1``) and keeps the longest accepted prefix plus one token of
its own. With ``a_i`` the probability that draft token ``i`` is accepted given that the
ones before it were (the acceptance rate per position), the tokens a step yields are

    E[tokens per step] = 1 + sum_{i=1..k} prod_{j<=i} a_j

(Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via Speculative
Decoding", eq. 1 with a constant rate: ``(1 - a^(k+1)) / (1 - a)``). One rate ``a`` given
for every position is that constant case: the chance of reaching position ``i`` falls
geometrically, ``a^i``.

A step costs the verification pass plus the draft's own work, so

    TPOT = (t_verify + t_draft) / E[tokens per step]

The draft is either an MTP head (DeepSeek-V3 report §2.2: one extra transformer block of the
target per depth, sharing its embedding and head; here one layer's share of the target's
plain decode step per drafted token, ``t_draft = k t_decode / L``), or a separate draft
model run ``k`` times at the same batch and context. The gain
``TPOT_plain / TPOT_spec`` is large while the step is memory-bound (weights read once
whatever the width) and shrinks toward ``E / (k + 1)`` (below 1) once the batch makes the
step compute-bound: ``k + 1`` times the tokens then cost ``k + 1`` times the time.

Worked number: ``k = 3``, ``a = (0.8, 0.6, 0.5)``: ``E = 1 + 0.8 + 0.48 + 0.24 = 2.52``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]

#: Longest draft considered: published MTP and EAGLE-style drafts use 1-8 tokens; beyond 16
#: the accepted prefix is almost never longer and the verification width only costs.
MAX_DEPTH = 16


def acceptance_by_position(acceptance: float | ArrayLike, depth: int) -> FloatArray:
    """Per-position conditional acceptance ``a_1..a_k``: one rate repeated ``depth`` times,
    or the list as given (its length must be ``depth``)."""
    a = np.atleast_1d(np.asarray(acceptance, float))
    if a.size == 1:
        return np.full(depth, float(a[0]))
    return a


def expected_tokens_per_step(acceptance: ArrayLike) -> float:
    """``1 + sum_i prod_{j<=i} a_j`` for per-position rates ``a`` (empty: 1, plain decode)."""
    a = np.asarray(acceptance, float)
    return float(1.0 + np.sum(np.cumprod(a)))


def reach_probability(acceptance: ArrayLike) -> FloatArray:
    """``prod_{j<=i} a_j`` for ``i = 1..k``: the chance a step yields at least ``i + 1`` tokens."""
    return np.cumprod(np.asarray(acceptance, float))


def mtp_draft_s(decode_step_s: ArrayLike, depth: int, num_layers: int) -> FloatArray:
    """An MTP head's work per step: ``k`` drafted tokens, each one layer of the target,
    ``k t_decode / L`` (the layer's share of the plain decode step at the same batch)."""
    return np.asarray(depth * np.asarray(decode_step_s, float) / num_layers)


def time_per_output_token_s(verify_s: ArrayLike, draft_s: ArrayLike, tokens_per_step: float) -> FloatArray:
    """``(t_verify + t_draft) / E[tokens per step]``: seconds per token one user sees."""
    return np.asarray((np.asarray(verify_s, float) + np.asarray(draft_s, float)) / tokens_per_step)
