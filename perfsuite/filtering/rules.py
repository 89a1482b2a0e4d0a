"""The filters, vocabulary orders and default thresholds ``perfsuite filtering`` offers,
apart from ``emulate`` (torch): a bad argument is refused before torch loads."""

from __future__ import annotations

from dataclasses import dataclass

ORDERS = ("natural", "sorted", "random")
DEFAULT_THRESHOLDS = (2.0**-8, 2.0**-10, 2.0**-12, 2.0**-14, 2.0**-16)


@dataclass(frozen=True)
class Filter:
    """A filtering rule with its backward tile (rows × vocab entries)."""

    name: str
    tile_n: int
    tile_v: int
    target_in_tile: bool
    methods: str  # the suite methods it stands for


FILTERS = {
    "cce": Filter("cce", 128, 128, True, "cce (sorted), cce-no-sort (natural)"),
    "element": Filter(
        "element", 128, 256, False, "ours-tiles-sort (sorted), ours-tiles-no-sort (natural)"
    ),
    "tile-list": Filter("tile-list", 128, 256, False, "ours-tiles-list (natural)"),
}
