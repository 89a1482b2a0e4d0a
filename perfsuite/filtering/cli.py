"""``perfsuite filtering``: the gradient-filtering study on one workload (study.py).
``--workload synthetic-axis``: the first synthetic geometry (the prior in hidden dimension
0), kept to show what it did."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from perfsuite.args import positive_int
from perfsuite.filtering.rules import DEFAULT_THRESHOLDS, FILTERS, ORDERS

DEFAULT_SHAPE = (1024, 32768, 512)  # the issue's synthetic measurement


def threshold_list(text: str) -> tuple[float, ...]:
    """``2^-12,1e-4`` -> floats; each in (0, 1)."""
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        try:
            value = 2.0 ** float(part[2:]) if part.startswith("2^") else float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a threshold: {part!r}") from None
        if not 0 < value < 1:
            raise argparse.ArgumentTypeError(f"a threshold must lie in (0, 1), got {part}")
        out.append(value)
    if not out:
        raise argparse.ArgumentTypeError("no threshold given")
    return tuple(out)


def add_arguments(p: argparse.ArgumentParser) -> None:
    arg = p.add_argument
    workloads = "random, synthetic (trained geometry), synthetic-axis (the old one) or a dump"
    arg("--workload", default="synthetic", help=workloads)
    arg("--tokens", type=positive_int, help=f"N (default {DEFAULT_SHAPE[0]}; a file's)")
    arg("--vocab", type=positive_int, help=f"V (default {DEFAULT_SHAPE[1]})")
    arg("--hidden", type=positive_int, help=f"D (default {DEFAULT_SHAPE[2]})")
    arg("--entropy", type=float, help="synthetic: mean entropy in nats (default 2)")
    arg("--zipf", type=float, help="synthetic: Zipf exponent of the prior (default 1)")
    arg("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    arg("--seed", type=int, default=0)
    arg("--device", choices=["cpu", "cuda"], default="cpu")
    eps = "filter_eps values, e.g. 2^-8,2^-12 (default 2^-8 … 2^-16)"
    arg("--thresholds", type=threshold_list, default=DEFAULT_THRESHOLDS, help=eps)
    arg("--filters", default=",".join(FILTERS), help=f"of {', '.join(FILTERS)} (default: all)")
    arg("--orders", default=",".join(ORDERS), help=f"of {', '.join(ORDERS)} (default: all)")
    arg("--out", required=True, type=Path, help="path stem: OUT.json/.md/.csv/.png")
    arg("--force", action="store_true", help="overwrite existing outputs")


def build_inputs(args: argparse.Namespace) -> tuple[Any, Any, dict[str, Any]]:
    """``(case, inputs, workload description)`` for the arguments."""
    from perfsuite.method import Case
    from perfsuite.plan.workloads import file_shape, parse_workload, workload_label
    from perfsuite.run.inputs import make_inputs

    axis = args.workload == "synthetic-axis"
    spec = parse_workload("synthetic" if axis else args.workload, args.entropy, args.zipf)
    if spec is not None and spec["kind"] == "file":
        shape = file_shape(spec, args.tokens, args.vocab, args.hidden)
        dims, softcap = (shape.tokens, shape.vocab, shape.hidden), shape.softcap
        workload = {"kind": "file", "path": args.workload, "label": workload_label(spec)}
    else:
        given = (args.tokens, args.vocab, args.hidden)
        dims, softcap = tuple(x or y for x, y in zip(given, DEFAULT_SHAPE, strict=True)), None
        workload = {"kind": "random", "label": "random"}
        if spec is not None:
            spec["geometry"] = "axis" if axis else "trained"
            label = f"synthetic(H={spec['entropy']:g},zipf={spec['zipf']:g},{spec['geometry']})"
            workload = {**spec, "label": label}
    case = Case(*dims, args.dtype, softcap=softcap, device=args.device)
    return case, make_inputs(case, args.seed, spec), workload


def run(args: argparse.Namespace) -> int:
    from perfsuite.plan.plan import parse_choices
    from perfsuite.results.outpath import check_output_file

    filters = parse_choices(args.filters, "filters", tuple(FILTERS))
    orders = parse_choices(args.orders, "orders", ORDERS)
    stem = args.out.with_suffix("") if args.out.suffix in (".json", ".md") else args.out
    for suffix in (".json", ".md", ".csv", ".png"):  # before the study, in outpath's words
        check_output_file(stem.with_suffix(suffix), "--out", overwrite=args.force)
    # torch, once the outputs are known writable
    from perfsuite.filtering.report import write_all
    from perfsuite.filtering.study import run_study
    from perfsuite.results.provenance import collect_env

    case, inputs, workload = build_inputs(args)
    result = run_study(case, inputs, args.thresholds, tuple(filters), tuple(orders))
    document = {
        "schema": "perfsuite-filtering/1",
        "command": "perfsuite " + " ".join(shlex.quote(a) for a in args.argv),
        "workload": {
            **workload,
            **{k: getattr(case, k) for k in ("tokens", "vocab", "hidden", "dtype", "softcap")},
            "seed": args.seed,
        },
        "filters": {name: vars(f) for name, f in FILTERS.items()},
        "env": collect_env(args.device),
        **result,
    }
    for path in write_all(stem, document):
        print(f"wrote {path}")
    return 0
