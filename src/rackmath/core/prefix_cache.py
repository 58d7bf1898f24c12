"""A replica's prefix cache under load: KV blocks named by content hash, kept in HBM while the
pool has room, evicted least-recently-used, optionally spilled to a host-memory tier.

What the request simulator (:func:`rackmath.core.requests.simulate`) asks of it, at token-slot
granularity (the KV pool of ``kv_tokens`` slots is the one the runtime's memory account leaves
after the weights, :func:`rackmath.analyses.deploy.simulate.kv_pool_tokens`):

* **Blocks.** A prompt of ``I`` tokens is ``ceil(I / b)`` blocks of ``b`` tokens (the last one
  partial), named by ids as a block-hash trace names them (Mooncake's ``hash_ids``: equal
  leading ids mean an equal prefix). A prompt's blocks past its id list are its own.
* **Hit.** At admission a request walks its ids from the first: every block found in HBM or in
  the host tier is a hit, up to the first block found in neither. Its cached prefix is the hit
  blocks' tokens, at most ``I - 1`` (the last prompt token always runs, to yield the first
  output token, as vLLM recomputes it on a full hit). The cached prefix skips its prefill
  compute but still takes its KV slots: a hit block in HBM is shared (pinned, no new slots), a
  hit block in the host tier is loaded back into new slots.
* **Admission.** A request needs ``held + I + O`` slots less its HBM-hit blocks. It is admitted
  when the free slots plus the evictable cached blocks (resident, pinned by no running request)
  hold that; evicting takes the least recently used first (vLLM's free-block queue: a finished
  request's blocks go to its tail, its last block first, so a prefix outlives its suffixes).
* **Registration.** When a request's prompt has run, its own id-named blocks become cached
  blocks (pinned by it); a block another request registered first stays the request's own copy.
* **Release.** At the last token the request unpins its blocks; a block no running request pins
  becomes evictable. Its other slots (output tokens, unnamed or duplicate prompt blocks) are free.
* **Host tier.** With ``host_tokens > 0`` an evicted block moves to host memory (an LRU of that
  capacity; write-back at eviction is not timed: it rides the link's other direction). A host
  hit is loaded over the host link: ``tokens x load_s_per_token`` seconds
  (``load_s_per_token`` = KV bytes one token holds per chip / the chip's host-link bytes/s,
  every chip loading its own shard at once), one load at a time: a load starts when the link is
  free and the request's prompt may not start before it ends.

Worked number (``tests/test_prefix_reuse.py::test_tiny_trace_by_hand``): blocks of 4 tokens;
A = ids [0, 1] (8 tokens), B = [0, 1, 2] (10 tokens) after A finished: B hits 0 and 1, 8 cached
tokens of 10, so its prefill runs 2 tokens; hit rate over both = 8 / 18 = 0.444.

Pure Python (dicts and an ordered dict), no NumPy: the simulator calls it once per admission,
registration and release.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from rackmath.specs.workload import MOONCAKE_BLOCK_TOKENS


@dataclass
class Admission:
    """What one admission found and took."""

    hbm_hit_tokens: int
    host_hit_tokens: int
    cached_tokens: int  # skipped by the prefill: hits, at most I - 1
    slots: int  # new slots taken from the pool
    ready_s: float  # when the prompt may start (after any load from the host tier)


@dataclass
class PrefixCache:
    """The cache of one replica (see the module docstring); ``free`` is the pool's free slots."""

    free: float
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    host_tokens: float = 0.0
    load_s_per_token: float = 0.0
    #: HBM-resident blocks: id -> [tokens, pins]
    resident: dict[int, list[int]] = field(default_factory=dict)
    #: resident blocks with no pin, least recently used first: id -> tokens
    evictable: OrderedDict[int, int] = field(default_factory=OrderedDict)
    evictable_tokens: int = 0
    host: OrderedDict[int, int] = field(default_factory=OrderedDict)
    host_used: int = 0
    link_free_s: float = 0.0
    #: per admitted request: the block ids it pins, and its slots that are not cached blocks
    pins: dict[int, list[int]] = field(default_factory=dict)
    own: dict[int, int] = field(default_factory=dict)

    def block_sizes(self, ids: list[int], prompt_tokens: int) -> list[int]:
        b = self.block_tokens
        return [min(b, prompt_tokens - k * b) for k in range(len(ids))]

    def _walk(self, ids: list[int]) -> int:
        """How many of ``ids``, from the first, are cached (in HBM or the host tier)."""
        n = 0
        for i in ids:
            if i not in self.resident and i not in self.host:
                break
            n += 1
        return n

    def admit(self, r: int, ids: list[int], prompt_tokens: int, need: int, now_s: float) -> Admission | None:
        """Admit request ``r`` (``need`` = held + I + O slots) if the pool can hold it, else None."""
        n = self._walk(ids)
        sizes = self.block_sizes(ids, prompt_tokens)
        hits = ids[:n]
        hbm_hit = sum(s for i, s in zip(hits, sizes, strict=False) if i in self.resident)
        pinned_free = sum(self.evictable[i] for i in hits if i in self.evictable)
        slots = need - hbm_hit
        if slots > self.free + self.evictable_tokens - pinned_free:
            return None
        host_hit = 0
        for i, s in zip(hits, sizes, strict=False):
            if i in self.resident:
                entry = self.resident[i]
                if entry[1] == 0:
                    del self.evictable[i]
                    self.evictable_tokens -= entry[0]
                entry[1] += 1
            else:  # loaded back from the host tier into new slots
                self.host_used -= self.host.pop(i)
                self.resident[i] = [s, 1]
                host_hit += s
        while self.free < slots:
            self._evict_one()
        self.free -= slots
        self.pins[r] = list(hits)
        self.own[r] = slots - host_hit
        ready = now_s
        if host_hit:
            start = max(now_s, self.link_free_s)
            ready = self.link_free_s = start + host_hit * self.load_s_per_token
        cached = min(hbm_hit + host_hit, prompt_tokens - 1)
        return Admission(hbm_hit, host_hit, cached, slots, ready)

    def _evict_one(self) -> None:
        i, s = self.evictable.popitem(last=False)
        self.evictable_tokens -= s
        del self.resident[i]
        self.free += s
        if self.host_tokens > 0 and s <= self.host_tokens:
            while self.host_used + s > self.host_tokens:
                self.host_used -= self.host.popitem(last=False)[1]
            self.host[i] = s
            self.host_used += s

    def register(self, r: int, ids: list[int], prompt_tokens: int) -> None:
        """Request ``r``'s prompt has run: its own id-named blocks become cached blocks."""
        pins = self.pins[r]
        sizes = self.block_sizes(ids, prompt_tokens)
        for i, s in zip(ids[len(pins) :], sizes[len(pins) :], strict=True):
            if i in self.resident or i in self.host:
                continue  # another request's copy is the cached one; this one stays private
            self.resident[i] = [s, 1]
            pins.append(i)
            self.own[r] -= s

    def release(self, r: int) -> None:
        """Request ``r`` finished: unpin its blocks (last block first), free its own slots."""
        for i in reversed(self.pins.pop(r)):
            entry = self.resident[i]
            entry[1] -= 1
            if entry[1] == 0:
                self.evictable[i] = entry[0]
                self.evictable_tokens += entry[0]
        self.free += self.own.pop(r)

    @property
    def cached_tokens(self) -> int:
        """Tokens of every block resident in HBM (pinned or not)."""
        return sum(v[0] for v in self.resident.values())
