"""Sizes in errors read in their own unit: a shape a typo made huge was refused with
"predicted peak ~2235179424.3 GiB"."""

from __future__ import annotations

import pytest

from perfsuite.plan.memory_model import exceeds, fmt_size


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (24_379_392, "23.2 MiB"),
        (16 * 2**30, "16.0 GiB"),
        (285.9 * 2**40, "285.9 TiB"),
        (3 * 2**50, "3.0 PiB"),
        (2235179424.3 * 2**30, "2.1 EiB"),
    ],
)
def test_a_size_reads_in_the_largest_unit_it_fills(nbytes, text):
    assert fmt_size(nbytes) == text


def test_the_too_big_wording_keeps_its_numbers_short():
    said = exceeds(int(2235179424.3 * 2**30), "the gate", 16 * 2**30, "cpu")
    assert said.startswith("predicted peak ~2.1 EiB (the gate) exceeds the 16.0 GiB this cpu")
