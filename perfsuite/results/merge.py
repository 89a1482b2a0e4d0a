"""``perfsuite merge A.json B.json … -o all.json``: join results files (a sweep's shards)
measured under the same environment (device, code, library versions, timing), unless
``--allow-mismatch`` (recorded; never devices). A cell in two files is an error unless
``--duplicates first|last``; a ``skipped`` row yields to a measured one."""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any

from perfsuite.results.cells import canonical_order, cell_key, env_differences
from perfsuite.results.kinds import describe_cell
from perfsuite.results.outpath import check_output_file
from perfsuite.results.results import load_results, new_document, require_kind, write_results

# A step file's plan (model, layers, sequence) is another shape of document: its cells are
# never shards of a loss sweep, and its env would be compared on fields it does not share.
MERGES = frozenset({"loss", "tp"})


class MergeError(ValueError):
    """Files that cannot be merged, and why."""


def merge_documents(
    documents: list[tuple[str, dict[str, Any]]],
    *,
    allow_mismatch: bool = False,
    duplicates: str = "error",
) -> dict[str, Any]:
    """One document from ``(name, document)`` pairs; ``MergeError`` if they disagree
    (``ResultsError`` if one holds rows merge does not take)."""
    for name, doc in documents:
        require_kind(doc, name, MERGES, "merge")
    first_name, first = documents[0]
    # The merged env names one device: cells measured on another would carry its name.
    devices = {(d["env"].get("device") or {}).get("name") for _, d in documents}
    if len(devices) > 1:
        raise MergeError(
            f"files from different devices ({', '.join(sorted(map(str, devices)))}): a merged "
            "file names one device for every cell, so these cannot be merged even with "
            "--allow-mismatch"
        )
    mismatches = []
    for name, doc in documents[1:]:
        for diff in env_differences(first["env"], doc["env"]):
            mismatches.append(f"{first_name} vs {name}: {diff}")
    if mismatches and not allow_mismatch:
        raise MergeError(
            "environments disagree, so their numbers are not comparable:\n  "
            + "\n  ".join(mismatches)
            + "\n(--allow-mismatch merges anyway and records this)"
        )
    kept: dict[tuple, tuple[str, dict[str, Any]]] = {}
    for name, doc in documents:
        for row in doc["rows"]:
            key = cell_key(row)
            other_name, other = kept.setdefault(key, (name, row))
            if other is row or row["status"] == "skipped":
                continue
            if other["status"] == "skipped" or duplicates == "last":
                kept[key] = (name, row)
            elif duplicates == "error":
                raise MergeError(
                    f"cell {describe_cell(row)} is in both {other_name} and {name} "
                    "(--duplicates first|last picks one)"
                )
    env = copy.deepcopy(first["env"])
    env["merged_from"] = [
        {
            "file": name,
            "created": doc["env"].get("created"),
            "shard": (doc["env"].get("sweep") or {}).get("shard"),
            "git": doc["env"].get("git"),
            "rows": len(doc["rows"]),
        }
        for name, doc in documents
    ]
    if mismatches:
        env["merge_mismatches"] = mismatches
    if isinstance(env.get("sweep"), dict):
        env["sweep"]["shard"] = None
    return new_document(env, canonical_order([r for _, r in kept.values()], env.get("plan") or {}))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("inputs", nargs="+", type=Path, help="results files to join")
    p.add_argument("-o", "--out", type=Path, required=True, help="merged results file")
    p.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="merge even if code or library versions differ (recorded in env); never devices",
    )
    p.add_argument(
        "--duplicates",
        choices=["error", "first", "last"],
        default="error",
        help="a cell measured in several files: refuse (default), keep the first or last",
    )


def run(args: argparse.Namespace) -> int:
    from perfsuite.fit import TrimmedConsole as Console

    console = Console(stderr=True)
    # Before reading: a one-line error; never over an input (merging b into a is `-o c`).
    check_output_file(args.out, "-o", inputs=args.inputs)
    documents = [(str(path), load_results(path)) for path in args.inputs]
    merged = merge_documents(
        documents, allow_mismatch=args.allow_mismatch, duplicates=args.duplicates
    )
    try:
        write_results(args.out, merged)
    except OSError as err:
        console.print(
            f"[red]error:[/red] -o {args.out}: {err.strerror}; nothing written", soft_wrap=True
        )
        return 1
    differ = " [yellow](environments differ: see env.merge_mismatches)[/yellow]"
    differ = differ if merged["env"].get("merge_mismatches") else ""
    console.print(f"merged {len(documents)} files, {len(merged['rows'])} rows → {args.out}{differ}")
    return 0
