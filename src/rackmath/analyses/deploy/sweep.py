"""Sweeps: the cartesian product of models, systems, plans, precisions, batch, context and
traffic, evaluated in chunks, locally or on a Dask cluster, into one tidy table.

The pipeline is pure and has three steps:

1. :func:`parse_spec` validates a mapping (a YAML file's contents) into a :class:`SweepSpec`;
   a bad field is one :class:`~rackmath.errors.InputError` line naming it.
2. :func:`make_chunks` resolves every id against the catalog, counts the points
   (``models x systems x plans x precisions x efficiency x batch x context x max(1, traffic)``), refuses
   more than ``max_points`` and groups the (model, system, plan, precision) combinations
   into chunks of at most ``chunk_points`` points (a combination whose own grid is larger is
   split along its batch axis, and its context axis if one batch row is larger still, so
   memory stays bounded by the chunk, not the grid).
3. :func:`evaluate_chunk` turns one chunk into a DataFrame: each combination's whole
   ``batch x context`` grid is one vectorized call of
   :meth:`~rackmath.analyses.serving.deployment.Deployment.decode` (the pooled ideal chip for the
   ``ideal`` plan), read out through the grid's :meth:`to_frame`, whose ``efficiency`` column
   says which efficiency each row used; traffic adds the fleet size from
   :func:`rackmath.core.economics.replicas_needed` and its rent from
   :func:`~rackmath.core.economics.usd_per_day`; a spec's ``speculation`` adds the
   speculative step's columns (:func:`~rackmath.analyses.serving.speculative.speculative_decode`
   on the same deployment). No formula is written here.

:func:`run` maps :func:`evaluate_chunk` over the chunks in this process, or on a
``distributed`` scheduler (``tcp://HOST:PORT`` or a ``Client``); the result is the same
either way. A combination that cannot exist (a plan the model does not divide into, a
precision the chip lacks) is skipped with its reason, not an error.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rackmath.analyses.deploy import candidates
from rackmath.analyses.economics.fleet import MIN_TRAFFIC_TOKENS_PER_S
from rackmath.analyses.serving.deployment import IDEAL_PLAN, DecodeGrid, check_context
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.analyses.serving.pooled import make_deployment
from rackmath.analyses.serving.speculative import parse_speculation, speculative_decode
from rackmath.catalog.loader import resolve_model
from rackmath.catalog.loader import system as catalog_system
from rackmath.core import economics as econ
from rackmath.errors import InputError, RackmathError
from rackmath.frames import DECODE_COLUMNS, deployment_labels, require
from rackmath.progress import progress
from rackmath.specs import checks
from rackmath.specs.efficiency import EfficiencyMode
from rackmath.specs.plan import ParallelPlan

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: Most points a sweep evaluates unless told otherwise (``--max-points``). A point is one
#: row of about 30 columns, ~250 bytes in memory, so the default table is ~250 MB.
DEFAULT_MAX_POINTS = 1_000_000
#: Points per chunk: big enough that one vectorized call dominates the chunk's overhead,
#: small enough that a cluster gets many chunks to spread.
DEFAULT_CHUNK_POINTS = 20_000
_T = TypeVar("_T")
#: How long to wait for a Dask scheduler to answer before refusing its address.
SCHEDULER_TIMEOUT = "10s"
#: A Dask scheduler address: ``PROTOCOL://HOST:PORT`` (a name, an IPv4 or a bracketed IPv6 host).
SCHEDULER_ADDRESS = re.compile(
    r"(?P<protocol>tcp|tls|ws|wss|ucx)://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)"
    r":(?P<port>[0-9]{1,5})"
)
#: Highest TCP port number.
MAX_PORT = 65_535
#: The columns every grid kind (ideal and planned) has, so rows of both share one table
#: with no gaps; the traffic columns follow when the spec has traffic.
COLUMNS: tuple[str, ...] = (
    *(c.name for c in deployment_labels()[:3]),
    "plan",
    "precision_family",
    *(c.name for c in deployment_labels()[3:]),
    "efficiency",
    *(c.name for c in DECODE_COLUMNS),
    "compute_s",
    "weight_fetch_s",
    "kv_fetch_s",
    "bottleneck",
)


def _each(values: list[_T], ok: Callable[[_T], bool], allowed: str) -> list[_T]:
    """``values`` unchanged when every one is ``ok``; else a ValueError naming the first that is not."""
    for v in values:
        if not ok(v):
            raise ValueError(f"{v!r} is not {allowed}")
    return values


class SweepSpec(BaseModel):
    """What to sweep. Lists of ids and numbers; every combination is evaluated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    models: list[str] = Field(min_length=1)
    systems: list[str] = Field(min_length=1)
    plans: list[str] = Field(default=[IDEAL_PLAN], min_length=1)
    precisions: list[str] = Field(default=["native"], min_length=1)
    #: kernel (fitted kernel curves, the default) and/or pure (the lecture's roofline)
    efficiency: list[str] = Field(default=[EfficiencyMode.KERNEL.value], min_length=1)
    batch: list[float] = Field(min_length=1)
    context: list[float] = Field(min_length=1)
    traffic_tokens_per_s: list[float] = Field(default=[])
    #: speculative decoding on every point, as ``explain --spec`` takes it (``mtp=1,acceptance=0.85``):
    #: adds the ``spec_*`` columns beside the plain decode ones (not an axis: no extra rows)
    speculation: str | None = None

    @field_validator("speculation")
    @classmethod
    def _speculation(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_speculation(value, resolve_model)
            except RackmathError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("batch", "context")
    @classmethod
    def _at_least_one(cls, values: list[float]) -> list[float]:
        return _each(values, lambda v: bool(np.isfinite(v)) and v >= 1, "a finite number >= 1")

    @field_validator("traffic_tokens_per_s")
    @classmethod
    def _traffic(cls, values: list[float]) -> list[float]:
        return _each(
            values,
            lambda v: bool(np.isfinite(v)) and v >= MIN_TRAFFIC_TOKENS_PER_S,
            f"a finite number >= {MIN_TRAFFIC_TOKENS_PER_S:g} (output tokens/s; less is one idle replica)",
        )

    @field_validator("precisions")
    @classmethod
    def _family(cls, values: list[str]) -> list[str]:
        return _each(
            values,
            lambda v: v in candidates.PRECISION_CHOICES,
            f"one of {', '.join(candidates.PRECISION_CHOICES)}",
        )

    @field_validator("efficiency")
    @classmethod
    def _efficiency(cls, values: list[str]) -> list[str]:
        return _each(values, lambda v: v in tuple(EfficiencyMode), "kernel or pure")

    @field_validator("plans")
    @classmethod
    def _plan(cls, values: list[str]) -> list[str]:
        for v in values:
            if v != IDEAL_PLAN:
                try:
                    ParallelPlan.parse(v)
                except RackmathError as exc:
                    raise ValueError(f"{v!r}: {exc} (or {IDEAL_PLAN!r})") from None
        return values


def parse_spec(data: Any) -> SweepSpec:
    """Validate a mapping into a :class:`SweepSpec`; the first bad field as one line."""
    if not isinstance(data, Mapping):
        raise InputError("sweep spec", type(data).__name__, "a mapping with models, systems, batch, context")
    try:
        return SweepSpec.model_validate(dict(data))
    except ValidationError as exc:
        # A misspelt field also shows up as a missing one: name the misspelling first.
        err = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")[0]
        where = ".".join(str(p) for p in err["loc"]) or "sweep spec"
        message, given = err["msg"].removeprefix("Value error, "), err.get("input")
        if err["type"] == "extra_forbidden":
            message = f"a sweep field ({', '.join(SweepSpec.model_fields)})"
        elif err["type"] == "missing":
            message, given = "a list (the field is required)", None
        raise InputError(f"sweep spec field {where}", given, message) from None


@dataclass(frozen=True)
class Combo:
    """One (model, system, plan, precision family, efficiency) whose batch x context grid is
    one call."""

    model: str
    system: str
    plan: str
    precision: str
    efficiency: str = EfficiencyMode.KERNEL.value


@dataclass(frozen=True)
class Chunk:
    """Combinations evaluated together, with the axes every one of them sweeps."""

    combos: tuple[Combo, ...]
    batch: tuple[float, ...]
    context: tuple[float, ...]
    traffic_tokens_per_s: tuple[float, ...]
    speculation: str | None = None  # ``SweepSpec.speculation``

    @property
    def points(self) -> int:
        return len(self.combos) * len(self.batch) * len(self.context) * max(1, len(self.traffic_tokens_per_s))


def count_points(spec: SweepSpec) -> int:
    """Rows the full product has (skipped combinations included)."""
    sizes = (
        spec.models,
        spec.systems,
        spec.plans,
        spec.precisions,
        spec.efficiency,
        spec.batch,
        spec.context,
    )
    return int(np.prod([len(s) for s in sizes], dtype=object)) * max(1, len(spec.traffic_tokens_per_s))


def make_chunks(
    spec: SweepSpec,
    *,
    max_points: int = DEFAULT_MAX_POINTS,
    chunk_points: int = DEFAULT_CHUNK_POINTS,
) -> list[Chunk]:
    """Resolve ids (unknown ones fail here, before any work), bound the size, and chunk."""
    for name, value in (("--max-points", max_points), ("chunk points", chunk_points)):
        checks.whole(name, value)
    models = [resolve_model(m).id for m in spec.models]
    systems = [catalog_system(s).id for s in spec.systems]
    n = count_points(spec)
    if n > max_points:
        raise InputError(
            "sweep size",
            f"{n:,} points",
            f"at most {max_points:,} points; shrink a list or raise the bound with --max-points {n}",
        )
    traffic = tuple(spec.traffic_tokens_per_s)
    per_combo = len(spec.batch) * len(spec.context) * max(1, len(traffic))
    combos = [
        Combo(*c) for c in itertools.product(models, systems, spec.plans, spec.precisions, spec.efficiency)
    ]
    if per_combo <= chunk_points:
        step = chunk_points // per_combo
        axes = (tuple(spec.batch), tuple(spec.context), traffic)
        return [
            Chunk(tuple(combos[i : i + step]), *axes, spec.speculation) for i in range(0, len(combos), step)
        ]
    # One combination's grid is larger than a chunk: split its batch (and, if one batch row
    # alone is too large, its context) axis, so no chunk holds more than chunk_points points.
    per_batch = len(spec.context) * max(1, len(traffic))
    batch_step = max(1, chunk_points // per_batch)
    context_step = (
        len(spec.context) if per_batch <= chunk_points else max(1, chunk_points // max(1, len(traffic)))
    )
    return [
        Chunk(
            (combo,),
            tuple(spec.batch[i : i + batch_step]),
            tuple(spec.context[j : j + context_step]),
            traffic,
            spec.speculation,
        )
        for combo in combos
        for i in range(0, len(spec.batch), batch_step)
        for j in range(0, len(spec.context), context_step)
    ]


@dataclass(frozen=True)
class ChunkResult:
    frame: pd.DataFrame
    skipped: tuple[tuple[Combo, str], ...]


def _grid(combo: Combo, batch: Sequence[float], context: Sequence[float]) -> DecodeGrid:
    model, system = resolve_model(combo.model), catalog_system(combo.system)
    precisions = candidates.precision_family(combo.precision, model, system)
    if precisions is None:
        raise InputError("precision", combo.precision, f"a precision {system.chip.id} has a peak for")
    p = precisions
    kw: dict[str, Any] = {
        "weights": p.weights,
        "kv": p.kv,
        "compute": p.compute,
        "efficiency": combo.efficiency,
    }
    if combo.plan == IDEAL_PLAN:
        return make_deployment(model, system, **kw).decode(batch, context)
    return plan_deployment(model, system, combo.plan, **kw).decode(batch, context)


def _within_window(combo: Combo, context: Sequence[float], skipped: list[tuple[Combo, str]]) -> list[float]:
    """The contexts of ``context`` the combination's model can hold; the others are skipped
    with the reason :func:`~rackmath.analyses.serving.deployment.check_context` gives (no rows for them)."""
    model = resolve_model(combo.model)
    window = model.max_context or float("inf")
    beyond = [c for c in context if c > window]
    if beyond:
        try:
            check_context(model, beyond, "context")
        except RackmathError as exc:
            skipped.append((combo, str(exc)))
    return [c for c in context if c <= window]


#: What ``SweepSpec.speculation`` adds to each row: the speculative step on the same deployment
#: (the plan's step, or the ideal chip's for the ``ideal`` plan) at the row's batch and context.
SPECULATION_COLUMNS: tuple[str, ...] = (
    "speculation",
    "spec_tokens_per_step",
    "spec_step_s",
    "spec_tpot_s",
    "spec_speedup",
    "spec_tokens_per_s_per_user",
    "spec_tokens_per_s_per_chip",
    "spec_usd_per_million_output_tokens",
    "spec_fits",
)


def _add_speculation(frame: pd.DataFrame, grid: DecodeGrid, text: str) -> None:
    """The ``spec_*`` columns of :data:`SPECULATION_COLUMNS`, in the grid's row order."""
    s = parse_speculation(text, resolve_model)
    g = speculative_decode(grid.deployment, grid.batch[:, 0], grid.context[0], s)
    values: tuple[Any, ...] = (
        text,
        s.tokens_per_step,
        g.step_s,
        g.tpot_s,
        g.speedup,
        g.tokens_per_s_per_user,
        g.tokens_per_s_per_chip,
        g.usd_per_million_output_tokens,
        g.fits,
    )
    for name, value in zip(SPECULATION_COLUMNS, values, strict=True):
        frame[name] = np.asarray(value).reshape(-1) if np.ndim(value) else value


def evaluate_chunk(chunk: Chunk) -> ChunkResult:
    """Every combination of ``chunk`` over its whole batch x context grid, as one table."""
    pd = require("pandas")
    frames = []
    skipped: list[tuple[Combo, str]] = []
    for combo in chunk.combos:
        contexts = _within_window(combo, chunk.context, skipped)
        if not contexts:
            continue
        try:
            grid = _grid(combo, chunk.batch, contexts)
        except RackmathError as exc:
            skipped.append((combo, str(exc)))
            continue
        frame = grid.to_frame()
        frame["precision_family"] = combo.precision
        frame = frame[list(COLUMNS)]
        if chunk.speculation is not None:
            _add_speculation(frame, grid, chunk.speculation)
        if chunk.traffic_tokens_per_s:
            price = grid.deployment.usd_per_chip_hour
            parts = []
            for traffic in chunk.traffic_tokens_per_s:
                part = frame.copy()
                # a point that does not fit gets no fleet: no headline cost for what cannot run
                fits = part["fits"].to_numpy(bool)
                replicas = np.where(
                    fits, econ.replicas_needed(traffic, part["tokens_per_s"].to_numpy()), np.nan
                )
                part["traffic_tokens_per_s"] = traffic
                part["replicas"] = replicas
                part["fleet_chips"] = replicas * part["chips"].to_numpy()
                part["fleet_usd_per_day"] = econ.usd_per_day(part["fleet_chips"].to_numpy(), price)
                parts.append(part)
            frame = pd.concat(parts, ignore_index=True)
        frames.append(frame)
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return ChunkResult(table, tuple(skipped))


@dataclass(frozen=True)
class SweepResult:
    frame: pd.DataFrame
    skipped: tuple[tuple[Combo, str], ...]
    points: int
    chunks: int
    where: str = "local"
    notes: tuple[str, ...] = field(default=())

    @property
    def efficiency(self) -> dict[str, dict[str, str]]:
        """Per system, the efficiency labels its rows used (the table's ``efficiency`` column)."""
        if not len(self.frame):
            return {}
        pairs = self.frame[["system", "efficiency"]].drop_duplicates()
        labels: dict[str, list[str]] = {}
        for system, label in zip(pairs["system"], pairs["efficiency"], strict=True):
            labels.setdefault(str(system), []).append(str(label))
        return {system: {"label": " and ".join(ls)} for system, ls in labels.items()}


def _local(chunks: Sequence[Chunk], done: Callable[[int], None]) -> Iterable[ChunkResult]:
    for c in chunks:
        result = evaluate_chunk(c)
        done(c.points)
        yield result


def check_scheduler(address: str) -> str:
    """``address`` when it reads ``tcp://HOST:PORT`` (port 1-65535); refused in one line before
    any connection is tried (a malformed address otherwise fails inside Dask after its timeout)."""
    text = address.strip()
    match = SCHEDULER_ADDRESS.fullmatch(text)
    if match is None or not 1 <= int(match["port"]) <= MAX_PORT:
        allowed = f"a Dask scheduler address PROTOCOL://HOST:PORT with a port of 1-{MAX_PORT}, e.g. tcp://127.0.0.1:8786"
        raise InputError("--scheduler", address, allowed)
    return text


def _distributed(chunks: Sequence[Chunk], scheduler: Any, done: Callable[[int], None]) -> list[ChunkResult]:
    if isinstance(scheduler, str):
        scheduler = check_scheduler(scheduler)
    distributed = require("distributed", "dask")
    own = not isinstance(scheduler, distributed.Client)
    if own:
        try:
            client = distributed.Client(scheduler, timeout=SCHEDULER_TIMEOUT, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise InputError("--scheduler", scheduler, f"a reachable Dask scheduler ({exc})") from None
    else:
        client = scheduler
    try:
        futures = client.map(evaluate_chunk, list(chunks), pure=False)
        order = {f.key: i for i, f in enumerate(futures)}
        results: list[Any] = [None] * len(futures)
        for fut in distributed.as_completed(futures, loop=client.loop):
            i = order[fut.key]
            results[i] = fut.result()
            done(chunks[i].points)
        return results
    finally:
        if own:
            client.close()


def run(chunks: Sequence[Chunk], *, scheduler: Any = None) -> SweepResult:
    """Evaluate ``chunks`` here (``scheduler=None``) or on a Dask scheduler, in chunk order."""
    pd = require("pandas")
    total = sum(c.points for c in chunks)
    with progress("Sweeping", total=total) as advance:
        if scheduler is None:
            results = list(_local(chunks, advance))
        else:
            results = _distributed(chunks, scheduler, advance)
    frames = [r.frame for r in results if len(r.frame)]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    skipped = tuple(s for r in results for s in r.skipped)
    where = "local" if scheduler is None else "dask"
    return SweepResult(frame=frame, skipped=skipped, points=len(frame), chunks=len(chunks), where=where)


def sweep(
    spec: SweepSpec | Mapping[str, Any],
    *,
    max_points: int = DEFAULT_MAX_POINTS,
    chunk_points: int = DEFAULT_CHUNK_POINTS,
    scheduler: Any = None,
) -> SweepResult:
    """Spec (or its mapping) -> chunks -> one table; see the module docstring. A scheduler
    address is checked before the spec, and the point budget before any work."""
    if isinstance(scheduler, str):
        scheduler = check_scheduler(scheduler)
    the_spec = spec if isinstance(spec, SweepSpec) else parse_spec(spec)
    chunks = make_chunks(the_spec, max_points=max_points, chunk_points=chunk_points)
    return run(chunks, scheduler=scheduler)
