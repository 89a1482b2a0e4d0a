"""The converge results: each run a ``train`` row of the version 2 results document (its
settings under ``env["converge"]``), read back with the files of version 1, and the tables."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from rich.console import Console

from perfsuite.fit import Column, Grid
from perfsuite.results.results import read_json, require_kind
from perfsuite.units import fmt_bytes

V1 = "perfsuite.converge/1"  # the converge document before the results envelope held it


def train_row(
    run: dict[str, Any], preset: dict[str, Any], device: str, data: str, interpreted: bool
) -> dict[str, Any]:
    """A run (``RunResult.to_dict()``, or a version 1 file's) as a flat ``train`` row."""
    size = {"tokens": preset["batch"] * preset["seq"], "vocab": preset["vocab"]}
    return {
        **run,
        **size,
        "hidden": preset["hidden"],
        "kind": "train",
        "phase": "train",
        "reason": run.get("reason") or "",
        "shape": preset["name"],
        "device": device,
        "workload": f"train({data})",
        "interpreted": interpreted,
    }


def from_v1(old: dict[str, Any]) -> dict[str, Any]:
    """A ``perfsuite.converge/1`` document as version 2: its sections under
    ``env["converge"]``, ``complete: false`` as ``partial``, its runs as ``train`` rows."""
    settings = {k: v for k, v in old.items() if k not in ("schema", "environment", "runs")}
    env = {**old["environment"], "created": old["created"], "converge": settings}
    if not settings.pop("complete", False):
        env["partial"] = True
    device = (env.get("device") or {}).get("kind", "cpu")
    data = "bigram" if (old.get("data") or {}).get("truth_known") else "text"
    interpreted = set(settings.pop("triton_interpreted", None) or ())
    rows = [
        train_row(r, old["preset"], device, data, r["method"] in interpreted) for r in old["runs"]
    ]
    return {"schema_version": 2, "env": env, "rows": rows}


def read(path: Path) -> dict[str, Any]:
    """A converge results file (version 1 converted) as ``load_results`` returns one."""
    from perfsuite.results.schema import validate

    raw = read_json(path)
    old = isinstance(raw, dict) and raw.get("schema") == V1
    document = validate(from_v1(raw) if old else raw, path)
    require_kind(document, path, {"train"}, "converge --render")  # rows and all (validate)
    return document


def summary(run: dict[str, Any]) -> dict[str, Any]:
    """The numbers one table row shows."""
    steps = run.get("steps") or []
    times = [s["time_s"] for s in steps if "time_s" in s]
    peaks = [s["peak_bytes"] for s in steps if s.get("peak_bytes") is not None]
    held = run.get("heldout") or {}
    parity = run.get("parity") or {}
    return {
        "train_loss": steps[-1]["loss"] if steps else None,
        "step_ms": statistics.median(times) * 1e3 if times else None,
        "peak_bytes": max(peaks) if peaks else None,
        **held,
        "verdict": parity.get("verdict", "—"),
        "loss_diff": parity.get("loss_max_rel_diff"),
        "param_diff": parity.get("param_rel_l2"),
    }


VERDICT_STYLE = {"same": "green", "differs": "bold red", "reference": "dim", "yardstick": "dim"}
KEY_COLUMNS = ("method", "β", "dtype")
LEFT = ("method", "dtype", "parity")  # the text columns; numbers align right
# (header, summary key, format) per column of each table.
TRAINING = (
    ("Δloss max rel", "loss_diff", ".1e"),
    ("Δparams rel L2", "param_diff", ".1e"),
    ("final loss", "train_loss", ".4f"),
    ("ms/step", "step_ms", ".1f"),
    ("peak MiB", "peak_bytes", "MiB"),  # fmt_bytes, as every table's
)
HELDOUT = (
    ("loss", "loss", ".4f"),
    ("ppl", "perplexity", ".2f"),
    ("acc", "accuracy", ".3f"),
    ("KL→truth", "kl_to_truth", ".4f"),
    ("ECE", "ece", ".4f"),
    ("RMS-CE", "rms_ce", ".4f"),
    ("SCE", "sce", ".2e"),
    ("ACE", "ace", ".2e"),
    ("MCE", "mce", ".3f"),
)


def _table(runs: list[dict[str, Any]], columns: tuple, verdict: bool, title: str = "") -> Grid:
    """Per run its key, the verdict (``verdict``, coloured), each column's number. The
    held-out table prints as two tables of the same rows (``HELDOUT_HALVES``)."""
    headers = [*KEY_COLUMNS, *(["parity"] if verdict else []), *(c[0] for c in columns)]
    rows = []
    for run in runs:
        s = summary(run)  # the verdict, or the status of a run that did not finish
        key = [run["method"], f"{run['beta']:g}", run["dtype"]]
        if verdict:  # anything but a verdict is a status: yellow
            said = s["verdict"] if run["status"] == "ok" else run["status"]
            style = VERDICT_STYLE.get(said, "yellow")
            key.append(f"[{style}]{said}[/{style}]")
        show = lambda v, f: fmt_bytes(v, f) if f == "MiB" else format(v, f)  # noqa: E731
        rows.append(key + ["—" if s.get(k) is None else show(s[k], f) for _, k, f in columns])
    cols = [Column(h, "left", True) if h in LEFT else Column(h, "right", False) for h in headers]
    key = [*range(len(KEY_COLUMNS))]
    parts = [] if verdict else [(t, key + [*range(*cut)]) for t, cut in HELDOUT_HALVES]
    return Grid(cols, rows, title, options={"title_justify": "left"}, parts=parts)


HELDOUT_TITLE = "held-out (plain CE, fp32 logits; 15-bin calibration, top-1 for ECE/RMS-CE/MCE)"
# (title, columns) of its halves: loss, ppl, acc, KL→truth | the calibration errors.
HELDOUT_HALVES = (
    ("held-out (plain CE, fp32 logits)", (3, 7)),
    ("held-out calibration (15 bins, top-1 for ECE/RMS-CE/MCE)", (7, 12)),
)


def title(document: dict[str, Any]) -> str:
    """``converge PRESET on DEVICE (WALL s, STEPS steps)``."""
    env = document["env"]
    settings, device = env.get("converge", {}), (env.get("device") or {}).get("kind", "?")
    preset = settings.get("preset", {})
    wall = f"{settings['wall_s']:.1f} s, " if settings.get("wall_s") is not None else ""
    return f"converge {preset.get('name')} on {device} ({wall}{preset.get('steps')} steps)"


def print_report(console: Console, document: dict[str, Any]) -> None:
    """Both tables, then each unfinished run's reason on a line of its own."""
    runs = document["rows"]
    _table(runs, TRAINING, True, f"{title(document)}: parity with eager").print(console)
    _table(runs, HELDOUT, False, HELDOUT_TITLE).print(console)
    for run in runs:
        if run.get("reason"):
            console.print(
                f"  [yellow]{run['method']}[/yellow] β={run['beta']:g} {run['dtype']}: "
                f"{run['reason']}",
                highlight=False,
            )


def markdown(document: dict[str, Any]) -> str:
    """Both tables as markdown, with the tolerances and every unfinished run's reason."""
    runs = document["rows"]
    tol = document["env"].get("converge", {}).get("tolerances", {})
    lines = [f"## {title(document)}", "", "### Parity with eager", ""]
    lines += _table(runs, TRAINING, True).markdown()
    lines += ["", f"### {HELDOUT_TITLE[0].upper()}{HELDOUT_TITLE[1:]}", ""]
    lines += _table(runs, HELDOUT, False).markdown()
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
    unfinished = [
        f"- {r['method']} β={r['beta']:g} {r['dtype']}: {r['status']}: {r['reason']}"
        for r in runs
        if r.get("reason")
    ]
    lines += ["", "Not run or not finished:", *unfinished] if unfinished else []
    return "\n".join(lines) + "\n"
