"""``perfsuite plot RESULTS.json -o DIR``: peak memory and time against V and against N, a
figure per (quantity, axis, the dimensions held fixed, phase), a panel per β, log-log."""

from __future__ import annotations

import argparse
import math
from itertools import product
from pathlib import Path
from typing import Any

from perfsuite.args import int_between
from perfsuite.plan.memory_model import floor_bytes
from perfsuite.render.cells import BUSY_MARK, INTERPRETED_MARK, group_rows
from perfsuite.render.roofline import gpu_for_env, roofline_ms
from perfsuite.render.tp_table import shard_rows
from perfsuite.results.outpath import check_output_dir
from perfsuite.results.results import PHASES, ResultsError, load_results, require_kind

AXES = {"vocab": ("V", "vocabulary size V"), "tokens": ("N", "tokens N")}
QUANTITIES = {"memory": "peak memory (MiB)", "time": "median time (ms)"}


def _value(row: dict[str, Any], quantity: str) -> float | None:
    peak = row.get("peak_bytes")
    return row.get("median_ms") if quantity == "time" else None if peak is None else peak / 2**20


def _fixed_label(key: tuple, x: str) -> tuple[str, str]:
    """Title text and file-name part for the dimensions held fixed (and the TP size)."""
    other, hidden, dtype, softcap, workload, tp = key
    name = "V" if x == "tokens" else "N"
    parts = [(f"{name}={other}, D={hidden}, {dtype}", f"{name}{other}-D{hidden}-{dtype}")]
    parts += [(f", TP={tp} per rank", f"-tp{tp}")] if tp is not None else []
    parts += [(f", softcap {softcap:g}", f"-cap{softcap:g}")] if softcap is not None else []
    if workload and workload != "random":
        slug = "".join(ch if ch.isalnum() else "_" for ch in workload).strip("_")
        parts.append((f", {workload}", f"-{slug}"))
    return "".join(t for t, _ in parts), "".join(s for _, s in parts)


def figures(document: dict[str, Any], phases: list[str]) -> list[tuple[str, Any]]:
    """``(file name, matplotlib Figure)`` for every plot the results support."""
    rows, env = document["rows"], document["env"]
    gpu = gpu_for_env(env)
    device = (env.get("device") or {}).get("name") or "?"
    methods = list(dict.fromkeys(r["method"] for r in rows))
    out = []
    for phase, quantity, x in product(phases, QUANTITIES, AXES):
        other = "vocab" if x == "tokens" else "tokens"
        mine = [r for r in rows if r["phase"] == phase]
        fixed = (other, "hidden", "dtype", "softcap", "workload", "tp")
        for key, members in group_rows(mine, key=lambda r: tuple(map(r.get, fixed))).items():
            xs_all = sorted({r[x] for r in members})
            if len(xs_all) < 2:
                continue
            fig = _figure(members, methods, quantity, x, xs_all, key, phase, gpu)
            title, slug = _fixed_label(key, x)
            fig.suptitle(f"{phase} {quantity} vs {AXES[x][0]} ({title}) on {device}")
            out.append((f"{quantity}-vs-{AXES[x][0]}-{slug}-{phase.replace('+', '')}.png", fig))
    return out


def figure_legend(fig: Any, axes: Any) -> None:
    """One legend beside the panels, each label once (each panel draws the same methods)."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside right center")


def _figure(members, methods, quantity, x, xs_all, key, phase, gpu) -> Any:
    """One figure: a panel per β, the legend beside them, the notes under them."""
    from matplotlib.figure import Figure

    betas = sorted({r["beta"] for r in members})
    fig = Figure(figsize=(3.6 * len(betas) + 1.8, 3.4), layout="constrained")
    axes = fig.subplots(1, len(betas), squeeze=False, sharey=True)[0]
    drawn: set[str] = set()
    for ax, beta in zip(axes, betas, strict=True):
        panel = [r for r in members if r["beta"] == beta]
        drawn |= _draw_panel(ax, panel, methods, quantity, x, xs_all, key, phase, gpu)
        ax.set(xscale="log", yscale="log", title=f"β = {beta:g}", xlabel=AXES[x][1])
        _data_ticks(ax, xs_all)
        _plain_log_labels(ax.yaxis)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel(QUANTITIES[quantity])
    figure_legend(fig, axes)
    notes = _notes(members, drawn, quantity)
    if notes:  # under the axes: what is not drawn, and what † means
        # in the layout: a rect left for them put the title on the panels'
        fig.set_figheight(3.4 + 0.18 * len(notes))
        fig.supxlabel("\n".join(notes), fontsize=7, x=0.01, ha="left", multialignment="left")
    return fig


def _plain_log_labels(axis: Any) -> None:
    """matplotlib's log-axis labels in plain numbers: ``6`` and ``1,000``, not ``6×10⁰``."""
    from matplotlib.ticker import LogFormatter

    class Plain(LogFormatter):
        def __call__(self, x: float, pos: int | None = None) -> str:
            if not super().__call__(x, pos):
                return ""
            return f"{x:,.0f}" if x >= 1 and float(x).is_integer() else f"{x:g}"

    axis.set_major_formatter(Plain(labelOnlyBase=False))
    axis.set_minor_formatter(Plain(labelOnlyBase=False))


