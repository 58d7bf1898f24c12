"""Fleets and traffic: replicas, chips and dollars for a global token rate, batching as a
train schedule, and a discrete-event check of both (D8-D10).

The decode step time comes either from a stated figure (the lecture's 15.625 ms, i.e. 64
steps per second, the HBM drain time of a full chip) or from a deployment's roofline
(:meth:`rackmath.analyses.serving.deployment.Deployment.decode`, one step time per batch size).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rackmath.analyses.serving import pooled
from rackmath.analyses.serving.deployment import Deployment, check_context
from rackmath.core import economics as econ
from rackmath.core import requests as rq
from rackmath.core import roofline as rl
from rackmath.core import simulation as sim
from rackmath.errors import InputError
from rackmath.frames import Col, Layout, Record, Tabular
from rackmath.progress import track
from rackmath.specs import checks
from rackmath.specs.bounds import MAX_TRAFFIC
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.workload import Requests

FloatArray = NDArray[np.float64]

#: The lecture's operating point (D10): 2,000 sequences, 64 steps per second.
LECTURE_BATCH = 2000
LECTURE_STEP_S = 1.0 / 64
#: "Hundreds of millions of tokens per second" for a large provider (D10, D28: 500M global).
LECTURE_TRAFFIC_TOKENS_PER_S = 500e6
LECTURE_CHIPS_PER_REPLICA = 72  # one GB200 NVL72 rack
DEFAULT_OUTPUT_TOKENS = 256
DEFAULT_LOADS = (0.2, 0.5, 0.8, 0.95)
#: The train check's arrival rate is capped at this share of a train's seats per interval,
#: so no train leaves full and the closed forms (D8) hold.
TRAIN_CHECK_MAX_FILL_FRAC = 0.5
#: The train check simulates at least this many arrivals and this many departures.
TRAIN_CHECK_ARRIVALS = 2000
TRAIN_CHECK_INTERVALS = 200

#: Input ranges. A replica batch above 2^16 sequences is beyond any HBM; a load is a
#: fraction of capacity up to 2x (overload); at most 16 loads; 2^17 tokens per request.
MAX_BATCH = 2**16
MAX_LOAD_FRAC = 2.0
MAX_LOADS = 16
MAX_OUTPUT_TOKENS = 2**17
MAX_REQUESTS = 10**6
#: Work budget of one ``fleet`` call (all loads and the train check together): simulated
#: arrivals (memory, ~100 bytes each) and simulated decode steps (~10 us each), i.e. a few
#: seconds and a few hundred MB at most. Raise them with the ``max_simulated_*`` arguments.
MAX_SIMULATED_REQUESTS = 2_000_000
MAX_SIMULATED_STEPS = 500_000
#: The shortest stated decode step: 1 us, below one kernel launch (~2-5 us on current GPUs),
#: so no forward pass of any model is faster. It also keeps the train check's arithmetic in
#: range: arrivals over a horizon of seconds are compared with departures ``k x T``, and at
#: ``T = 1e-30 s`` the float64 rounding of ``k T`` (1e-16 of a second) exceeds ``T`` itself,
#: which once printed a mean latency of -2e-13 s.
MIN_STEP_S = 1e-6


#: Least traffic a fleet is sized for: one output token per second (one reader takes in
#: about 5-10). Below it a fleet is one idle replica, and its cost per token is that
#: replica's rent divided by almost nothing (1e-30 tokens/s priced a million tokens at $6e32).
MIN_TRAFFIC_TOKENS_PER_S = 1.0


def check_traffic(value: float, field: str = "traffic") -> float:
    """``value`` output tokens/s when finite and at least :data:`MIN_TRAFFIC_TOKENS_PER_S`."""
    if not (np.isfinite(value) and value >= MIN_TRAFFIC_TOKENS_PER_S):
        allowed = (
            f"at least {MIN_TRAFFIC_TOKENS_PER_S:g} output token/s (a fleet for less is one idle "
            "replica, and its cost per token means nothing)"
        )
        raise InputError(field, value, allowed)
    if value > MAX_TRAFFIC:
        raise InputError(field, value, f"at most {MAX_TRAFFIC:g} output tokens/s")
    return float(value)


@dataclass(frozen=True)
class LoadPoint(Record):
    load_frac: float
    arrival_rate_per_s: float
    requests: int
    completed_frac: float
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    mean_batch: float
    tokens_per_s: float


@dataclass(frozen=True)
class TrainCheck(Record):
    """The train schedule simulated at one arrival rate, beside its closed forms (D8)."""

    interval_s: float
    run_s: float
    arrival_rate_per_s: float
    worst_latency_s: float
    mean_latency_s: float
    closed_form_worst_s: float
    closed_form_mean_s: float


@dataclass(frozen=True)
class Fleet(Tabular):
    """A sized fleet; as a table, one row per simulated load."""

    frame_layout = Layout(
        columns=(
            Col("batch", "batch", "sequences"),
            Col("step_s", "step_s", "s"),
            Col("replicas", "replicas", "replicas"),
            Col("chips", "chips", "chips"),
            Col("traffic_tokens_per_s", "traffic_tokens_per_s", "tokens/s"),
            Col("usd_per_million_tokens", "usd_per_million_output_tokens", "USD per 1e6 tokens"),
            Col("capacity_requests_per_s", "capacity_requests_per_s", "requests/s"),
            Col("loads[].load_frac", "load_frac", "1"),
            Col("loads[].arrival_rate_per_s", "arrival_rate_per_s", "requests/s"),
            Col("loads[].completed_frac", "completed_frac", "1"),
            Col("loads[].ttft_p50_s", "ttft_p50_s", "s"),
            Col("loads[].ttft_p99_s", "ttft_p99_s", "s"),
            Col("loads[].tpot_p50_s", "tpot_p50_s", "s"),
            Col("loads[].tpot_p99_s", "tpot_p99_s", "s"),
            Col("loads[].mean_batch", "mean_batch", "sequences"),
            Col("loads[].tokens_per_s", "tokens_per_s", "tokens/s"),
        ),
        dims=("load",),
        coords=("load_frac",),
    )

    batch: float
    step_s: float
    chips_per_replica: int
    usd_per_chip_hour: float
    traffic_tokens_per_s: float
    output_tokens: int
    source: str  # where the step time came from
    tokens_per_s_per_replica: float
    replicas: int
    train: TrainCheck
    loads: tuple[LoadPoint, ...]
    capacity_requests_per_s: float
    #: the efficiency of the deployment the step times came from (None: a stated step time)
    efficiency: dict[str, Any] | None = None

    @property
    def chips(self) -> int:
        return self.replicas * self.chips_per_replica

    @property
    def usd_per_day(self) -> float:
        return float(econ.usd_per_day(self.chips, self.usd_per_chip_hour))

    @property
    def usd_per_million_tokens(self) -> float:
        """The whole fleet's rental over the traffic it carries (one second of both)."""
        return float(
            rl.usd_per_million_tokens(1.0, self.traffic_tokens_per_s, self.chips, self.usd_per_chip_hour)
        )

    @property
    def requests_per_s_per_replica(self) -> float:
        return self.traffic_tokens_per_s / self.replicas / self.output_tokens

    @property
    def batch_fill_time_s(self) -> float:
        """Time for one replica's share of the traffic to bring a batch's worth of requests."""
        return float(econ.batch_fill_time_s(self.batch, self.requests_per_s_per_replica))

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch": self.batch,
            "step_s": self.step_s,
            "step_source": self.source,
            "tokens_per_s_per_replica": self.tokens_per_s_per_replica,
            "traffic_tokens_per_s": self.traffic_tokens_per_s,
            "replicas": self.replicas,
            "chips_per_replica": self.chips_per_replica,
            "chips": self.chips,
            "usd_per_chip_hour": self.usd_per_chip_hour,
            "usd_per_day": self.usd_per_day,
            "usd_per_million_tokens": self.usd_per_million_tokens,
            "output_tokens_per_request": self.output_tokens,
            "requests_per_s_per_replica": self.requests_per_s_per_replica,
            "batch_fill_time_s": self.batch_fill_time_s,
            "train": self.train.to_dict(),
            "capacity_requests_per_s": self.capacity_requests_per_s,
            "loads": [p.to_dict() for p in self.loads],
            "efficiency": self.efficiency,
        }


