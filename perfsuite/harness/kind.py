"""Cell kinds and the loop that measures them: decided cases first, then one worker after
another until every case is done (a worker that dies costs the case it was on), each
measured case's rows marked with the machine's state over it (``measure.machine``)."""

from __future__ import annotations

import queue
from collections.abc import Collection
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsuite.harness.environment import child_env
from perfsuite.harness.lifecycle import failed_record, read_json_lines, run_worker
from perfsuite.harness.progress import NoticeFn, ProgressFn, Tracker
from perfsuite.harness.schedule import run_parallel, schedule
from perfsuite.harness.scratch import scratch
from perfsuite.harness.worker import case_rows
from perfsuite.measure.machine import Watch
from perfsuite.results.provenance import gpu_state
from perfsuite.results.results import MEASURED, new_document

if TYPE_CHECKING:
    from perfsuite.harness.command import Checkpoint

Rows = list[dict[str, Any]]


def busy_label(method: str, case: dict[str, Any]) -> str:
    """How a case is named in the machine's state groups (not a shape: its fields)."""
    if not {"tokens", "vocab", "hidden", "dtype", "beta"} <= case.keys():  # a kind of other cases
        return " ".join([method, *(f"{k}={v}" for k, v in case.items())])
    tp = f" TP={case['tp']}" if case.get("tp") else ""
    size = f"N={case['tokens']} V={case['vocab']} D={case['hidden']}"
    return f"{method}{tp} {size} {case['dtype']} β={case['beta']:g}"