def _data_ticks(ax: Any, xs: list[int]) -> None:
    """x ticks at the swept values, labelled plainly, no two labels closer than a sixth of
    the (log) axis, no minor labels (they ran into each other beside a long legend)."""
    from matplotlib.ticker import NullFormatter

    span = math.log10(xs[-1] / xs[0])
    labels, last = [], 0.0
    for x in xs:
        keep = not labels or math.log10(x / last) >= span / 6
        labels.append(str(x) if keep else "")
        last = x if keep else last
    ax.set_xticks(xs, labels)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="x", labelsize="small")


def _notes(members: list[dict[str, Any]], drawn: set[str], quantity: str) -> list[str]:
    """The figure's footnotes: methods with nothing drawn (and why), what † and ! mean."""
    missing = group_rows((r for r in members if r["method"] not in drawn), lambda r: r["method"])
    words = {"wrong": "failed the correctness gate", "unsupported": "N/A"}
    statuses = {m: sorted({r["status"] for r in rows}) for m, rows in missing.items()}
    why = [f"{m} ({', '.join(words.get(s, s) for s in st)})" for m, st in statuses.items()]
    notes = ["not drawn: " + "; ".join(why)] if why else []
    if quantity == "time" and any(r.get("interpreted") for r in members if r["method"] in drawn):
        notes.append(
            f"{INTERPRETED_MARK} dotted: Triton under the CPU interpreter; "
            "its time says nothing about a GPU"
        )
    if quantity == "time" and any(r.get("busy") and r["status"] == "ok" for r in members):
        notes.append(f"{BUSY_MARK} measured on a busy machine: its time is not trustworthy")
    return notes


def _draw_panel(ax, panel, methods, quantity, x, xs_all, key, phase, gpu) -> set[str]:
    """Draws the panel; returns the methods it drew."""
    drawn = set()
    for index, method in enumerate(methods):
        points = sorted(
            (r[x], _value(r, quantity), r.get("interpreted"), bool(r.get("busy")))
            for r in panel
            if r["method"] == method and r["status"] == "ok" and _value(r, quantity)
        )
        if not points:
            continue
        interpreted = quantity == "time" and any(p[2] for p in points)
        label = f"{method} {INTERPRETED_MARK}" if interpreted else method
        ax.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            marker="o",
            color=f"C{index % 10}",  # one colour per method across panels and figures
            linestyle=":" if interpreted else "-",
            label=label,
        )
        for px, py, _, busy in points:
            if busy and quantity == "time":  # as the tables mark its cell; memory is unaffected
                ax.annotate(BUSY_MARK, (px, py), xytext=(3, 3), textcoords="offset points")
        drawn.add(method)
    other, hidden, dtype, tp = key[0], key[1], key[2], key[5]
    # (N, V, D) at each x, V a rank's ⌈V/K⌉ rows of C in a TP figure
    dims = [(xv, other) if x == "tokens" else (other, xv) for xv in xs_all]
    dims = [(n, v if tp is None else shard_rows(v, tp), hidden) for n, v in dims]
    per_rank = "" if tp is None else " per rank"
    if quantity == "memory":
        ys = [floor_bytes(phase, *d, dtype) / 2**20 for d in dims]
        ax.plot(xs_all, ys, "k--", linewidth=1, label="lower bound" + per_rank)
    elif gpu is not None:
        ys = [roofline_ms(phase, *d, dtype, gpu) for d in dims]
        ax.plot(xs_all, ys, "k--", linewidth=1, label=f"roofline ({gpu.name}){per_rank}")
    return drawn


# A resolution matplotlib can render: 100000 dpi is a std::bad_alloc, not a plot.
_dpi = int_between(20, 600)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", type=Path, help="a results file (run, sweep or merge)")
    p.add_argument("-o", "--out", type=Path, required=True, help="folder for the PNGs")
    p.add_argument(
        "--phase",
        default="fwd+bwd",
        help="phase(s) to plot, comma-separated, or all (default fwd+bwd, the headline)",
    )
    p.add_argument("--dpi", type=_dpi, default=150, help="resolution, 20 to 600 (default 150)")
    p.add_argument(
        "--breakdown",
        action="store_true",
        help="where each profiled cell's time goes (a run with --profile), one PNG a cell",
    )


def run(args: argparse.Namespace) -> int:
    from perfsuite.fit import TrimmedConsole as Console

    console = Console(stderr=True)
    phases = list(PHASES) if args.phase == "all" else args.phase.split(",")
    bad = [p for p in phases if p not in PHASES]
    if bad:
        raise ResultsError(f"--phase: unknown {', '.join(bad)}")
    document = load_results(args.results)  # a bad file makes no -o folder
    require_kind(document, args.results, {"loss", "tp"}, "plot")
    check_output_dir(args.out, "-o")  # before anything is drawn
    if args.breakdown:
        from perfsuite.render.breakdown import breakdown_figures

        made = breakdown_figures(r for r in document["rows"] if r["phase"] in phases)
    else:
        made = figures(document, phases)
    if not made:
        why = "no slice of the results varies V or N over two or more values (sweep a grid first)"
        why = f"no row has a breakdown for {args.phase}" if args.breakdown else why
        console.print(f"[yellow]nothing to plot:[/yellow] {why}")
        return 1
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        for name, fig in made:
            fig.savefig(args.out / name, dpi=args.dpi)
    except OSError as err:
        raise ResultsError(f"-o {args.out}: cannot write plots there ({err.strerror})") from None
    console.print(f"{len(made)} plots → {args.out}")
    return 0
