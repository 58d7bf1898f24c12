"""Expected outcomes that are not bugs.

Every error a user can cause derives from :class:`RackmathError`. Faces (CLI, web) turn
these into one-line messages and a non-zero exit; anything else is a bug and stays loud.
Each message names the field, what was given, and what is allowed, so the user can fix
the input without reading code.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class RackmathError(Exception):
    """Base class for errors a user can cause and fix."""


class InputError(RackmathError, ValueError):
    """A value is out of range, of the wrong type, or malformed."""

    def __init__(self, field: str, given: object, allowed: str) -> None:
        self.field = field
        self.given = given
        self.allowed = allowed
        super().__init__(f"{field}: got {given!r}; allowed: {allowed}")


class UnknownIdError(RackmathError, KeyError):
    """A catalog id (model, chip, system, precision...) that does not exist."""

    def __init__(self, kind: str, given: str, known: Iterable[str]) -> None:
        self.kind = kind
        self.given = given
        self.known = sorted(known)
        self.suggestions = difflib.get_close_matches(given.lower(), self.known, n=3, cutoff=0.5)
        hint = (
            f"did you mean {', '.join(self.suggestions)}?"
            if self.suggestions
            else f"known {kind}s: {', '.join(self.known)}"
        )
        super().__init__(f"unknown {kind} {given!r}; {hint}")

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class PrecisionUnavailableError(RackmathError):
    """The chip has no peak figure for the requested compute precision.

    We never invent one (say int4 = 2 x int8): a fictional throughput would be silently
    produced. Pick one of the chip's precisions instead.
    """

    def __init__(self, chip_id: str, precision: str, available: Iterable[str]) -> None:
        self.chip_id = chip_id
        self.precision = precision
        self.available = sorted(available)
        super().__init__(
            f"{chip_id} has no {precision} compute peak in the catalog; "
            f"available: {', '.join(self.available)}"
        )


class ConfigError(RackmathError):
    """A Hugging Face config.json that cannot be read as a supported model."""


class DoesNotFitError(RackmathError):
    """A deployment whose memory per chip exceeds the chip's capacity."""

    def __init__(self, what: str, needed_bytes_per_chip: float, capacity_bytes_per_chip: float):
        self.needed_bytes_per_chip = needed_bytes_per_chip
        self.capacity_bytes_per_chip = capacity_bytes_per_chip
        short = needed_bytes_per_chip - capacity_bytes_per_chip
        super().__init__(
            f"{what} does not fit: needs {needed_bytes_per_chip / 1e9:.1f} GB per chip, "
            f"the chip has {capacity_bytes_per_chip / 1e9:.1f} GB (short by {short / 1e9:.1f} GB)"
        )
