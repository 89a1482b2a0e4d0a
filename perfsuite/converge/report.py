"""The converge results: a JSON document rewritten after every run, and a rich table.

The file is written atomically (``perfsuite.results.results.write_results``) after
each run, with ``complete: false`` until the last, so an interrupted or crashed
sweep keeps every run that finished.
"""

from __future__ import annotations

import datetime
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from perfsuite.converge.train import RunResult
from perfsuite.method import package_version
from perfsuite.results.results import write_results

SCHEMA = "perfsuite.converge/1"
DISTRIBUTIONS = ("torch", "transformers", "torchmetrics", "triton", "liger-kernel", "numpy")


def environment(device: str) -> dict[str, Any]:
    """Versions and the device: what a reader needs to reproduce the numbers."""
    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "device": device,
        "versions": {d: package_version(d) for d in DISTRIBUTIONS},
        "torch_threads": torch.get_num_threads(),
    }
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
    return env


def new_document(**sections: Any) -> dict[str, Any]:
    """The document's header; ``runs`` fills in as the sweep goes."""
    return {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **sections,
        "runs": [],
        "complete": False,
    }


def save(path: Path, document: dict[str, Any], runs: list[RunResult], complete: bool) -> None:
    document["runs"] = [r.to_dict() for r in runs]
    document["complete"] = complete
    write_results(path, document)


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def summary(run: RunResult) -> dict[str, Any]:
    """The numbers one table row shows (also handy for a short printout)."""
    times = [s["time_s"] for s in run.steps if "time_s" in s]
    peaks = [s["peak_bytes"] for s in run.steps if s.get("peak_bytes") is not None]
    held = run.heldout or {}
    parity = run.parity or {}
    return {
        "train_loss": run.losses[-1] if run.steps else None,
        "step_ms": statistics.median(times) * 1e3 if times else None,
        "peak_mib": max(peaks) / 2**20 if peaks else None,
        **{k: held.get(k) for k in ("loss", "perplexity", "accuracy", "kl_to_truth")},
        **{k: held.get(k) for k in ("ece", "rms_ce", "sce", "ace")},
        "verdict": parity.get("verdict", "—"),
        "loss_diff": parity.get("loss_max_rel_diff"),
        "param_diff": parity.get("param_rel_l2"),
    }


VERDICT_STYLE = {"same": "green", "differs": "bold red", "reference": "dim", "yardstick": "dim"}


def _key_cells(run: RunResult) -> list[str]:
    status = run.status if run.status == "ok" else f"[yellow]{run.status}[/yellow]"
    return [run.method, f"{run.beta:g}", run.dtype, status]


def _table(title: str, numeric: tuple[str, ...]) -> Table:
    t = Table(title=title, title_justify="left")
    for col in ("method", "β", "dtype", "status"):
        t.add_column(col, justify="right" if col == "β" else "left")
    for col in numeric:
        t.add_column(col, justify="left" if col == "parity" else "right")
    return t


def training_table(runs: list[RunResult], title: str) -> Table:
    """Per run: last training loss, median step time, peak memory, parity with eager."""
    t = _table(title, ("loss", "ms/step", "peak MiB", "parity", "Δloss rel", "Δparam rel"))
    for run in runs:
        s = summary(run)
        style = VERDICT_STYLE.get(s["verdict"], "")
        verdict = f"[{style}]{s['verdict']}[/{style}]" if style else s["verdict"]
        t.add_row(
            *_key_cells(run),
            _fmt(s["train_loss"], ".4f"),
            _fmt(s["step_ms"], ".1f"),
            _fmt(s["peak_mib"], ".1f"),
            verdict,
            _fmt(s["loss_diff"], ".1e"),
            _fmt(s["param_diff"], ".1e"),
        )
    return t


def heldout_table(runs: list[RunResult], title: str) -> Table:
    """Per run: held-out loss, perplexity, accuracy, KL to the truth, calibration."""
    cols = ("loss", "ppl", "acc", "KL→truth", "ECE", "RMS", "SCE", "ACE")
    t = _table(title, cols)
    for run in runs:
        s = summary(run)
        t.add_row(
            *_key_cells(run),
            _fmt(s["loss"], ".4f"),
            _fmt(s["perplexity"], ".2f"),
            _fmt(s["accuracy"], ".3f"),
            _fmt(s["kl_to_truth"], ".4f"),
            _fmt(s["ece"], ".4f"),
            _fmt(s["rms_ce"], ".4f"),
            _fmt(s["sce"], ".5f"),
            _fmt(s["ace"], ".5f"),
        )
    return t


def print_report(console: Console, runs: list[RunResult], title: str) -> None:
    """Both tables, then each failed run's reason on a line of its own."""
    console.print(training_table(runs, f"{title}: training, parity with eager"))
    console.print(heldout_table(runs, "held-out (plain CE, fp32 logits; 15-bin calibration)"))
    for run in runs:
        if run.reason:
            console.print(
                f"  [yellow]{run.method}[/yellow] β={run.beta:g} {run.dtype}: {run.reason}"
            )
