"""``perfsuite workload dump|train|inspect``: make and inspect ``--workload FILE`` dumps."""

from __future__ import annotations

import argparse
import json
import math
import shlex
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from perfsuite.args import positive_int
from perfsuite.converge.presets import PRESETS
from perfsuite.units import fmt_bytes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="workload_command", required=True)
    dump = sub.add_parser("dump", help="dump hidden states of a saved transformers causal LM")
    dump.add_argument("--model", required=True, type=Path, help="a save_pretrained folder")
    dump.add_argument("--text", required=True, type=Path, help="UTF-8 text to run it on")
    dump.add_argument("--seq", type=positive_int, default=512, help="tokens per sequence")
    dump.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], help="default: the model's")
    train = sub.add_parser("train", help="train converge's cpu-filtering preset, dump a batch")
    train.add_argument(
        "--preset",
        default="cpu-filtering",
        choices=PRESETS,
        metavar="PRESET",  # the choices in the help, not in an 80-column usage line
        help=f"converge's preset: {', '.join(PRESETS)} (default cpu-filtering)",
    )
    train.add_argument("--steps", type=positive_int, help="default: the preset's")
    train.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    for p in (dump, train):
        p.add_argument("--tokens", type=positive_int, default=2048, help="rows to dump (N)")
        p.add_argument("--out", required=True, type=Path, help="the .safetensors file")
        p.add_argument("--force", action="store_true", help="overwrite --out")
    inspect = sub.add_parser("inspect", help="entropy, entries >= 2^-12, frequency geometry")
    inspect.add_argument("file", type=Path, help="a dump")
    inspect.add_argument("--json", action="store_true", help="print JSON")


def summarize(path: Path) -> dict[str, Any]:
    """What ``inspect`` prints: the file's shape and ``workload_summary``."""
    from perfsuite.filtering.stats import workload_summary
    from perfsuite.plan.workloads import read_dump

    dump = read_dump(path)
    return {
        "file": str(path),
        "bytes": path.stat().st_size,
        "dtype": str(dump["e"].dtype).removeprefix("torch."),
        **workload_summary(dump["e"], dump["c"], dump["targets"], dump["softcap"]),
    }


def _print(summary: dict[str, Any]) -> None:
    for key, value in summary.items():
        text = f"{value:.6g}" if isinstance(value, float) else str(value)
        print(f"{key:>32}  {text}")


def _model_and_ids(args: argparse.Namespace) -> tuple[Any, Any]:
    import torch

    from perfsuite.plan.workloads import WorkloadError

    if not args.model.is_dir():
        raise WorkloadError(f"--model {args.model}: not a folder (save_pretrained's output)")
    if not args.text.is_file():
        raise WorkloadError(f"--text {args.text}: no such file")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(args.model)
        model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    except (OSError, ValueError) as err:
        raise WorkloadError(f"--model {args.model}: {' '.join(str(err).split())[:200]}") from None
    ids = tokenizer(args.text.read_text(encoding="utf-8"))["input_ids"]
    per = args.seq + 1
    count = -(-args.tokens // args.seq)
    if len(ids) < count * per:
        raise WorkloadError(
            f"--text {args.text}: {len(ids)} tokens, fewer than {count} sequences of {per}"
        )
    return model, torch.tensor(ids[: count * per]).view(count, per)


def _train_and_dump(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """``--preset`` trained by converge's own loop (eager, fp32), then ``--tokens`` rows of
    its first training sequences (where a step's gradient is taken) dumped to ``--out``."""
    import torch
    from torch.nn.utils import vector_to_parameters

    from perfsuite.activations.dump import dump_workload
    from perfsuite.converge.data import build_dataset
    from perfsuite.converge.model import build_model, set_deterministic
    from perfsuite.converge.train import train_run
    from perfsuite.plan.registry import get_method
    from perfsuite.plan.workloads import WorkloadError

    p = replace(PRESETS[args.preset], steps=args.steps or PRESETS[args.preset].steps)
    set_deterministic(p.seed)
    data = build_dataset(p, "text", split_words=False)
    seq = data.train.shape[-1] - 1
    sequences = data.train.reshape(-1, seq + 1)
    wanted = math.ceil(args.tokens / seq)
    if wanted > sequences.shape[0]:
        raise WorkloadError(
            f"--tokens {args.tokens}: the preset's training batches hold {sequences.shape[0] * seq}"
        )

    def step(record: dict[str, Any]) -> None:
        if record["step"] % 25 == 0:
            print(f"step {record['step']:>4}  loss {record['loss']:.3f}", flush=True)

    start = time.perf_counter()
    result = train_run(get_method("eager"), p, data, 0.0, "fp32", args.device, on_step=step)
    wall = time.perf_counter() - start
    if result.status != "ok" or result.params is None:
        raise WorkloadError(f"training {args.preset} failed: {result.status}: {result.reason}")
    model = build_model(p, torch.float32, args.device)
    vector_to_parameters(result.params.to(args.device), model.parameters())
    losses = result.losses
    record = {
        "preset": asdict(p),
        "data": data.describe(),
        "train_wall_s": round(wall, 1),
        "device": args.device,
        "train_loss_first": losses[0],
        "train_loss_last_10_mean": sum(losses[-10:]) / len(losses[-10:]),
        "heldout": {k: v for k, v in (result.heldout or {}).items() if isinstance(v, float)},
        "dumped": f"the first {wanted} training sequences of {seq + 1} tokens",
        "command": command,
    }
    ids = sequences[:wanted].to(args.device)
    return {**record, **dump_workload(model.eval(), ids, args.out, metadata=record)}


def run(args: argparse.Namespace) -> int:
    # here, not above: they load torch, and the arguments are checked before
    from perfsuite.activations.dump import dump_workload
    from perfsuite.plan.workloads import WorkloadError
    from perfsuite.results.outpath import check_output_file

    command = "perfsuite " + shlex.join(args.argv)
    if args.workload_command == "inspect":
        summary = summarize(args.file)
        print(json.dumps(summary, indent=1)) if args.json else _print(summary)
        return 0
    if args.out.suffix != ".safetensors":
        raise WorkloadError(f"--out {args.out}: must end in .safetensors")
    check_output_file(args.out, "--out", overwrite=args.force)
    start = time.perf_counter()
    if args.workload_command == "dump":
        model, ids = _model_and_ids(args)
        meta = {"model": str(args.model), "text": str(args.text), "command": command}
        info = dump_workload(model, ids, args.out, dtype=args.dtype, metadata=meta)
    else:
        info = _train_and_dump(args, command)
    print(f"wrote {args.out} ({fmt_bytes(info['bytes'])}) in {time.perf_counter() - start:.0f} s")
    _print(summarize(args.out))
    return 0
