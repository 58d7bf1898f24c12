"""A property computed on first read and kept: ``functools.cached_property`` without its lock.

Python 3.11's ``cached_property`` takes a lock on each first read (~0.5 us); a plan point's
answer objects are new each time, so every point paid it. Python 3.12 removed the lock (it
serialized every instance of a class, and the values it guards are pure functions of the
instance: two threads computing one compute the same), and there this module gives the
standard library's own. The value goes to the instance's ``__dict__``, so it works on frozen
dataclasses as ``functools.cached_property`` does.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

_T = TypeVar("_T")

if sys.version_info >= (3, 12):
    from functools import cached_property
else:

    class cached_property(Generic[_T]):
        """``functools.cached_property`` as Python 3.12 has it: no lock."""

        def __init__(self, func: Callable[[Any], _T]) -> None:
            self.func = func
            self.attrname = func.__name__
            self.__doc__ = func.__doc__

        def __set_name__(self, owner: type, name: str) -> None:
            self.attrname = name

        @overload
        def __get__(self, instance: None, owner: type | None = None) -> cached_property[_T]: ...

        @overload
        def __get__(self, instance: object, owner: type | None = None) -> _T: ...

        def __get__(self, instance: object | None, owner: type | None = None) -> Any:
            if instance is None:
                return self
            value = instance.__dict__[self.attrname] = self.func(instance)
            return value


__all__ = ["cached_property"]
