"""``perfsuite report RESULTS.json --format md|latex|csv|html [-o FILE]``: the paper's table.
``--paper``: a run beside the paper's one-device table as ratios within each run (absolute
times move with clocks and versions; the paper's claims are relative)."""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import Any

from perfsuite.fit import pipe_table
from perfsuite.plan.memory_model import floor_bytes
from perfsuite.plan.registry import paper_names
from perfsuite.render.cells import one_device
from perfsuite.render.report_formats import FORMATS, render
from perfsuite.results.outpath import check_output_file
from perfsuite.results.results import ResultsError, load_results, require_kind

_SUFFIX_FORMAT = {".md": "md", ".tex": "latex", ".csv": "csv", ".html": "html", ".htm": "html"}
# The paper's Gemma2-2B H100 table, committed with the results it is set beside.
PAPER_TABLE = Path(__file__).resolve().parents[2] / "reports" / "paper" / "gemma2-2b-h100.csv"
COLUMNS = [
    "paper method", "β", "ours as", "paper ×CCE", "ours ×CCE", "paper ×compile", "ours ×compile",
    "paper peak/floor", "ours peak/floor", "our status",
]  # fmt: skip
# The columns of reports/paper/gemma2-2b-h100.csv that side_by_side reads.
PAPER_COLUMNS = ("method", "beta", "fwdbwd_mem_mb", "fwdbwd_ms")


def read_paper(path: Path) -> list[dict[str, str]]:
    """The paper's table as CSV rows; ``ResultsError`` (one line) for another file (a
    results JSON given as ``--paper`` raised ``KeyError: 'method'``)."""
    usage = f"--paper {path}: not a paper table (a CSV of columns {', '.join(PAPER_COLUMNS)})"
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            columns = reader.fieldnames or []
    except (UnicodeDecodeError, csv.Error):
        raise ResultsError(usage) from None
    except OSError as err:
        raise ResultsError(f"--paper {path}: cannot read ({err.strerror})") from None
    missing = [c for c in PAPER_COLUMNS if c not in columns]
    if missing or not rows:
        raise ResultsError(usage + (f"; no {missing[0]!r} column" if missing else "; no rows"))
    for i, row in enumerate(rows, 2):  # the line in the file, after the header
        for column in PAPER_COLUMNS[2:]:
            try:
                _num(row[column])
            except (TypeError, ValueError):
                raise ResultsError(
                    f"--paper {path}: line {i}: {column} is {row[column]!r}, not a number"
                ) from None
    return rows


def _num(text: str | None) -> float | None:
    return float(text) if text not in (None, "") else None


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "–"


def _ours(rows: list[dict[str, Any]], method: str, positive_beta: bool) -> dict[str, Any]:
    """Our fwd+bwd cell for ``method`` at β = 0 or the run's β > 0 ({}: none)."""
    mine = (r for r in rows if r["method"] == method and r["phase"] == "fwd+bwd")
    return next((r for r in mine if (r["beta"] > 0) == positive_beta), {})


