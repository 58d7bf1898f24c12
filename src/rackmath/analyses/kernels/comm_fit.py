"""Fit one collective implementation's curve on its measured calls
(:class:`~rackmath.analyses.kernels.rows.CommRows`): the alpha-beta line of
:func:`rackmath.core.efficiency.collective_time_s`, with the terms each implementation's
physics has (a pipeline where NCCL streams chunks, :func:`pipelined`; the busiest SM's turns
where DeepEP's low-latency kernels walk tokens one SM per expert, :func:`per_sm_tokens`).
:func:`rackmath.analyses.kernels.fit.fit_collectives` fits every collective of a chip."""

from __future__ import annotations

import numpy as np

from rackmath.analyses.kernels.rows import CommRows
from rackmath.core.efficiency import collective_time_s
from rackmath.specs.efficiency import CollectiveEfficiency


def pipelined(name: str) -> bool:
    """Whether a collective implementation streams chunks through a pipeline (NCCL's ring and
    tree algorithms), so its curve fits ``pipeline_latency_s``. The custom one-shot all-reduce
    is one step and DeepEP sends per-token messages: their tables fit the plain line (with the
    term, held-out medians do not fall: B200 custom 3% -> 14%, H100 DeepEP 5-8% unchanged)."""
    return name.endswith(":nccl")


def per_sm_tokens(name: str) -> bool:
    """Whether a collective implementation runs one SM per expert that walks its tokens in turn
    (DeepEP's low-latency dispatch and combine), so its curve fits ``sm_token_s``
    (:func:`rackmath.core.work.sm_tokens`; where its rows span more than one expert count)."""
    return name.endswith(":deepep_ll")


def fit_comm(
    r: CommRows, pipeline: bool = False, group_power: bool = False, per_sm: bool = False
) -> tuple[float, float, float, float, float, float]:
    """Fit :func:`rackmath.core.efficiency.collective_time_s` (the step's curve: each row's
    residual is timed through it) on the log of the latency (soft-L1 loss, fixed start).
    Returns (latency_s, hop_latency_s, seconds per byte, pipeline_latency_s, group power,
    sm_token_s); the hop term and the group power (0 to 4, with ``group_power``) only with more
    than one group size, the pipeline term only with ``pipeline``, the seconds a token of the
    busiest SM (1e-10 to 1e-3) only with ``per_sm`` and more than one expert count (with one,
    its turns follow the message)."""
    from scipy.optimize import least_squares

    log_t = np.log(r.latency_s)
    with_hop = np.unique(r.chips).size > 1
    with_sm = per_sm and np.unique(np.asarray(r.experts)).size > 1
    free = np.array([True, True, with_hop, pipeline, group_power and with_hop, with_sm])
    # all but the power in log space
    x0 = np.array([np.log(5e-6), np.log(1e-11), np.log(1e-6), np.log(1e-7), 1.0, np.log(1e-6)])[free]
    lo = np.array([np.log(1e-8), np.log(1e-15), np.log(1e-10), np.log(1e-12), 0.0, np.log(1e-10)])[free]
    hi = np.array([np.log(1e-2), np.log(1e-6), np.log(1e-3), np.log(1e-3), 4.0, np.log(1e-3)])[free]
    logs = np.array([True, True, True, True, False, True])

    def params(q: np.ndarray) -> tuple[float, float, float, float, float, float]:
        p = np.zeros(6)
        p[free] = q
        lat, spb, hop, pipe, power, per_token = np.where(free & logs, np.exp(p), np.where(logs, 0.0, p))
        return float(lat), float(hop), float(spb), float(pipe), float(power), float(per_token)

    def resid(q: np.ndarray) -> np.ndarray:
        lat, hop, spb, pipe, power, per_token = params(q)
        c = CollectiveEfficiency(lat, 1.0, hop, pipe, power, per_token)  # x = wire_bytes * spb
        t = collective_time_s(c, r.wire_bytes, 1.0 / spb, chips=r.chips, sm_tokens=r.sm_tokens)
        return np.asarray(np.log(t) - log_t)

    sol = least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1)
    return params(sol.x)


def comm_efficiency(r: CommRows, link_bytes_per_s: float, group_power: bool = False) -> CollectiveEfficiency:
    """One collective's curve (:func:`fit_comm`; a pipeline where NCCL runs, :func:`pipelined`;
    the busiest SM's turns where DeepEP's low-latency kernels run, :func:`per_sm_tokens`)."""
    lat, hop, spb, pipe, power, per_token = fit_comm(r, pipelined(r.name), group_power, per_sm_tokens(r.name))
    bandwidth_frac = float(min(1.0, 1.0 / (spb * link_bytes_per_s)))
    return CollectiveEfficiency(lat, bandwidth_frac, hop, pipe, power, per_token)