def reference_deployment(
    model: str | ModelSpec | None, system: str | SystemSpec | None, efficiency: str = "kernel"
) -> Deployment | None:
    """The deployment whose roofline gives ``fleet`` its step times: a model on a system (ids
    or specs) at their defaults, both or neither (None: the stated step time)."""
    if (model is None) != (system is None):
        raise InputError("--model/--on", model or system, "both --model and --on, or neither")
    if model is None or system is None:
        return None
    from rackmath.catalog.loader import resolve_model
    from rackmath.catalog.loader import system as catalog_system

    return pooled.make_deployment(
        resolve_model(model) if isinstance(model, str) else model,
        catalog_system(system) if isinstance(system, str) else system,
        efficiency=efficiency,
    )


def step_times_from_deployment(deployment: Deployment, max_batch: int, context: float) -> FloatArray:
    """Decode step time for every batch 1..max_batch at ``context`` (the roofline)."""
    batches = np.arange(1, max_batch + 1, dtype=float)
    return np.asarray(deployment.decode(batches, [context]).step_s[:, 0], dtype=float)


def _steady_state(run: rq.RequestRun, start_s: float, end_s: float) -> tuple[float, float]:
    """(mean running sequences, tokens/s) over ``[start_s, end_s)``.

    Request ``i`` occupies a slot from one step before its first token to its last token
    and emits its tokens evenly over that span.
    """
    out = run.requests.output_tokens.astype(float)
    per_token = (run.finish_s - run.first_token_s) / np.maximum(out - 1, 1)
    begin = run.first_token_s - per_token
    span = run.finish_s - begin
    overlap = np.clip(np.minimum(run.finish_s, end_s) - np.maximum(begin, start_s), 0.0, None)
    overlap = np.where(np.isfinite(overlap), overlap, 0.0)
    width = end_s - start_s
    tokens = np.where(span > 0, overlap / span * out, 0.0)
    return float(overlap.sum() / width), float(tokens.sum() / width)


