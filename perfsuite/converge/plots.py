"""Figures of a converge results document, written next to it.

* ``STEM-loss.png``: training loss per step, one line per method, one panel per
  beta (top row); below, each method's per-step relative distance from eager on a
  log axis with the dtype's loss tolerance dashed: the curves coincide above, the
  bottom row shows by how much, next to the yardstick of eager's own rounding.
* ``STEM-reliability.png``: reliability diagrams, one row per beta, one column per
  method: held-out accuracy per confidence bin against the diagonal, the gap to it
  shaded, the share of positions per bin as a grey histogram, and the ECE.
* ``STEM-calibration.png``: ECE, RMS-CE, SCE and ACE as grouped bars, method x beta.

Built from the JSON alone (the same document ``--out`` holds) with matplotlib's
object API, as ``perfsuite plot`` does (no pyplot state, no display needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfsuite.render.table import INTERPRETED_MARK

REFERENCE = "eager"
FLOOR = 1e-10  # where an exactly-zero difference is drawn on the log axis
METRICS = (("ece", "ECE"), ("rms_ce", "RMS-CE"), ("sce", "SCE"), ("ace", "ACE"))


def artifact_paths(out: Path) -> dict[str, Path]:
    """The files written next to the results JSON ``out``: table and figures."""
    stem = out.with_suffix("") if out.suffix == ".json" else out
    return {
        "table": stem.with_name(stem.name + ".md"),
        "loss": stem.with_name(stem.name + "-loss.png"),
        "reliability": stem.with_name(stem.name + "-reliability.png"),
        "calibration": stem.with_name(stem.name + "-calibration.png"),
    }


def _under_test(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs of methods, without the yardstick of eager's noise (its calibration is
    eager's; it belongs in the loss figure only)."""
    return [r for r in runs if (r.get("parity") or {}).get("verdict") != "yardstick"]


def _methods(runs: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["method"] for r in runs))


def _betas(runs: list[dict[str, Any]]) -> list[float]:
    return sorted({r["beta"] for r in runs})


def _interpreted(document: dict[str, Any]) -> set[str]:
    """Methods that trained under the Triton interpreter (marked †)."""
    ran = {r["method"] for r in document["runs"] if r["status"] == "ok"}
    return set(document.get("triton_interpreted") or ()) & ran


def _subtitle(document: dict[str, Any]) -> str:
    preset = document.get("preset", {})
    env = document.get("environment", {})
    device = (env.get("device") or {}).get("kind", "?")
    dtypes = "/".join(document.get("dtypes", []))
    data = "bigram source" if (document.get("data") or {}).get("truth_known") else "text"
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

    runs = document["runs"]
    methods, betas = _methods(runs), _betas(runs)
    tol = document.get("tolerances", {})
    fig = Figure(figsize=(4.2 * len(betas) + 2.2, 6.4), layout="constrained")
    axes = fig.subplots(2, len(betas), squeeze=False, sharex=True, sharey="row")
    for col, beta in enumerate(betas):
        top, bottom = axes[0][col], axes[1][col]
        here = {r["method"]: r for r in runs if r["beta"] == beta and r["steps"]}
        ref = here.get(REFERENCE)
        for index, method in enumerate(methods):
            run = here.get(method)
            if run is None:
                continue
            steps = [s["step"] for s in run["steps"]]
            losses = [s["loss"] for s in run["steps"]]
            style = {"color": f"C{index % 10}", "label": _label(method, document)}
            # Coinciding curves: each later one thinner, so every one stays visible.
            width = max(3.2 - 0.45 * index, 0.8)
            top.plot(steps, losses, linewidth=width, alpha=0.9, **style)
            if ref is not None and method != REFERENCE:
                ref_loss = [s["loss"] for s in ref["steps"]]
                n = min(len(losses), len(ref_loss))
                pairs = zip(losses[:n], ref_loss[:n], strict=True)
                rel = [max(abs(a - b) / abs(b), FLOOR) for a, b in pairs]
                marker = MARKERS[index % len(MARKERS)]
                bottom.plot(steps[:n], rel, marker=marker, linestyle="none", alpha=0.7, **style)
        for dtype in document.get("dtypes", []):
            if dtype in tol:
                rtol = tol[dtype]["loss_rtol"]
                bottom.axhline(rtol, color="k", linestyle="--", linewidth=1)
                bottom.annotate(
                    f"{dtype} rtol {rtol:g}",
                    (0.02, rtol),
                    xycoords=("axes fraction", "data"),
                    textcoords="offset points",
                    xytext=(0, 3),
                    fontsize=8,
                )
        top.set_title(f"β = {beta:g}")
        bottom.set_yscale("log")
        bottom.set_xlabel("step")
        bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
        for ax in (top, bottom):
            ax.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("training loss (smoothed CE)")
    axes[1][0].set_ylabel(f"|loss − eager| / eager\n(exact 0 drawn at {FLOOR:g})")
    _legend(fig, axes.flat)
    fig.suptitle(f"Training loss per method vs eager\n{_subtitle(document)}", fontsize=10)
    return fig


