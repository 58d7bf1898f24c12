"""Plain-language readings of analysis results, shared by the faces (CLI text, web page)."""

from __future__ import annotations

import numpy as np

from rackmath import fmt
from rackmath.analyses.explain import Explanation
from rackmath.analyses.figures import cheapest_fitting


def reading(result: Explanation) -> str:
    """One paragraph that says what the numbers mean."""
    g = result.decode
    c0 = float(result.contexts[0])
    first = g.usd_per_million_output_tokens[0, 0]
    cheapest = cheapest_fitting(g)
    b_star = result.balance.balance_batch_with_kv[0]
    max_b = result.max_batch[0]
    parts = [
        f"At batch 1 a step takes {fmt.seconds(g.step_s[0, 0])} and is bound by "
        f"{g.times.bottleneck[0, 0]}; a million output tokens cost {fmt.usd(first)}."
    ]
    if np.isfinite(b_star):
        parts.append(
            f"Weight fetches are amortised over the batch until about {b_star:,.0f} sequences at "
            f"{c0:,.0f} tokens of context, where compute takes over."
        )
    else:
        parts.append(
            f"At {c0:,.0f} tokens of context the KV-cache fetch per sequence exceeds its compute, "
            "so no batch becomes compute-bound: longer context costs bandwidth, not FLOPs."
        )
    if cheapest is not None:
        best = g.usd_per_million_output_tokens[cheapest, 0]
        parts.append(
            f"Among the batches shown, the cheapest that fits is {g.batch[cheapest, 0]:,.0f} at "
            f"{fmt.usd(best)} per million tokens, {first / best:,.0f}x cheaper than batch 1, "
            f"while each user still gets {g.tokens_per_s_per_user[cheapest, 0]:,.0f} tokens/s."
        )
    if np.isfinite(b_star) and max_b < b_star:
        parts.append(
            f"Memory caps the batch at {max_b:,.0f} sequences, below the balance point: "
            "more HBM (or a smaller KV cache) would lower the cost further."
        )
    return " ".join(parts)
