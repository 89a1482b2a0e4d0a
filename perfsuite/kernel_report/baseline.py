"""Stored kernel-report baselines: the ``--json`` document, one per Triton version (another
Triton or ptxas changes the SASS with no change of ours) and arch set, a row per line (a
renewal's git diff names each build)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import triton

from perfsuite.results.results import write_atomically

from . import build
from .options import SHAPES, arch_set

# Other JSON under reports/ names its schema: never taken for a results file.
SCHEMA = "perfsuite-kernel-report/1"
_NAME = re.compile(r"triton-(?P<version>.+)_(?P<archs>sm_[0-9a-z_-]+)\.json")
_LISTS = ("rows", "costs", "designs", "launched")  # one element per line


class BaselineError(ValueError):
    """A baseline that cannot be used (one ``error:`` line, exit code 2)."""


def toolchain(archs: list[str]) -> dict[str, Any]:
    """The Triton version and the CUDA release of each arch's ptxas."""
    ptxas = {}
    for arch in arch_set(archs):
        try:
            ptxas[arch] = build.ptxas_version(arch)
        except build.BuildError as exc:  # the builds then fail and say why
            ptxas[arch] = f"unknown ({exc})"
    return {"triton": triton.__version__, "ptxas": ptxas}


def command_args(
    sel: dict[str, Any], shape: dict[str, Any], archs: list[str] | None = None
) -> list[str]:
    """The options that select ``sel`` at ``shape`` (``archs``: in this order)."""
    args = ["--arch", ",".join(archs or sel["archs"])]
    if shape["name"] != "gemma2-2b":
        named = shape["name"] in SHAPES
        args[:0] = ["--shape", shape["name"] if named else "{n},{v},{d},{dtype}".format(**shape)]
    if sel.get("dtypes_asked"):
        args += ["--dtype", ",".join(sel["dtypes"])]
    if sel.get("kernels_asked"):
        args += ["--kernel", ",".join(sel["kernels"] + sel["peers"])]
    return args if sel["cce"] else [*args, "--no-cce"]


def _dump(doc: dict[str, Any]) -> str:
    """``doc`` as JSON, each element of its lists on a line of its own."""
    parts = []
    for key, value in doc.items():
        text = json.dumps(value)
        if key in _LISTS and isinstance(value, list) and value:
            text = "[\n" + ",\n".join(f"  {json.dumps(v)}" for v in value) + "\n ]"
        parts.append(f" {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def save(report: dict[str, Any], folder: str | os.PathLike[str]) -> Path:
    """Write ``report`` as the baseline of its Triton version and arch set in ``folder``,
    atomically (replacing the one there: a renewal)."""
    version, archs = report["toolchain"]["triton"], report["selection"]["archs"]  # an arch set
    path = Path(folder) / f"triton-{version}_{'-'.join(archs)}.json"
    write_atomically(path, _dump({"schema": SCHEMA, **report}))
    return path


def load(
    folder: str, selection: dict[str, Any], shape: dict[str, Any], *, across: bool = False
) -> tuple[dict[str, Any], Path]:
    """The stored document to compare this run with, and its file: this Triton version's
    (``across``: the newest other version's, else this one's) for the arch set; else a
    ``BaselineError`` naming the command that makes one."""
    version, archs = triton.__version__, ",".join(selection["archs"])  # an arch set
    make = " ".join(["make one: perfsuite kernel-report", *command_args(selection, shape)])
    make += f" --save {folder}"
    if Path(folder).is_file():  # "no such folder" about a file that exists (issue 46)
        named = _NAME.fullmatch(Path(folder).name)
        hint = f": the folder that holds it is {Path(folder).parent}" if named else ""
        raise BaselineError(
            f"--baseline {folder}: is a file; --baseline takes the folder `--save DIR` "
            f"wrote its baselines to{hint}"
        )
    if not Path(folder).is_dir():
        raise BaselineError(f"--baseline {folder}: no such folder; {make}")
    found = (_NAME.fullmatch(p.name) for p in Path(folder).glob("triton-*.json"))
    wanted = archs.replace(",", "-")
    files = {m["version"]: Path(folder) / m.string for m in found if m and m["archs"] == wanted}
    others = sorted(
        (v for v in files if v != version),
        key=lambda v: tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.+-]", v)),
    )
    if across and others:
        path = files[others[-1]]
    elif version in files:
        path = files[version]
    elif others:
        raise BaselineError(
            f"--baseline {folder}: holds Triton {', '.join(others)}'s baseline for {archs}, not "
            f"this Triton {version}'s: compare across versions with --across-triton, or {make}"
        )
    else:
        raise BaselineError(
            f"--baseline {folder}: no baseline for Triton {version} and --arch {archs}; {make}"
        )
    try:
        doc = json.loads(path.read_text())
        assert doc.get("schema") == SCHEMA and isinstance(doc["rows"], list)
        assert doc["toolchain"]["triton"] == _NAME.fullmatch(path.name).group("version")
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        raise BaselineError(f"--baseline {path}: not a kernel-report baseline; {make}") from None
    # It must hold what this run builds of ours, at the same shape.
    keys = ("n", "v", "d", "dtype", "beta", "softcap")
    base_shape = doc.get("shape", {})
    if any(base_shape.get(k) != shape[k] for k in keys):
        was = ", ".join(f"{k}={base_shape.get(k)}" for k in keys)
        raise BaselineError(f"--baseline {path}: built at another shape ({was}); {make}")
    for field in ("dtypes", "kernels"):
        built = doc.get("selection", {}).get(field, [])
        if missing := sorted(set(selection[field]) - set(built)):
            raise BaselineError(
                f"--baseline {path}: built no {', '.join(missing)} "
                f"({field[:-1]}s {', '.join(built) or 'none'}); {make}"
            )
    return doc, path


def in_selection(rows: list[dict[str, Any]], selection: dict[str, Any]) -> list[dict[str, Any]]:
    """The stored rows this run builds too (its dtypes, our kernels and CCE's)."""
    kernels = set(selection["kernels"]) | set(selection["peers"])
    return [r for r in rows if r["dtype"] in selection["dtypes"] and r["kernel"] in kernels]
