"""Unit constants. Everything inside rackmath is SI: bytes, seconds, FLOP, USD.

Decimal and binary prefixes are different constants with different names; conversions
happen only in the catalog loader and in the faces, never inside the math.
"""

from __future__ import annotations

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
PB = 1e15

KiB = 2.0**10
MiB = 2.0**20
GiB = 2.0**30
TiB = 2.0**40

BITS_PER_BYTE = 8

TERA = 1e12
PETA = 1e15
MILLION = 1e6
BILLION = 1e9

MS = 1e-3
US = 1e-6
SECONDS_PER_MINUTE = 60.0
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0
SECONDS_PER_YEAR = 365.0 * SECONDS_PER_DAY  # a 365-day year

#: FLOPs per multiply-accumulate: the convention vendors use for peak FLOP/s and that
#: every FLOP count in rackmath follows.
FLOPS_PER_MAC = 2
