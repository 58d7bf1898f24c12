"""Reading files a user names (``config.json``, ``--prices``): text only, bounded size.

A wrong file (a binary, a huge dump, a pathologically nested document) is an
:class:`~rackmath.errors.InputError` naming the option, never a traceback.
"""

from __future__ import annotations

from pathlib import Path

from rackmath.errors import InputError

#: Largest user file read (real config.json and price files are a few kB).
MAX_USER_FILE_BYTES = 2_000_000


def read_text(path: str | Path, field: str, *, max_bytes: int = MAX_USER_FILE_BYTES) -> str:
    """The UTF-8 text of ``path``; refuses missing, oversized and binary files."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if not file.is_file():
            raise InputError(field, str(path), "a file (this is a folder or a device)")
        if size > max_bytes:
            raise InputError(
                field, str(path), f"a file of at most {max_bytes:,} bytes (this one has {size:,})"
            )
        data = file.read_bytes()
    except OSError as exc:
        raise InputError(field, str(path), f"a file that can be read ({exc.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            field,
            str(path),
            f"a UTF-8 text file (byte {data[exc.start]:#04x} at offset {exc.start} is not text)",
        ) from None
