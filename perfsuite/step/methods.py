"""The losses one training step is measured with: every declared method with a ``step``
(``perfsuite.method.StepPatch``), as the step kind sees it."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util

from perfsuite.method import SimpleMethod, package_version


def availability(method: SimpleMethod, device: str) -> str | None:
    """None when ``method``'s step can run on ``device`` here, else why not."""
    reason = method.lacks("step") or method.availability(device)
    requires = method.step.requires if method.step else ()
    return reason or ("; ".join(filter(None, map(why_missing, requires))) or None)


def why_missing(module: str) -> str | None:
    """None when ``module`` is there to import, else why not in the import system's own
    words: not installed; installed without it (cut-cross-entropy 25.1.1's PyPI wheel has
    no ``cut_cross_entropy.transformers``, apple/ml-cross-entropy#9, where issue 45's row
    said only "not installed"); or the error its parent package raised. A module whose
    spec is absent is imported only to hear that error, before any of its code runs."""
    try:
        if importlib.util.find_spec(module) is not None:  # imports the parent packages
            return None
        importlib.import_module(module)
        return None
    except ImportError as err:
        said = f"{type(err).__name__}: {err}"
        top = module.partition(".")[0]
        if not isinstance(err, ModuleNotFoundError) or err.name not in (module, top):
            return f"{module} failed to import ({said})"
        dist = _distribution(top) if err.name == module and module != top else None
        if dist is not None:
            return f"{dist} {package_version(dist)} is installed without {module} ({said})"
        return f"{module} not installed"


def _distribution(package: str) -> str | None:
    """The installed distribution that provides ``package``: the one of its name, as most
    are (``cut_cross_entropy``: cut-cross-entropy), else the one whose files list it (a
    scan of every distribution's metadata, over a second)."""
    try:
        return importlib.metadata.distribution(package).metadata["Name"]
    except importlib.metadata.PackageNotFoundError:
        found = importlib.metadata.packages_distributions().get(package)
        return found[0] if found else None
