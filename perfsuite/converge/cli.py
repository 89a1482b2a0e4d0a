"""``perfsuite converge`` / ``python -m perfsuite.converge``: arguments and the sweep.

Bad input (unknown method, --steps 0, an unwritable --out, ...) is refused before
anything trains, with one ``error:`` line and exit status 2. Exit 1 means a run
crashed, diverged or trained differently from eager; 0 that every run that could
run matched eager (unavailable methods are recorded, not failures).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from perfsuite.converge.presets import DEFAULT_METHODS, PRESETS, Preset
from perfsuite.method import DTYPES, Method

REFERENCE = "eager"


class UsageError(ValueError):
    """Bad command-line input: reported on one line, exit status 2."""


@dataclass
class Config:
    """The checked arguments of one converge sweep."""

    preset: Preset
    methods: list[str]
    betas: list[float]
    dtypes: list[str]
    device: str
    out: Path
    force: bool = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``perfsuite converge`` (also ``python -m perfsuite.converge``)."""
    parser.add_argument("--preset", default="smoke", help=f"one of {', '.join(PRESETS)}")
    parser.add_argument(
        "--methods",
        help="comma-separated method names; eager (the reference) is always added "
        "(default: " + "; ".join(f"{d}: {','.join(m)}" for d, m in DEFAULT_METHODS.items()) + ")",
    )
    parser.add_argument("--beta", default="0,0.1", help="label smoothing values, comma-separated")
    parser.add_argument("--dtype", default="fp32", help=f"comma-separated, of {','.join(DTYPES)}")
    parser.add_argument("--steps", help="training steps (default: the preset's)")
    parser.add_argument("--seed", help="model, data and order seed (default: the preset's, 0)")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--out", help="results JSON (default: converge-PRESET-DEVICE.json)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --out")