def _legend(fig: Any, axes: Any) -> None:
    handles: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside right center")


def reliability_figure(document: dict[str, Any]) -> Any:
    """Reliability curves: one panel per beta with every method overlaid (they should
    coincide, as the loss curves do), then eager at every beta in one panel."""
    from matplotlib.figure import Figure

    runs = [r for r in _under_test(document["runs"]) if (r.get("heldout") or {}).get("reliability")]
    if not runs:
        return None
    methods, betas = _methods(runs), _betas(runs)
    eager = [r for r in runs if r["method"] == REFERENCE]
    panels = len(betas) + (1 if len(eager) > 1 else 0)
    fig = Figure(figsize=(3.6 * panels + 2.2, 4.0), layout="constrained")
    axes = fig.subplots(1, panels, squeeze=False, sharey=True)[0]
    top = _populated_limit(runs)
    for ax, beta in zip(axes, betas, strict=False):
        here = [r for r in runs if r["beta"] == beta]
        for index, method in enumerate(methods):
            run = next((r for r in here if r["method"] == method), None)
            if run is not None:
                label = f"{_label(method, document)}  (ECE {run['heldout']['ece']:.3f})"
                _curve(ax, run["heldout"], index, label)
        _histogram(ax, here[0]["heldout"], top, "0.85", _peak(here[:1]), filled=True)
        ax.set_title(f"β = {beta:g}: every method")
        _small_legend(ax)
    if panels > len(betas):
        ax = axes[-1]
        for k, run in enumerate(eager):
            label = f"β = {run['beta']:g}  (ECE {run['heldout']['ece']:.3f})"
            _curve(ax, run["heldout"], k, label)
            _histogram(ax, run["heldout"], top, f"C{k % 10}", _peak(eager), filled=False)
        ax.set_title("eager: β compared")
        _small_legend(ax)
    for ax in axes:
        _frame(ax, top, len(runs[0]["heldout"]["reliability"]["count"]))
    axes[0].set_ylabel("accuracy (held-out, top-1)")
    fig.suptitle(
        "Reliability: accuracy per confidence bin (15 equal-width bins; marker area ∝ "
        "positions in the bin; bars at the bottom: positions per bin, the fullest bin at a "
        "third of the height)\n" + _subtitle(document),
        fontsize=10,
    )
    return fig


MARKERS = "osD^vP*Xh<>p"


def _small_legend(ax: Any) -> None:
    """A legend in the corner the points leave free, its markers one size."""
    legend = ax.legend(fontsize=7, loc="best", framealpha=0.85)
    for handle in legend.legend_handles:
        if hasattr(handle, "set_sizes"):
            handle.set_sizes([30])


def _curve(ax: Any, held: dict[str, Any], index: int, label: str) -> None:
    rel = held["reliability"]
    total = sum(rel["count"]) or 1
    keep = [b for b, c in enumerate(rel["count"]) if c > 0]
    conf = [rel["confidence"][b] for b in keep]
    acc = [rel["accuracy"][b] for b in keep]
    sizes = [12 + 400 * rel["count"][b] / total for b in keep]
    color = f"C{index % 10}"
    ax.plot(conf, acc, color=color, linewidth=1, alpha=0.8)
    ax.scatter(
        conf,
        acc,
        s=sizes,
        marker=MARKERS[index % len(MARKERS)],
        facecolors="none",
        edgecolors=color,
        label=label,
    )


