"""The work bounds the analyses enforce and the faces declare: one copy of each.

A bound keeps a request inside what the model means (no context beyond every model's window,
no job beyond the largest clusters built) and inside what a call can do in seconds. The
analyses raise :class:`~rackmath.errors.InputError` beyond them, so the Python API refuses what
the CLI refuses; the CLI's option parsers read the same numbers to refuse a typed value before
any work. A model's own limits (its context window, its heads and experts) bind first.
This module imports nothing (``rackmath --help`` stays light).
"""

from __future__ import annotations

#: Tokens of context: 16.8M, beyond every model's window (a model's own maximum binds first).
MAX_CONTEXT = 2**24
#: Sequences per decode step (memory binds long before).
MAX_BATCH = 2**20
#: Chips in one job: 262,144, above the largest clusters built.
MAX_CHIPS = 2**18
#: A training token budget.
MAX_TOKENS = 1e18
#: Output tokens per second a fleet or a deployment search is sized for.
MAX_TRAFFIC = 1e12
#: USD per chip-hour (a price above it is a typo for a price per node or per month).
MAX_USD_PER_CHIP_HOUR = 1e4
#: Most chips per replica the deployment search and the frontier consider.
MAX_SEARCH_CHIPS = 2**14
#: Work budget of a deployment search: (plans x batches x precision families) evaluated.
MAX_SEARCH_CANDIDATES = 3_000_000
