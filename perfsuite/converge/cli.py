"""``perfsuite converge`` / ``python -m perfsuite.converge``: arguments and the command.

Bad input (unknown method, --steps 0, an unwritable --out, ...) is refused before
anything trains, with one ``error:`` line and exit status 2. Exit 1 means a run
crashed, ran out of memory, diverged or trained differently from eager; 0 that
every run that could run matched eager (unavailable and unsupported cells are
recorded, not failures).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

from perfsuite.converge.datasets import DATA_KINDS
from perfsuite.converge.presets import DEFAULT_METHODS, PRESETS
from perfsuite.converge.sweep import Config
from perfsuite.fit import TrimmedConsole
from perfsuite.method import DTYPES, Method

REFERENCE = "eager"


class UsageError(ValueError):
    """Bad command-line input: reported on one line, exit status 2."""


def _preset_help() -> str:
    return "; ".join(
        f"{p.name}: V={p.vocab}, D={p.hidden}, {p.layers} layers, {p.steps} steps of "
        f"{p.batch}x{p.seq} tokens, for {p.target.upper()}"
        for p in PRESETS.values()
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``perfsuite converge`` (also ``python -m perfsuite.converge``)."""
    parser.add_argument("--preset", default="smoke", help=f"one of: {_preset_help()}")
    parser.add_argument(
        "--methods",
        help="comma-separated method names; eager (the reference) is always added "
        "(default: the preset's, else "
        + "; ".join(f"{d}: {','.join(m)}" for d, m in DEFAULT_METHODS.items())
        + ")",
    )
    parser.add_argument("--beta", default="0,0.1", help="label smoothing values, comma-separated")
    parser.add_argument(
        "--dtype", help=f"comma-separated, of {','.join(DTYPES)} (default: the preset's)"
    )
    parser.add_argument("--steps", help="training steps (default: the preset's)")
    parser.add_argument(
        "--z-loss",
        help="train with PaLM's z_loss·lse² added (e.g. 1e-4; default 0). Methods without "
        "it are recorded as unsupported",
    )
    parser.add_argument("--seed", help="model, data and order seed (default: the preset's, 0)")
    parser.add_argument(
        "--train-batches",
        help="distinct training batches, cycled (0: a fresh batch every step; default: the "
        "preset's). Repeated data makes a model overconfident, as fine-tuning does",
    )
    parser.add_argument(
        "--data",
        default="bigram",
        help="bigram (synthetic, true distribution known; default) or text (Python's "
        "bundled help pages, BPE-tokenised here; no truth)",
    )
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument(
        "--jobs", help="Triton methods interpreted on CPU at a time (default: 2 on 2+ cores)"
    )
    parser.add_argument("--timeout", help="seconds one run may take (default: the preset's)")
    parser.add_argument(
        "--out",
        help="results JSON (default: reports/runs/TIME-converge-PRESET-DEVICE.json); the "
        "table (.md) and the plots (-loss, -reliability, -calibration .png) go next to it",
    )
    parser.add_argument("--force", action="store_true", help="overwrite existing outputs")
    parser.add_argument(
        "--render",
        metavar="RESULTS",
        help="rewrite the table and plots next to a finished results JSON; train nothing",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="build the data and the model (on the meta device), print the plan, train nothing",
    )