def _check_batch_bound(batch: int) -> None:
    if batch > MAX_BATCH:
        raise InputError("batch", batch, f"a whole number from 1 to {MAX_BATCH:,}")


def _horizon_s(requests: int, rate_per_s: float, residence_s: float) -> float:
    """Arrival horizon of one load: ``requests`` arrivals or 20 full-batch residences."""
    return max(requests / rate_per_s, 20 * residence_s)


def simulation_work(
    step_s_by_batch: FloatArray, *, output_tokens: int, loads: tuple[float, ...] | list[float], requests: int
) -> tuple[float, float]:
    """(simulated arrivals, simulated decode steps) that :func:`simulate_loads` would run.

    Arrivals per load: rate x horizon. Steps per load: at most the horizon plus one
    residence over the shortest step (the server steps only while busy), and at most
    three horizons (the cut-off).
    """
    b = step_s_by_batch.size
    residence = output_tokens * float(step_s_by_batch[-1])
    capacity = b / residence
    shortest = float(np.min(step_s_by_batch))
    arrivals = steps = 0.0
    for load in loads:
        rate = load * capacity
        horizon = _horizon_s(requests, rate, residence)
        arrivals += rate * horizon
        steps += min(horizon + residence, 3 * horizon) / shortest
    return arrivals, steps


