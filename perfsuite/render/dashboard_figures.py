"""The dashboard's plots: per group three panels on the run axis (time with its p20-p80 band,
time relative to each method's first segment, peak memory), change points as vertical lines."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from perfsuite.history.timelines import Group, Line, Mark

MARK_STYLE = {
    "open": {"color": "#d62728", "dash": "solid", "width": 2},
    "acknowledged": {"color": "#ff7f0e", "dash": "dash", "width": 2},
    "recovered": {"color": "#ff7f0e", "dash": "dash", "width": 2},
    "change": {"color": "#999999", "dash": "dot", "width": 1},
}
# Runs up to which every run gets a tick labelled with its commit.
LABELLED_RUNS = 12
# A panel whose methods span more than this factor gets a log axis.
LOG_SPREAD = 20


def palette(methods: Sequence[str]) -> dict[str, str]:
    """One colour per method, the same in every plot of a page."""
    from plotly.colors import qualitative

    colours = qualitative.Plotly + qualitative.D3 + qualitative.Dark24
    return {m: colours[i % len(colours)] for i, m in enumerate(sorted(set(methods)))}


def _time_traces(group: Group, line: Line, colour: str) -> list[Any]:
    import plotly.graph_objects as go
    from plotly.colors import hex_to_rgb

    traces = []
    band = [
        (x, lo, hi)
        for x, lo, hi in zip(line.positions, line.low, line.high, strict=True)
        if lo is not None and hi is not None
    ]
    if band:
        xs = [b[0] for b in band]
        traces.append(
            go.Scatter(
                x=xs + xs[::-1],
                y=[b[2] for b in band] + [b[1] for b in band][::-1],
                fill="toself",
                fillcolor="rgba({},{},{},0.18)".format(*hex_to_rgb(colour)),
                line={"width": 0},
                hoverinfo="skip",
                legendgroup=line.method,
                showlegend=False,
                name=f"{line.method} p20–p80",
            )
        )
    shown = "median %{y:.4g} ms (p20 %{customdata[3]:.4g}, p80 %{customdata[4]:.4g})"
    return [*traces, _line_trace(group, line, colour, line.values, True, shown)]


def relative(line: Line, marks: Sequence[Mark]) -> list[float]:
    """``line``'s values over the median of its first segment: the runs before its
    first change point (all of them when it has none)."""
    first = min(
        (m.after.position for m in marks if (m.method, m.metric) == (line.method, line.metric)),
        default=None,
    )
    pairs = zip(line.positions, line.values, strict=True)
    base = [v for x, v in pairs if first is None or x < first] or line.values
    level = statistics.median(base)
    return [v / level for v in line.values]


def _line_trace(
    group: Group, line: Line, colour: str, y: list[float], legend: bool, shown: str
) -> Any:
    """A method's line of the relative or the memory panel; ``shown``: the hover's value."""
    import plotly.graph_objects as go

    return go.Scatter(
        x=line.positions,
        y=y,
        mode="lines+markers",
        name=line.method,
        legendgroup=line.method,
        showlegend=legend,
        line={"color": colour, "width": 1.5},
        marker={"size": 4},
        customdata=[
            [group.runs[x].commit, group.runs[x].created, group.runs[x].run_hash[:12], lo, hi]
            for x, lo, hi in zip(line.positions, line.low, line.high, strict=True)
        ],
        hovertemplate=(
            "<b>%{fullData.name}</b> run %{x}<br>commit %{customdata[0]}<br>"
            f"%{{customdata[1]}}<br>{shown}<extra></extra>"
        ),
    )


def _mark(fig: Any, mark: Mark, row: int, commit_url: Callable[[str], str]) -> None:
    style = MARK_STYLE[mark.state]
    for panel in (1, 2) if row == 1 else (row,):  # the relative panel's time marks: unlabelled
        fig.add_vline(x=mark.after.position, row=panel, col=1, line=style)
    if mark.state == "change":
        return
    axis = "y" if row == 1 else f"y{row}"
    # plotly drops an <a href> that is not http(s) (the site's own pages seen from
    # file://), so the page's script opens ``name`` on a click instead.
    fig.add_annotation(
        x=mark.after.position,
        y=1,
        xref="x",
        yref=f"{axis} domain",
        text=f"<u>{mark.size:+.1%} {mark.method} @ {mark.after.sha[:7]}</u>",
        name=commit_url(mark.after.sha),
        captureevents=True,
        showarrow=False,
        xanchor="left",
        yanchor="top",
        font={"color": style["color"], "size": 11},
        bgcolor="rgba(255,255,255,0.8)",
        hovertext=(
            f"{mark.state} regression: {mark.metric} {mark.size:+.1%}, commit "
            f"{mark.before.commit} → {mark.after.commit} (click: the commit)"
        ),
    )


def figure(group: Group, colours: dict[str, str], commit_url: Callable[[str], str]) -> Any:
    """The plotly figure of one group."""
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.07,
        subplot_titles=(
            "time (ms): median, p20–p80 band",
            "time relative to each method's first segment (median before its first change)",
            "peak memory (MiB)",
        ),
    )
    timed = {line.method for line in group.lines if line.metric == "time"}
    for line in group.lines:
        colour = colours[line.method]
        if line.metric == "time":
            for trace in _time_traces(group, line, colour):
                fig.add_trace(trace, row=1, col=1)
            ratios = relative(line, group.marks)
            shown = "%{y:.3f}× its first segment's median"
            fig.add_trace(_line_trace(group, line, colour, ratios, False, shown), row=2, col=1)
        else:
            mib = [v / 2**20 for v in line.values]
            legend = line.method not in timed
            trace = _line_trace(group, line, colour, mib, legend, "peak %{y:.5g} MiB")
            fig.add_trace(trace, row=3, col=1)
    if timed:
        fig.add_hline(y=1.0, row=2, col=1, line={"color": "#bbbbbb", "width": 1})
    for mark in group.marks:
        _mark(fig, mark, 1 if mark.metric == "time" else 3, commit_url)
    axis: dict[str, Any] = {"range": [-0.5, max(len(group.runs) - 0.5, 0.5)], "zeroline": False}
    if len(group.runs) <= LABELLED_RUNS:
        axis |= {
            "tickmode": "array",
            "tickvals": [r.position for r in group.runs],
            "ticktext": [f"{r.position}<br>{r.sha[:7]}" for r in group.runs],
        }
    fig.update_xaxes(**axis)
    fig.update_yaxes(title_text="× first segment", row=2, col=1)
    for row, metric in ((1, "time"), (3, "memory")):
        values = [v for line in group.lines if line.metric == metric for v in line.values]
        if values and max(values) > LOG_SPREAD * min(values):
            fig.update_yaxes(type="log", row=row, col=1)
    fig.update_xaxes(title_text="run (oldest first; hover a point for its commit)", row=3, col=1)
    fig.update_layout(
        height=760,
        margin={"l": 60, "r": 20, "t": 40, "b": 60},
        hovermode="closest",
        legend={"orientation": "v"},
        template="plotly_white",
    )
    return fig
