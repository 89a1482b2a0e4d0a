"""The one worker: ``serve`` reads a kind's spec and measures each case, a ``{"start": i}``
line before it, every line appended to the spec's JSON-lines file (``emitter``). Besides,
what every kind's worker shares (a row's columns, a failure's status, the memory cap,
a loss cell's phases), so that step, converge and regress need not import the loss kind."""

from __future__ import annotations

import gc
import importlib
import json
import os
import resource
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:  # torch loads in the worker, not in a parent that names its WORKER
    import torch

    from perfsuite.measure.memory import Peak
    from perfsuite.measure.timing import Timing
    from perfsuite.method import LossFn
    from perfsuite.results.results import Row

# Said next to a bf16 failure under the interpreter, whose casts differ from a GPU's.
INTERPRETER_BF16_NOTE = (
    "under the Triton interpreter, whose fp32->bf16 casts truncate where GPUs round to "
    "nearest: may pass on a GPU"
)


@contextmanager
def emitter(path: str | os.PathLike[str]) -> Iterator[Callable[[Any], None]]:
    """``emit(line)`` appends one line (a dict or a dataclass), synced: a worker killed
    right after loses none of it."""
    with open(path, "a", buffering=1) as out:

        def emit(line: Any) -> None:
            out.write(json.dumps(asdict(line) if is_dataclass(line) else line) + "\n")
            out.flush()
            os.fsync(out.fileno())

        yield emit


def gate_status(verdict: Any, interpreted: bool, dtype: str, ok: str = "") -> tuple[str, str]:
    """A gated case's status and reason by its ``run.correctness.Verdict``: ``ok`` (said
    ``ok``), or ``wrong`` and what failed (still measured: how fast an inexact kernel
    runs is half of the finding)."""
    if verdict.passed:
        return "ok", ok
    said = f" ({INTERPRETER_BF16_NOTE})" if interpreted and dtype == "bf16" else ""
    return "wrong", verdict.explain() + said


def case_rows(
    kind: str, method: str, case: dict[str, Any], phases: Iterable[str], **fields: Any
) -> list[Row]:
    """One ``kind`` row per phase of ``case`` (its keys that are a row's, its workload
    spec as its label), ``fields`` set."""
    from perfsuite.results.results import Row

    given = {k: v for k, v in case.items() if k in Row.__dataclass_fields__}
    if isinstance(given.get("workload"), dict):
        from perfsuite.plan.workloads import workload_label  # torch

        given["workload"] = workload_label(given["workload"])
    return [Row(kind=kind, method=method, phase=p, **given, **fields) for p in phases]


def fill(row: Row, peak: Peak, timing: Timing) -> None:
    """A measured row's memory and time columns."""
    row.peak_bytes, row.peak_abs_bytes = peak.delta, peak.absolute
    row.rss_peak_bytes, row.samples_ms = peak.rss_delta, timing.samples_ms
    if timing.samples_ms:
        row.median_ms, row.p20_ms, row.p80_ms = timing.median_ms, timing.p20_ms, timing.p80_ms


def failure(err: BaseException) -> tuple[str, str]:
    """``(status, reason)`` of a case whose measurement raised ``err``."""
    from perfsuite.method import Unavailable, Unsupported

    if isinstance(err, Unsupported):
        return "unsupported", str(err)
    if isinstance(err, Unavailable):
        return "unavailable", str(err)
    return ("oom" if is_oom(err) else "error"), describe(err)


def is_oom(err: BaseException) -> bool:
    import torch

    if isinstance(err, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and (
        "can't allocate memory" in text or "out of memory" in text.lower()
    )


def describe(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:500]


def limit_memory(extra_bytes: int) -> None:
    """Cap the data segment at what the process holds now plus ``extra_bytes``."""
    from perfsuite.measure.memory import status_kib

    current = status_kib("VmData") * 1024
    resource.setrlimit(resource.RLIMIT_DATA, (current + extra_bytes, resource.RLIM_INFINITY))


class Phase:
    """The untimed set-up and the timed body of one phase of a loss cell (``inputs``: a
    ``perfsuite.run.inputs.Inputs``, its e, c and targets)."""

    def __init__(self, name: str, loss_fn: LossFn, inputs: Any) -> None:
        self.name, self.loss_fn, self.inputs = name, loss_fn, inputs
        self.loss: torch.Tensor | None = None

    def _forward(self) -> None:
        self.loss = self.loss_fn(self.inputs.e, self.inputs.c, self.inputs.targets)

    def _backward(self) -> None:
        assert self.loss is not None
        self.loss.backward()
        self.loss = None

    def _fwd_bwd(self) -> None:
        self.loss_fn(self.inputs.e, self.inputs.c, self.inputs.targets).backward()

    def reset(self) -> None:
        """Drop the pending graph and the gradients."""
        self.loss = None
        self.inputs.clear_grads()

    def setup(self) -> None:
        self.reset()
        if self.name == "bwd":
            self._forward()

    @property
    def body(self) -> Callable[[], None]:
        return {"fwd": self._forward, "bwd": self._backward, "fwd+bwd": self._fwd_bwd}[self.name]


Spec = TypeVar("Spec")
State = TypeVar("State")
Emit = Callable[[Any], None]
Stage = Callable[[str], None]
# One case: (spec, the session's state, its index, the case dict, emit, stage).
CaseFn = Callable[[Spec, State, int, dict[str, Any], Emit, Stage], None]
# Set up before the cases and the freeze (imports, a model, a process group): yields the
# state each case gets and the emit this process writes with (a rank but the first: none).
SessionFn = Callable[[Spec, Emit], AbstractContextManager[tuple[State, Emit]]]


@dataclass(frozen=True)
class Served(Generic[Spec, State]):
    """What a kind's worker module declares (as ``WORKER``) for ``main`` to serve."""

    spec_type: type[Spec]
    run_case: CaseFn
    session: SessionFn | None = None


def serve(served: Served, spec_path: str) -> int:
    """The one worker loop over the ``served.spec_type`` JSON file at ``spec_path`` (its
    ``out``, ``cases`` and optional ``memory_limit``): a crash loses only the case in flight."""
    import torch

    from perfsuite.measure.memory import freeze_what_exists

    spec = served.spec_type(**json.loads(Path(spec_path).read_text()))
    run_case, session = served.run_case, served.session or holding(lambda spec: None)
    with emitter(spec.out) as out, session(spec, out) as (state, emit):
        freeze_what_exists()  # and what the session imported
        limit = getattr(spec, "memory_limit", None)
        if limit is not None:
            limit_memory(limit)
        for i, raw in enumerate(spec.cases):  # type: ignore[attr-defined]
            emit({"start": i})
            run_case(spec, state, i, raw, emit, lambda text, i=i: emit({"stage": text, "case": i}))
            gc.collect()
            if torch.cuda.is_initialized():
                torch.cuda.empty_cache()
    return 0


def holding(make: Callable[[Any], Any]) -> SessionFn:
    """A session whose state is ``make(spec)`` (the method measured, say), nothing to
    tear down."""

    @contextmanager
    def session(spec: Any, emit: Emit) -> Iterator[tuple[Any, Emit]]:
        yield make(spec), emit

    return session


def main(argv: list[str]) -> int:
    """``MODULE SPEC.json``: MODULE's ``WORKER`` served on the spec (``python_worker``)."""
    return serve(importlib.import_module(argv[0]).WORKER, argv[1])
