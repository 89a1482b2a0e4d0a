"""Every command's argument parser, the table of subcommands in their own modules, and the
one way an error is printed: one ``error:`` line, not argparse's usage block (subparsers
take their parent's class, so every one is a ``Parser``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

# The deepest (sub)command parsed, for an error only the top parser can see.
_PROG = "_perfsuite_prog"


def print_error(message: object) -> None:
    """``error: <message>`` as one line on stderr, however long: a terminal folds it, a
    log or ``grep`` keeps it whole (rich wrapped errors at 80 columns into 2-5 lines)."""
    sys.stderr.write(f"error: {' '.join(str(message).split())}\n")
    sys.stderr.flush()


def _fail(prog: str, message: str) -> NoReturn:
    print_error(f"{message} (see {prog} --help)")
    sys.exit(2)


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line, ``error: <what> (see <prog> --help)``,
    exit 2, and whose help is plain text (docstrings' descriptions lose their reST ````)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The deepest (sub)command's default wins: a subparser's values overwrite its parent's.
        self.set_defaults(**{_PROG: self.prog})

    def error(self, message: str) -> NoReturn:
        _fail(self.prog, message)

    def format_help(self) -> str:
        return super().format_help().replace("``", "")

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> argparse.Namespace:
        """As argparse's, but an unknown option names the subcommand's help, not the top's
        (argparse leaves those to the top parser: ``see perfsuite --help``)."""
        namespace, extras = self.parse_known_args(args, namespace)
        prog = vars(namespace).pop(_PROG, self.prog)
        if extras:
            _fail(prog, f"unrecognized arguments: {' '.join(extras)}")
        return namespace


# Commands in their own modules: (name, module under perfsuite, help). Each module has
# ``add_arguments(parser)`` and ``run(args) -> int``; ``perfsuite.cli`` imports it only when
# its command runs or its help is asked for (``run``, ``shapes``, ``methods`` are its own).
MODULE_COMMANDS = (
    ("sweep", "run.cluster",  # sweep's arguments and run, plus --executor (job arrays)
     "measure a grid of (tokens, vocab, hidden, beta); resumable, shardable"),
    ("merge", "results.merge",
     "join results files (e.g. shards), checking their environments agree"),
    ("report", "render.report", "render the paper table as md, latex, csv or html"),
    ("plot", "render.plot", "PNG plots of memory and time against V and N"),
    ("compare", "regress.compare", "compare two results cell by cell; exit 1 on regression"),
    ("baseline", "regress.baseline_store", "store or list this device's baseline results"),
    ("bisect", "regress.bisect",
     "find the commit that made a cell slower (git bisect run in a temporary worktree)"),
    ("sensitivity", "regress.sensitivity",
     "measure the regression detector's false-alarm and detection rates here"),
    ("converge", "converge.cli",
     "train a tiny LM once per method and beta: parity with eager, calibration"),
    ("step", "step.cli",
     "one full training step of a transformers model per loss method: fwd, bwd, AdamW"),
    ("history", "history.cli",
     "keep every run in a SQLite history; find change points and regressions across commits"),
    ("dashboard", "render.dashboard",
     "write the history as a static site: plots across commits, change points marked"),
    ("workload", "activations.cli",
     "dump a transformers model's hidden states as a --workload file; train one; inspect one"),
    ("filtering", "filtering.cli",
     "what gradient filters keep and cost on a workload: tiles, mass, gradient errors"),
    ("kernel-report", "kernel_report", "compile the kernels ahead of time; registers, spills"),
)  # fmt: skip


DESCRIPTION = (
    "Benchmark linear cross-entropy with label smoothing: our Triton kernel against its "
    "peers, each checked against an fp32 reference, timed, with its peak memory. "
    "Start with `perfsuite run --shape smoke`; exit codes: 0 done, 1 a failure the "
    "command names (a regression, no cell measured), 2 bad input, 130 interrupted."
)
