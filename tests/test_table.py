"""The console table: paper layout, lower bound, N/A, status words, footnotes."""

from __future__ import annotations

from dataclasses import asdict

from rich.console import Console

from perfsuite.results import Row
from perfsuite.table import build_tables, footnotes, print_tables


def _rows():
    shape = dict(tokens=8, vocab=16, hidden=4, dtype="fp32", softcap=None, shape="t", device="cpu")
    rows = []
    for beta in (0.0, 0.1):
        for phase in ("fwd", "bwd", "fwd+bwd"):
            rows.append(
                Row(
                    method="eager",
                    beta=beta,
                    phase=phase,
                    status="ok",
                    median_ms=2.0,
                    peak_bytes=3 << 20,
                    **shape,
                )
            )
            rows.append(
                Row(
                    method="torch-native",
                    beta=beta,
                    phase=phase,
                    status="ok",
                    median_ms=1.0,
                    peak_bytes=1 << 20,
                    **shape,
                )
            )
            rows.append(
                Row(
                    method="fake",
                    beta=beta,
                    phase=phase,
                    status="unsupported" if beta else "oom",
                    reason="because",
                    **shape,
                )
            )
    return [asdict(r) for r in rows]


def _render(rows) -> str:
    console = Console(width=250, record=True)
    print_tables(rows, console)
    return console.export_text()


def test_one_table_per_beta_with_lower_bound_first():
    tables = build_tables(_rows())
    assert len(tables) == 2
    headers = [c.header for c in tables[0].columns]
    assert headers[:7] == [
        "method",
        "fwd mem",
        "fwd time",
        "bwd mem",
        "bwd time",
        "fwd+bwd mem",
        "fwd+bwd time",
    ]
    text = _render(_rows())
    assert text.index("lower bound") < text.index("eager")
    assert "β=0 " in text and "β=0.1 " in text


def test_statuses_and_markers():
    text = _render(_rows())
    assert "N/A" in text and "oom" in text and "because" in text
    assert "2 ms" in text and "3.00 MiB" in text
    assert "‡" in text  # torch-native computes grads in forward
    assert any("fair column" in n for n in footnotes(_rows()))
