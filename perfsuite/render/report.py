"""``perfsuite report RESULTS.json --format md|latex|csv|html [-o FILE]``: the paper's table.

One table per (N, V, D, dtype, softcap, workload), laid out as the paper's:
method rows, fwd / bwd / fwd+bwd column groups of memory and time, sections by
β (largest first), the lower-bound row at the top of each section, N/A where a
method does not apply, numbers with units, the best of each column in bold.
Grouping, status labels and marks are ``perfsuite.render.table``'s, shared with the
console table.

Analytic columns (math.md, ``perfsuite.render.roofline``): the lower-bound row holds
the memory floor, and in each phase's third column the FLOPs of the cell; on a
known GPU (H100, H200, A100) its time column holds the roofline time and the
methods' third column the measured fraction of it; elsewhere (CPU, unknown
GPU) the third column is the achieved FLOP rate. The CSV spells every one of
these out per row.
"""

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
    try:
        if args.out is not None:
            check_writable(
                args.out, overwrite=args.force, flag="-o", inputs=[args.results, args.paper]
            )
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
    except ResultsError as err:
        console.print(f"[red]error:[/red] {err}", soft_wrap=True)
        return 2
    if args.out is None:
        sys.stdout.write(text)
    else:
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


def main(argv: list[str] | None = None) -> int:
    from perfsuite.parser import Parser

    parser = Parser(prog="perfsuite report", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
