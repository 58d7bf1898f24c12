"""Request-level simulation of a disaggregated xPyD fleet: prefill pool, KV transfer, decode pool.

Built from the one request simulator (:func:`rackmath.core.requests.simulate`), run twice:

1. **Prefill pool.** ``x`` prefill replicas; requests are dealt round-robin in arrival order
   (replica ``i mod x``), each replica queues and batches its prompts under its caps. A
   request leaves the pool when its prompt's last chunk ends (``O = 1`` on that replica: it
   makes one token, the first, and frees its KV).
2. **KV transfer.** Its prompt's KV moves to the decode pool in ``t_kv`` (per request, the
   caller's figure from :func:`rackmath.core.network.kv_transfer_s`); no link contention
   between transfers (an optimistic assumption: one prompt's KV at a time is a few ms at most).
   The first token reaches the user when the decode pool holds the KV:
   ``TTFT = prefill done + t_kv - arrival``.
3. **Decode pool.** ``y`` decode replicas; requests are dealt round-robin in the order their
   KV lands. Each arrives with its ``I`` prompt tokens cached (held and attended to, never
   prefilled) and its first token as a one-token input; its tokens ``2..O`` come from the
   decode replica (``O - 1`` tokens there). The one-token input rides in a step as a
   one-token prompt chunk, the step table's ``p = 1`` (its attention over the cached prompt is
   costed as a decode token's would not be: a small approximation, one step per request).
   ``TPOT = (finish - first token) / (O - 1)``; it includes any wait for a decode slot.

A request with ``O = 1`` is done at the prefill pool (its token is the first and last) and is
never transferred. No NumPy inside the two simulations' loops; this module adds O(n) array
work around them.

Worked number (one request, idle fleet, constant steps): arrival 0, prefill step 40 ms,
``t_kv`` 5 ms, decode step 10 ms, ``O = 4``: TTFT = 45 ms; tokens 2, 3, 4 at 55, 65, 75 ms;
TPOT = 30 ms / 3 = 10 ms.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import requests as rq
from rackmath.errors import InputError
from rackmath.specs import checks
from rackmath.specs.workload import Requests

FloatArray = NDArray[np.float64]

#: Most replicas in either pool (a fleet larger than this is sized by ``plan``, not simulated).
MAX_POOL_REPLICAS = 1024


@dataclass(frozen=True)
class DisaggregatedRun(rq.RequestTimes):
    """Per-request times (s) of one simulated xPyD fleet, with each pool's step count."""

    requests: Requests
    prefill_done_s: FloatArray
    first_token_s: FloatArray  # prefill done + KV transfer
    finish_s: FloatArray
    kv_transfer_s: FloatArray
    prefill_steps: int
    decode_steps: int
    decode_seq_steps: float
    itl_gap_s: FloatArray
    itl_weight: FloatArray

    @property
    def steps(self) -> int:
        return self.prefill_steps + self.decode_steps

    @property
    def mean_decode_batch(self) -> float:
        """Mean decoding sequences per decode-pool step (over the decode replicas' steps)."""
        return self.decode_seq_steps / self.decode_steps if self.decode_steps else 0.0


def _check_pool(name: str, replicas: int) -> int:
    allowed = f"a whole number of replicas from 1 to {MAX_POOL_REPLICAS:,}"
    return checks.whole(name, replicas, maximum=MAX_POOL_REPLICAS, allowed=allowed)


def _round_robin(
    order: NDArray[np.int64], replicas: int, build: Requests, table: object, limits: rq.Limits
) -> tuple[FloatArray, FloatArray, int, float, list[rq.RequestRun]]:
    """Deal ``build``'s requests (already in ``order``) over ``replicas`` and simulate each.
    Returns (first token, finish) per request of ``build`` in its own order, steps, seq-steps
    and each replica's run."""
    first = np.full(build.size, np.nan)
    finish = np.full(build.size, np.nan)
    steps, seq_steps = 0, 0.0
    runs = []
    for k in range(replicas):
        idx = order[k::replicas]
        if idx.size == 0:
            continue
        run = rq.simulate(build.take(idx), table, limits)  # type: ignore[arg-type]
        first[idx], finish[idx] = run.first_token_s, run.finish_s
        steps += run.steps
        seq_steps += run.decode_seq_steps
        runs.append(run)
    return first, finish, steps, seq_steps, runs


def simulate_disaggregated(
    requests: Requests,
    *,
    prefill_table: rq.StepTable,
    prefill_limits: rq.Limits,
    prefill_replicas: int,
    decode_table: rq.StepTable,
    decode_limits: rq.Limits,
    decode_replicas: int,
    kv_transfer_s: ArrayLike,
) -> DisaggregatedRun:
    """Serve ``requests`` on ``x`` prefill and ``y`` decode replicas (see the module docstring).

    ``kv_transfer_s`` is one figure or one per request (its prompt's KV over the link)."""
    x = _check_pool("prefill replicas", prefill_replicas)
    y = _check_pool("decode replicas", decode_replicas)
    n = requests.size
    t_kv = np.broadcast_to(np.asarray(kv_transfer_s, float), (n,))
    if not np.all(np.isfinite(t_kv) & (t_kv >= 0)):
        raise InputError("kv_transfer_s", float(np.min(t_kv)), "a finite time >= 0")
    # 1. the prefill pool: each request makes one token there (its first)
    pre = replace(requests, output_tokens=np.ones(n, np.int64))  # prefix reuse rides along
    done, _, p_steps, _, _ = _round_robin(np.arange(n), x, pre, prefill_table, prefill_limits)
    first = done + t_kv
    finish = np.where(requests.output_tokens == 1, done, np.nan)  # done at the prefill pool
    # 2. the decode pool, in the order the KV lands (stable for ties)
    go = np.flatnonzero(requests.output_tokens > 1)
    d_steps, d_seq = 0, 0.0
    gaps: list[FloatArray] = []
    weights: list[FloatArray] = []
    if go.size:
        land = first[go]
        order = np.argsort(land, kind="stable")
        dec = Requests(
            land[order],
            np.ones(go.size, np.int64),
            requests.output_tokens[go][order] - 1,
            requests.input_tokens[go][order],
        )
        second, fin, d_steps, d_seq, runs = _round_robin(
            np.arange(go.size), y, dec, decode_table, decode_limits
        )
        finish[go[order]] = fin
        # ITL: token 1 (the KV landed) to token 2 (the decode pool's first), then that pool's gaps
        gaps = [second - land[order], *(r.itl_gap_s for r in runs)]
        weights = [np.ones(go.size), *(r.itl_weight for r in runs)]
    return DisaggregatedRun(
        requests=requests,
        prefill_done_s=done,
        first_token_s=first,
        finish_s=finish,
        kv_transfer_s=np.asarray(t_kv, float),
        prefill_steps=p_steps,
        decode_steps=d_steps,
        decode_seq_steps=d_seq,
        itl_gap_s=np.concatenate(gaps) if gaps else np.zeros(0),
        itl_weight=np.concatenate(weights) if weights else np.zeros(0),
    )
