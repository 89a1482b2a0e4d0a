"""The methods the suite knows: each module of ``perfsuite.baselines`` declares its
``METHODS`` (importing it never imports the package it wraps: a missing one makes its
methods ``unavailable``), then plugins: ``PERFSUITE_PLUGINS`` modules and the
``perfsuite.methods`` entry points."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch: loaded when methods are asked for, not to render rows
    from perfsuite.method import SimpleMethod

# Table order; torch_parallel and megatron declare methods measured only across ranks.
ADAPTER_MODULES = (
    "perfsuite.baselines.torch_methods",
    "perfsuite.baselines.torch_parallel",
    "perfsuite.baselines.ours",
    "perfsuite.baselines.megatron",
    "perfsuite.baselines.liger",
    "perfsuite.baselines.cce",
    "perfsuite.baselines.torchtune",
    "perfsuite.baselines.quack",
)
ENTRY_POINT_GROUP = "perfsuite.methods"


def _plugin(module_name: str) -> list[Any]:
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        raise ValueError(f"PERFSUITE_PLUGINS: cannot import {module_name!r} ({err.msg})") from None
    if not hasattr(module, "METHODS"):
        raise ValueError(f"PERFSUITE_PLUGINS: {module_name!r} has no METHODS list")
    return list(module.METHODS)


def _entry_point(ep: importlib.metadata.EntryPoint) -> list[Any]:
    try:
        loaded = ep.load()
    except Exception as err:  # noqa: BLE001 - a broken plugin is one line, not a traceback
        raise ValueError(f"entry point {ep.name} = {ep.value}: cannot load it ({err})") from None
    loaded = getattr(loaded, "METHODS", loaded)
    return list(loaded) if isinstance(loaded, list | tuple) else [loaded]


def all_methods() -> dict[str, SimpleMethod]:
    """Name -> every declared method, in table order: the tree's (``ADAPTER_MODULES``, then
    the others, by name), then plugins'."""
    import pkgutil

    from perfsuite import baselines
    from perfsuite.method import SimpleMethod

    names = {f"{baselines.__name__}.{m.name}" for m in pkgutil.iter_modules(baselines.__path__)}
    tree = [*ADAPTER_MODULES, *sorted(names - set(ADAPTER_MODULES))]
    found = [(m, d) for m in tree for d in getattr(importlib.import_module(m), "METHODS", ())]
    plugins = [m.strip() for m in os.environ.get("PERFSUITE_PLUGINS", "").split(",") if m.strip()]
    found += [(m, d) for m in plugins for d in _plugin(m)]
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found += [(f"entry point {ep.name}", d) for d in _entry_point(ep)]
    methods: dict[str, SimpleMethod] = {}
    for where, method in found:
        if not isinstance(method, SimpleMethod):
            raise ValueError(f"{where}: {method!r} is not a perfsuite.method.SimpleMethod")
        if method.name in methods:
            raise ValueError(f"method {method.name!r} registered twice ({where})")
        methods[method.name] = method
    return methods


def methods_for(kind: str) -> dict[str, SimpleMethod]:
    """The methods that declare ``kind`` (``perfsuite.method.KINDS``), as that kind
    measures them: for ``tp`` the declarations across ranks."""
    return {
        name: m.across_ranks() if kind == "tp" else m
        for name, m in all_methods().items()
        if kind in m.kinds
    }


def get_method(name: str) -> SimpleMethod:
    if (method := all_methods().get(name)) is None:
        raise KeyError(f"unknown method {name!r}; known: {', '.join(all_methods())}")
    return method


def pip_requirements() -> list[str]:
    """Every method's pinned pip requirements, once each, in table order: the peer
    wheels the lent GPU's image lacks (.ci/gpu-wheels reads them here)."""
    return list(dict.fromkeys(r for m in all_methods().values() for r in m.pip))


def paper_names() -> dict[str, str]:
    """The paper's method name -> the method declared as it (render/report.py's --paper)."""
    return {m.paper: name for name, m in all_methods().items() if m.paper}


def triton_packages() -> list[str]:
    """The import names of the packages whose Triton kernels the peers run (their
    ``requires`` where ``caps.triton``; ours and triton itself aside)."""
    found = (r for m in all_methods().values() if m.caps.triton for r in m.requires)
    return [r for r in dict.fromkeys(found) if r != "triton" and not r.startswith("perfsuite")]
