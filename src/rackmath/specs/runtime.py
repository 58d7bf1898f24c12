"""A serving runtime's scheduler caps and memory setting (``catalog/data/runtimes.yaml``)."""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import BaseModel, ConfigDict, Field

FloatArray = NDArray[np.float64]


class RuntimeProfile(BaseModel):
    """What an engine caps per replica, as shipped (see the catalog file's header for units)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str
    version: str
    max_seqs: int = Field(ge=1)
    max_tokens: int = Field(ge=1)
    chunk_tokens: int = Field(ge=1)
    kv_memory_frac: float = Field(gt=0, le=1)
    #: when the flag's default depends on the chips of one engine: {at least this many chips: frac}
    kv_memory_frac_by_engine_chips: dict[int, float] | None = None
    kv_memory_basis: Literal["total", "free"]
    policy: Literal["mixed", "prefill_first"]
    chunked_prefill: bool = True
    #: the engine's name for ``max_tokens`` (``max_num_batched_tokens``, ``max_num_tokens``, ...)
    token_budget_flag: str = "max_tokens"
    #: the setting that turns chunked prefill on, where it is off by default
    chunking_flag: str = ""
    #: the catalog profile of the same engine with chunked prefill on (where this one is off)
    chunked_variant: str | None = None
    scheduler: str
    cuda_graphs: bool
    cuda_graph_max_batch: int = Field(ge=0)
    date: str
    source: list[str]
    notes: str = ""

    def memory_frac(self, engine_chips: ArrayLike) -> FloatArray:
        """The memory flag for engines of ``engine_chips`` chips (vectorized): the entry with the
        largest threshold not above the chips, else :attr:`kv_memory_frac`."""
        n = np.asarray(engine_chips, float)
        out = np.full(n.shape, self.kv_memory_frac)
        for threshold, frac in sorted((self.kv_memory_frac_by_engine_chips or {}).items()):
            out = np.where(n >= threshold, frac, out)
        return np.asarray(out, dtype=float)

    def with_overrides(self, **changes: object) -> RuntimeProfile:
        """A copy with the given fields replaced (None values are ignored), re-validated."""
        data = self.model_dump()
        data.update({k: v for k, v in changes.items() if v is not None})
        return RuntimeProfile(**data)