def simulate_loads(
    step_s_by_batch: FloatArray,
    *,
    output_tokens: int,
    prefill_s: float = 0.0,
    loads: tuple[float, ...] | list[float] = DEFAULT_LOADS,
    requests: int = 6000,
    seed: int = 0,
) -> tuple[tuple[LoadPoint, ...], float]:
    """Continuous batching at fractions of capacity; returns (points, capacity requests/s).

    Capacity: a full batch ``B`` serves ``B`` requests every ``out x t(B) + B x prefill``.
    Each load runs ``requests`` arrivals or 20 full-batch residence times, whichever is
    longer; latencies drop the first 10% of requests (warm-up), and the mean batch and
    throughput are measured over the steady window from 20% to 90% of the arrival horizon.
    """
    b = step_s_by_batch.size
    residence = output_tokens * float(step_s_by_batch[-1]) + b * prefill_s
    capacity = b / residence
    # the request simulator as this replica: batch-only step times, every joiner's prompt
    # whole in its first step, no KV cap (see core.requests.BatchStepTable)
    table = rq.BatchStepTable(step_s_by_batch, prompt_tokens=1, prefill_s=prefill_s)
    limits = table.limits()
    points = []
    for i, load in enumerate(track(loads, "Simulating loads")):
        checks.positive("load", load, allowed="fractions of capacity > 0")
        rate = load * capacity
        horizon = _horizon_s(requests, rate, residence)
        arrivals = sim.poisson_arrivals_s(rate, horizon, seed + i)
        n = arrivals.size
        one = np.ones(n, np.int64)  # fleet's request: a one-token prompt (its cost is prefill_s)
        reqs = Requests(arrivals, one, np.full(n, output_tokens, np.int64))
        run = rq.simulate(reqs, table, limits, cutoff_s=3 * horizon)
        keep = slice(arrivals.size // 10, None)
        ttft, tpot = run.ttft_s[keep], run.tpot_s[keep]
        mean_batch, tokens_per_s = _steady_state(run, 0.2 * horizon, 0.9 * horizon)
        points.append(
            LoadPoint(
                load_frac=float(load),
                arrival_rate_per_s=float(rate),
                requests=int(arrivals.size),
                completed_frac=run.completed_frac,
                ttft_p50_s=float(np.nanpercentile(ttft, 50)) if np.isfinite(ttft).any() else np.nan,
                ttft_p99_s=float(np.nanpercentile(ttft, 99)) if np.isfinite(ttft).any() else np.nan,
                tpot_p50_s=float(np.nanpercentile(tpot, 50)) if np.isfinite(tpot).any() else np.nan,
                tpot_p99_s=float(np.nanpercentile(tpot, 99)) if np.isfinite(tpot).any() else np.nan,
                mean_batch=mean_batch,
                tokens_per_s=tokens_per_s,
            )
        )
    return tuple(points), float(capacity)


def train_check(interval_s: float, run_s: float, batch: int, rate_per_s: float, seed: int = 0) -> TrainCheck:
    """Simulate the train at ``rate_per_s`` (capped so trains never fill) beside its closed forms."""
    rate = min(rate_per_s, TRAIN_CHECK_MAX_FILL_FRAC * batch / interval_s)
    horizon_s = max(TRAIN_CHECK_ARRIVALS / rate, TRAIN_CHECK_INTERVALS * interval_s)
    arrivals = sim.poisson_arrivals_s(rate, horizon_s, seed)
    lat = sim.simulate_train_schedule(arrival_s=arrivals, interval_s=interval_s, run_s=run_s, max_batch=batch)
    # a request is done at least run_s after it arrives: a floor against the rounding of k x T
    lat = np.maximum(lat, run_s)
    return TrainCheck(
        interval_s=interval_s,
        run_s=run_s,
        arrival_rate_per_s=float(rate),
        worst_latency_s=float(lat.max()),
        mean_latency_s=float(lat.mean()),
        closed_form_worst_s=float(econ.train_worst_latency_s(interval_s, run_s)),
        closed_form_mean_s=float(econ.train_mean_latency_s(interval_s, run_s)),
    )


def fleet(
    *,
    traffic_tokens_per_s: float = LECTURE_TRAFFIC_TOKENS_PER_S,
    batch: int = LECTURE_BATCH,
    step_s: float | None = None,
    deployment: Deployment | None = None,
    context: float = 4096,
    chips_per_replica: int | None = None,
    usd_per_chip_hour: float | None = None,
    output_tokens: int = DEFAULT_OUTPUT_TOKENS,
    loads: tuple[float, ...] | list[float] = DEFAULT_LOADS,
    requests: int = 6000,
    seed: int = 0,
    max_simulated_requests: float = MAX_SIMULATED_REQUESTS,
    max_simulated_steps: float = MAX_SIMULATED_STEPS,
) -> Fleet:
    """Size a fleet for ``traffic_tokens_per_s`` and simulate one replica under load.

    With a ``deployment`` the step time at each batch comes from its roofline at
    ``context`` and chips and price default to the deployment's; otherwise ``step_s``
    (default the lecture's 1/64 s) holds at every batch size (a full-HBM decode loop runs at
    the drain time whatever the batch).
    """
    check_traffic(traffic_tokens_per_s, "--traffic")
    checks.whole_valued("batch", batch)
    checks.whole_valued("output tokens", output_tokens)
    if output_tokens > MAX_OUTPUT_TOKENS:
        raise InputError("output tokens", output_tokens, f"a whole number from 1 to {MAX_OUTPUT_TOKENS:,}")
    checks.whole_valued("requests", requests, maximum=MAX_REQUESTS)
    loads = list(loads)
    if not 1 <= len(loads) <= MAX_LOADS:
        raise InputError("loads", len(loads), f"1 to {MAX_LOADS} loads")
    for load in loads:
        checks.between(
            "load",
            load,
            0.0,
            MAX_LOAD_FRAC,
            low_open=True,
            allowed=f"a fraction of capacity in (0, {MAX_LOAD_FRAC:g}]",
        )
    checks.whole_valued("seed", seed, minimum=0)
    batch = int(batch)
    if deployment is not None:
        check_context(deployment.model, context, "--context")
        fits = int(deployment.max_concurrency([context])[0])
        if batch > fits:
            allowed = f"at most {fits:,} sequences of {context:,.0f} tokens fit in memory"
            raise InputError("batch", batch, allowed)
        _check_batch_bound(batch)  # after the memory check, whose message is the more useful one
        steps = step_times_from_deployment(deployment, batch, context)
        d = deployment
        source = f"roofline of {d.model.id} on {d.chips} x {d.system.chip.id} at {context:,.0f} tokens"
        chips = deployment.chips if chips_per_replica is None else chips_per_replica
        price = deployment.usd_per_chip_hour if usd_per_chip_hour is None else usd_per_chip_hour
    else:
        step = checks.positive("step time", LECTURE_STEP_S if step_s is None else step_s)
        if step < MIN_STEP_S:
            raise InputError(
                "--step",
                f"{step:g} s",
                f"a decode step of at least {MIN_STEP_S * 1e6:g} us (one kernel launch)",
            )
        _check_batch_bound(batch)
        steps = np.full(batch, step)
        source = "stated step time (same at every batch)"
        chips = LECTURE_CHIPS_PER_REPLICA if chips_per_replica is None else chips_per_replica
        if usd_per_chip_hour is None:
            from rackmath.catalog.loader import chip

            price = chip("gb200").price_usd_per_chip_hour.value_usd
        else:
            price = usd_per_chip_hour
    checks.positive("price per chip-hour", price)
    checks.whole_valued("chips per replica", chips)
    full_step = float(steps[-1])
    per_replica = float(econ.replica_tokens_per_s(batch, full_step))
    replicas = int(econ.replicas_needed(traffic_tokens_per_s, per_replica))
    train_rate = traffic_tokens_per_s / replicas / output_tokens
    arrivals, sim_steps = simulation_work(steps, output_tokens=output_tokens, loads=loads, requests=requests)
    train_cap = TRAIN_CHECK_MAX_FILL_FRAC * batch / full_step
    arrivals += max(TRAIN_CHECK_ARRIVALS, TRAIN_CHECK_INTERVALS * full_step * min(train_rate, train_cap))
    if arrivals > max_simulated_requests:
        raise InputError(
            "simulation",
            f"{arrivals:,.0f} simulated requests",
            f"at most {max_simulated_requests:,} (lower --batch, --loads or --requests, "
            "or raise --max-sim-requests)",
        )
    if sim_steps > max_simulated_steps:
        raise InputError(
            "simulation",
            f"{sim_steps:,.0f} simulated decode steps",
            f"at most {max_simulated_steps:,} (lower --output-tokens or --loads, or raise --max-sim-steps)",
        )
    points, capacity = simulate_loads(
        steps, output_tokens=output_tokens, loads=loads, requests=requests, seed=seed
    )
    return Fleet(
        batch=float(batch),
        step_s=full_step,
        chips_per_replica=int(chips),
        usd_per_chip_hour=float(price),
        traffic_tokens_per_s=float(traffic_tokens_per_s),
        output_tokens=int(output_tokens),
        source=source,
        tokens_per_s_per_replica=per_replica,
        replicas=replicas,
        train=train_check(full_step, full_step, batch, train_rate, seed),
        loads=points,
        capacity_requests_per_s=capacity,
        efficiency=None if deployment is None else deployment.efficiency_described,
    )
