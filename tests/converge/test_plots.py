"""The figures, drawn from a hand-made results document (no training; a version 1 one,
read as converge reads those): every one is written, and runs that did not finish leave
gaps, not errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfsuite.cli import main
from perfsuite.converge.plots import (
    artifact_paths,
    calibration_figure,
    loss_figure,
    reliability_figure,
)
from perfsuite.converge.report import from_v1

# A committed results file of loss rows: not a converge file.
SMOKE = json.loads((Path(__file__).parents[2] / "reports/cpu-smoke/results.json").read_text())


def _run(method: str, beta: float, status: str = "ok", offset: float = 0.0) -> dict:
    if status != "ok":
        return {"method": method, "beta": beta, "dtype": "fp32", "status": status, "steps": []}
    steps = [{"step": i, "loss": 6.0 - 0.1 * i + offset} for i in range(5)]
    confidence, accuracy = [0.0] * 13 + [0.9, 0.97], [0.0] * 13 + [0.8, 1.0 - beta]
    reliability = dict(count=[0.0] * 13 + [30.0, 10.0], confidence=confidence, accuracy=accuracy)
    heldout = dict(ece=0.1 + beta, rms_ce=0.12, sce=0.01, ace=0.02, reliability=reliability)
    return dict(method=method, beta=beta, dtype="fp32", status="ok", steps=steps, heldout=heldout)


OLD = {
    "schema": "perfsuite.converge/1",
    "created": "2025-01-01T00:00:00+00:00",
    "preset": {"name": "smoke", "steps": 5, "vocab": 512, "hidden": 64, "batch": 4, "seq": 32},
    "triton_interpreted": ["ours"],
    "dtypes": ["fp32"],
    "data": {"truth_known": True},
    "environment": {"device": {"kind": "cpu"}},
    "tolerances": {
        "fp32": {"loss_atol": 1e-8, "loss_rtol": 2e-5, "param_atol": 5e-3, "param_rtol": 1e-5}
    },
    "runs": [
        _run("eager", 0.0),
        _run("ours", 0.0, offset=1e-6),
        _run("torchtune-chunked", 0.0),
        _run("eager", 0.1),
        _run("ours", 0.1),  # exactly eager's losses: drawn at the floor
        _run("torchtune-chunked", 0.1, status="unsupported"),
    ],
    "complete": True,
}
DOCUMENT = from_v1(OLD)


def test_panels_follow_betas_and_methods():
    loss = loss_figure(DOCUMENT)
    assert [ax.get_title() for ax in loss.axes[:2]] == ["β = 0", "β = 0.1"]
    # Bottom row: ours' distance from eager, one point per step (tolerance line aside).
    distance = loss.axes[2].get_lines()
    ours = next(line for line in distance if line.get_label() == "ours †")
    expected = [1e-6 / (6.0 - 0.1 * i) for i in range(5)]
    assert list(ours.get_ydata()) == pytest.approx(expected, rel=1e-6)
    reliability = reliability_figure(DOCUMENT)
    titles = [ax.get_title() for ax in reliability.axes]
    assert titles == ["β = 0: every method", "β = 0.1: every method", "eager: β compared"]
    bars = calibration_figure(DOCUMENT)
    assert [ax.get_title() for ax in bars.axes] == ["ECE", "RMS-CE", "SCE", "ACE"]
    # The unsupported cell is labelled where its bar would be.
    assert "unsupported" in " ".join(t.get_text() for t in bars.axes[0].texts)


def test_render_rewrites_table_and_plots_from_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """Every figure written next to the results, named where it was written."""
    path = tmp_path / "old.json"
    path.write_text(json.dumps(OLD))
    assert main(["converge", "--render", str(path)]) == 0
    paths = artifact_paths(path)
    assert paths["table"] == tmp_path / "old.md"
    table = paths["table"].read_text()
    assert "| ours † |" not in table and "| ours | 0 | fp32 |" in table
    assert "| torchtune-chunked | 0.1 | fp32 | unsupported |" in table
    printed = capsys.readouterr().out.splitlines()
    figures = [paths[k] for k in ("loss", "reliability", "calibration")]
    plots = [line.split()[-1] for line in printed if line.startswith("plot:")]
    assert plots == list(map(str, figures))
    for figure in figures:
        assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and figure.stat().st_size > 10_000
    for document, why in [({"rows": []}, "schema_version None"), (SMOKE, "holds loss rows")]:
        (tmp_path / "run.json").write_text(json.dumps(document))
        assert main(["converge", "--render", str(tmp_path / "run.json")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{tmp_path / 'run.json'}" in err and why in err, err
