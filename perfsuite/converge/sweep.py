"""The converge sweep: every method x beta x dtype a run, eager's yardstick after eager,
the results file rewritten after each; then the markdown table and the figures."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from perfsuite.converge.data import build_dataset
from perfsuite.converge.model import describe_model, quiet_imports, set_deterministic
from perfsuite.converge.parity import attach_verdicts, tolerances_doc, yardstick_for
from perfsuite.converge.plots import artifact_paths, write_figures
from perfsuite.converge.presets import Preset
from perfsuite.converge.report import markdown, print_report, train_row
from perfsuite.converge.runner import Cell, TrainKind, result
from perfsuite.converge.train import ADAM, RunResult, memory_meter
from perfsuite.harness.command import Checkpoint
from perfsuite.harness.kind import run_kind
from perfsuite.harness.progress import ProgressFn
from perfsuite.method import SimpleMethod
from perfsuite.results.provenance import collect_env
from perfsuite.results.results import new_document
from perfsuite.units import fmt_bytes

# Provenance: the versions of what a run's numbers depend on, beyond the methods' own.
DISTRIBUTIONS = ("transformers", "torchmetrics", "tokenizers", "numpy", "matplotlib")


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


def plan_cells(config: Config, known: dict[str, SimpleMethod]) -> list[Cell]:
    """Every run, in table order: dtype, then beta, then method (eager first)."""
    cells = []
    for dtype in config.dtypes:
        names = list(config.methods)
        yard = yardstick_for(dtype)
        if yard not in names and yard in known:
            names.insert(1, yard)  # eager's own rounding noise (see parity)
        cells += [Cell(name, beta, dtype) for beta in config.betas for name in names]
    return cells


def sweep(
    config: Config,
    known: dict[str, SimpleMethod],
    console: Console,
    progress: ProgressFn,
    checkpoint: Checkpoint,
) -> dict[str, Any]:
    """Train every cell in workers, eager's first (so a printed verdict is final),
    ``checkpoint`` given every run so far after each; the results document."""
    start, p = time.perf_counter(), config.preset
    cells = plan_cells(config, known)
    distributions = {d for m in config.methods for d in known[m].distributions}
    env = collect_env(config.device, [*DISTRIBUTIONS, *sorted(distributions)])
    env["torch_threads"] = torch.get_num_threads()
    # ``model`` is filled in by the first worker: the parent does not import transformers.
    settings = env["converge"] = {
        "argv": sys.argv[1:],
        "preset": asdict(p),
        "methods": config.methods,
        "betas": config.betas,
        "dtypes": config.dtypes,
        "model": None,
        "optimizer": {"name": "AdamW", "lr": p.lr, **ADAM, "grad_clip": None},
        "loss_hook": "loss_fn(last hidden states, lm_head.weight, next tokens), as Liger/CCE patch",
        "data": build_dataset(p, config.data).describe(),
        "isolation": "one worker process per method (perfsuite.converge.worker)",
        "determinism": set_deterministic(p.seed),
        "memory_meter": memory_meter(config.device)[0],
        "tolerances": tolerances_doc(),
    }
    preset = settings["preset"]
    results: dict[Cell, RunResult] = {}

    def rows(_: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows of every run so far, in table order, their verdicts attached."""
        runs = [results[c] for c in cells if c in results]
        attach_verdicts(runs)
        return [
            train_row(r.to_dict(), preset, config.device, config.data, kind.interpreted(r.method))
            for r in runs
        ]

    def on_result(method: str, case: dict[str, Any], finished: list[dict[str, Any]]) -> None:
        run = result(finished[0])
        results[Cell(run.method, run.beta, run.dtype)] = run
        checkpoint.add(finished)
        progress(method, case, finished)
        verdict = (run.parity or {}).get("verdict", "—")
        note = f" ({run.reason})" if run.reason else ""
        console.print(
            f"{run.method} β={run.beta:g} {run.dtype}: {run.status}{note}, parity "
            f"{verdict}, {run.wall_s:.1f} s",
            highlight=False,
        )

    kind = TrainKind(
        known, p, config.data, config.device, config.jobs, config.timeout_s,
        on_model=lambda model: settings.__setitem__("model", settings["model"] or model),
    )  # fmt: skip
    cases: dict[str, list[dict[str, Any]]] = {}
    for cell in cells:
        cases.setdefault(cell.method, []).append(kind.case(cell))
    groups: list[dict[str, Any]] = []
    env["machine"] = {"groups": groups}
    checkpoint.env, checkpoint.shape = env, rows
    run_kind(kind, cases, on_result, groups)
    settings["wall_s"] = round(time.perf_counter() - start, 1)
    return new_document(env, rows([]))


def report(out: Path, document: dict[str, Any], console: Console) -> None:
    """Print both tables; write the markdown table and the figures next to the JSON."""
    print_report(console, document)
    paths = artifact_paths(out)
    paths["table"].write_text(markdown(document))
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


def dry_run(config: Config, known: dict[str, SimpleMethod], console: Console) -> int:
    """Build the data and the model (meta device), print every cell's fate; train nothing."""
    p = config.preset
    data = build_dataset(p, config.data)
    with quiet_imports():
        model = describe_model(p)
    console.print(
        f"converge {p.name} (for {p.target}) on {config.device}: {model['class']} with "
        f"{model['parameters'] / 1e6:.1f} M parameters (V={p.vocab}, D={p.hidden}, "
        f"{p.layers} layers); {p.steps} steps of {p.batch}x{p.seq} tokens; eager's fp32 "
        f"logits {fmt_bytes(p.tokens_per_step * p.vocab * 4)} a step",
        highlight=False,
    )
    console.print(f"data: {data.describe()}", highlight=False)
    if p.target != config.device:
        console.print(
            f"[yellow]note:[/yellow] {p.name} is sized for {p.target}; on {config.device} its "
            "Triton methods would run under the interpreter, one program at a time in numpy",
            highlight=False,
        )
    kind = TrainKind(known, p, config.data, config.device, config.jobs, config.timeout_s)
    for cell in plan_cells(config, known):
        fate = kind.decided(cell.method, kind.case(cell))
        what = f"{fate[0]['status']} ({fate[0]['reason']})" if fate else "train"
        if fate is None and kind.interpreted(cell.method):
            what += " under the Triton interpreter"
        console.print(f"  {cell.method} β={cell.beta:g} {cell.dtype}: {what}", highlight=False)
    console.print(f"dry run: nothing trained, nothing written (--out would be {config.out})")
    return 0
