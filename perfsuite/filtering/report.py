"""The filtering study's files: JSON (rows + provenance), a markdown table, CSV, a plot."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from perfsuite.fit import pipe_table

COLUMNS = (
    ("filter", "filter"),
    ("order", "order"),
    ("threshold", "threshold"),
    ("entries_above", "entries ≥ thr"),
    ("tiles_kept", "tiles kept"),
    ("entries_kept", "entries kept"),
    ("dropped_mass_mean", "dropped mass/row (mean)"),
    ("dropped_mass_max", "(max)"),
    ("grad_e_rel_max", "dE max-abs / max|ref|"),
    ("grad_e_rel_fro", "dE Frobenius rel"),
    ("grad_e_vs_torch", "dE err / torch bf16's"),
    ("grad_e_worst_dim_share", "dE err² in worst dim"),
    ("grad_c_vs_torch", "dC err / torch's"),
    ("gate", "within gate (dE, dC)"),
    ("zero_dc_rows", "C rows with dC = 0"),
)


def _fmt(key: str, value: Any) -> str:
    if value is None:
        return "–"
    if key == "threshold":
        return f"2^{math.log2(value):g}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if key in ("tiles_kept", "entries_kept", "entries_above", "zero_dc_rows"):
            return f"{100 * value:.3g} %"
        return f"{value:.3g}"
    return str(value)


def markdown(document: dict[str, Any]) -> str:
    """The table one workload's study gives, with its summary line above it."""
    s, w = document["summary"], document["workload"]
    lines = [
        f"# Filtering study: {w['label']} (N={w['tokens']}, V={w['vocab']}, D={w['hidden']}, "
        f"{w['dtype']})",
        "",
        f"Mean entropy {s['mean_entropy']:.3g} nats; "
        f"{100 * s['fraction_at_or_above_threshold']:.3g} % of softmax entries ≥ 2^-12; "
        f"mean top-1 probability {s['mean_top1']:.3g}. "
        f"Frequency direction's share of E {s['share_e']:.3g}, of C {s['share_c']:.3g} "
        f"(random: {s['random_share']:.3g}). Torch {w['dtype']} vs the fp32 reference: dE "
        f"{s['torch_grad_e_max_abs']:.3g}, dC {s['torch_grad_c_max_abs']:.3g} max-abs "
        f"(reference max |dE| {s['grad_e_ref_max']:.3g}, |dC| {s['grad_c_ref_max']:.3g}). "
        f"Measured in {s['wall_s']:g} s.",
        "",
    ]
    rows = []
    for row in document["rows"]:
        gate = "/".join(_fmt("", row[f"grad_{q}_within_gate"]) for q in ("e", "c"))
        rows.append([gate if k == "gate" else _fmt(k, row.get(k)) for k, _ in COLUMNS])
    lines += pipe_table([h for _, h in COLUMNS], rows, left=("filter", "order"))
    lines += ["", f"Made by: `{document['command']}`", ""]
    return "\n".join(lines)


def plot(path: Path, document: dict[str, Any]) -> None:
    """Tiles kept and dE error over torch's, against the threshold, per filter × order."""
    from matplotlib.figure import Figure

    filtered = (r for r in document["rows"] if r["filter"] != "none")
    rows = sorted(filtered, key=lambda r: r["threshold"])
    fig = Figure(figsize=(15, 4.2), layout="tight")
    axes = fig.subplots(1, 3)
    styles = {"natural": "-", "sorted": "--", "random": ":"}
    colors = {"cce": "tab:red", "element": "tab:orange", "tile-list": "tab:blue"}
    for name, order in dict.fromkeys((r["filter"], r["order"]) for r in rows):
        sel = [r for r in rows if (r["filter"], r["order"]) == (name, order)]
        x = [r["threshold"] for r in sel]
        kw = {"color": colors.get(name), "linestyle": styles.get(order), "marker": "o"}
        kw["label"] = f"{name}, {order}"
        axes[0].plot(x, [r["tiles_kept"] for r in sel], **kw)
        axes[1].plot(x, [max(r["dropped_mass_mean"], 1e-12) for r in sel], **kw)
        axes[2].plot(x, [max(r["grad_e_vs_torch"], 1e-4) for r in sel], **kw)
    none = next(r for r in document["rows"] if r["filter"] == "none")
    axes[2].axhline(none["grad_e_vs_torch"], color="grey", lw=1, label="nothing dropped")
    axes[2].axhline(2.0, color="black", lw=1, ls="--", label="2 × torch (gate, less slack)")
    panels = (
        ("tiles kept", "linear"),
        ("dropped probability mass per row (mean)", "log"),
        ("dE max-abs error / torch same-dtype's", "log"),
    )
    for ax, (title, yscale) in zip(axes, panels, strict=True):
        ax.set_xscale("log", base=2)
        ax.set(xlabel="threshold (filter_eps)", yscale=yscale)
        ax.set_title(title, fontsize=10)
    axes[0].set_ylim(0, 1.05)
    axes[2].legend(fontsize=7)
    w = document["workload"]
    fig.suptitle(
        f"{w['label']}: N={w['tokens']} V={w['vocab']} D={w['hidden']} {w['dtype']}, "
        f"entropy {document['summary']['mean_entropy']:.2f} nats",
        fontsize=11,
    )
    fig.savefig(path, dpi=110)


def write_all(stem: Path, document: dict[str, Any]) -> list[Path]:
    """``stem``.json/.md/.csv/.png; the paths written."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(s) for s in (".json", ".md", ".csv", ".png")]
    paths[0].write_text(json.dumps(document, indent=1, default=str) + "\n")
    paths[1].write_text(markdown(document))
    pd.DataFrame(document["rows"]).to_csv(paths[2], index=False)
    plot(paths[3], document)
    return paths
