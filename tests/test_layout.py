"""The package's shape (issue 11): folders by stage, imports one way, small modules.

Import cycles are found from the source (every ``import``, lazy ones inside
functions included), so a cycle hidden behind a function-level import counts.
``perfsuite/kernels`` and ``perfsuite/baselines`` are links to the top-level
folders, with their own rules; they are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "perfsuite"
LINKED = ("kernels", "baselines")
MAX_LINES = 400


def modules() -> dict[str, Path]:
    """Dotted name -> file for every perfsuite module outside the linked folders."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent)
        if rel.parts[1] in LINKED:
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The perfsuite modules ``name`` imports (a ``from X import Y`` of a submodule
    counts as importing X.Y)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:
                    out.add(sub)
                elif base in known:
                    out.add(base)
    out.discard(name)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node."""
    import networkx  # torch's dependency

    graph = networkx.DiGraph([(v, w) for v, targets in edges.items() for w in targets])
    return sorted(sorted(c) for c in networkx.strongly_connected_components(graph) if len(c) > 1)


def stage(module: str) -> str:
    """``perfsuite.run.sweep`` -> ``run``; a top-level module is its own stage
    (``perfsuite.cli`` -> ``cli``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "perfsuite"


def test_no_import_cycles_between_modules():
    assert cycles(graph()) == []


def test_no_module_over_the_line_limit():
    long = {
        name: n
        for name, path in modules().items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these along a seam (limit {MAX_LINES} lines): {long}"


# Only the harness starts measurement workers: a kind declares them.
NO_PROCESSES = ("step", "converge")
STARTERS = {"subprocess", "multiprocessing", "torch.multiprocessing"}


def imported_names(path: Path) -> set[str]:
    """Every module a file imports (absolute names), perfsuite's or not."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def test_only_the_harness_starts_processes():
    starting = {
        name: sorted(imported_names(path) & STARTERS)
        for name, path in modules().items()
        if stage(name) in NO_PROCESSES and imported_names(path) & STARTERS
    }
    assert starting == {}, f"a kind declares its worker; perfsuite.harness starts it: {starting}"


def test_the_checks_see_a_process_starter(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from torch import multiprocessing\n")
    assert imported_names(path) & STARTERS == {"torch.multiprocessing"}


def test_the_checks_see_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# Stages from the top (the command line) down: a stage imports only stages after it, so
# data flows one way and stages never import each other in a cycle (docs/development.md,
# "Layout"). A new stage takes its place here.
ORDER = (
    "__main__", "cli",
    "activations", "converge", "step", "filtering", "kernel_report",  # commands, kinds
    "render", "history", "regress",  # readers of results
    "run", "harness", "args", "measure", "tp_method",  # measuring; the layout across ranks
    "plan", "results", "method", "parser", "fit", "units",  # the declarations, primitives
    "perfsuite", "checkout",  # the package's __init__: its version, the checkout's path
)  # fmt: skip


def test_a_lower_stage_never_imports_a_higher_one():
    upward = []
    for module, targets in graph().items():
        for target in targets:
            a, b = stage(module), stage(target)
            assert a in ORDER and b in ORDER, f"place stage {a if a not in ORDER else b} in ORDER"
            if a != b and ORDER.index(a) > ORDER.index(b):
                upward.append(f"{module} imports {target}")
    assert upward == []
