"""The step cell kind: cases measured by ``perfsuite.step.worker`` processes through the
harness; a model the memory model says cannot fit is ``skipped``, nothing started."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsuite.harness import kind as harness
from perfsuite.harness.lifecycle import python_worker
from perfsuite.harness.progress import NoticeFn, ProgressFn
from perfsuite.method import SimpleMethod, package_version
from perfsuite.plan.memory_model import Estimate, step_estimate
from perfsuite.plan.registry import methods_for
from perfsuite.results.provenance import collect_env
from perfsuite.step.plan import CASE_KEYS, StepPlan, case_size
from perfsuite.step.presets import get_preset
from perfsuite.step.worker import LR, StepSpec

if TYPE_CHECKING:
    from perfsuite.harness.command import Checkpoint

LOSS_SHARE = (
    "loss_ms: median over samples of the step's fwd+bwd, less the median fwd+bwd of the "
    "same model in the same worker with a trivial loss on the decoder's last hidden states "
    "(mean of their squares; compiled alike for torch-compile); the share is loss_ms over "
    "the step's median. The optimizer is the same work for every loss and is left out."
)


def availability(method: SimpleMethod, device: str) -> str | None:
    """None when ``method``'s step can run on ``device`` (its patch importable), else why not."""
    requires = method.step.requires if method.step else ()
    reason = method.availability(device)
    return reason or ("; ".join(filter(None, map(why_missing, requires))) or None)


def why_missing(module: str) -> str | None:
    """None when ``module`` is there to import, else why not in the import system's own
    words: not installed, installed without it (a wheel without its patch module), or the
    error its parent package raised (an absent spec is imported only to hear it)."""
    try:
        if importlib.util.find_spec(module) is None:  # imports the parent packages
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
    """The installed distribution that provides ``package``: the one of its name, else
    the one whose files list it (a scan of every distribution's metadata, over a second)."""
    try:
        return importlib.metadata.distribution(package).metadata["Name"]
    except importlib.metadata.PackageNotFoundError:
        found = importlib.metadata.packages_distributions().get(package)
        return found[0] if found else None


class StepKind(harness.Kind):
    """A training step of a model: one worker per method, four phases per case."""

    name, case_keys = "step", CASE_KEYS

    def __init__(self, plan: StepPlan, models: dict[str, Any]) -> None:
        self.plan, self.device, self.timeout_s = plan, plan.device, plan.timeout_s
        self.phases = tuple(plan.phases)
        self.models = models
        self.methods = methods_for("step")

    def estimate(self, method: str, case: dict[str, Any]) -> Estimate:
        network = get_preset(case["shape"]).network(case_size(case))
        return step_estimate(self.methods[method].caps.holds, network, case["dtype"], self.device)

    def availability(self, method: str) -> str | None:
        return availability(self.methods[method], self.plan.device)

    def wont_fit(self, method: str, case: dict[str, Any]) -> str | None:
        return self.estimate(method, case).too_big(self.plan.capacity, self.plan.capacity_source)

    def work(self, method: str, case: dict[str, Any]) -> float:
        """A step's cost: 6 x parameters x tokens."""
        return 6.0 * get_preset(case["shape"]).parameters(case["layers"]) * case["tokens"]

    def peak(self, method: str, case: dict[str, Any]) -> int | None:
        return self.estimate(method, case).need

    def command(self, method: str, cases: list[dict[str, Any]], out: Path, spec: Path) -> list[str]:
        p = self.plan
        limit = p.memory_limit if p.device == "cpu" else None
        worker = StepSpec(method, cases, str(out), p.samples, p.warmup, p.seed, limit)
        spec.write_text(json.dumps(asdict(worker)))
        return python_worker("perfsuite.step.worker", str(spec))

    def heard(self, method: str, lines: list[dict[str, Any]]) -> None:
        for line in lines:
            if "model" in line:
                self.models.setdefault(line["model"], line["info"])


def run_step_plan(
    plan: StepPlan,
    progress: ProgressFn | None = None,
    checkpoint: Checkpoint | None = None,
    notice: NoticeFn | None = None,
) -> dict[str, Any]:
    """Measure every (method, case) of ``plan``; returns the results document.
    ``notice``: the progress lines while workers run (a model's step may take minutes)."""
    models: dict[str, Any] = {}
    kind, cases = StepKind(plan, models), plan.cases()
    distributions = [d for name in plan.methods for d in kind.methods[name].distributions]
    env = collect_env(plan.device, ["transformers", *distributions])
    env["plan"] = plan.as_dict()
    estimates: dict[str, Any] = {}
    for case in cases:
        estimates.setdefault(case["shape"], {})[case["dtype"]] = {
            name: kind.estimate(name, case).as_dict() for name in plan.methods
        }
    env["step"] = {
        "optimizer": f"torch.optim.AdamW(lr={LR:g}), torch's defaults otherwise",
        "loss_share": LOSS_SHARE,
        "models": models,
        "memory_estimates": estimates,
    }
    return harness.measure(kind, plan.methods, cases, env, progress, checkpoint, notice)
