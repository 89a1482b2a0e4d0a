"""Whether two results were measured in comparable environments: the check
``perfsuite compare`` makes between a baseline and a run, and that the stored
baselines of one device make among themselves (``baseline_store``)."""

from __future__ import annotations

from typing import Any

# Versions that do not change what is measured: the suite itself (the code
# under test lives in the rows' methods) and its table/dataframe libraries.
IGNORED_VERSIONS = frozenset({"perfsuite", "pandas", "rich"})


def env_differences(base_env: dict[str, Any], cur_env: dict[str, Any]) -> tuple[list, list]:
    """(blocking problems, warnings) between two environments."""
    problems: list[str] = []
    warnings: list[str] = []
    bdev, cdev = base_env.get("device") or {}, cur_env.get("device") or {}
    for key in ("kind", "name", "cuda"):
        if bdev.get(key) != cdev.get(key) and (key != "cuda" or bdev.get("kind") == "cuda"):
            problems.append(f"device {key}: {bdev.get(key)!r} (baseline) vs {cdev.get(key)!r}")
    bver, cver = base_env.get("versions") or {}, cur_env.get("versions") or {}
    for name in sorted((set(bver) & set(cver)) - IGNORED_VERSIONS):
        if bver[name] != cver[name]:
            problems.append(f"{name} version: {bver[name]} (baseline) vs {cver[name]}")
    for name in sorted((set(bver) ^ set(cver)) - IGNORED_VERSIONS):
        warnings.append(f"{name}: recorded in only one of the two results")
    if bdev.get("driver") != cdev.get("driver"):
        warnings.append(f"GPU driver: {bdev.get('driver')!r} (baseline) vs {cdev.get('driver')!r}")
    if base_env.get("python") != cur_env.get("python"):
        warnings.append(f"python: {base_env.get('python')} (baseline) vs {cur_env.get('python')}")
    if (cur_env.get("git") or {}).get("dirty"):
        warnings.append("current results come from a checkout with uncommitted changes")
    return problems, warnings
