"""The explicit list of methods the suite knows, plus opt-in plugins.

Each adapter module exposes ``METHODS``; importing it must not import the
optional package it wraps (that happens in ``prepare``), so a missing package
yields ``unavailable`` for its methods instead of breaking the registry.
``PERFSUITE_PLUGINS`` (comma-separated module names) adds methods from outside
the tree, e.g. a test's deliberately wrong method or a slowed-down copy.
"""

from __future__ import annotations

import importlib
import os

from perfsuite.method import Method
from perfsuite.tp_method import ParallelMethod

ADAPTER_MODULES = (
    "perfsuite.baselines.torch_methods",
    "perfsuite.baselines.ours",
    "perfsuite.baselines.liger",
    "perfsuite.baselines.cce",
    "perfsuite.baselines.torchtune",
    "perfsuite.baselines.quack",
)


def _modules() -> list[str]:
    plugins = [m.strip() for m in os.environ.get("PERFSUITE_PLUGINS", "").split(",") if m.strip()]
    return [*ADAPTER_MODULES, *plugins]


def all_methods() -> dict[str, Method]:
    """Name -> method, in table order."""
    methods: dict[str, Method] = {}
    for module_name in _modules():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if module_name in ADAPTER_MODULES:
                raise
            raise ValueError(
                f"PERFSUITE_PLUGINS: cannot import {module_name!r} ({err.msg})"
            ) from None
        if not hasattr(module, "METHODS"):
            raise ValueError(f"PERFSUITE_PLUGINS: {module_name!r} has no METHODS list")
        for method in module.METHODS:
            if method.name in methods:
                raise ValueError(f"method {method.name!r} registered twice ({module_name})")
            methods[method.name] = method
    return methods


# Methods across ranks (perfsuite.tp_method): each module exposes ``TP_METHODS``; a
# plugin module may add its own ``TP_METHODS`` beside ``METHODS``.
TP_ADAPTER_MODULES = (
    "perfsuite.baselines.tp_torch",
    "perfsuite.baselines.tp_ours",
    "perfsuite.baselines.tp_megatron",
    "perfsuite.baselines.tp_liger",
    "perfsuite.baselines.tp_cce",
)


def tp_methods() -> dict[str, ParallelMethod]:
    """Name -> method measured across ranks (``run --tp``), in table order."""
    methods: dict[str, ParallelMethod] = {}
    plugins = [m for m in _modules() if m not in ADAPTER_MODULES]
    for module_name in (*TP_ADAPTER_MODULES, *plugins):
        module = importlib.import_module(module_name)
        for method in getattr(module, "TP_METHODS", ()):
            if method.name in methods:
                raise ValueError(f"TP method {method.name!r} registered twice ({module_name})")
            methods[method.name] = method
    return methods


def methods_for(tp: bool) -> dict[str, Method]:
    """The registry a plan draws from: the TP one for ``--tp`` runs."""
    return tp_methods() if tp else all_methods()  # type: ignore[return-value]


def get_method(name: str) -> Method:
    methods = all_methods()
    if name not in methods:
        raise KeyError(f"unknown method {name!r}; known: {', '.join(methods)}")
    return methods[name]
