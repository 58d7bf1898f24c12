"""Write synthetic multi-turn chat traces in the public Mooncake trace format (JSON lines of
``timestamp`` in ms, ``input_length``, ``output_length`` and ``hash_ids``, the ids of the
prompt's 512-token KV blocks; kvcache-ai/Mooncake ``FAST25-release/traces``).

Nothing here is copied from a dataset: the sessions are drawn from stated distributions.
Every session opens with one system prompt shared by all sessions; turn ``k``'s prompt is turn
``k - 1``'s prompt, that turn's answer and a new user message, so its first
``floor(P_{k-1} / 512)`` blocks are the previous prompt's (the same ids) and the rest are new.
A block that only partly held the previous prompt holds more now: a new id.

    python examples/make_multiturn_trace.py            # rewrites the two files below

* ``examples/multiturn-tiny.jsonl``: four requests, two users, two turns each, written out so
  the hit rate can be counted by hand (``docs/serving-features.md``).
* ``examples/multiturn-trace.jsonl``: 16 sessions of 2 to 4 turns (seeded, a few KB), and
  ``examples/multiturn-trace.csv``, the same requests without block ids (no prefix reuse).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

BLOCK_TOKENS = 512
HERE = Path(__file__).resolve().parent


class Ids:
    """Hands out new block ids (:func:`renumber` then numbers them in order of first use, as the
    Mooncake traces' remapped hashes are)."""

    def __init__(self) -> None:
        self.next = 0

    def new(self, n: int) -> list[int]:
        out = list(range(self.next, self.next + n))
        self.next += n
        return out


def turn_ids(prev_tokens: int, prev_ids: list[int], tokens: int, ids: Ids) -> list[int]:
    """A prompt of ``tokens`` that extends a prompt of ``prev_tokens`` (ids ``prev_ids``)."""
    keep = prev_tokens // BLOCK_TOKENS
    return prev_ids[:keep] + ids.new(math.ceil(tokens / BLOCK_TOKENS) - keep)


def tiny() -> list[dict[str, object]]:
    """Two users after a 1,024-token system prompt (blocks 0 and 1), two turns each."""
    ids = Ids()
    system = ids.new(2)
    a1 = turn_ids(1024, system, 1536, ids)  # user A: 512 tokens of question -> [0, 1, 2]
    b1 = turn_ids(1024, system, 1300, ids)  # user B: 276 tokens -> [0, 1, 3]
    a2 = turn_ids(1536, a1, 2048, ids)  # A's answer (100) and 412 more -> [0, 1, 2, 4]
    b2 = turn_ids(1300, b1, 2048, ids)  # B's answer (100) and 648 more -> [0, 1, 5, 6]
    rows = [(0, 1536, a1), (10_000, 1300, b1), (20_000, 2048, a2), (30_000, 2048, b2)]
    return [{"timestamp": t, "input_length": n, "output_length": 100, "hash_ids": h} for t, n, h in rows]


def sessions(count: int = 16, seed: int = 7) -> list[dict[str, object]]:
    """``count`` sessions starting as a Poisson stream (one each 2 s on average), 2 to 4 turns,
    a user taking 20 s on average (exponential) between an answer and the next question."""
    rng = np.random.default_rng(seed)
    ids = Ids()
    system_tokens = 1536
    system = ids.new(system_tokens // BLOCK_TOKENS)
    rows = []
    start = 0.0
    for _ in range(count):
        start += rng.exponential(2.0)
        t = start
        prev_prompt, prev_ids, history = system_tokens, system, system_tokens
        for turn in range(int(rng.integers(2, 5))):
            user = int(max(16, rng.lognormal(math.log(600 if turn == 0 else 200), 0.6)))
            answer = int(max(8, rng.lognormal(math.log(250), 0.5)))
            tokens = history + user  # everything said so far, then the new question
            h = turn_ids(prev_prompt, prev_ids, tokens, ids)
            rows.append(
                {"timestamp": round(t * 1000), "input_length": tokens, "output_length": answer, "hash_ids": h}
            )
            prev_prompt, prev_ids, history = tokens, h, tokens + answer
            t += 2.0 + answer * 0.03 + rng.exponential(20.0)  # the answer streams, then the user thinks
    rows.sort(key=lambda r: r["timestamp"])  # type: ignore[arg-type,return-value]
    return renumber(rows)


def renumber(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """The same rows with block ids 0, 1, 2, ... in order of first appearance."""
    seen: dict[int, int] = {}
    for r in rows:
        r["hash_ids"] = [seen.setdefault(i, len(seen)) for i in r["hash_ids"]]  # type: ignore[attr-defined]
    return rows


def write(rows: list[dict[str, object]], name: str) -> None:
    (HERE / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def main() -> None:
    write(tiny(), "multiturn-tiny.jsonl")
    rows = sessions()
    write(rows, "multiturn-trace.jsonl")
    csv = ["arrival_s,input_tokens,output_tokens"]
    csv += [f"{r['timestamp'] / 1000:g},{r['input_length']},{r['output_length']}" for r in rows]  # type: ignore[operator]
    (HERE / "multiturn-trace.csv").write_text("\n".join(csv) + "\n")


if __name__ == "__main__":
    main()
