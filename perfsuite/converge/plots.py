"""A converge results document's figures (docs/converge.md), written next to it from the
document alone with matplotlib's object API (no pyplot state, no display needed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from perfsuite.converge.presets import REFERENCE
from perfsuite.render.cells import INTERPRETED_MARK
from perfsuite.render.plot import figure_legend

FLOOR = 1e-10  # where an exactly-zero difference is drawn on the log axis
METRICS = (("ece", "ECE"), ("rms_ce", "RMS-CE"), ("sce", "SCE"), ("ace", "ACE"))
MARKERS = "osD^vP*Xh<>p"
FIGURES = ("loss", "reliability", "calibration")
TOLERANCE_NOTE = {"xycoords": ("axes fraction", "data"), "textcoords": "offset points"}
ZOOMED_NOTE = {"fontsize": 7, "color": "0.4"}
STATUS_NOTE = {"rotation": 90, "ha": "center", "va": "bottom", "fontsize": 7, "color": "0.35"}


def artifact_paths(out: Path) -> dict[str, Path]:
    """The files written next to the results JSON ``out``: table and figures."""
    stem = out.with_suffix("") if out.suffix == ".json" else out
    figures = {key: stem.with_name(f"{stem.name}-{key}.png") for key in FIGURES}
    return {"table": stem.with_name(stem.name + ".md"), **figures}


def _under_test(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs but eager's yardstick (its calibration is eager's: the loss figure only)."""
    return [r for r in runs if (r.get("parity") or {}).get("verdict") != "yardstick"]


def _grid(runs: list[dict[str, Any]]) -> tuple[list[str], list[float]]:
    return list(dict.fromkeys(r["method"] for r in runs)), sorted({r["beta"] for r in runs})


def _interpreted(document: dict[str, Any]) -> set[str]:
    """Methods that trained under the Triton interpreter (marked †)."""
    return {r["method"] for r in document["rows"] if r["status"] == "ok" and r.get("interpreted")}


def _subtitle(document: dict[str, Any]) -> str:
    env = document["env"]
    settings, device = env.get("converge", {}), (env.get("device") or {}).get("kind", "?")
    preset = settings.get("preset", {})
    dtypes = "/".join(settings.get("dtypes", []))
    data = "bigram source" if (settings.get("data") or {}).get("truth_known") else "text"
    text = f"{preset.get('name', '?')} preset, {preset.get('steps', '?')} steps, {dtypes}, "
    text += f"{data}, V={preset.get('vocab', '?')}, on {device}"
    if _interpreted(document):
        text += f" ({INTERPRETED_MARK}: Triton, under the interpreter)"
    return text


def _label(method: str, document: dict[str, Any]) -> str:
    return f"{method} {INTERPRETED_MARK}" if method in _interpreted(document) else method


