"""Request-level discrete-event simulation of one serving replica (continuous batching).

A replica runs the iteration-level scheduler of Orca, vLLM, SGLang and TensorRT-LLM: at
every step boundary it decides which sequences take part in the next forward pass. This is
the one continuous-batching simulator: ``simulate`` and ``fleet`` both run it (``fleet``'s
decode-only replica, one output length, a fixed prefill time per joiner and the batch as the
only cap, is :class:`BatchStepTable`); :mod:`rackmath.core.simulation` has the Poisson
arrival process it draws from. What it models, beyond that replica:

* requests with their own prompt (``I_i``) and output (``O_i``) lengths;
* a cap on running sequences (``max_seqs``: vLLM ``max_num_seqs``, TensorRT-LLM
  ``max_batch_size``, SGLang ``max_running_requests``) and on tokens per step
  (``max_tokens``: ``max_num_batched_tokens`` / ``max_num_tokens`` / the chunked prefill size);
* a KV pool of ``kv_tokens`` token slots; a request is admitted only when ``I + O`` slots are
  free (reserved whole, so nothing is ever evicted or preempted);
* chunked prefill: a prompt is fed ``min(remaining, budget, chunk)`` tokens per step (with
  ``chunked=False`` a prompt runs whole in one step or waits for a step with room);
* two scheduler policies. ``mixed`` (vLLM V1, TensorRT-LLM in-flight batching): each step
  gives one token to every decoding sequence first, then fills the rest of the token budget
  with prompt chunks, FCFS. ``prefill_first`` (SGLang's default, no mixed chunks): while
  prompts wait and fit, a step carries prompt chunks only and decoding sequences wait.

Step time. A step with ``d`` decoding sequences at mean cached context ``c`` and ``p``
prompt tokens takes ``T(d, p, c)``, read from a :class:`StepTable` that the caller fills
from the per-operator step model (one vectorized ``plan_step`` over the grid) and
interpolated trilinearly; grids are clamped at their ends.

Token timing. A prompt's last chunk yields its first token at the end of that step
(TTFT = that time - arrival). It then makes one token per step it decodes in and leaves
after its ``O``-th token, freeing its KV slots. TPOT = (finish - first token)/(O - 1).

Exactness. For ``max_seqs = 1``, ``O = 1`` and a constant step ``s`` the replica is an
M/D/1 queue (each request is one step of service, FIFO); with a step linear in the prompt
tokens and exponential prompt lengths it is M/M/1. The tests hold the simulation to the
Pollaczek-Khinchine mean wait of both (:func:`rackmath.core.simulation.mg1_mean_wait_s`).

Prefix reuse. A prompt's cached prefix skips its prefill: stated per request
(``Requests.prefix_tokens``, a hit rate) or found by the replica's prefix cache from the
prompt's block ids (``Requests.block_ids``; HBM blocks evicted least-recently-used, an optional
host tier, :mod:`rackmath.core.prefix_cache`). Either way the prefix's KV still takes its slots.

The loop is plain Python over steps (scalar arithmetic, a heap of finishing steps), no
NumPy inside: about 2-4 us per step, so 10^5 requests of 500 tokens at a batch of 256
(~2 x 10^5 steps) take well under a second plus the table lookups.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import prefix_cache as pc
from rackmath.core import simulation as sim
from rackmath.errors import InputError
from rackmath.specs import checks
from rackmath.specs.workload import LengthDist, Requests

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: The two scheduler policies (see the module docstring).
POLICIES: tuple[str, ...] = ("mixed", "prefill_first")
#: A pure-decode stretch longer than this many steps is advanced in one vectorized call.
FAST_FORWARD_MIN_STEPS = 8
# ----------------------------------------------------------------------------- inputs


def poisson_requests(
    rate_per_s: float, n: int, input_dist: LengthDist, output_dist: LengthDist, seed: int = 0
) -> Requests:
    """``n`` requests with Poisson arrivals (exponential gaps of mean ``1/rate``) and lengths drawn
    independently from the two distributions."""
    checks.positive("--rate", rate_per_s, allowed="requests per second > 0 (e.g. 5/s)")
    # the arrival process of core.simulation, over a horizon that holds n arrivals but for a
    # 10-sigma shortfall (then a longer horizon)
    horizon = (n + 10 * math.sqrt(n) + 20) / rate_per_s
    arrivals = sim.poisson_arrivals_s(rate_per_s, horizon, seed)
    while arrivals.size < n:  # pragma: no cover - a 10-sigma event
        horizon *= 2
        arrivals = sim.poisson_arrivals_s(rate_per_s, horizon, seed)
    rng = np.random.default_rng(seed + 1)
    return Requests(arrivals[:n], input_dist.sample(n, rng), output_dist.sample(n, rng))


# ----------------------------------------------------------------------------- step table


@dataclass(frozen=True)
class StepTable:
    """Step seconds ``T[d, p, c]`` on grids of decode sequences, prompt tokens and context.

    Grids are ascending; a grid of one point makes ``T`` constant along it.
    """

    decode: FloatArray
    prefill_tokens: FloatArray
    context: FloatArray
    step_s: FloatArray  # shape (decode, prefill_tokens, context)

    @classmethod
    def constant(cls, step_s: float) -> StepTable:
        one = np.zeros(1)
        return cls(one, one, one, np.full((1, 1, 1), float(step_s)))

    def __call__(self, d: ArrayLike, p: ArrayLike, c: ArrayLike) -> FloatArray:
        """Trilinear interpolation (vectorized; the simulator uses :meth:`scalar`)."""
        out = np.zeros(np.broadcast(np.asarray(d), np.asarray(p), np.asarray(c)).shape)
        axes = ((self.decode, d), (self.prefill_tokens, p), (self.context, c))
        idx, wts = zip(*(_bracket(g, x) for g, x in axes), strict=True)
        for a in (0, 1):
            for b in (0, 1):
                for k in (0, 1):
                    w = wts[0][a] * wts[1][b] * wts[2][k]
                    out = out + w * self.step_s[idx[0][a], idx[1][b], idx[2][k]]
        return np.asarray(out, dtype=float)

    def scalar(self) -> _ScalarLookup:
        return _ScalarLookup(self)


Bracket = tuple[tuple[IntArray, IntArray], tuple[FloatArray, FloatArray]]


def _bracket(grid: FloatArray, x: ArrayLike) -> Bracket:
    xs = np.clip(np.asarray(x, float), grid[0], grid[-1])
    if grid.size == 1:
        z = np.zeros(xs.shape, np.int64)
        return (z, z), (np.ones(xs.shape), np.zeros(xs.shape))
    hi = np.clip(np.searchsorted(grid, xs, side="right"), 1, grid.size - 1)
    lo = hi - 1
    w = (xs - grid[lo]) / (grid[hi] - grid[lo])
    return (lo, hi), (1.0 - w, w)


class _ScalarLookup:
    """The table as Python lists, for the per-step loop (no NumPy call per step)."""

    def __init__(self, t: StepTable) -> None:
        self.g = [list(map(float, t.decode)), list(map(float, t.prefill_tokens)), list(map(float, t.context))]
        self.v = t.step_s.tolist()

    @staticmethod
    def _find(grid: list[float], x: float) -> tuple[int, int, float]:
        n = len(grid)
        if n == 1 or x <= grid[0]:
            return 0, 0, 0.0
        if x >= grid[-1]:
            return n - 1, n - 1, 0.0
        import bisect

        hi = bisect.bisect_right(grid, x)
        lo = hi - 1
        return lo, hi, (x - grid[lo]) / (grid[hi] - grid[lo])

    def decode_only(self, d: float, contexts: ArrayLike) -> FloatArray:
        """Steps with ``d`` decoding sequences and no prompt tokens at each of ``contexts``: the
        table at ``p = 0`` interpolated in ``d``, then along the context grid (same clamping)."""
        d0, d1, wd = self._find(self.g[0], d)
        p0 = self._find(self.g[1], 0.0)[0]
        lo, hi = self.v[d0][p0], self.v[d1][p0]
        row = [a + wd * (b - a) for a, b in zip(lo, hi, strict=True)]
        return np.asarray(np.interp(np.asarray(contexts, dtype=np.float64), self.g[2], row), dtype=np.float64)

    def __call__(self, d: float, p: float, c: float) -> float:
        d0, d1, wd = self._find(self.g[0], d)
        p0, p1, wp = self._find(self.g[1], p)
        c0, c1, wc = self._find(self.g[2], c)
        v = self.v

        def along_c(a: int, b: int) -> float:
            row = v[a][b]
            return row[c0] + wc * (row[c1] - row[c0])

        lo = along_c(d0, p0) + wp * (along_c(d0, p1) - along_c(d0, p0))
        hi = along_c(d1, p0) + wp * (along_c(d1, p1) - along_c(d1, p0))
        return lo + wd * (hi - lo)


class BatchStepTable:
    """A step time that depends on the batch only: ``T = t[b - 1] + j x prefill`` for a step of
    ``b = d + j`` sequences of which ``j`` join with a whole prompt of ``prompt_tokens``.

    ``fleet``'s replica (:mod:`rackmath.analyses.economics.fleet`): decode-only step times per batch
    from a stated figure or the roofline, a fixed prefill cost per joiner, prompts unchunked.
    :func:`simulate` reads it like a :class:`StepTable` (``p`` prompt tokens are ``p / I``
    joiners); with ``Limits(max_seqs=B, max_tokens >= B (I + 1), chunk_tokens=I,
    kv_tokens=inf, chunked=False)`` the request simulator is exactly that replica. Worked
    number: ``t = [10, 12] ms``, prefill 3 ms, one decoder and one joiner: 12 + 3 = 15 ms.
    """

    def __init__(self, step_s_by_batch: ArrayLike, prompt_tokens: int, prefill_s: float = 0.0) -> None:
        self.steps = [float(x) for x in np.asarray(step_s_by_batch, float)]
        self.prompt_tokens = int(prompt_tokens)
        self.prefill_s = float(prefill_s)

    def scalar(self) -> BatchStepTable:
        return self

    def limits(self) -> Limits:
        """The caps that make :func:`simulate` this replica: ``B`` running sequences, room for
        ``B`` decode tokens plus ``B`` whole prompts a step, no KV cap."""
        b, i = len(self.steps), self.prompt_tokens
        return Limits(max_seqs=b, max_tokens=b * (i + 1), chunk_tokens=i, kv_tokens=math.inf, chunked=False)

    def decode_only(self, d: float, contexts: ArrayLike) -> FloatArray:
        return np.full(np.shape(contexts), self.steps[int(d) - 1])

    def __call__(self, d: float, p: float, c: float) -> float:
        joiners = p / self.prompt_tokens
        b = int(d + math.ceil(joiners))
        return self.steps[b - 1] + joiners * self.prefill_s


# ----------------------------------------------------------------------------- the replica


@dataclass(frozen=True)
class Limits:
    """What the runtime caps: running sequences, tokens per step, prompt chunk, KV slots."""

    max_seqs: int
    max_tokens: int
    chunk_tokens: int
    kv_tokens: float
    policy: str = "mixed"
    #: False: a prompt is prefilled in one step or waits (TensorRT-LLM without chunked context)
    chunked: bool = True

    def __post_init__(self) -> None:
        for name in ("max_seqs", "max_tokens", "chunk_tokens"):
            checks.whole(name, getattr(self, name))
        if self.max_tokens < self.max_seqs:  # every running sequence may need a token in one step
            raise InputError(
                "max_tokens", self.max_tokens, f"at least max_seqs ({self.max_seqs:,}) tokens per step"
            )
        if not self.kv_tokens >= 1:
            raise InputError("kv_tokens", self.kv_tokens, "at least one token of KV memory")
        if self.policy not in POLICIES:
            raise InputError("policy", self.policy, ", ".join(POLICIES))


class RequestTimes:
    """Latencies from each request's arrival, first token and finish times (s), as the benchmark
    clients define them; shared by the aggregated and the disaggregated runs.

    * **TTFT** = first token - arrival: the queueing before admission counts (vLLM ``bench serve``
      times it from the request's send on the client clock, ``vllm/benchmarks/serve.py``; AIPerf
      from query submission to the first non-empty response, its Metrics Reference v0.13;
      MLPerf loadgen from the query's scheduled issue in the Server scenario).
    * **TPOT** = (E2E - TTFT) / (O - 1) per request (vLLM's ``calculate_metrics``:
      ``(latency - ttft) / (output_len - 1)``; AIPerf's per-request inter-token latency and
      MLPerf's time per output token are the same ratio); NaN for one-token outputs.
    * **ITL**: every gap between two successive output tokens, the first token excluded, pooled
      over all requests (vLLM's ``itls``; AIPerf calls it inter-chunk latency). A step yields one
      token per sequence, so a gap is the time between the two steps that made them.
    * **E2E** = finish - arrival.
    """

    requests: Requests
    first_token_s: FloatArray
    finish_s: FloatArray
    #: the pooled ITL as weighted samples: ``itl_weight[k]`` gaps of ``itl_gap_s[k]`` seconds
    itl_gap_s: FloatArray
    itl_weight: FloatArray

    @property
    def ttft_s(self) -> FloatArray:
        return np.asarray(self.first_token_s - self.requests.arrival_s)

    @property
    def tpot_s(self) -> FloatArray:
        """``(finish - first)/(O - 1)`` per request; NaN for one-token outputs."""
        o = self.requests.output_tokens.astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray(np.where(o > 1, (self.finish_s - self.first_token_s) / (o - 1), np.nan))

    @property
    def e2e_s(self) -> FloatArray:
        return np.asarray(self.finish_s - self.requests.arrival_s)

    @property
    def span_s(self) -> float:
        """First arrival to last finish (requests a cut-off run left unfinished aside)."""
        done = self.finish_s[np.isfinite(self.finish_s)]
        return float(done.max() - self.requests.arrival_s[0]) if done.size else 0.0

    @property
    def output_tokens_per_s(self) -> float:
        return float(self.requests.output_tokens.sum() / self.span_s) if self.span_s > 0 else 0.0

    def itl_percentile_s(self, q: float) -> float | None:
        """The ``q``-th percentile (0-100) of the pooled ITL (:func:`weighted_percentile`)."""
        if not self.itl_gap_s.size:
            return None
        return float(weighted_percentile(self.itl_gap_s, self.itl_weight, q))

    def itl_within_frac(self, limit_s: float) -> float:
        """The share of all inter-token gaps within ``limit_s``."""
        w = self.itl_weight
        total = float(w.sum())
        return float(w[self.itl_gap_s <= limit_s].sum() / total) if total else 1.0


def weighted_percentile(values: ArrayLike, weights: ArrayLike, q: float) -> float:
    """The smallest value whose cumulative weight reaches ``q`` percent of the total (the
    inverted CDF of weighted samples; NumPy's ``inverted_cdf`` method when every weight is 1).
    Worked number: values [1, 2, 3] with weights [1, 1, 2]: p50 = 2 (2 of 4), p51 = 3."""
    v = np.asarray(values, float)
    w = np.asarray(weights, float)
    order = np.argsort(v, kind="stable")
    cum = np.cumsum(w[order])
    k = int(np.searchsorted(cum, q / 100.0 * cum[-1] * (1 - 1e-12), side="left"))
    return float(v[order][min(k, v.size - 1)])


def _no_gaps() -> FloatArray:
    return np.zeros(0)


@dataclass(frozen=True)
class RequestRun(RequestTimes):
    """Per-request times (s) of one simulated replica, and its step count."""

    requests: Requests
    first_token_s: FloatArray
    finish_s: FloatArray
    steps: int
    busy_s: float
    decode_seq_steps: float  # sum over steps of decoding sequences (mean batch = this / steps)
    #: sum over steps of (sequences in the step: decoding + taking prompt tokens) x step time
    seq_time_s: float = 0.0
    #: time the run ended (the last step's end, or the cutoff)
    end_s: float = 0.0
    itl_gap_s: FloatArray = field(default_factory=_no_gaps)
    itl_weight: FloatArray = field(default_factory=_no_gaps)
    #: per request: prompt tokens found cached (their prefill skipped), of them loaded from the
    #: host tier; None without prefix reuse
    hit_tokens: IntArray | None = None
    host_hit_tokens: IntArray | None = None

    @property
    def completed_frac(self) -> float:
        """Share of requests finished (all, unless the run hit its cutoff)."""
        return float(np.mean(np.isfinite(self.finish_s))) if self.finish_s.size else 1.0

    @property
    def mean_decode_batch(self) -> float:
        return self.decode_seq_steps / self.steps if self.steps else 0.0


def work_steps(requests: Requests, limits: Limits) -> float:
    """A lower bound on the steps a run takes: every output token after the first needs a
    step, at most ``max_seqs`` per step; every prompt token needs a step, at most
    ``max_tokens`` per step. Used to refuse unbounded work before starting."""
    decode = float((requests.output_tokens - 1).sum()) / limits.max_seqs
    prefill = float(requests.input_tokens.sum()) / limits.max_tokens
    return max(decode, prefill)


@dataclass(frozen=True)
class HostTier:
    """A host-memory tier under the HBM prefix cache: ``tokens`` of KV it holds (the replica's),
    ``load_s_per_token`` to bring one token's KV back (:mod:`rackmath.core.prefix_cache`)."""

    tokens: float
    load_s_per_token: float


def simulate(
    requests: Requests,
    table: StepTable | BatchStepTable,
    limits: Limits,
    *,
    cutoff_s: float = math.inf,
    host: HostTier | None = None,
) -> RequestRun:
    """Serve ``requests`` on one replica; see the module docstring for the rules.

    The run stops when every request is done or at the first step boundary at or after
    ``cutoff_s`` (an overloaded replica: requests unfinished by then keep NaN times).
    Prefix reuse: ``requests.prefix_tokens`` skip their prefill; ``requests.block_ids`` run
    through the replica's prefix cache (:mod:`rackmath.core.prefix_cache`, ``host`` its
    host-memory tier)."""
    arr = requests.arrival_s.tolist()
    inp = requests.input_tokens.tolist()
    out = requests.output_tokens.tolist()
    n = len(arr)
    held = [0] * n if requests.cached_tokens is None else requests.cached_tokens.tolist()
    skip = [0] * n if requests.prefix_tokens is None else requests.prefix_tokens.tolist()
    need = [h + i + o for h, i, o in zip(held, inp, out, strict=True)]
    worst = max(need)
    if worst > limits.kv_tokens:
        raise InputError(
            "request length",
            f"{worst:,} tokens (input + output)",
            f"at most the KV pool of {limits.kv_tokens:,.0f} tokens (shorter requests, a bigger plan or a "
            "larger KV memory fraction)",
        )
    chunked = limits.chunked
    if not chunked and max(inp) > limits.max_tokens:
        raise InputError(
            "request length",
            f"a {max(inp):,}-token prompt",
            f"prompts of at most the {limits.max_tokens:,}-token step budget when prefills are not chunked: "
            "shorter inputs, a larger budget or chunked prefill",
        )
    cache = None
    if requests.block_ids is not None:
        cache = pc.PrefixCache(
            free=float(limits.kv_tokens),
            block_tokens=requests.block_tokens,
            host_tokens=host.tokens if host else 0.0,
            load_s_per_token=host.load_s_per_token if host else 0.0,
        )
    hits = [0] * n
    host_hits = [0] * n
    step_of = table.scalar()
    first = [math.nan] * n
    finish = [math.nan] * n
    max_seqs, max_tokens, chunk = limits.max_seqs, limits.max_tokens, limits.chunk_tokens
    mixed = limits.policy == "mixed"
    kv_free = float(limits.kv_tokens)
    waiting: deque[int] = deque()  # arrived, not admitted (FCFS)
    prefilling: deque[list[float]] = deque()  # [request, prompt tokens left, ready time]
    finishing: list[tuple[int, int]] = []  # heap of (step index of the last token, request)
    decoding = 0
    ctx_sum = 0.0  # cached tokens over decoding sequences
    nxt = 0  # next request not yet arrived
    t = 0.0
    steps = 0
    dsteps = 0  # steps that carried decode tokens
    busy = 0.0
    seq_steps = 0.0
    seq_time = 0.0
    done = 0
    # the pooled inter-token gaps: (seconds, how many) per decode step, and vectorized stretches
    gap_s: list[float] = []
    gap_n: list[float] = []
    gap_chunks: list[tuple[FloatArray, float]] = []
    last_dec = 0.0  # end of the last step that carried decode tokens
    fresh: list[float] = []  # first-token times of sequences not yet in a decode step

    def gaps(t_end: float, d: int) -> None:
        stay = d - len(fresh)
        if stay:
            gap_s.append(t_end - last_dec)
            gap_n.append(stay)
        for f in fresh:
            gap_s.append(t_end - f)
            gap_n.append(1.0)
        fresh.clear()

    def release(r: int) -> None:
        nonlocal kv_free
        if cache is None:
            kv_free += need[r]
        else:
            cache.release(r)

    while done < n and t < cutoff_s:
        while nxt < n and arr[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        if decoding == 0 and not prefilling and not waiting:
            t = arr[nxt]  # idle until the next arrival
            continue
        a = arr[nxt] if nxt < n else math.inf
        if (
            not prefilling
            and not waiting
            and finishing[0][0] - dsteps > FAST_FORWARD_MIN_STEPS
            and a - t > FAST_FORWARD_MIN_STEPS * step_of(decoding, 0.0, ctx_sum / decoding)
        ):
            # a pure-decode stretch: same d, context +1 a step, until the next finish or arrival
            k = finishing[0][0] - dsteps - 1
            dts = step_of.decode_only(decoding, ctx_sum / decoding + np.arange(k))
            ends = t + np.cumsum(dts)
            m = 1 + int(np.searchsorted(ends[:-1], a, side="left"))  # steps starting before a
            m = min(m, k)
            gaps(float(ends[0]), decoding)
            if m > 1:
                gap_chunks.append((np.diff(ends[:m]), float(decoding)))
            last_dec = float(ends[m - 1])
            dt = last_dec - t
            t += dt
            busy += dt
            seq_time += decoding * dt
            seq_steps += decoding * m
            ctx_sum += decoding * m
            dsteps += m
            steps += m
            continue
        budget: float = max_tokens
        running = decoding + len(prefilling)
        # admission: FCFS, while a sequence slot and the whole request's KV are free
        while waiting and running < max_seqs:
            r = waiting[0]
            if cache is None:
                if need[r] > kv_free:
                    break
                kv_free -= need[r]
                prefilling.append([r, inp[r] - skip[r], t])
                hits[r] = skip[r]
            else:
                got = cache.admit(r, requests.ids(r), inp[r], need[r], t)
                if got is None:
                    break
                prefilling.append([r, inp[r] - got.cached_tokens, got.ready_s])
                hits[r], host_hits[r] = got.cached_tokens, got.host_hit_tokens
            waiting.popleft()
            running += 1
        ready = [e for e in prefilling if e[2] <= t] if cache is not None else prefilling
        prefill_only = not mixed and bool(ready)
        d = 0 if prefill_only else decoding
        budget -= d
        p = 0.0
        p_seqs = 0
        completed: list[int] = []
        for entry in ready:
            if budget <= 0 or (not chunked and entry[1] > budget):
                break
            take = min(entry[1], budget, chunk)
            entry[1] -= take
            budget -= take
            p += take
            p_seqs += 1
            if entry[1] == 0:
                completed.append(int(entry[0]))
        if d == 0 and p == 0:
            if len(ready) < len(prefilling):  # prompts wait for their KV from the host tier
                t = min(min(e[2] for e in prefilling), a)
                continue
            # a decode-capped, budget-starved corner: nothing can move
            raise InputError("max_tokens", max_tokens, "a token budget of at least max_seqs + 1")
        dt = step_of(d, p, ctx_sum / d if d else 0.0)
        t += dt
        busy += dt
        seq_time += (d + p_seqs) * dt
        seq_steps += d
        if d:
            gaps(t, d)
            last_dec = t
            ctx_sum += d
            dsteps += 1
            while finishing and finishing[0][0] == dsteps:
                _, r = heapq.heappop(finishing)
                finish[r] = t
                release(r)
                decoding -= 1
                ctx_sum -= need[r]
                done += 1
        if completed:
            prefilling = deque(e for e in prefilling if e[1] > 0)
        for r in completed:
            first[r] = t
            if cache is not None:
                cache.register(r, requests.ids(r), inp[r])
            if out[r] == 1:
                finish[r] = t
                release(r)
                done += 1
            else:  # its tokens 2..O come in the next O - 1 steps that carry decode tokens
                decoding += 1
                fresh.append(t)
                ctx_sum += held[r] + inp[r] + 1
                heapq.heappush(finishing, (dsteps + out[r] - 1, r))
        steps += 1
    gap_arr = [np.asarray(gap_s, float)] + [c for c, _ in gap_chunks]
    wt_arr = [np.asarray(gap_n, float)] + [np.full(c.size, w) for c, w in gap_chunks]
    reuse = cache is not None or requests.prefix_tokens is not None
    return RequestRun(
        requests=requests,
        first_token_s=np.asarray(first),
        finish_s=np.asarray(finish),
        steps=steps,
        busy_s=busy,
        decode_seq_steps=seq_steps,
        seq_time_s=seq_time,
        end_s=t,
        itl_gap_s=np.concatenate(gap_arr),
        itl_weight=np.concatenate(wt_arr),
        hit_tokens=np.asarray(hits, np.int64) if reuse else None,
        host_hit_tokens=np.asarray(host_hits, np.int64) if cache is not None else None,
    )
