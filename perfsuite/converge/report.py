"""The converge results: a JSON document rewritten after every run, and a rich table.

The file is written atomically (``perfsuite.results.results.write_results``) after
each run, with ``complete: false`` until the last, so an interrupted or crashed
sweep keeps every run that finished.
"""

from __future__ import annotations

import datetime
import statistics
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from perfsuite.converge.train import RunResult
from perfsuite.results.provenance import collect_env
from perfsuite.results.results import write_results

SCHEMA = "perfsuite.converge/1"
DISTRIBUTIONS = ("transformers", "torchmetrics", "tokenizers", "numpy", "matplotlib")


def environment(device: str, distributions: list[str]) -> dict[str, Any]:
    """``perfsuite run``'s provenance (git SHA and dirtiness, versions, device), plus
    torch's thread count: what a reader needs to reproduce the numbers."""
    env = collect_env(device, [*DISTRIBUTIONS, *distributions])
    env["torch_threads"] = torch.get_num_threads()
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
KEY_COLUMNS = ("method", "β", "dtype")
TRAINING_COLUMNS = (
    "parity",
    "Δloss max rel",
    "Δparams rel L2",
    "final loss",
    "ms/step",
    "peak MiB",
)
HELDOUT_COLUMNS = ("loss", "ppl", "acc", "KL→truth", "ECE", "RMS-CE", "SCE", "ACE", "MCE")


def verdict_text(run: RunResult) -> str:
    """The parity verdict, or the status of a run that did not finish."""
    return run.status if run.status != "ok" else (run.parity or {}).get("verdict", "—")


def _key(run: RunResult) -> list[str]:
    return [run.method, f"{run.beta:g}", run.dtype]


def training_rows(runs: list[RunResult]) -> list[list[str]]:
    """Per run: parity with eager, its distances, last training loss, step time, memory."""
    rows = []
    for run in runs:
        s = summary(run)
        rows.append(
            [
                *_key(run),
                verdict_text(run),
                _fmt(s["loss_diff"], ".1e"),
                _fmt(s["param_diff"], ".1e"),
                _fmt(s["train_loss"], ".4f"),
                _fmt(s["step_ms"], ".1f"),
                _fmt(s["peak_mib"], ".1f"),
            ]
        )
    return rows


def heldout_rows(runs: list[RunResult]) -> list[list[str]]:
    """Per run: held-out loss, perplexity, accuracy, KL to the truth, calibration."""
    rows = []
    for run in runs:
        s, held = summary(run), run.heldout or {}
        rows.append(
            [
                *_key(run),
                _fmt(s["loss"], ".4f"),
                _fmt(s["perplexity"], ".2f"),
                _fmt(s["accuracy"], ".3f"),
                _fmt(s["kl_to_truth"], ".4f"),
                _fmt(s["ece"], ".4f"),
                _fmt(s["rms_ce"], ".4f"),
                _fmt(s["sce"], ".2e"),
                _fmt(s["ace"], ".2e"),
                _fmt(held.get("mce"), ".3f"),
            ]
        )
    return rows


def _rich(
    console: Console,
    title: str,
    columns: tuple[str, ...],
    rows: list[list[str]],
    verdicts: bool,
    halves: tuple[str, str] | None = None,
) -> None:
    """Fitted to the console (``perfsuite.fit``): numbers never fold or get cut. With
    ``halves`` (two titles), a table too wide for the console is printed as two tables
    of the same rows, split after ``HELDOUT_SPLIT`` columns: a block of lines per row
    (11 at 80 columns) was hard to compare."""
    from perfsuite.fit import Column, fit_table, print_fitted

    cols = [
        Column(c, "left", True) if c in ("method", "dtype", "parity") else Column(c, "right", False)
        for c in (*KEY_COLUMNS, *columns)
    ]
    styled = []
    for row in rows:
        if verdicts:  # colour the verdict; anything but a verdict is a status: yellow
            style = VERDICT_STYLE.get(row[3], "yellow")
            row = [*row[:3], f"[{style}]{row[3]}[/{style}]", *row[4:]]
        styled.append(row)
    if halves and fit_table(cols, styled, console.width, title=title) is None:
        key, cut = len(KEY_COLUMNS), len(KEY_COLUMNS) + HELDOUT_SPLIT
        for half, (start, end) in zip(halves, ((key, cut), (cut, len(cols))), strict=True):
            picked = [r[:key] + r[start:end] for r in styled]
            print_fitted(console, cols[:key] + cols[start:end], picked, half, title_justify="left")
        return
    print_fitted(console, cols, styled, title, title_justify="left")


HELDOUT_TITLE = "held-out (plain CE, fp32 logits; 15-bin calibration, top-1 for ECE/RMS-CE/MCE)"
HELDOUT_SPLIT = 4  # loss, ppl, acc, KL→truth | the calibration errors
HELDOUT_HALVES = (
    "held-out (plain CE, fp32 logits)",
    "held-out calibration (15 bins, top-1 for ECE/RMS-CE/MCE)",
)


def print_report(console: Console, runs: list[RunResult], title: str) -> None:
    """Both tables, then each unfinished run's reason on a line of its own."""
    _rich(console, f"{title}: parity with eager", TRAINING_COLUMNS, training_rows(runs), True)
    _rich(console, HELDOUT_TITLE, HELDOUT_COLUMNS, heldout_rows(runs), False, HELDOUT_HALVES)
    for run in runs:
        if run.reason:
            console.print(
                f"  [yellow]{run.method}[/yellow] β={run.beta:g} {run.dtype}: {run.reason}",
                highlight=False,
            )


def _md_table(columns: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    headers = [*KEY_COLUMNS, *columns]
    out = ["| " + " | ".join(headers) + " |"]
    aligns = [":--" if h in ("method", "dtype", "parity") else "--:" for h in headers]
    out.append("|" + "|".join(aligns) + "|")
    out.extend("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows)
    return out


def markdown(document: dict[str, Any], runs: list[RunResult], title: str) -> str:
    """Both tables as markdown, with the tolerances and every unfinished run's reason."""
    tol = document.get("tolerances", {})
    lines = [f"## {title}", "", "### Parity with eager", ""]
    lines += _md_table(TRAINING_COLUMNS, training_rows(runs))
    lines += ["", f"### {HELDOUT_TITLE[0].upper()}{HELDOUT_TITLE[1:]}", ""]
    lines += _md_table(HELDOUT_COLUMNS, heldout_rows(runs))
    lines += ["", "Tolerances (" + tol.get("source", "") + "):"]
    if tol.get("noise rule"):
        lines.append(f"- {tol['noise rule']}")
    for dtype in ("fp32", "bf16", "fp16"):
        if dtype in tol:
            t = tol[dtype]
            lines.append(
                f"- {dtype}: per-step loss atol {t['loss_atol']:g}, rtol {t['loss_rtol']:g}; "
                f"final parameters atol {t['param_atol']:g}, rtol {t['param_rtol']:g}"
            )
    unfinished = [run for run in runs if run.reason]
    if unfinished:
        lines += ["", "Not run or not finished:"]
    for run in unfinished:
        lines.append(f"- {run.method} β={run.beta:g} {run.dtype}: {run.status}: {run.reason}")
    return "\n".join(lines) + "\n"
