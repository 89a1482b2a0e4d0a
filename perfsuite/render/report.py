"""``perfsuite report RESULTS.json --format md|latex|csv|html [-o FILE]``: the paper's table.

Analytic columns (docs/math.md, ``roofline``): the lower-bound row holds the memory floor
and each phase's FLOPs; the methods' third column the fraction of the roofline on a known
GPU (H100, H200, A100), else the achieved FLOP rate. The CSV spells every number out."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfsuite.render.report_formats import FORMATS, render
from perfsuite.results.results import ResultsError, check_writable, load_results, require_kind

_SUFFIX_FORMAT = {".md": "md", ".tex": "latex", ".csv": "csv", ".html": "html", ".htm": "html"}


# The paper's Gemma2-2B H100 table, committed with the results it is set beside.
PAPER_TABLE = Path(__file__).resolve().parents[2] / "reports" / "paper" / "gemma2-2b-h100.csv"


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
        check_writable(args.out, overwrite=args.force, flag="-o", inputs=[args.results, args.paper])
    document = load_results(args.results)
    require_kind(document, args.results, {"loss", "tp"}, "report")  # step: other FLOPs
    if args.paper is not None:
        from perfsuite.render.paper_compare import read_paper, side_by_side

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