def _populated_limit(runs: list[dict[str, Any]]) -> float:
    """Upper edge of the highest confidence bin any run fills (the panels zoom to it)."""
    top = 0.0
    for run in runs:
        rel = run["heldout"]["reliability"]
        n = len(rel["count"])
        filled = [b for b, c in enumerate(rel["count"]) if c > 0]
        accs = [rel["accuracy"][b] for b in filled]
        top = max(top, (max(filled) + 1) / n if filled else 0.0, *accs)
    return min(1.0, top * 1.05)


def _peak(runs: list[dict[str, Any]]) -> float:
    """The largest share of positions any one bin of ``runs`` holds."""
    shares = [
        c / (sum(r["heldout"]["reliability"]["count"]) or 1)
        for r in runs
        for c in r["heldout"]["reliability"]["count"]
    ]
    return max(shares, default=1.0) or 1.0


def _histogram(
    ax: Any, held: dict[str, Any], top: float, color: str, peak: float, filled: bool
) -> None:
    """The share of positions per bin, the fullest bin (``peak``) a third of the panel's
    height: grey bars, or a coloured outline where several are compared."""
    rel = held["reliability"]
    n = len(rel["count"])
    total = sum(rel["count"]) or 1
    heights = [c / total / peak * top / 3 for c in rel["count"]]
    edges = [b / n for b in range(n + 1)]
    if filled:
        ax.bar(edges[:-1], heights, width=1 / n, align="edge", color=color, zorder=0)
    else:
        ax.stairs(heights, edges, color=color, linewidth=1.2, zorder=1)


def _frame(ax: Any, top: float, n_bins: int) -> None:
    """Diagonal, bin edges and the zoomed limits."""
    ax.plot([0, 1], [0, 1], "k--", linewidth=0.8)
    for b in range(n_bins + 1):
        ax.axvline(b / n_bins, color="0.8", linewidth=0.4, zorder=0)
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("confidence (top-1)")
    if top < 1.0:
        ax.text(0.98, 0.02, "zoomed", transform=ax.transAxes, ha="right", fontsize=7, color="0.4")


def calibration_figure(document: dict[str, Any]) -> Any:
    """ECE, RMS-CE, SCE, ACE: one panel each, bars grouped by method, one colour per beta."""
    from matplotlib.figure import Figure

    runs = _under_test(document["runs"])
    methods, betas = _methods(runs), _betas(runs)
    fig = Figure(figsize=(max(2.0 + 0.55 * len(methods), 4.0) * 2, 6.4), layout="constrained")
    axes = list(fig.subplots(2, 2, squeeze=False, sharex=True).flat)
    width = 0.8 / max(len(betas), 1)
    colors = {beta: f"C{k}" for k, beta in enumerate(betas)}
    for ax, (key, name) in zip(axes, METRICS, strict=True):
        for k, beta in enumerate(betas):
            xs, ys, missing = [], [], []
            for m, method in enumerate(methods):
                run = next((r for r in runs if r["beta"] == beta and r["method"] == method), None)
                x = m - 0.4 + width * (k + 0.5)
                value = ((run or {}).get("heldout") or {}).get(key)
                if value is None:
                    missing.append((x, (run or {}).get("status", "not run")))
                else:
                    xs.append(x)
                    ys.append(value)
            ax.bar(xs, ys, width=width, color=colors[beta], label=f"β = {beta:g}")
            for x, status in missing:
                ax.text(
                    x,
                    0,
                    f" {status}",
                    rotation=90,
                    ha="center",
                    va="bottom",
                    fontsize=7,
                    color="0.35",
                )
        ax.set_title(name)
        ax.set_xticks(range(len(methods)))
        ax.set_xticklabels([_label(m, document) for m in methods], rotation=30, ha="right")
        ax.grid(True, axis="y", alpha=0.3)
    _legend(fig, axes)
    fig.suptitle(
        f"Held-out calibration per method and β (15 bins; lower is better)\n{_subtitle(document)}",
        fontsize=10,
    )
    return fig


def write_figures(document: dict[str, Any], out: Path, dpi: int = 150) -> list[Path]:
    """Every figure the document supports, saved next to ``out``; returns the paths."""
    paths = artifact_paths(out)
    made = []
    for key, build in (
        ("loss", loss_figure),
        ("reliability", reliability_figure),
        ("calibration", calibration_figure),
    ):
        fig = build(document)
        if fig is not None:
            fig.savefig(paths[key], dpi=dpi)
            made.append(paths[key])
    return made
