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

Acceptance comes in three published forms, each turned into the conditional rates ``a_i``:
the rates themselves, the cumulative chance ``p_i`` of reaching draft ``i``
(:func:`acceptance_from_reach`, as vLLM's per-position acceptance counters give it over the
steps), or the mean acceptance length ``tau`` (tokens per step) at each depth
(:func:`reach_from_lengths`) or at one depth only (:func:`constant_rate_for_length`). A tree
of ``w`` candidates per position (:func:`tree_acceptance`) verifies ``1 + w k`` tokens a
step (:func:`tokens_verified_per_step`). Drafters: an MTP module or EAGLE head (about one
layer of the target, :func:`draft_layer_s`), a separate draft model (its own decode steps),
or n-gram prompt lookup (a string match on the host: no model work).
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


# ----------------------------------------------------------------------------- acceptance inputs


def acceptance_from_reach(reach: ArrayLike) -> FloatArray:
    """Conditional rates from a cumulative curve: ``a_i = p_i / p_(i-1)`` with ``p_0 = 1``,
    where ``p_i = prod_(j<=i) a_j`` is the chance a step reaches (keeps) draft ``i``; after a
    position never reached (``p = 0``) the rate is 0. Worked number: ``p = (0.8, 0.48, 0.24)``
    gives ``a = (0.8, 0.6, 0.5)``."""
    p = np.asarray(reach, float)
    before = np.concatenate(([1.0], p[:-1]))
    return np.asarray(np.divide(p, before, out=np.zeros_like(p), where=before > 0))


def reach_from_lengths(lengths: ArrayLike) -> FloatArray:
    """Reach probabilities from an acceptance-length curve: a chain of ``i`` drafts yields
    ``tau(i) = 1 + p_1 + ... + p_i`` tokens a step (the accepted drafts and the target's own
    token), so ``p_i = tau(i) - tau(i - 1)`` with ``tau(0) = 1``. Worked number:
    ``tau = (1.8, 2.28, 2.52)`` gives ``p = (0.8, 0.48, 0.24)``."""
    tau = np.asarray(lengths, float)
    return np.asarray(np.diff(np.concatenate(([1.0], tau))))


def constant_rate_for_length(length: float, depth: int) -> float:
    """The one rate ``a`` at which ``k = depth`` drafts yield ``length`` tokens a step:
    ``(1 - a^(k+1)) / (1 - a) = tau`` (Leviathan et al. 2023, eq. 1), solved by bisection
    (the left side rises with ``a`` from 1 at ``a = 0`` to ``k + 1`` at ``a = 1``). For a
    published mean acceptance length at one depth, where no per-position curve is given.
    Worked number: ``tau = 2.52`` at ``k = 3`` is ``a ~ 0.638`` (``1 + a + a^2 + a^3``)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):  # 2^-60: below a double's resolution of a rate
        mid = 0.5 * (lo + hi)
        if expected_tokens_per_step(np.full(depth, mid)) < length:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


# ----------------------------------------------------------------------------- tree drafting


def tree_acceptance(acceptance: ArrayLike, width: int) -> FloatArray:
    """Per-position rates of a tree holding ``width`` candidates at each depth, from one
    candidate's rates: a position is kept when any of its ``w`` candidates is,
    ``a_i(w) = 1 - (1 - a_i)^w``. The candidates are taken as independent chances (SpecInfer,
    Miao et al. 2024, §4: verifying several candidates per position); real top-``w``
    candidates of one draft are correlated, so this is an upper bound on the tree's gain.
    Worked number: ``a = 0.6`` with ``w = 2`` is ``1 - 0.4^2 = 0.84``."""
    a = np.asarray(acceptance, float)
    return np.asarray(1.0 - (1.0 - a) ** width)


def tokens_verified_per_step(width: int, depth: int) -> int:
    """Query tokens one sequence runs through the target in a verify step: its last token
    (the root) and ``width`` candidates at each of ``depth`` positions, ``1 + w k`` (a chain,
    ``w = 1``: ``k + 1``; SGLang's ``--speculative-num-draft-tokens`` with ``topk = w`` and
    ``num_steps = k`` at its largest). Worked number: ``w = 4, k = 5`` verifies 21 tokens.
    The verify load charges every query's attention at the chain's mean offset
    ``L + (T - 1) / 2`` (:func:`rackmath.core.loads.decode_load`); a tree's nodes sit at most
    ``k`` deep, so for ``w > 1`` that over-states the context by under ``T / 2`` tokens."""
    return 1 + width * depth


def draft_layer_s(plain_step_s: ArrayLike, depth: int, num_layers: int) -> FloatArray:
    """A one-layer drafter's work per step (an MTP module or an EAGLE head, each about one
    decoder layer of the target): ``k t_plain / L`` with ``t_plain`` the target's plain
    decode step at the drafter's batch (``B w`` rows for a tree of width ``w``). The same
    formula as :func:`mtp_draft_s`, named for what it charges."""
    return mtp_draft_s(plain_step_s, depth, num_layers)
