"""perfsuite plot: figures checked through matplotlib's objects, not pixels; cells
measured across ranks get figures of their own per TP size, with a rank's floor."""

from __future__ import annotations

import copy
import json

import pytest
from fake_results import CPU_ENV, H100_ENV, grid_document, row, tp_row

from perfsuite.plan.memory_model import floor_bytes
from perfsuite.results.results import new_document

pytest.importorskip("matplotlib")

from perfsuite.cli import main  # noqa: E402
from perfsuite.render import plot  # noqa: E402


def noted_document() -> dict:
    """grid_document() with eager failing the gate at N = 32 (issue 20: it vanished
    without a word) and ours at N = 32, V = 300 measured on a busy machine (issue 30)."""
    doc = grid_document()
    for r in doc["rows"]:
        if r["method"] == "eager" and r["tokens"] == 32:
            r["status"] = "wrong"
        if r["method"] == "ours" and (r["tokens"], r["vocab"]) == (32, 300):
            r["busy"] = "other processes used 1.0 of 2 cores"
    return doc


@pytest.fixture(scope="module")
def drawn() -> list[tuple[str, object, object]]:
    """Figures laid out as savefig lays them out, drawn once for the layout tests: six
    methods (a long legend narrows the panels), N in {64, 128} and every time within one
    decade (5.5 to 6.7 ms), so that both axes span under half a decade and matplotlib
    labels minor ticks; ours interpreted puts a footnote under the axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    doc = grid_document()
    for name in ("torch-compile", "ours-tiles-no-sort", "cce-kahan-full-c", "torchtune-chunked"):
        doc["rows"] += [{**copy.deepcopy(r), "method": name} for r in doc["rows"][:24]]
    for r in doc["rows"]:
        r["tokens"] = {16: 64, 32: 128}[r["tokens"]]
        if r.get("median_ms"):
            r["median_ms"] = 5.5 + (r["vocab"] % 7) / 5
    out = []
    for name, fig in plot.figures(doc, ["fwd+bwd"]):
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)
        out.append((name, fig, renderer))
    return out


def test_one_panel_per_beta_one_line_per_measured_method():
    made = dict(plot.figures(grid_document(), ["fwd+bwd"]))
    # {memory, time} x {vs V, vs N} x the two values of the dimension held fixed.
    assert len(made) == 8
    assert "memory-vs-V-N16-D16-fp32-fwdbwd.png" in made
    assert "time-vs-N-V300-D16-fp32-fwdbwd.png" in made
    for name, fig in made.items():
        axes = fig.get_axes()
        assert [ax.get_title() for ax in axes] == ["β = 0", "β = 0.1"]
        for ax in axes:
            assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
            labels = [line.get_label() for line in ax.get_lines()]
            # 'broken' only ever OOMed: no line. The memory floor is drawn; no roofline on CPU.
            if name.startswith("memory"):
                assert labels == ["eager", "ours", "lower bound"]
            else:
                assert labels == ["eager", "ours †"]  # interpreted Triton, marked
            for line in ax.get_lines():
                assert len(line.get_xdata()) == 2  # two points along the swept axis
        assert len(fig.legends) == 1
        colours = {(line.get_label(), line.get_color()) for ax in axes for line in ax.get_lines()}
        assert len(colours) == len({label for label, _ in colours})  # same colour in every panel


def test_time_plots_on_a_known_gpu_show_the_roofline():
    doc = grid_document({**H100_ENV})
    made = dict(plot.figures(doc, ["fwd"]))
    assert len(made) == 8 and all(name.endswith("-fwd.png") for name in made)
    ax = made["time-vs-V-N32-D16-fp32-fwd.png"].get_axes()[0]
    assert ax.get_lines()[-1].get_label() == "roofline (H100 SXM)"


def test_command_writes_pngs(tmp_path):
    results = tmp_path / "r.json"
    results.write_text(json.dumps(noted_document()))
    out = tmp_path / "plots"
    assert main(["plot", str(results), "-o", str(out), "--dpi", "50"]) == 0
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) == 8
    for png in pngs:
        data = png.read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000


def test_nothing_to_plot_without_a_swept_axis():
    doc = grid_document()
    doc["rows"] = [r for r in doc["rows"] if r["tokens"] == 16 and r["vocab"] == 200]
    assert plot.figures(doc, ["fwd+bwd"]) == []


def test_a_figure_says_what_it_does_not_draw_and_marks_busy_times():
    """What failed the gate is named, the dagger explained; a busy cell's time gets the
    tables' ! (issue 30: the plots did not mark it)."""
    made = dict(plot.figures(noted_document(), ["fwd+bwd"]))
    texts = {name: " ".join(t.get_text() for t in fig.texts) for name, fig in made.items()}
    time_vs_v = texts["time-vs-V-N32-D16-fp32-fwdbwd.png"]
    assert "not drawn: eager (failed the correctness gate); broken (oom)" in time_vs_v
    assert "† dotted: Triton under the CPU interpreter" in time_vs_v
    memory = texts["memory-vs-V-N16-D16-fp32-fwdbwd.png"]
    assert "broken (oom)" in memory and "†" not in memory  # memory: † does not apply
    for name, fig in made.items():
        marks = [t for ax in fig.get_axes() for t in ax.texts if t.get_text() == "!"]
        busy = name.startswith("time") and ("N32" in name or "V300" in name)
        assert len(marks) == (2 if busy else 0), name  # one point per β panel
        assert ("! measured on a busy machine" in texts[name]) == busy, name


