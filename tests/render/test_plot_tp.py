"""`perfsuite plot` with cells measured across ranks: figures of their own per TP size,
with a rank's floor, never a line joined to the one-device cells."""

from __future__ import annotations

import pytest
from fake_results import CPU_ENV, row, tp_row

from perfsuite.plan.memory_model import floor_bytes
from perfsuite.results.results import new_document

pytest.importorskip("matplotlib")

from perfsuite.render import plot  # noqa: E402


def test_each_tp_size_gets_its_own_figures_with_a_rank_floor():
    shape = dict(tokens=64, hidden=32, dtype="fp32", shape="smoke", device="cpu")
    rows = []
    for vocab in (512, 1024):
        rows.append(row("ours", "fwd+bwd", ms=vocab / 100, mib=vocab / 1000, vocab=vocab, **shape))
        for k in (2, 4):
            rows.append(tp_row("ours", k, vocab / 100 / k, vocab / 1e6 / k, vocab=vocab, **shape))
    made = dict(plot.figures(new_document(CPU_ENV, rows)))
    assert set(made) == {
        f"{q}-vs-V-N64-D32-fp32{tp}-fwdbwd.png"
        for q in ("memory", "time")
        for tp in ("", "-tp2", "-tp4")
    }
    fig = made["memory-vs-V-N64-D32-fp32-tp4-fwdbwd.png"]
    assert "TP=4 per rank" in fig._suptitle.get_text()
    (ax,) = fig.get_axes()
    ours, bound = ax.get_lines()
    assert bound.get_label() == "lower bound per rank"
    assert list(bound.get_ydata()) == [
        floor_bytes("fwd+bwd", 64, v // 4, 32, "fp32") / 2**20 for v in (512, 1024)
    ]
    peaks = [v / 1e6 / 4 * 1024 for v in (512, 1024)]  # GiB -> MiB, int bytes
    assert list(ours.get_ydata()) == pytest.approx(peaks, rel=1e-4)
    one = made["memory-vs-V-N64-D32-fp32-fwdbwd.png"].get_axes()[0].get_lines()[0]
    assert list(one.get_ydata()) == pytest.approx([0.512, 1.024], rel=1e-4)  # one device only
