"""fmt: the faces' human-scale strings (one duration formatter shared by the CLI and the web)."""

from __future__ import annotations

import pytest

from rackmath.views import fmt


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0.0232, "23.2 ms"),
        (1.25, "1.25 s"),
        (30.5 * 60, "30.5 min"),
        (23.4 * 3600, "23.4 h"),
        (2 * 86400, "2 d"),
        (5e-6, "5 µs"),
    ],
)
def test_duration_picks_the_largest_unit_that_fits(seconds: float | None, text: str) -> None:
    assert fmt.duration(seconds) == text