def _split(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _int(text: str | None, flag: str, minimum: int) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{flag}: not an integer: {text!r}") from None
    if value < minimum:
        raise UsageError(f"{flag} must be >= {minimum}, got {value}")
    return value


def _betas(text: str) -> list[float]:
    betas = []
    for part in _split(text):
        try:
            beta = float(part)
        except ValueError:
            raise UsageError(f"--beta: not a number: {part!r}") from None
        if not (math.isfinite(beta) and 0.0 <= beta < 1.0):
            raise UsageError(f"--beta values must be in [0, 1), got {part}")
        betas.append(beta)
    if not betas:
        raise UsageError("--beta: no values given")
    return list(dict.fromkeys(betas))


def resolve(args: argparse.Namespace, known: dict[str, Method]) -> Config:
    """Check every argument against the registry ``known``; raise ``UsageError``."""
    import torch

    if args.preset not in PRESETS:
        raise UsageError(f"--preset: unknown {args.preset!r}; known: {', '.join(PRESETS)}")
    if args.device not in ("auto", "cpu", "cuda"):
        raise UsageError(f"--device: unknown {args.device!r}; known: auto, cpu, cuda")
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device here")
    preset = PRESETS[args.preset].with_steps(_int(args.steps, "--steps", 1))
    preset = preset.with_seed(_int(args.seed, "--seed", 0))
    dtypes = _split(args.dtype)
    bad = [d for d in dtypes if d not in DTYPES]
    if bad or not dtypes:
        raise UsageError(
            f"--dtype: unknown {', '.join(bad) or '(none)'}; known: {', '.join(DTYPES)}"
        )
    if args.methods is None:
        methods = [m for m in DEFAULT_METHODS[device] if m in known]
    else:
        methods = _split(args.methods)
        unknown = [m for m in methods if m not in known]
        if unknown or not methods:
            raise UsageError(
                f"--methods: unknown {', '.join(map(repr, unknown)) or '(none)'}; "
                f"known: {', '.join(known)}"
            )
    methods = [REFERENCE, *[m for m in dict.fromkeys(methods) if m != REFERENCE]]
    out = Path(args.out or f"converge-{preset.name}-{device}.json")
    return Config(preset, methods, _betas(args.beta), list(dict.fromkeys(dtypes)), device, out)


def _interpret_triton(config: Config, known: dict[str, Method]) -> None:
    """On CPU Triton kernels run only under the interpreter, which ``@triton.jit`` reads
    when a kernel is defined: set it before any of them is imported (as the runner does)."""
    if config.device == "cpu" and any(known[m].caps.triton for m in config.methods):
        os.environ.setdefault("TRITON_INTERPRET", "1")


def sweep(
    config: Config, known: dict[str, Method], console: Console | None = None
) -> tuple[list[Any], dict[str, Any]]:
    """Train every method x beta x dtype; writes ``config.out`` after each run."""
    from perfsuite.converge.data import make_dataset, make_source
    from perfsuite.converge.model import build_model, config_summary, set_deterministic
    from perfsuite.converge.parity import YARDSTICK, attach_verdicts, tolerances_doc
    from perfsuite.converge.report import environment, new_document, save
    from perfsuite.converge.train import ADAM, memory_meter, train_run

    console = console or Console(stderr=True)
    p = config.preset
    determinism = set_deterministic(p.seed)
    source = make_source(p.vocab, p.support, p.zipf, p.seed)
    data = make_dataset(source, p.steps, p.batch, p.seq, p.eval_batches)
    document = new_document(
        argv=sys.argv[1:],
        preset=p.to_dict(),
        methods=config.methods,
        betas=config.betas,
        dtypes=config.dtypes,
        model=config_summary(build_model(p, DTYPES["fp32"], "cpu")),
        optimizer={"name": "AdamW", "lr": p.lr, **ADAM, "grad_clip": None},
        loss_hook="loss_fn(last hidden states, lm_head.weight, next tokens), as Liger/CCE patch",
        data=data.describe(),
        determinism=determinism,
        memory_meter=memory_meter(config.device)[0],
        tolerances=tolerances_doc(),
        environment=environment(config.device),
    )
    runs: list[Any] = []
    save(config.out, document, runs, complete=False)
    for dtype in config.dtypes:
        names = list(config.methods)
        if dtype != "fp32" and YARDSTICK not in names and YARDSTICK in known:
            names.insert(1, YARDSTICK)  # eager's own 16-bit noise (see parity)
        for beta in config.betas:
            for name in names:
                start = time.perf_counter()
                run = train_run(known[name], p, data, beta, dtype, config.device)
                runs.append(run)
                attach_verdicts(runs)  # eager runs first, so each verdict is final
                save(config.out, document, runs, complete=False)
                verdict = (run.parity or {}).get("verdict", "—")
                note = f" ({run.reason})" if run.reason else ""
                console.print(
                    f"{name} β={beta:g} {dtype}: {run.status}{note}, parity {verdict}, "
                    f"{time.perf_counter() - start:.1f} s"
                )
    save(config.out, document, runs, complete=True)
    return runs, document


def exit_status(runs: list[Any]) -> int:
    """1 if a run crashed, diverged or differs from eager; else 0."""
    bad = any(
        r.status in ("error", "diverged") or (r.parity or {}).get("verdict") == "differs"
        for r in runs
    )
    return 1 if bad else 0


def run(args: argparse.Namespace) -> int:
    """The ``perfsuite converge`` command: 0 all same, 1 a failure or difference, 2 bad input."""
    from perfsuite.plan.registry import all_methods
    from perfsuite.results.results import ResultsError, check_writable

    console = Console()
    try:
        known = all_methods()
        config = resolve(args, known)
        check_writable(config.out, overwrite=args.force)
    except (UsageError, ResultsError, ValueError) as err:
        print(f"perfsuite converge: error: {err}", file=sys.stderr)
        return 2
    _interpret_triton(config, known)
    p = config.preset
    console.print(
        f"converge {p.name}: {', '.join(config.methods)} x β {config.betas} x {config.dtypes} "
        f"on {config.device}, {p.steps} steps of {p.batch}x{p.seq} tokens -> {config.out}"
    )
    start = time.perf_counter()
    runs, _ = sweep(config, known, console)
    from perfsuite.converge.report import print_report

    title = f"converge {p.name} on {config.device} ({time.perf_counter() - start:.1f} s)"
    print_report(console, runs, title)
    console.print(f"results: {config.out}")
    return exit_status(runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m perfsuite.converge",
        description="Train a tiny Llama once per loss method x beta and compare with eager.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))
