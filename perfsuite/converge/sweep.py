"""The converge sweep: which runs, in which order, and what is written after each.

Every method x beta x dtype is one run; a yardstick of eager's own rounding noise
joins after eager (``eager-reordered`` in fp32, the fp32-logit ``reference`` in 16
bit; see ``yardstick`` and ``parity``). Runs go
to per-method worker processes (``runner``); each finished run is judged against
eager, printed, and the results JSON is rewritten (``complete: false`` until the
last), so an interrupted or crashed sweep keeps every run that finished. At the
end the markdown table and the figures are written next to the JSON.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from perfsuite.converge.datasets import build_dataset
from perfsuite.converge.model import describe_model, quiet_imports, set_deterministic
from perfsuite.converge.parity import attach_verdicts, tolerances_doc
from perfsuite.converge.plots import artifact_paths, write_figures
from perfsuite.converge.presets import Preset
from perfsuite.converge.report import (
    SCHEMA,
    environment,
    markdown,
    new_document,
    print_report,
    save,
)
from perfsuite.converge.runner import Cell, TrainKind, decided, interpreted, result
from perfsuite.converge.train import ADAM, RunResult, memory_meter
from perfsuite.converge.yardstick import yardstick_for
from perfsuite.harness.kind import run_kind
from perfsuite.method import Method


@dataclass
class Config:
    """The checked arguments of one converge sweep (``cli.resolve`` makes them)."""

    preset: Preset
    methods: list[str]
    betas: list[float]
    dtypes: list[str]
    device: str
    out: Path
    data: str = "bigram"
    jobs: int = 1
    timeout_s: float = 1800.0


def plan_cells(config: Config, known: dict[str, Method]) -> list[Cell]:
    """Every run, in table order: dtype, then beta, then method (eager first)."""
    cells = []
    for dtype in config.dtypes:
        names = list(config.methods)
        yard = yardstick_for(dtype)
        if yard not in names and yard in known:
            names.insert(1, yard)  # eager's own rounding noise (see parity)
        cells += [Cell(name, beta, dtype) for beta in config.betas for name in names]
    return cells


def _header(config: Config, known: dict[str, Method], data_info: dict[str, Any]) -> dict:
    p = config.preset
    distributions = sorted({d for m in config.methods for d in known[m].distributions})
    return new_document(
        argv=sys.argv[1:],
        preset=p.to_dict(),
        methods=config.methods,
        betas=config.betas,
        dtypes=config.dtypes,
        model=None,  # filled in by the first worker (the parent does not import transformers)
        optimizer={"name": "AdamW", "lr": p.lr, **ADAM, "grad_clip": None},
        loss_hook="loss_fn(last hidden states, lm_head.weight, next tokens), as Liger/CCE patch",
        data=data_info,
        isolation="one worker process per method (perfsuite.converge.worker)",
        triton_interpreted=[m for m in config.methods if interpreted(known[m], config.device)],
        determinism=set_deterministic(p.seed),
        memory_meter=memory_meter(config.device)[0],
        tolerances=tolerances_doc(),
        environment=environment(config.device, distributions),
    )


def sweep(
    config: Config, known: dict[str, Method], console: Console
) -> tuple[list[RunResult], dict[str, Any]]:
    """Train every cell in workers; rewrites ``config.out`` after each finished run."""
    start = time.perf_counter()
    cells = plan_cells(config, known)
    document = _header(config, known, build_dataset(config.preset, config.data).describe())
    results: dict[Cell, RunResult] = {}
    lock = threading.Lock()

    def ordered() -> list[RunResult]:
        return [results[c] for c in cells if c in results]

    def on_result(run: RunResult) -> None:
        with lock:
            results[Cell(run.method, run.beta, run.dtype)] = run
            runs = ordered()
            attach_verdicts(runs)  # eager runs first, so a printed verdict is final
            save(config.out, document, runs, complete=False)
            verdict = (run.parity or {}).get("verdict", "—")
            note = f" ({run.reason})" if run.reason else ""
            console.print(
                f"{run.method} β={run.beta:g} {run.dtype}: {run.status}{note}, parity "
                f"{verdict}, {run.wall_s:.1f} s",
                highlight=False,
            )

    kind = TrainKind(
        known, config.preset, config.data, config.device, config.jobs, config.timeout_s,
        on_model=lambda model: document.__setitem__("model", document["model"] or model),
    )  # fmt: skip
    cases: dict[str, list[dict[str, Any]]] = {}
    for cell in cells:
        cases.setdefault(cell.method, []).append(kind.case(cell))
    groups: list[dict[str, Any]] = []
    document["machine"] = {"groups": groups}
    run_kind(kind, cases, lambda method, case, rows: on_result(result(rows[0])), groups)
    runs = ordered()
    attach_verdicts(runs)
    document["wall_s"] = round(time.perf_counter() - start, 1)
    save(config.out, document, runs, complete=True)
    return runs, document


def _title(document: dict[str, Any]) -> str:
    preset = document.get("preset", {})
    device = (document.get("environment", {}).get("device") or {}).get("kind", "?")
    wall = f"{document['wall_s']:.1f} s, " if document.get("wall_s") is not None else ""
    return f"converge {preset.get('name')} on {device} ({wall}{preset.get('steps')} steps)"


def report(out: Path, runs: list[RunResult], document: dict[str, Any], console: Console) -> None:
    """Print both tables; write the markdown table and the figures next to the JSON."""
    title = _title(document)
    print_report(console, runs, title)
    paths = artifact_paths(out)
    paths["table"].write_text(markdown(document, runs, title))
    # paths whole on one line, however long (soft wrap: the terminal's, not rich's fold)
    console.print(f"results: {out}", highlight=False, soft_wrap=True)
    console.print(f"table:   {paths['table']}", highlight=False, soft_wrap=True)
    try:
        figures = write_figures(document, out)
    except ImportError as err:  # the results are written; the figures can follow (--render)
        console.print(f"[yellow]no plots:[/yellow] {err} (pip install 'perfsuite[converge]')")
        return
    for path in figures:
        console.print(f"plot:    {path}", highlight=False, soft_wrap=True)


def render(path: Path, console: Console) -> int:
    """``--render``: the table and figures of a finished results file, rewritten from it
    alone (after a GPU session, or with newer plotting code); trains nothing."""
    from perfsuite.results.results import ResultsError, json_error

    try:
        text = path.read_text(encoding="utf-8")
        document = json.loads(text)
    except json.JSONDecodeError as err:
        raise ResultsError(f"--render {path}: {json_error(text, err)}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ResultsError(f"--render {path}: not a readable JSON file ({err})") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise ResultsError(f"--render {path}: not a converge results file (schema {SCHEMA})")
    runs = []
    for data in document.get("runs", []):
        run = RunResult.from_dict(data)
        run.parity = data.get("parity")
        runs.append(run)
    report(path, runs, document, console)
    return 0


def dry_run(config: Config, known: dict[str, Method], console: Console) -> int:
    """Build the data and the model (meta device), print every cell's fate; train nothing."""
    p = config.preset
    data = build_dataset(p, config.data)
    with quiet_imports():
        model = describe_model(p)
    logits_gib = p.tokens_per_step * p.vocab * 4 / 2**30
    console.print(
        f"converge {p.name} (for {p.target}) on {config.device}: {model['class']} with "
        f"{model['parameters'] / 1e6:.1f} M parameters (V={p.vocab}, D={p.hidden}, "
        f"{p.layers} layers); {p.steps} steps of {p.batch}x{p.seq} tokens; eager's fp32 "
        f"logits {logits_gib:.2f} GiB a step",
        highlight=False,
    )
    console.print(f"data: {data.describe()}", highlight=False)
    if p.target != config.device:
        console.print(
            f"[yellow]note:[/yellow] {p.name} is sized for {p.target}; on {config.device} its "
            "Triton methods would run under the interpreter, one program at a time in numpy",
            highlight=False,
        )
    for cell in plan_cells(config, known):
        fate = decided(known[cell.method], cell, p, config.device)
        what = f"{fate.status} ({fate.reason})" if fate else "train"
        if fate is None and interpreted(known[cell.method], config.device):
            what += " under the Triton interpreter"
        console.print(f"  {cell.method} β={cell.beta:g} {cell.dtype}: {what}", highlight=False)
    console.print(f"dry run: nothing trained, nothing written (--out would be {config.out})")
    return 0
