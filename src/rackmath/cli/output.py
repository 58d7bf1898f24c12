"""What every command prints through: one console, and tables that fit the width.

:func:`console` is the one Rich console of every command. Its width is ``COLUMNS`` when set,
else the terminal's, else :data:`FILE_COLUMNS` (a file or a pipe: wide enough that prose
seldom wraps). Its ``print`` never truncates a table: a table wider than the console is
split into column groups printed one under the other, each repeating the table's key
columns (``make_table(keys=...)``; the first column by default), so an id is never cut to
"…" and a number never loses digits, at 80 columns as in a file. A single column still too
wide for the line folds (wraps) instead of being cut. An indented line of prose longer than
the console wraps under its own indent. Nothing here imports NumPy.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import os
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

#: Width of the output when it goes to a file or a pipe and ``COLUMNS`` is not set.
FILE_COLUMNS = 132
#: Attribute of a Rich ``Table`` naming how many leading columns identify a row; they are
#: repeated in every part of a split table.
KEY_COLUMNS_ATTR = "rackmath_key_columns"
#: A width no table reaches: its natural (unwrapped) width is measured against this.
_UNBOUNDED = 1_000_000
#: Most ways of splitting a table that are compared before the greedy split is kept.
_MOST_SPLITS = 5_000


def natural_width(console: Console, table: Table) -> int:
    """Columns ``table`` takes when no cell wraps (borders and padding included)."""
    options = console.options.update_width(_UNBOUNDED)
    return int(Measurement.get(console, options, table).maximum)


def _part(table: Table, indices: list[int], first: bool, last: bool) -> Table:
    """``table`` restricted to the columns ``indices`` (cells shared, nothing recomputed)."""
    part = copy.copy(table)
    part.columns = [
        dataclasses.replace(table.columns[j], _index=k, overflow="fold") for k, j in enumerate(indices)
    ]
    part.rows = list(table.rows)
    part.title = table.title if first else None
    part.caption = table.caption if last else None
    return part


def fit_table(console: Console, table: Table) -> list[Table]:
    """``table`` as one or more tables, each at most ``console.width`` wide when possible.

    The fewest column groups that fit (each after the repeated key columns), with the
    columns spread so the widest group is as narrow as it can be; a group holds at least one
    column, so a column wider than the line alone folds its cells."""
    width = console.width
    n = len(table.columns)
    if n < 2 or natural_width(console, table) <= width:
        return [table]
    keys = list(range(min(int(getattr(table, KEY_COLUMNS_ATTR, 1)), n - 1)))
    rest = list(range(len(keys), n))
    own = {j: natural_width(console, _part(table, [j], True, True)) for j in range(n)}
    pair = natural_width(console, _part(table, [0, 1], True, True))
    divider = pair - own[0] - own[1]  # what each further column adds beyond its own width

    def span(columns: list[int]) -> int:
        return sum(own[j] for j in columns) + divider * (len(columns) - 1)

    groups = _balanced(rest, lambda g: span(keys + g), width)
    return [_part(table, keys + g, i == 0, i == len(groups) - 1) for i, g in enumerate(groups)]


def _balanced(columns: list[int], span: Callable[[list[int]], int], width: int) -> list[list[int]]:
    """Contiguous groups of ``columns``: the fewest whose spans fit ``width`` (a lone column
    may not), then, among splits into that many, the one whose widest group is narrowest."""
    greedy: list[list[int]] = [[]]
    for j in columns:
        if greedy[-1] and span([*greedy[-1], j]) > width:
            greedy.append([j])
        else:
            greedy[-1] = [*greedy[-1], j]
    count = len(greedy)
    if math.comb(len(columns) - 1, count - 1) > _MOST_SPLITS:
        return greedy
    best: list[list[int]] = greedy
    best_span = None
    for cuts in itertools.combinations(range(1, len(columns)), count - 1):
        bounds = (0, *cuts, len(columns))
        groups = [columns[a:b] for a, b in itertools.pairwise(bounds)]
        widest = max(span(g) for g in groups)
        if best_span is None or widest < best_span:
            best, best_span = groups, widest
    return best


class FittingConsole(Console):
    """A Rich console whose ``print`` splits a table that is wider than the console."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        if len(objects) == 1 and isinstance(objects[0], str):
            super().print(self._indented(objects[0], kwargs.get("markup")), **kwargs)
            return
        if not any(isinstance(o, Table) for o in objects):
            super().print(*objects, **kwargs)
            return
        for o in objects:
            if not isinstance(o, Table):
                super().print(o, **kwargs)
                continue
            for i, part in enumerate(fit_table(self, o)):
                if i:
                    super().print()
                super().print(part, **kwargs)

    def _indented(self, line: str, markup: bool | None) -> Any:
        """Lines longer than the console wrap under their own indent (a hanging indent)."""
        if len(line) <= self.width or not any(part.startswith(" ") for part in line.split("\n")):
            return line
        text = Text.from_markup(line) if markup is not False and self._markup else Text(line)
        out = []
        for part in text.split("\n", allow_blank=True):
            indent = len(part.plain) - len(part.plain.lstrip(" "))
            if part.cell_len <= self.width or not indent:
                out.append(part)
                continue
            body = part[indent:]
            for wrapped in body.wrap(self, self.width - indent):
                wrapped.rstrip()
                out.append(Text(" " * indent) + wrapped)
        return Text("\n").join(out)


def console(width: int | None = None) -> FittingConsole:
    """The console every command prints to (see the module docstring for its width).

    ``width`` fixes the width for a file or pipe (``COLUMNS`` and a terminal still win)."""
    out = FittingConsole(highlight=False)
    columns = os.environ.get("COLUMNS", "")
    if out.is_terminal or columns.isdigit():
        return out
    return FittingConsole(highlight=False, width=width or FILE_COLUMNS)


def make_table(
    columns: tuple[str, ...],
    *,
    left: tuple[str, ...] = (),
    title: str | None = None,
    edge: bool = False,
    no_wrap: bool = False,
    keys: int = 1,
) -> Table:
    """A Rich table with bold headers: the ``left`` columns (text) left-aligned, the others
    (numbers) right-aligned; ``edge`` draws the outer border; the first ``keys`` columns
    identify a row and are repeated when the table is split to fit the width."""
    out = Table(title=title, header_style="bold", show_edge=edge)
    for col in columns:
        out.add_column(col, justify="left" if col in left else "right", no_wrap=no_wrap)
    setattr(out, KEY_COLUMNS_ATTR, keys)
    return out
