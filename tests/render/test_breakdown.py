"""The breakdown as text: a stacked bar per method, a legend, the top kernels, 80 columns."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
import torch.nn.functional as F

from perfsuite.measure.kernel_classes import CLASSES
from perfsuite.measure.profile import profile_call
from perfsuite.render.breakdown import LETTERS, breakdown_lines, stacked_bar
from perfsuite.units import fmt_number

CELL = dict(shape="gemma2-2b", tokens=8192, vocab=256000, hidden=2304, dtype="bf16", beta=0.1)
LONG_KERNEL = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas"
)


def cuda_row(method: str, wall: float, host: float, **classes: float) -> dict:
    """A row as the worker writes it, with a CUDA breakdown of the given class times."""
    full = dict.fromkeys(CLASSES, 0.0) | classes
    top = [
        {"name": LONG_KERNEL if i == 0 else f"{c}_kernel_{i}", "class": c, "ms": ms, "calls": 3}
        for i, (c, ms) in enumerate(sorted(classes.items(), key=lambda kv: -kv[1]))
    ]
    breakdown = dict(
        source="cuda-kernels", wall_ms=wall, device_ms=sum(full.values()), busy_ms=wall - host,
        host_ms=host, launches=1234, classes=full, top=top, note="",
    )  # fmt: skip
    return dict(CELL, method=method, phase="fwd+bwd", status="ok", breakdown=breakdown)


@pytest.fixture
def rows() -> list[dict]:
    return [
        cuda_row("liger", 138.9, 18.9, gemm=80.0, peer=30.0, elementwise=8.0, copy=2.0),
        cuda_row("ours-fused-no-filter", 61.25, 1.25, ours=58.0, copy=2.0),
        dict(CELL, method="cce", phase="fwd+bwd", status="error", breakdown=None),
    ]


@pytest.mark.parametrize("width", [80, 60, 120])
def test_fits_the_width_and_never_cuts_a_number(rows, width):
    lines = breakdown_lines(rows, width)
    assert max(map(len, lines)) <= width, "\n".join(lines)
    text = "\n".join(lines)
    for row in rows[:2]:
        b = row["breakdown"]
        for number in (fmt_number(b["wall_ms"]), fmt_number(b["host_ms"]), str(b["launches"])):
            assert re.search(rf"(?<![\d.]){re.escape(number)}(?![\d.])", text), number
        for top in b["top"]:
            assert fmt_number(top["ms"]) in text


def test_one_bar_per_method_scaled_to_the_longest_wall_time(rows):
    lines = breakdown_lines(rows, 80)
    bars = {m: re.search(r"[GOPECNx.]{3,}", line).group() for line in lines
            for m in ("liger", "ours-fused-no-filter") if line.startswith(m + " ")}  # fmt: skip
    assert set(bars) == {"liger", "ours-fused-no-filter"}  # cce has no breakdown: no bar
    longest = len(bars["liger"])
    assert len(bars["ours-fused-no-filter"]) == round(longest * 61.25 / 138.9)
    # liger: gemm 80 of 120 ms of kernels in 120 ms busy, then 18.9 ms of host.
    assert bars["liger"].count("G") == pytest.approx(longest * 80 / 138.9, abs=1)
    assert bars["liger"].endswith(".") and "O" not in bars["liger"]
    assert set(bars["ours-fused-no-filter"]) <= {"O", "C", "."}


def test_title_legend_and_top_kernels_with_long_names_shortened(rows):
    lines = breakdown_lines(rows, 80)
    assert lines[0] == "where the time goes: gemma2-2b bf16 β=0.1 fwd+bwd (CUDA kernels)"
    legend = lines[1]
    for cls in CLASSES:
        assert f"{LETTERS[cls]} {cls}" in legend
    assert ". host" in legend
    text = "\n".join(lines)
    assert "top kernels" in text and "elementwise_kernel_2" in text
    assert LONG_KERNEL[:20] in text and LONG_KERNEL[-10:] in text and "..." in text


def test_cells_are_grouped_and_rows_without_a_breakdown_skipped(rows):
    other = [dict(r, phase="fwd") for r in rows[:1]]
    lines = breakdown_lines(rows + other, 80)
    titles = [line for line in lines if line.startswith("where the time goes")]
    assert len(titles) == 2 and titles[1].endswith("fwd (CUDA kernels)")
    assert breakdown_lines(rows[2:], 80) == []


def test_a_bar_is_the_wall_time_whole():
    row = cuda_row("x", 100.0, 25.0, gemm=50.0, copy=25.0)["breakdown"]
    assert stacked_bar(row, 0.4) == "GGGGGGGGGGGGGGGGGGGGCCCCCCCCCC.........."


def test_a_profiled_cpu_cell_renders():
    e = torch.randn(128, 64, requires_grad=True)
    c = torch.randn(1024, 64, requires_grad=True)
    t = torch.randint(0, 1024, (128,))

    def fn() -> None:
        F.cross_entropy(F.linear(e, c), t).backward()

    fn()
    breakdown = dataclasses.asdict(profile_call(fn, torch.device("cpu")))
    row = dict(CELL, dtype="fp32", method="eager", phase="fwd+bwd", breakdown=breakdown)
    lines = breakdown_lines([row], 80)
    assert "(CPU ops, no GPU)" in lines[0] and "top ops" in "\n".join(lines)
    assert any(line.startswith("eager ") and "G" in line for line in lines)
    assert max(map(len, lines)) <= 80
