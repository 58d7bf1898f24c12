"""What every plot module shares: the accepted file formats, headless Matplotlib, and
writing a figure (parent folders created; a path that cannot be written is an
:class:`~rackmath.errors.InputError`, so the CLI prints one line instead of a traceback)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rackmath.errors import InputError

FORMATS = (".png", ".svg", ".pdf")


def checked_path(path: str | Path) -> Path:
    """``path`` as a Path, refused unless it ends in one of :data:`FORMATS`."""
    out = Path(path)
    if out.suffix.lower() not in FORMATS:
        raise InputError("--plot", str(out), "a file name ending in .png, .svg or .pdf")
    return out


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the headless Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path, dpi: int = 120) -> Path:
    """Write ``fig`` to ``path`` (creating its folder) and close it."""
    plt = pyplot()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=dpi)
    except OSError as exc:
        raise InputError("--plot", str(path), f"a path that can be written ({exc.strerror})") from None
    finally:
        plt.close(fig)
    return path
