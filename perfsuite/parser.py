"""The argument parser of every perfsuite command, subcommands' included.

argparse answers a bad argument with its usage block (3 to 7 lines) and then
``perfsuite compare: error: ...``, a prefix that changes with the command; the README
promises one ``error:`` line instead. Subparsers are made of their parent's class
(``add_subparsers`` defaults ``parser_class`` to it), so the top parser being a
``Parser`` makes every subcommand's, and every sub-subcommand's, one too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

# The deepest (sub)command parsed, for an error only the top parser can see.
_PROG = "_perfsuite_prog"


def _fail(prog: str, message: str) -> NoReturn:
    sys.stderr.write(f"error: {' '.join(message.split())} (see {prog} --help)\n")
    sys.exit(2)


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line,
    ``error: <what> (see <prog> --help)``, on stderr with exit status 2, and whose help
    is plain text (descriptions taken from docstrings lose their reST ````)."""

    def error(self, message: str) -> NoReturn:
        _fail(self.prog, message)

    def format_help(self) -> str:
        return super().format_help().replace("``", "")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        if not hasattr(namespace, _PROG):  # a subcommand's parser returns first
            setattr(namespace, _PROG, self.prog)
        return namespace, extras

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
