"""The runner behind ``.ci/gpu-run``: one device call's steps of the GPU checklist, in
priority order, under one time limit (see ``.ci/gpu-run``'s header for how to call it).

Every step is a command with a stated time estimate (``gpu_plan.py`` says where each comes
from) and its own hard limit. Before a step starts, its estimate is checked against the time
left: a step that would not finish is *refused* (not started) and the next, smaller ones
still get their chance. A step that runs past its limit, or past the call's, gets SIGTERM
(``perfsuite run`` keeps its finished cells on it), then SIGKILL. Each step's output lands in
the work folder as it is written, and after every step (and every ``PACK_EVERY_S`` seconds
meanwhile) the work folder is packed into ``$OUT/gpu-run-<call>.tgz`` next to
``manifest-<call>.json`` (what ran, what was refused or skipped, and why) and
``gpu-run-<call>.log``, so a call cut short still returns what it measured. The device
tool returns at most 8 files from ``$OUT``: these three.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_plan import (  # noqa: E402
    CALL_LIMITS_S,
    CALLS,
    DEFAULT_LIMIT_S,
    WHEELS_S,
    Skip,
    Step,
    build_steps,
    select,
)

from perfsuite.measure.clocks import start_smi_loop, stop_smi_loop  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GRACE_S = 5.0  # SIGTERM, then this long before SIGKILL
RESERVE_S = 8.0  # kept at the end of the call for the last pack and the manifest
PACK_EVERY_S = 20.0
# A file over this is left out of the packed folder (and named in the manifest): the tool
# returns no file over 16 MiB, so one large trace would otherwise lose every result.
PACK_FILE_MAX = 8 * 2**20
# The clock log: what nvidia-smi samples, and how often (5 lines a second, ~0.5 MiB/hour).
CLOCK_FIELDS = (
    "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active"
)
CLOCK_EVERY_MS = 200


def call_estimate(steps: list[Step]) -> float:
    """Seconds a call is planned to take: the wheels, its steps, the last pack."""
    return WHEELS_S + sum(s.estimate_s for s in steps) + RESERVE_S


@dataclass
class Record:
    """One step's line in the manifest."""

    id: str
    item: str
    name: str
    what: str
    estimate_s: float
    limit_s: float
    source: str
    status: str = "pending"  # pending, running, done, timed out, refused, skipped
    rc: int | None = None
    reason: str | None = None
    started_s: float | None = None  # seconds since the call's start
    seconds: float | None = None
    timeout_s: float | None = None
    files: list[str] = field(default_factory=list)


