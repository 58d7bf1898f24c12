"""Reading files a user names: ``config.json``, ``--prices``, ``--measurements``, ``--trace``,
``sweep`` specs. One guard for all of them: text only, bounded size, bounded nesting.

A wrong file (a binary, a huge dump, a pathologically nested document) is an
:class:`~rackmath.errors.InputError` naming the option, never a traceback, and is refused
before the work it would cause: YAML is read with libyaml's C loader (``CSafeLoader``) only
after a pass over its events has checked the nesting, because libyaml's composer recurses in
C and a file of ~100,000 nested brackets would crash the interpreter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rackmath.errors import InputError

#: Largest user file read (real config.json and price files are a few kB).
MAX_USER_FILE_BYTES = 2_000_000
#: Largest user YAML file (sweep specs, --measurements, --prices). The shipped catalogs are at
#: most 130 kB; libyaml reads a megabyte in about a second on a busy CI core.
MAX_USER_YAML_BYTES = 1_000_000
#: Deepest nesting of mappings and lists in a user's YAML. Real files nest fewer than 10
#: levels (a measurement: list -> entry -> scenario -> plan); 32 leaves room.
MAX_NESTING = 32

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_OPEN = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSE = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


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
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            field,
            str(path),
            f"a UTF-8 text file (byte {data[exc.start]:#04x} at offset {exc.start} is not text)",
        ) from None
    if "\x00" in text:
        raise InputError(
            field, str(path), f"a text file (byte 0x00 at offset {text.index(chr(0))} is not text)"
        )
    return text


def load_yaml(
    path: str | Path, field: str, *, max_bytes: int = MAX_USER_YAML_BYTES, max_depth: int = MAX_NESTING
) -> Any:
    """The YAML document in ``path`` (safe types only), read under :func:`read_text`'s guards."""
    return parse_yaml(read_text(path, field, max_bytes=max_bytes), field, str(path), max_depth=max_depth)


def parse_yaml(text: str, field: str, given: str, *, max_depth: int = MAX_NESTING) -> Any:
    """``text`` as YAML: refused in one line when it nests deeper than ``max_depth`` or does
    not parse (with the line and column of the problem)."""
    try:
        depth = 0
        for event in yaml.parse(text, Loader=_LOADER):
            if isinstance(event, _OPEN):
                depth += 1
                if depth > max_depth:
                    line = event.start_mark.line + 1 if event.start_mark else "?"
                    allowed = f"YAML nested at most {max_depth} levels deep (level {depth} at line {line})"
                    raise InputError(field, given, allowed)
            elif isinstance(event, _CLOSE):
                depth -= 1
        return yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise InputError(field, given, f"valid YAML ({problem}{where})") from None
