"""Human-scale formatting for the faces (CLI, web, plots). Decimal prefixes throughout:
``70.3 kB`` is 70,300 bytes. Nothing here is used by the math."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from rackmath.units import SECONDS_PER_DAY, SECONDS_PER_HOUR, SECONDS_PER_MINUTE

_PREFIXES = [(1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]


def si(value: float, unit: str = "", digits: int = 3) -> str:
    """``si(3.6e17, "FLOP/s")`` -> ``'360 PFLOP/s'``."""
    if value is None or not math.isfinite(value):
        return "n/a"
    magnitude = abs(value)
    for scale, prefix in _PREFIXES:
        if magnitude >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}".rstrip()


def nbytes(value: float) -> str:
    return si(value, "B")


def seconds(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    if value >= 1:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} µs"


def duration(value: float | None) -> str:
    """Durations from microseconds to days: ``23.2 ms``, ``1.25 s``, ``30.5 min``, ``23.4 h``, ``2 d``
    (``-`` for None)."""
    if value is None:
        return "-"
    for unit, size in (("d", SECONDS_PER_DAY), ("h", SECONDS_PER_HOUR), ("min", SECONDS_PER_MINUTE)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return seconds(value)


def count(value: float) -> str:
    """Parameters and batch sizes: ``671e9`` -> ``'671B'``, ``5600`` -> ``'5,600'``."""
    if value is None or not math.isfinite(value):
        return "n/a"
    if value >= 1e12:
        return f"{value / 1e12:.3g}T"
    if value >= 1e9:
        return f"{value / 1e9:.4g}B"
    if value >= 1e6:
        return f"{value / 1e6:.4g}M"
    return f"{value:,.0f}"


def usd(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"${value:,.2f}" if value >= 0.1 else f"${value:.4f}"


def money(value: float) -> str:
    """Dollars short enough for a headline: ``$489.32``, ``$12,345``, ``$48.3 M``, ``$1.2 B``."""
    if value is None or not math.isfinite(value):
        return "n/a"
    size = abs(value)
    if size < 1e4:
        return usd(value)
    if size < 1e6:
        return f"${value:,.0f}"
    for scale, word in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if size >= scale:
            return f"${value / scale:.3g} {word}"
    return usd(value)  # pragma: no cover - unreachable


def pct(frac: float) -> str:
    if frac is None or not math.isfinite(frac):
        return "n/a"
    return f"{frac:.1%}"


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _finite(value: Any) -> Any:
    """Replace NaN and infinities by None (JSON null): "no value", never a bogus number."""
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, np.ndarray):
        return _finite(value.tolist())
    return value


def to_json(payload: Any) -> str:
    """``payload`` (a result's ``to_dict()``) as indented, strict JSON: NumPy scalars and
    arrays become numbers and lists, and a NaN or infinity becomes null (no value), never a
    non-standard token a reader would choke on."""
    return json.dumps(_finite(payload), indent=2, default=_jsonable, allow_nan=False)


def _plain_number(value: float) -> str:
    size = abs(value)
    if size >= 1e9 or (value != 0 and size < 1e-3):
        return f"{value:.3g}"
    if size >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.4g}"


def column(name: str, value: Any) -> str:
    """A table cell shown by its column's unit suffix: ``step_s`` 0.0123 -> ``'12.3 ms'``,
    ``mfu_frac`` 0.6431 -> ``'64.3%'``, ``..._usd_per_million_...`` -> ``'$0.1234'``,
    ``..._bytes`` and ``bytes_read`` -> ``'70.3 GB'``, ``flops`` and ``..._flops`` -> ``'1.2 PFLOP'``
    (``..._per_s``: ``'3.35 TB/s'``); a band's edge (``step_s_p90``) as its quantity; text
    stays as it is."""
    if value is None:
        return "-"
    if isinstance(value, (bool, np.bool_, str)) or not isinstance(value, (int, float, np.number)):
        return str(value)
    v = float(value)
    if not math.isfinite(v):
        return "n/a"
    n = name.lower()
    for edge in ("_p10", "_p90"):  # a band's edge is shown as the quantity it bounds
        n = n.removesuffix(edge)
    if n.endswith(("_frac", "_error", "_error_frac", "mfu", "mbu")) or "_frac_" in n:
        return pct(v)
    if "usd" in n:
        return usd(v) + ("/M" if "per_million" in n else "")
    rate = "/s" if n.endswith("_per_s") else ""
    if n == "bytes" or n.startswith("bytes_") or n.endswith("_bytes") or "_bytes_" in n:
        return nbytes(v) + rate  # bytes, bytes_read, weight_bytes, hbm_bytes_per_s
    if n == "flops" or n.startswith("flops_") or n.endswith("_flops") or "_flops_" in n:
        return (si(v, "FLOP") if abs(v) < 1e21 else f"{v:.3g} FLOP") + rate
    if n.startswith("joules"):
        return si(v, "J")
    if n.endswith("_w") or "_w_per_" in n:
        return si(v, "W")
    if n.endswith(("_per_s", "per_s_per_user", "per_s_per_chip")):
        return _plain_number(v) + "/s"
    if n.endswith("_s") or n.endswith("_latency_s"):
        return duration(v) if v >= 60 else seconds(v)
    return _plain_number(v)


def efficiency_line(efficiency: dict[str, dict[str, Any]]) -> str:
    """The one line a report states about its efficiency, from each system's described
    efficiency (``{system: {"label": ..., ...}}``): ``efficiency: <label>``, with the systems
    named after each label when they differ."""
    by_label: dict[str, list[str]] = {}
    for system_id, e in efficiency.items():
        by_label.setdefault(e["label"], []).append(system_id)
    if len(by_label) == 1:
        return f"efficiency: {next(iter(by_label))}"
    return "efficiency: " + "; ".join(f"{label} on {', '.join(ids)}" for label, ids in by_label.items())