class Call:
    """The state of one call: its clock, work folder, records, log and packing."""

    def __init__(self, tag: str, work: Path, out: Path, limit_s: float, t0: float) -> None:
        self.tag, self.work, self.out, self.limit_s = tag, work, out, limit_s
        self.t0 = t0  # wall-clock start (the wrapper's, so wheel installs count)
        self.deadline = t0 + limit_s
        self.records: list[Record] = []
        self.meta: dict = {}
        self.lock = threading.Lock()
        self.dirty = True
        work.mkdir(parents=True, exist_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        self.log_path = work / f"gpu-run-{tag}.log"

    def now(self) -> float:
        return time.time() - self.t0

    def left(self) -> float:
        return self.deadline - time.time() - RESERVE_S

    def log(self, text: str) -> None:
        line = f"[{self.now():6.1f}s] {text}"
        print(line, flush=True)
        with self.log_path.open("a") as f:
            f.write(line + "\n")
        self.dirty = True

    def manifest(self) -> dict:
        steps = [asdict(r) for r in self.records]
        counts: dict[str, int] = {}
        for r in self.records:
            counts[r.status] = counts.get(r.status, 0) + 1
        big = [f"{p.relative_to(self.work)} ({p.stat().st_size / 2**20:.1f} MiB)"
               for p in sorted(self.work.rglob("*")) if _too_big(p)]  # fmt: skip
        return {**self.meta, "elapsed_s": round(self.now(), 1), "counts": counts,
                "left_out_of_pack": big, "steps": steps}  # fmt: skip

    def save(self) -> None:
        """Manifest and log into the work folder and ``$OUT``; then pack."""
        with self.lock:
            text = json.dumps(self.manifest(), indent=1)
            (self.work / f"manifest-{self.tag}.json").write_text(text)
            _atomic_write(self.out / f"manifest-{self.tag}.json", text.encode())
            if self.log_path.exists():
                _atomic_write(self.out / self.log_path.name, self.log_path.read_bytes())
            self._pack()
            self.dirty = False

    def _pack(self) -> None:
        tmp = self.out / f".gpu-run-{self.tag}.tgz.part"
        try:
            with tarfile.open(tmp, "w:gz") as tar:
                tar.add(self.work, arcname=f"gpu-run-{self.tag}", filter=_small)
            os.replace(tmp, self.out / f"gpu-run-{self.tag}.tgz")
        except OSError as err:  # a file changing under tar: the next pack gets it
            print(f"pack: {err}", flush=True)
            tmp.unlink(missing_ok=True)


def _too_big(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size > PACK_FILE_MAX
    except OSError:  # removed meanwhile
        return False


def _small(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if info.isfile() and info.size > PACK_FILE_MAX else info


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.part")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _packer(call: Call, stop: threading.Event) -> None:
    """Re-packs now and then while a long step writes, so a killed call returns it."""
    while not stop.wait(PACK_EVERY_S):
        call.dirty = True
        call.save()


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the step's process group, SIGKILL after ``GRACE_S``."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_step(call: Call, step: Step, record: Record, env: dict[str, str]) -> None:
    """Decide (skip, refuse or run) and run one step, filling ``record``."""
    left = call.left()
    try:
        argv = step.command(call.work)
    except Skip as why:
        record.status, record.reason = "skipped", str(why)
        call.log(f"{step.id} {step.name}: skipped: {why}")
        return
    if step.estimate_s > left - GRACE_S:
        record.status = "refused"
        record.reason = f"estimate {step.estimate_s:.0f} s > {max(left - GRACE_S, 0):.0f} s left"
        call.log(f"{step.id} {step.name}: refused: {record.reason}")
        return
    timeout = min(step.limit_s, left - GRACE_S)
    record.status, record.timeout_s = "running", round(timeout, 1)
    record.started_s = round(call.now(), 1)
    call.log(
        f"{step.id} {step.name}: start (estimate {step.estimate_s:.0f} s, limit {timeout:.0f} s)"
    )
    call.save()
    before = {p for p in call.work.rglob("*")}
    log_path = call.work / f"{step.id}-{step.name}.log"
    t = time.time()
    with log_path.open("ab") as log:
        stdout = (call.work / step.stdout).open("wb") if step.stdout else log
        try:
            # Its own process group (to stop it whole), not its own session: the device
            # tool ends a command's session with it, so nothing outlives a killed call.
            proc = subprocess.Popen(
                argv, cwd=ROOT, env={**env, **step.env}, stdout=stdout, stderr=log,
                stdin=subprocess.DEVNULL, process_group=0,
            )  # fmt: skip
            try:
                record.rc = proc.wait(timeout=timeout)
                record.status = "done"
            except subprocess.TimeoutExpired:
                _stop_group(proc)
                record.rc = proc.returncode
                record.status = "timed out"
                record.reason = f"stopped at its limit of {timeout:.0f} s"
            except BaseException:  # SIGTERM or Ctrl-C of the runner: the step goes too
                _stop_group(proc)
                record.status, record.reason = "timed out", "the runner was stopped"
                raise
        except OSError as err:
            record.status, record.reason = "done", f"could not start: {err}"
            record.rc = 127
        finally:
            if stdout is not log:
                stdout.close()
    record.seconds = round(time.time() - t, 1)
    record.files = sorted(
        str(p.relative_to(call.work))
        for p in call.work.rglob("*")
        if p.is_file() and p not in before
    )
    call.log(f"{step.id} {step.name}: {record.status}, rc={record.rc}, {record.seconds:.0f} s"
             + (f" ({record.reason})" if record.reason else ""))  # fmt: skip
    tail = log_path.read_text(errors="replace").splitlines()[-4:]
    for line in tail:
        print(f"    | {line[:180]}", flush=True)


def start_clock_log(call: Call) -> subprocess.Popen | None:
    """``clocks.csv`` in the work folder for the whole call: nvidia-smi's SM clock, power,
    temperature and throttle reasons every ``CLOCK_EVERY_MS``. A step's times mean little
    without them: back to back, ours held the H200's 700 W cap at ~1,530 of 1,980 MHz
    (reports/nvidia-h200/raw/13-sustained-clocks/), which the snapshots around each cell
    group do not see. None (and the manifest says why) where nvidia-smi is missing."""
    with (call.work / "clocks.csv").open("w") as out:
        proc = start_smi_loop(CLOCK_FIELDS, CLOCK_EVERY_MS, out, fmt="csv")
    call.meta["clocks"] = "not logged: no nvidia-smi" if proc is None else "clocks.csv"
    return proc


def run_call(call: Call, steps: list[Step], env: dict[str, str]) -> int:
    call.records = [
        Record(s.id, s.item, s.name, s.what, s.estimate_s, s.limit_s, s.source) for s in steps
    ]
    call.log(f"call {call.tag}: {len(steps)} steps, estimate {call_estimate(steps):.0f} s "
             f"(wheels and reserve included), limit {call.limit_s:.0f} s")  # fmt: skip
    clocks = start_clock_log(call)
    call.save()
    stop = threading.Event()
    packer = threading.Thread(target=_packer, args=(call, stop), daemon=True)
    packer.start()
    try:
        for step, record in zip(steps, call.records, strict=True):
            run_step(call, step, record, env)
            call.save()
    finally:
        stop.set()
        packer.join()
        if clocks is not None:
            stop_smi_loop(clocks)
        call.meta["finished"] = True
        call.log("call {}: {}".format(call.tag, call.manifest()["counts"]))
        call.save()
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=".ci/gpu-run", description=__doc__.split("\n\n")[0])
    p.add_argument("call", nargs="?", help=f"which call: {', '.join(CALLS)} (or give --items)")
    p.add_argument("--items", help="step ids or item numbers, comma-separated (e.g. 3b,6)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: the rehearsal (tiny shapes, CUDA-only steps skipped)")  # fmt: skip
    limits = ", ".join(f"call {c}: {s:.0f}" for c, s in CALL_LIMITS_S.items())
    p.add_argument("--limit", type=float,
                   help="seconds for the whole call, from the wrapper's start "
                   f"(default {limits}; else {DEFAULT_LIMIT_S:.0f})")  # fmt: skip
    p.add_argument("--estimate", action="append", default=[], metavar="ID=SECONDS",
                   help="override a step's estimate (tests; a re-plan after a call)")  # fmt: skip
    p.add_argument("--step-limit", action="append", default=[], metavar="ID=SECONDS",
                   help="override a step's own limit")  # fmt: skip
    p.add_argument("--out", type=Path, default=os.environ.get("OUT"), help="default $OUT")
    p.add_argument("--work", type=Path, help="work folder (default /tmp/gpu-run-<call>-<time>)")
    p.add_argument("--trained", type=Path, default=os.environ.get("GPU_RUN_TRAINED"),
                   help="a trained-activation dump for item 3b (default $GPU_RUN_TRAINED, "
                   "else reports/filtering/trained-*.safetensors)")  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    args = p.parse_args(argv)
    if not args.call and not args.items:
        p.error("name a call or --items")
    if args.call and args.call not in CALLS:
        p.error(f"unknown call {args.call!r}: one of {', '.join(CALLS)}")
    return args


def dry_run(tag: str, steps: list[Step], limit: float) -> None:
    """Each step's estimate and limit, where the estimate comes from, and the call's total."""
    total = WHEELS_S
    print(f"call {tag}: est {WHEELS_S:4.0f} s  the wheels' install (.whl/), before step 1")
    for s in steps:
        total += s.estimate_s
        print(f"{s.id:>3} {s.name:<16} est {s.estimate_s:4.0f} s  limit {s.limit_s:4.0f} s"
              f"  sum {total:4.0f} s")  # fmt: skip
        print(textwrap.fill(s.what, 78, initial_indent="      ", subsequent_indent="      "))
        print(textwrap.fill(f"from: {s.source}", 78, initial_indent="      ",
                            subsequent_indent="        "))  # fmt: skip
    total += RESERVE_S
    print(f"    reserve          est {RESERVE_S:4.0f} s  the last pack and manifest")
    fits = "fits" if total <= limit else "DOES NOT FIT"
    print(f"call {tag}: {len(steps)} steps, estimate {total:.0f} s, limit {limit:.0f} s: {fits}")


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # run_step stops the step; run_call's finally saves


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tag = args.call or "items"
    steps = build_steps(args.device, sys.executable, ROOT, args.trained)
    steps = select(steps, CALLS[args.call] if args.call else args.items.split(","))
    for attr, texts in (("estimate_s", args.estimate), ("limit_s", args.step_limit)):
        for text in texts:
            sid, _, seconds = text.partition("=")
            for s in steps:
                if s.id == sid:
                    setattr(s, attr, float(seconds))
    if args.limit is None:
        args.limit = CALL_LIMITS_S.get(args.call, DEFAULT_LIMIT_S)
    if args.dry_run:
        dry_run(tag, steps, args.limit)
        return 0
    if args.out is None:
        print("no --out and no $OUT: nowhere to put the results", file=sys.stderr)
        return 2
    t0 = float(os.environ.get("GPU_RUN_T0") or time.time())
    # A fresh folder per call: a warm machine may still hold an earlier call's files.
    work = args.work or Path(f"/tmp/gpu-run-{tag}-{int(t0)}")
    call = Call(tag, work, args.out, args.limit, t0)
    call.meta = {
        "call": tag, "device": args.device, "limit_s": args.limit, "python": sys.executable,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
        "commit": os.environ.get("GPU_RUN_COMMIT") or _git_head(), "finished": False,
        "argv": sys.argv[1:] if argv is None else argv,
    }  # fmt: skip
    wheels = os.environ.get("GPU_RUN_WHEELS_LOG")
    if wheels and Path(wheels).exists():
        shutil.copy(wheels, work / "wheels.log")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    signal.signal(signal.SIGTERM, _terminated)
    try:
        return run_call(call, steps, env)
    except KeyboardInterrupt:
        return 130


def _git_head() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


if __name__ == "__main__":
    sys.exit(main())