def _split(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _number(text: str | None, flag: str, minimum: float, kind: type = int) -> Any:
    if text is None:
        return None
    try:
        value = kind(text)
    except ValueError:
        noun = "an integer" if kind is int else "a number"
        raise UsageError(f"{flag}: not {noun}: {text!r}") from None
    if not math.isfinite(value) or value < minimum:
        raise UsageError(f"{flag} must be >= {minimum:g}, got {text}")
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


def _methods(
    text: str | None, device: str, known: dict[str, Method], preset_methods: tuple | None
) -> list[str]:
    if text is None:
        methods = [m for m in preset_methods or DEFAULT_METHODS[device] if m in known]
    else:
        methods = _split(text)
        unknown = [m for m in methods if m not in known]
        if unknown or not methods:
            raise UsageError(
                f"--methods: unknown {', '.join(map(repr, unknown)) or '(none)'}; "
                f"known: {', '.join(known)}"
            )
    return [REFERENCE, *[m for m in dict.fromkeys(methods) if m != REFERENCE]]


def _default_out(preset: str, device: str) -> Path:
    """``reports/runs/<time>-converge-<preset>-<device>.json``, as ``run`` names its files
    (git ignores reports/runs/: a result is committed only on purpose)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("reports/runs") / f"{stamp}-converge-{preset}-{device}.json"


def resolve(args: argparse.Namespace, known: dict[str, Method]) -> Config:
    """Check every argument against the registry ``known``; raise ``UsageError``."""
    import torch

    from perfsuite.plan.plan import default_jobs

    if args.preset not in PRESETS:
        raise UsageError(f"--preset: unknown {args.preset!r}; known: {', '.join(PRESETS)}")
    if args.device not in ("auto", "cpu", "cuda"):
        raise UsageError(f"--device: unknown {args.device!r}; known: auto, cpu, cuda")
    if args.data not in DATA_KINDS:
        raise UsageError(f"--data: unknown {args.data!r}; known: {', '.join(DATA_KINDS)}")
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device here")
    preset = PRESETS[args.preset].with_steps(_number(args.steps, "--steps", 1))
    preset = preset.with_seed(_number(args.seed, "--seed", 0))
    preset = preset.with_train_batches(_number(args.train_batches, "--train-batches", 0))
    preset = preset.with_z_loss(_number(args.z_loss, "--z-loss", 0, float))
    if args.data == "text" and preset.vocab < 256:
        raise UsageError(f"--data text needs a vocabulary >= 256; {preset.name} has {preset.vocab}")
    dtypes = list(preset.dtypes) if args.dtype is None else _split(args.dtype)
    bad = [d for d in dtypes if d not in DTYPES]
    if bad or not dtypes:
        raise UsageError(
            f"--dtype: unknown {', '.join(bad) or '(none)'}; known: {', '.join(DTYPES)}"
        )
    jobs = _number(args.jobs, "--jobs", 1)
    timeout = _number(args.timeout, "--timeout", 1, float)
    return Config(
        preset=preset,
        methods=_methods(args.methods, device, known, preset.methods),
        betas=_betas(args.beta),
        dtypes=list(dict.fromkeys(dtypes)),
        device=device,
        out=Path(args.out) if args.out else _default_out(preset.name, device),
        data=args.data,
        jobs=default_jobs() if jobs is None else jobs,
        timeout_s=preset.timeout_s if timeout is None else timeout,
    )


def check_outputs(config: Config, force: bool) -> None:
    """Refuse now, before training, outputs that cannot be written or would be clobbered."""
    from perfsuite.converge.plots import artifact_paths
    from perfsuite.results.results import ResultsError, check_writable

    check_writable(config.out, overwrite=force)
    if not force:
        for path in artifact_paths(config.out).values():
            if path.exists():
                raise ResultsError(f"--out {config.out}: {path} exists; pass --force to overwrite")


def exit_status(runs: list[Any]) -> int:
    """1 if a run crashed, ran out of memory, diverged or differs from eager; else 0."""
    bad = any(
        r.status in ("error", "oom", "diverged") or (r.parity or {}).get("verdict") == "differs"
        for r in runs
    )
    return 1 if bad else 0


def run(args: argparse.Namespace) -> int:
    """The ``perfsuite converge`` command: 0 all same, 1 a failure or difference, 2 bad input."""
    from perfsuite.converge.sweep import dry_run, render, report, sweep
    from perfsuite.converge.yardstick import METHODS as YARDSTICKS
    from perfsuite.plan.registry import methods_for

    console = TrimmedConsole()  # the terminal's width, $COLUMNS, else 80: tables fold to fit
    # Bad input raises (UsageError, ResultsError): the entry point prints it, exit 2.
    if args.render is not None:
        return render(Path(args.render), console)
    known = {**methods_for("train"), **YARDSTICKS}
    config = resolve(args, known)
    if args.dry_run:
        return dry_run(config, known, console)
    check_outputs(config, args.force)
    p = config.preset
    console.print(
        f"converge {p.name}: {', '.join(config.methods)} x β {config.betas} x {config.dtypes} "
        f"on {config.device}, {p.steps} steps of {p.batch}x{p.seq} tokens, {config.data} data"
        + (f", z-loss {p.z_loss:g}" if p.z_loss else "")
        + f" -> {config.out}",
        highlight=False,
    )
    runs, document = sweep(config, known, console)
    report(config.out, runs, document, console)
    return exit_status(runs)


def main(argv: list[str] | None = None) -> int:
    """``python -m perfsuite.converge``: bad input as ``perfsuite converge`` prints it."""
    from perfsuite.parser import BAD_INPUT, Parser, print_error

    parser = Parser(
        prog="python -m perfsuite.converge",
        description="Train a tiny Llama once per loss method x beta and compare with eager.",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except BAD_INPUT as err:
        print_error(err)
        return 2
