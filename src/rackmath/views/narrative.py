"""Plain-language readings of analysis results, shared by the faces (CLI text, web page)."""

from __future__ import annotations

import numpy as np

from rackmath.analyses.serving.deployment import DecodeGrid
from rackmath.analyses.serving.explain import Explanation, cheapest_fitting
from rackmath.views import fmt

#: How the CLI names the roofline-only view (the web names its own switch).
PURE_HINT = "--efficiency pure shows the roofline alone"


def reading(result: Explanation, at: DecodeGrid | None = None, *, pure_hint: str = PURE_HINT) -> str:
    """One paragraph that says what the numbers mean: at the first batch of ``result``, or at
    the point ``at`` (one batch at the result's first context: the web's sliders)."""
    g = result.decode
    c0 = float(result.contexts[0])
    p = g if at is None else at
    b0 = p.batch[0, 0]
    first = p.usd_per_million_output_tokens[0, 0]
    cheapest = cheapest_fitting(g)
    b_star = result.balance.balance_batch_with_kv[0]
    max_b = result.max_batch[0]
    parts = [
        f"At batch {b0:,.0f} a step takes {fmt.seconds(p.step_s[0, 0])} and is bound by "
        f"{p.step.bottleneck[0, 0]}; a million output tokens cost {fmt.usd(first)}."
    ]
    if at is not None and not bool(at.fits[0, 0]):
        parts.append(
            f"Batch {b0:,.0f} does not fit at {c0:,.0f} tokens of context: the largest that does is "
            f"{max_b:,.0f} sequences."
        )
    if np.isfinite(b_star):
        parts.append(
            f"On the roofline, weight fetches are amortised over the batch until about {b_star:,.0f} "
            f"sequences at {c0:,.0f} tokens of context, where compute takes over."
        )
    else:
        parts.append(
            f"On the roofline, at {c0:,.0f} tokens of context the KV-cache fetch per sequence exceeds "
            "its compute, so no batch becomes compute-bound: longer context costs bandwidth, not FLOPs."
        )
    last = str(g.step.bottleneck[-1, 0])
    if result.deployment.efficiency.mode == "kernel" and last == "compute":
        parts.append(
            "At the kernels' measured efficiencies the largest batch shown is bound by compute "
            "instead: the kernels reach a fraction of peak FLOP/s, so compute binds sooner "
            f"than the roofline says ({pure_hint})."
        )
    if cheapest is None:
        parts.append(
            f"None of the batches shown fits in memory at {c0:,.0f} tokens: the largest that does is "
            f"{max_b:,.0f} sequences."
        )
        return " ".join(parts)
    b_best = g.batch[cheapest, 0]
    best_cost = g.usd_per_million_output_tokens[cheapest, 0]
    if cheapest == 0 and at is None:
        parts.append(f"Among the batches shown that fit, batch {b_best:,.0f} is the cheapest.")
    elif best_cost >= first and bool(p.fits[0, 0]):
        parts.append(
            f"No batch shown that fits is cheaper than batch {b0:,.0f}: the cheapest is {b_best:,.0f} "
            f"at {fmt.usd(best_cost)} per million tokens."
        )
    else:
        parts.append(
            f"Among the batches shown, the cheapest that fits is {b_best:,.0f} at "
            f"{fmt.usd(best_cost)} per million tokens, "
            f"{first / best_cost:,.0f}x cheaper than batch {b0:,.0f}, "
            f"while each user still gets {g.tokens_per_s_per_user[cheapest, 0]:,.0f} tokens/s."
        )
    if np.isfinite(b_star) and max_b < b_star:
        parts.append(
            f"Memory caps the batch at {max_b:,.0f} sequences, below the balance point: "
            "more HBM (or a smaller KV cache) would lower the cost further."
        )
    return " ".join(parts)
