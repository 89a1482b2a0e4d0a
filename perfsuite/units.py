"""How every number is written: bytes, milliseconds, FLOPs, in one module under the planner,
the tables and compare, so that one cell reads the same in each command."""

from __future__ import annotations

from collections.abc import Sequence

# (scale, unit), largest first.
BYTES = tuple((1024**i, u) for i, u in enumerate("B KiB MiB GiB TiB PiB EiB".split()))[::-1]
FLOPS = tuple((1000.0**i, f"{p}FLOP") for i, p in enumerate(" k M G T P".split(" ")))[::-1]
RATES = tuple((s, f"{u}/s") for s, u in FLOPS if u != "kFLOP")[1:]


def largest(value: float, units: Sequence[tuple[float, str]]) -> tuple[float, str]:
    """(scale, unit): the largest of ``units`` that ``value`` fills, else the smallest
    (a column in MiB where GiB would print 0.00)."""
    return next(((s, u) for s, u in units if value >= s), units[-1])


def fmt_number(value: float | None, unit_scale: float = 1) -> str:
    """A cell's number without its unit (its header says it): three significant figures,
    thousands grouped from 100; in a scaled unit two decimals, ``<0.01`` for what would
    print as 0.00 (a few bytes read "3.81e-06"); ``-``: none."""
    if value is None or value != value:
        return "-"
    x = value / unit_scale
    if unit_scale != 1 and 0 < x < 0.005:
        return "<0.01"
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}" if unit_scale == 1 else f"{x:.2f}"


def fmt_bytes(nbytes: float | None, unit: str | None = None) -> str:
    """The one byte formatter. With ``unit`` (``"MiB"``), a column's number in it
    (``fmt_number``); without, a size with the largest unit it fills: ``512 B``, ``131 KiB``,
    ``23.3 MiB`` (a shape a typo made huge read "~2235179424.3 GiB")."""
    if unit is not None:
        return fmt_number(nbytes, dict((u, s) for s, u in BYTES)[unit])
    if nbytes is None:
        return "-"
    scale, unit = largest(nbytes, BYTES)
    return f"{nbytes:.0f} B" if scale == 1 else f"{fmt_number(nbytes / scale)} {unit}"


def fmt_flops(flops: float) -> str:
    """``9.66 TFLOP``: FLOPs in the largest unit they fill."""
    scale, unit = largest(flops, FLOPS)
    return f"{flops / scale:.3g} {unit}"


# A cell's status in no more room than a number (the run table's and compare's words).
SHORT_STATUS = {"unavailable": "unavail", "unsupported": "N/A"}