class Kind:
    """What a cell kind tells the harness; the defaults suit a one-process worker."""

    name: str  # one of ``results.KINDS``: stamped on every row the kind makes

    device: str = "cpu"
    jobs: int = 1  # interpreted workers at a time
    timeout_s: float = 3600.0
    per_case: bool = False  # True: the timeout restarts after each finished case
    phases: tuple[str, ...] = ()
    case_keys: tuple[str, ...] = ()  # the fields that tell one case's rows from another's
    methods: dict[str, Any]  # name -> the ``SimpleMethod`` it measures (if any)

    def decided(self, method: str, case: dict[str, Any]) -> Rows | None:
        """The rows of a case no worker is needed for, else None: the one chain of every
        kind (``skipped``: predicted not to fit, where ``oom`` is what a worker ran into)."""
        from perfsuite.tp_method import case_reason  # torch: kind.py is read without it

        m = getattr(self, "methods", {}).get(method)
        if m is None:
            return None  # a kind that measures no method: its worker decides
        chain = (
            ("unsupported", lambda: m.lacks(self.name)),
            ("unavailable", lambda: self.availability(method)),
            ("unsupported", lambda: case_reason(m, case)),
            ("skipped", lambda: self.wont_fit(method, case)),
        )
        for status, why in chain:
            reason = why()
            if reason is not None:
                return self.status_rows(method, case, self.phases, status, reason)
        return None

    def availability(self, method: str) -> str | None:
        """Why the method cannot run on this kind's device here (None: it can)."""
        return self.methods[method].availability(self.device)

    def wont_fit(self, method: str, case: dict[str, Any]) -> str | None:
        """Why the case is predicted not to fit (None: attempt it)."""
        return None

    def interpreted(self, method: str) -> bool:
        """Whether the method's worker runs Triton kernels on a CPU (the interpreter)."""
        m = getattr(self, "methods", {}).get(method)  # None: a kind of no method
        return self.device == "cpu" and m is not None and m.caps.triton

    def cost(self, method: str) -> float:
        """Relative cost of an interpreted method's worker (costliest start first)."""
        m = getattr(self, "methods", {}).get(method)
        return 1.0 if m is None else m.caps.interpreter_cost

    def work(self, method: str, case: dict[str, Any]) -> float:
        """A cell's relative time (the progress lines' model)."""
        return 1.0

    def peak(self, method: str, case: dict[str, Any]) -> int | None:
        """A cell's predicted peak bytes (None: no prediction)."""
        return None

    def beside(self) -> bool:
        """Whether interpreted workers may run beside native ones (memory allowing)."""
        return False

    def batch(self, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The cases, from the first, that one worker takes."""
        return cases

    def command(self, method: str, cases: list[dict[str, Any]], out: Path, spec: Path) -> list[str]:
        """Write the worker's spec to ``spec``; the command that runs it."""
        raise NotImplementedError

    def same(self, row: dict[str, Any], case: dict[str, Any]) -> bool:
        """Whether ``row`` is one of ``case``'s."""
        return all(row.get(k) == case.get(k) for k in self.case_keys)

    def status_rows(
        self, method: str, case: dict[str, Any], phases: Collection[str], status: str, reason: str
    ) -> Rows:
        """Unmeasured rows of ``case``'s ``phases`` that say why."""
        fields = {"status": status, "reason": reason, "interpreted": self.interpreted(method)}
        return [asdict(r) for r in case_rows(self.name, method, case, phases, **fields)]

    def finished(self, lines: Rows, cases: list[dict[str, Any]]) -> list[Rows]:
        """The rows of each finished case among ``lines``, from the first case on."""
        done = []
        for case in cases:
            mine = [r for r in lines if "phase" in r and self.same(r, case)]
            if len(mine) < len(self.phases):
                break
            done.append(mine)
        return done

    def lost(
        self, method: str, case: dict[str, Any], index: int, lines: Rows, status: str, reason: str
    ) -> Rows:
        """The rows of case ``index``, in flight when its worker died: those it wrote,
        then ``status`` and why for the phases it did not."""
        kept = [ln for ln in lines if "phase" in ln and self.same(ln, case)]  # not markers
        missing = [p for p in self.phases if p not in {r["phase"] for r in kept}]
        return kept + self.status_rows(method, case, missing, status, reason)

    def heard(self, method: str, lines: Rows) -> None:
        """Every line so far, at every poll (what a kind keeps besides rows)."""


def run_kind(
    kind: Kind,
    cases: dict[str, list[dict[str, Any]]],
    progress: ProgressFn | None = None,
    machine: list[dict[str, Any]] | None = None,
    notice: NoticeFn | None = None,
    slots: list[dict[str, str]] | None = None,
) -> dict[str, Rows]:
    """Every method's cases (``cases`` by method): those ``kind.decided`` reported first,
    the rest measured by workers in ``schedule``'s order, or dealt among ``slots``
    (environments, a GPU each) one worker per slot at a time; ``notice`` hears the progress
    lines, ``machine`` each measured case's state. The rows by method, as they came."""
    by_method: dict[str, Rows] = {method: [] for method in cases}
    pending: dict[str, list[dict[str, Any]]] = {}
    for method, method_cases in cases.items():
        for case in method_cases:
            rows = kind.decided(method, case)
            if rows is None:
                pending.setdefault(method, []).append(case)
                continue
            by_method[method] += rows
            if progress is not None:
                progress(method, case, rows)
    units = [(method, case) for method, mine in pending.items() for case in mine]
    tracker = None if notice is None else Tracker(units, notice, kind)
    slots = slots or [{}]
    n = len(slots)
    batches = [(m, mine[k::n]) for m, mine in pending.items() for k in range(min(n, len(mine)))]
    free: queue.Queue[dict[str, str]] = queue.Queue()
    for slot in slots:
        free.put(slot)

    def work(item: tuple[str, list[dict[str, Any]]]) -> None:
        method, batch = item
        slot = free.get() if n > 1 else slots[0]  # one slot: the harness's own order
        try:
            by_method[method] += run_cases(kind, method, batch, progress, machine, slot, tracker)
        finally:
            if n > 1:
                free.put(slot)

    if n > 1:
        run_parallel(batches, work, n)
    else:
        schedule(
            batches, work, interpreted=lambda item: kind.interpreted(item[0]),
            cost=lambda item: kind.cost(item[0]), jobs=kind.jobs, beside=kind.beside(),
        )  # fmt: skip
    return by_method


def run_cases(
    kind: Kind,
    method: str,
    cases: list[dict[str, Any]],
    progress: ProgressFn | None = None,
    machine: list[dict[str, Any]] | None = None,
    env: dict[str, str] | None = None,
    tracker: Tracker | None = None,
) -> Rows:
    """Every case of one method by workers, a new one after a death; ``env`` is added to
    the worker's environment (``CUDA_VISIBLE_DEVICES``). The rows as they came."""
    watch = Watch(kind.device)
    rows: Rows = []
    reported = 0  # cases told, the lost ones included

    def report(case_rows: Rows) -> None:
        nonlocal reported
        case = cases[reported]
        # Counted before it is told: a Ctrl-C inside ``progress`` (a checkpoint being
        # written) comes back for the last lines and must not repeat it.
        reported += 1
        rows.extend(case_rows)
        if any(r["status"] in MEASURED for r in case_rows):  # marked with the machine's state
            if tracker is not None:
                tracker.finished(method, case)
            state = watch.end(busy_label(method, case))
            for row in case_rows:
                row["busy"] = "; ".join(state["busy"])  # its reasons, "" when quiet
            if machine is not None:
                machine.append(state)
        if progress is not None:
            progress(method, case, case_rows)

    def on_lines(lines: Rows) -> bool:  # of the worker over ``batch`` from case ``first``
        kind.heard(method, lines)
        new = kind.finished(lines, batch)[reported - first :]
        for done in new:
            report(done)
        if tracker is not None:
            tracker.poll(method, lines)
        return bool(new)

    with scratch() as tmp:
        while reported < len(cases):  # one worker over a batch, a new one after a death
            first, batch = reported, kind.batch(cases[reported:])
            out = Path(tmp) / f"rows-{first}.jsonl"
            command = kind.command(method, batch, out, Path(tmp) / f"spec-{first}.json")
            if tracker is not None:
                tracker.worker_started(method, batch)
            try:
                interpreted = kind.interpreted(method)
                environ = {**child_env(kind.device, kind.jobs, interpreted), **(env or {})}
                ended = run_worker(
                    command, environ, out, kind.timeout_s, on_lines, interpreted, kind.per_case
                )
            finally:
                if tracker is not None:
                    tracker.worker_ended(method)
            if reported < first + len(batch):  # the case in flight died with the worker
                lines = read_json_lines(out)
                status, reason = failed_record(lines) or ended.death_reason()
                report(kind.lost(method, cases[reported], reported - first, lines, status, reason))
    return rows


def checkpointed(
    env: dict[str, Any], progress: ProgressFn | None, checkpoint: Checkpoint | None
) -> ProgressFn:
    """``progress``, then ``checkpoint`` given the case's rows: the file holds every case
    finished so far, with ``env`` (a run killed half-way keeps what it measured)."""
    if checkpoint is not None:
        checkpoint.env = env

    def report(method: str, case: dict[str, Any], rows: Rows) -> None:
        if progress is not None:
            progress(method, case, rows)
        if checkpoint is not None:
            checkpoint.add(rows)

    return report


def measure(
    kind: Kind,
    methods: list[str],
    cases: list[dict[str, Any]],
    env: dict[str, Any],
    progress: ProgressFn | None = None,
    checkpoint: Checkpoint | None = None,
    notice: NoticeFn | None = None,
) -> dict[str, Any]:
    """Every case of every method (``run_kind``), checkpointed after each; the results
    document of ``env`` (the machine's groups and, on CUDA, the GPU's state after
    added), its rows by method, then in case order (each case's in the kind's phase order)."""
    groups: list[dict[str, Any]] = []
    env["machine"] = {"groups": groups}
    report = checkpointed(env, progress, checkpoint)
    by_method = run_kind(kind, {m: cases for m in methods}, report, groups, notice)
    position = {tuple(case.get(k) for k in kind.case_keys): i for i, case in enumerate(cases)}

    def order(row: dict[str, Any]) -> tuple[int, int]:
        case = position.get(tuple(row.get(k) for k in kind.case_keys), len(cases))
        return case, kind.phases.index(row["phase"])

    rows = [row for m in methods for row in sorted(by_method[m], key=order)]
    if kind.device == "cuda":
        env["gpu_state_after"] = gpu_state()
    return new_document(env, rows)
