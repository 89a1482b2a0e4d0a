"""How every number is written: bytes, milliseconds, FLOPs. One module under everything
(the planner words sizes, the tables and compare write cells), so that one cell reads
the same in each command."""

from __future__ import annotations

BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
FLOP_UNITS = ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP"))


def fmt_number(value: float | None, unit_scale: float = 1) -> str:
    """A cell's number without its unit (a column header says it): three significant
    figures, thousands grouped from 100; in a scaled unit two decimals, and ``<0.01`` for
    what would print as 0.00 (a few bytes read "3.81e-06"). ``-``: none."""
    if value is None or value != value:
        return "-"
    x = value / unit_scale
    if unit_scale != 1 and 0 < x < 0.005:
        return "<0.01"
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}" if unit_scale == 1 else f"{x:.2f}"


def byte_unit(nbytes: float, units: tuple[str, ...] = BYTE_UNITS) -> tuple[int, str]:
    """(scale, unit): the largest of ``units`` that ``nbytes`` fills (the first if none)."""
    filled = [(1024 ** BYTE_UNITS.index(u), u) for u in units]
    return next(((s, u) for s, u in reversed(filled) if nbytes >= s), filled[0])


def fmt_bytes(nbytes: float | None, unit: str | None = None) -> str:
    """The one byte formatter. With ``unit`` (``"MiB"``), a column's number in it
    (``fmt_number``); without, a size that carries its own unit, the largest it fills:
    ``512 B``, ``131 KiB``, ``23.3 MiB`` (a shape a typo made huge read "~2235179424.3
    GiB")."""
    if unit is not None:
        return fmt_number(nbytes, 1024 ** BYTE_UNITS.index(unit))
    if nbytes is None:
        return "-"
    scale, unit = byte_unit(nbytes)
    return f"{nbytes:.0f} B" if scale == 1 else f"{fmt_number(nbytes / scale)} {unit}"


def fmt_flops(flops: float) -> str:
    """``9.66 TFLOP``: FLOPs in the largest unit they fill."""
    scale, unit = next(((s, u) for s, u in FLOP_UNITS if flops >= s), (1.0, "FLOP"))
    return f"{flops / scale:.3g} {unit}"


def rate_unit(rate: float) -> tuple[float, str]:
    """(scale, unit) of a column of FLOP rates whose largest is ``rate``: ``TFLOP/s``
    where it fills one, down to ``FLOP/s`` (``GFLOP/s`` where TFLOP/s would print 0.00)."""
    return next(((s, f"{u}/s") for s, u in FLOP_UNITS[1:-1] if rate >= s), (1.0, "FLOP/s"))