def loss_figure(document: dict[str, Any]) -> Any:
    """Loss curves (top) and relative distance from eager (bottom), beta as panels."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    runs = document["rows"]
    methods, betas = _grid(runs)
    settings = document["env"].get("converge", {})
    tol = settings.get("tolerances", {})
    fig = Figure(figsize=(4.2 * len(betas) + 2.2, 6.4), layout="constrained")
    axes = fig.subplots(2, len(betas), squeeze=False, sharex=True, sharey="row")
    for col, beta in enumerate(betas):
        top, bottom = axes[0][col], axes[1][col]
        here = {r["method"]: r for r in runs if r["beta"] == beta and r["steps"]}
        ref = [s["loss"] for s in here[REFERENCE]["steps"]] if REFERENCE in here else None
        for index, method in enumerate(methods):
            if method not in here:
                continue
            steps = [s["step"] for s in here[method]["steps"]]
            losses = [s["loss"] for s in here[method]["steps"]]
            style = {"color": f"C{index % 10}", "label": _label(method, document)}
            # Coinciding curves: each later one thinner, so every one stays visible.
            width = max(3.2 - 0.45 * index, 0.8)
            top.plot(steps, losses, linewidth=width, alpha=0.9, **style)
            if ref is not None and method != REFERENCE:
                rel = [max(abs(a - b) / abs(b), FLOOR) for a, b in zip(losses, ref, strict=False)]
                dots = {"marker": MARKERS[index % len(MARKERS)], "linestyle": "none"}
                bottom.plot(steps[: len(rel)], rel, alpha=0.7, **dots, **style)
        for dtype in [d for d in settings.get("dtypes", []) if d in tol]:
            rtol = tol[dtype]["loss_rtol"]
            bottom.axhline(rtol, color="k", linestyle="--", linewidth=1)
            note = f"{dtype} rtol {rtol:g}"
            bottom.annotate(note, (0.02, rtol), xytext=(0, 3), fontsize=8, **TOLERANCE_NOTE)
        top.set_title(f"β = {beta:g}")
        bottom.set(yscale="log", xlabel="step")
        bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
        for ax in (top, bottom):
            ax.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("training loss (smoothed CE)")
    axes[1][0].set_ylabel(f"|loss − eager| / eager\n(exact 0 drawn at {FLOOR:g})")
    figure_legend(fig, axes.flat)
    fig.suptitle(f"Training loss per method vs eager\n{_subtitle(document)}", fontsize=10)
    return fig


def reliability_figure(document: dict[str, Any]) -> Any:
    """Reliability curves: one panel per beta with every method overlaid (they should
    coincide, as the loss curves do), then eager at every beta in one panel. Under the
    curves, the share of positions per bin, the fullest a third of the panel's height."""
    from matplotlib.figure import Figure

    runs = [r for r in _under_test(document["rows"]) if (r.get("heldout") or {}).get("reliability")]
    if not runs:
        return None
    methods, betas = _grid(runs)
    panels = [(f"β = {b:g}: every method", [r for r in runs if r["beta"] == b]) for b in betas]
    eager = [r for r in runs if r["method"] == REFERENCE]
    if len(eager) > 1:
        panels.append(("eager: β compared", eager))
    fig = Figure(figsize=(3.6 * len(panels) + 2.2, 4.0), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    bins = [r["heldout"]["reliability"] for r in runs]
    n = len(bins[0]["count"])
    edges = [b / n for b in range(n + 1)]
    # The panels zoom to the highest confidence bin any run fills.
    filled = [(b + 1) / n for rel in bins for b, c in enumerate(rel["count"]) if c]
    reached = [a for rel in bins for a, c in zip(rel["accuracy"], rel["count"], strict=True) if c]
    top = min(1.0, max(0.0, *filled, *reached) * 1.05)
    for ax, (title, here) in zip(axes, panels, strict=True):
        compared = here is eager  # eager's β against each other: outlined histograms
        counts = [r["heldout"]["reliability"]["count"] for r in here]
        shares = [[c / (sum(count) or 1) for c in count] for count in counts]
        peak = max(max(s) for s in (shares if compared else shares[:1])) or 1.0
        for k, run in enumerate(here):
            held, rel = run["heldout"], run["heldout"]["reliability"]
            name = f"β = {run['beta']:g}" if compared else _label(run["method"], document)
            index = k if compared else methods.index(run["method"])
            keep = [b for b, c in enumerate(rel["count"]) if c > 0]  # the bins it fills
            conf = [rel["confidence"][b] for b in keep]
            acc = [rel["accuracy"][b] for b in keep]
            color, marker = f"C{index % 10}", MARKERS[index % len(MARKERS)]
            ax.plot(conf, acc, color=color, linewidth=1, alpha=0.8)
            sizes = [12 + 400 * shares[k][b] for b in keep]
            label = f"{name}  (ECE {held['ece']:.3f})"
            ax.scatter(conf, acc, s=sizes, marker=marker, fc="none", ec=color, label=label)
            heights = [share / peak * top / 3 for share in shares[k]]
            if compared:
                ax.stairs(heights, edges, color=f"C{k % 10}", linewidth=1.2, zorder=1)
            elif k == 0:
                ax.bar(edges[:-1], heights, width=1 / n, align="edge", color="0.85", zorder=0)
        legend = ax.legend(fontsize=7, loc="best", framealpha=0.85)
        for handle in legend.legend_handles:  # the markers one size
            if hasattr(handle, "set_sizes"):
                handle.set_sizes([30])
        ax.plot([0, 1], [0, 1], "k--", linewidth=0.8)
        for edge in edges:
            ax.axvline(edge, color="0.8", linewidth=0.4, zorder=0)
        ax.set(title=title, xlim=(0, top), ylim=(0, top), xlabel="confidence (top-1)")
        if top < 1.0:
            ax.text(0.98, 0.02, "zoomed", transform=ax.transAxes, ha="right", **ZOOMED_NOTE)
    axes[0].set_ylabel("accuracy (held-out, top-1)")
    fig.suptitle(
        "Reliability: accuracy per confidence bin (15 equal-width bins; marker area ∝ "
        "positions in the bin; bars at the bottom: positions per bin, the fullest bin at a "
        "third of the height)\n" + _subtitle(document),
        fontsize=10,
    )
    return fig


def calibration_figure(document: dict[str, Any]) -> Any:
    """ECE, RMS-CE, SCE, ACE: one panel each, bars grouped by method, one colour per beta."""
    from matplotlib.figure import Figure

    runs = _under_test(document["rows"])
    methods, betas = _grid(runs)
    fig = Figure(figsize=(max(2.0 + 0.55 * len(methods), 4.0) * 2, 6.4), layout="constrained")
    axes = list(fig.subplots(2, 2, squeeze=False, sharex=True).flat)
    width = 0.8 / max(len(betas), 1)
    for ax, (key, name) in zip(axes, METRICS, strict=True):
        for k, beta in enumerate(betas):
            here = {r["method"]: r for r in runs if r["beta"] == beta}
            xs = [m - 0.4 + width * (k + 0.5) for m in range(len(methods))]
            values = [(here.get(m, {}).get("heldout") or {}).get(key) for m in methods]
            heights = [math.nan if v is None else v for v in values]
            ax.bar(xs, heights, width=width, color=f"C{k}", label=f"β = {beta:g}")
            for x, method, value in zip(xs, methods, values, strict=True):
                if value is None:  # labelled where its bar would be
                    status = here.get(method, {}).get("status", "not run")
                    ax.text(x, 0, f" {status}", **STATUS_NOTE)
        ax.set_title(name)
        labels = [_label(m, document) for m in methods]
        ax.set_xticks(range(len(methods)), labels, rotation=30, ha="right")
        ax.grid(True, axis="y", alpha=0.3)
    figure_legend(fig, axes)
    fig.suptitle(
        f"Held-out calibration per method and β (15 bins; lower is better)\n{_subtitle(document)}",
        fontsize=10,
    )
    return fig


def write_figures(document: dict[str, Any], out: Path, dpi: int = 150) -> list[Path]:
    """Every figure the document supports, saved next to ``out``; returns the paths."""
    paths, made = artifact_paths(out), []
    builds = (loss_figure, reliability_figure, calibration_figure)
    for key, build in zip(FIGURES, builds, strict=True):
        fig = build(document)
        if fig is not None:
            fig.savefig(paths[key], dpi=dpi)
            made.append(paths[key])
    return made