def side_by_side(document: dict[str, Any], paper: list[dict[str, str]]) -> str:
    """Markdown: per paper row, the paper's ratios and ours from ``document``."""
    mine = one_device(document["rows"])
    if not mine:
        raise ResultsError("no one-device cell to set beside the paper (only cells across ranks)")
    rows = [r for r in mine if r.get("median_ms") is not None or r["status"] != "ok"]
    first = mine[0]
    floor = floor_bytes("fwd+bwd", first["tokens"], first["vocab"], first["hidden"], first["dtype"])
    floor_mb = floor / 2**20
    # The paper's own lower-bound row, when it has one, for its peak/floor ratios.
    paper_floor = next(
        (_num(p["fwdbwd_mem_mb"]) for p in paper if p["method"] == "lower_bound"), floor_mb
    )
    paper_cce = next(
        _num(p["fwdbwd_ms"]) for p in paper if p["method"] == "cce" and p["beta"] == "0"
    )
    ours_cce = _ours(rows, "cce", False)

    def paper_compile(beta: str) -> float | None:
        rows = [p for p in paper if p["method"] == "torch_compile"]
        exact = [p for p in rows if p["beta"] == beta]
        return _num((exact or rows or [{}])[0].get("fwdbwd_ms"))

    records = []
    # The paper's method names -> ours: each method's ``paper``, and a method since removed
    # that older results files hold (reports/nvidia-h100-80gb-hbm3/).
    declared = {"ours_fused_no_grad_filter": "ours-fused-no-filter", **paper_names()}
    for p in paper:
        method = declared.get(p["method"])
        if method is None:
            continue
        positive = p["beta"] != "0"
        mine = _ours(rows, method, positive)
        ms, status = mine.get("median_ms"), mine.get("status", "not run")
        mark = " ✗" if status == "wrong" else ""
        paper_ms = _num(p["fwdbwd_ms"])
        compile_ms = _ours(rows, "torch-compile", positive).get("median_ms")
        records.append([  # COLUMNS' order
            p["method"], p["beta"], method,
            _ratio(paper_ms, paper_cce), _ratio(ms, ours_cce.get("median_ms")) + mark,
            _ratio(paper_ms, paper_compile(p["beta"])), _ratio(ms, compile_ms) + mark,
            _ratio(_num(p["fwdbwd_mem_mb"]), paper_floor), _ratio(mine.get("peak_bytes"), floor),
            status,
        ])  # fmt: skip
    lines = pipe_table(COLUMNS, records, [*COLUMNS[:3], COLUMNS[-1]])
    cce_status = ours_cce.get("status", "not run")
    lines.append("")
    lines.append(
        f"×CCE: fwd+bwd time over CCE's at β = 0 in the same run (ours: CCE {cce_status}"
        + (", ✗ = failed our correctness gate, timed anyway" if cce_status == "wrong" else "")
        + "); ×compile: over torch.compile's at the same β; peak/floor: fwd+bwd peak over "
        f"the floor of {floor_mb:,.0f} MiB (dE + dC in the input dtype)."
    )
    return "\n".join(lines) + "\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", type=Path, help="a results file (run, sweep or merge)")
    p.add_argument(
        "--format",
        choices=FORMATS,
        help="md (default), latex, csv or html; inferred from -o's suffix when omitted",
    )
    p.add_argument("-o", "--out", type=Path, help="write here instead of stdout")
    p.add_argument("--force", action="store_true", help="overwrite an existing -o file")
    p.add_argument(
        "--paper",
        type=Path,
        nargs="?",
        const=PAPER_TABLE,
        metavar="CSV",
        help="print the paper's table beside this run as ratios (markdown); "
        "default CSV: reports/paper/gemma2-2b-h100.csv",
    )
    p.add_argument(
        "--breakdown",
        action="store_true",
        help="where each profiled cell's time goes (a run with --profile): a bar per "
        "method by class (GEMM, our kernels, the peer's, elementwise, copies, ...), top kernels",
    )


def run(args: argparse.Namespace) -> int:
    from perfsuite.fit import TrimmedConsole as Console

    console = Console(stderr=True)
    fmt = args.format or _SUFFIX_FORMAT.get(args.out.suffix if args.out else "", "md")
    if args.out is not None:
        check_output_file(args.out, "-o", overwrite=args.force, inputs=[args.results, args.paper])
    document = load_results(args.results)
    require_kind(document, args.results, {"loss", "tp"}, "report")  # step: other FLOPs
    if args.paper is not None:
        if not args.paper.is_file():
            raise ResultsError(f"--paper {args.paper}: no such file")
        text = side_by_side(document, read_paper(args.paper))
    elif args.breakdown:
        from perfsuite.render.breakdown import breakdown_lines

        lines = breakdown_lines(document["rows"], console.width)
        if not lines:
            raise ResultsError(
                f"{args.results}: no row has a breakdown (measure with run --profile DIR)"
            )
        text = "\n".join(lines) + "\n"
    else:
        text = render(document, fmt)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    try:
        args.out.write_text(text)
    except OSError as err:  # it went away since the check: the report still shows
        sys.stdout.write(text)
        console.print(
            f"[red]error:[/red] -o {args.out}: {err.strerror}; printed above", soft_wrap=True
        )
        return 1
    console.print(f"{fmt} report → {args.out}")
    return 0