def test_tick_labels_never_run_into_each_other(drawn):
    """Issue 30: with a long legend narrowing the panels, an axis spanning under half a
    decade labelled every minor tick: `8×10¹9×10¹`."""
    for name, fig, renderer in drawn:
        for ax in fig.get_axes():
            for axis in (ax.xaxis, ax.yaxis):
                labels = axis.get_majorticklabels() + axis.get_minorticklabels()
                boxes = [t.get_window_extent(renderer) for t in labels if t.get_text()]
                for i, box in enumerate(boxes):
                    assert not any(box.overlaps(other) for other in boxes[i + 1 :]), name
        if "-vs-N-" in name:
            texts = [t.get_text() for t in fig.get_axes()[0].get_xticklabels()]
            assert texts == ["64", "128"]  # the swept values, plainly


def test_the_title_clears_the_panel_titles_and_log_labels_are_plain(drawn):
    """Issue 36: with footnotes under the axes the figure's title sat on the panels' β
    titles, and a log axis under a decade read "6×10⁰"."""
    noted = 0
    for name, fig, renderer in drawn:
        title = fig._suptitle.get_window_extent(renderer)
        for ax in fig.get_axes():
            assert not title.overlaps(ax.title.get_window_extent(renderer)), name
            labels = ax.yaxis.get_majorticklabels() + ax.yaxis.get_minorticklabels()
            assert not [t.get_text() for t in labels if "×" in t.get_text()], name
        noted += "†" in " ".join(t.get_text() for t in fig.texts)
    assert noted  # the case of the issue: footnotes under the axes


def test_each_tp_size_gets_its_own_figures_with_a_rank_floor():
    shape = dict(tokens=64, hidden=32, dtype="fp32", shape="smoke", device="cpu")
    rows = []
    for vocab in (512, 1024):
        rows.append(row("ours", "fwd+bwd", ms=vocab / 100, mib=vocab / 1000, vocab=vocab, **shape))
        for k in (2, 4):
            rows.append(tp_row("ours", k, vocab / 100 / k, vocab / 1e6 / k, vocab=vocab, **shape))
    made = dict(plot.figures(new_document(CPU_ENV, rows), ["fwd+bwd"]))
    assert set(made) == {
        f"{q}-vs-V-N64-D32-fp32{tp}-fwdbwd.png"
        for q in ("memory", "time")
        for tp in ("", "-tp2", "-tp4")
    }
    fig = made["memory-vs-V-N64-D32-fp32-tp4-fwdbwd.png"]
    assert "TP=4 per rank" in fig._suptitle.get_text()
    (ax,) = fig.get_axes()
    ours, bound = ax.get_lines()
    assert bound.get_label() == "lower bound per rank"
    assert list(bound.get_ydata()) == [
        floor_bytes("fwd+bwd", 64, v // 4, 32, "fp32") / 2**20 for v in (512, 1024)
    ]
    peaks = [v / 1e6 / 4 * 1024 for v in (512, 1024)]  # GiB -> MiB, int bytes
    assert list(ours.get_ydata()) == pytest.approx(peaks, rel=1e-4)
    one = made["memory-vs-V-N64-D32-fp32-fwdbwd.png"].get_axes()[0].get_lines()[0]
    assert list(one.get_ydata()) == pytest.approx([0.512, 1.024], rel=1e-4)  # one device only
