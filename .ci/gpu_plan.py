"""What ``.ci/gpu-run`` runs: the GPU checklist as steps, each with a time estimate, where
that estimate comes from, and a hard limit; and which steps each device call runs.

A task lent a GPU has 15 minutes of device time in all, every start (minutes when cold),
idle wait and transfer counted, at most 10 minutes a command. So call 1 holds what matters
most, in at most 7 minutes of device time: the kernel's CUDA tests at Gemma2-2B; the kernel
candidates at the Gemma2-2B cell the kernel's targets are stated at (ours, the route the
rule does not pick, ours-cublas and torch-compile, fwd+bwd, β 0 and 0.1), each profiled
with ``--timer kernels`` and with ``--timer graph`` (``--profile``: a trace and a
breakdown each), so one call picks the faster route (kernels/routes.py); ``kernel-report
--baseline`` under the device's Triton; then the peers of the README's table (ours-fused,
liger, cce, eager) while time is left. The profile and kernel-report steps run only where
this tree's ``perfsuite`` offers their options (checked on the device, at run time). Call 2
runs the rest of today's checklist in whatever time is left (its ``--limit``); calls 3 and
4 the older checklist's other steps, for a session with more time. ``--device cpu`` builds
the rehearsal: the same steps at tiny sizes.

Estimates are seconds on a GPU. Call 1's and call 2's come from the H200 run of
2026-11-28 at commit 45f5417 (``reports/nvidia-h200/raw/``; "H200 <folder>/<file>"
below): each ``*.manifest.json``'s step seconds,
and within a step the time stamps of its log between one method's worker start and its
last cell. The older steps' come from the H100's first light
(``reports/nvidia-h100-80gb-hbm3/raw/*/``: the time stamps of ``run.log``, ``rerun.log``
and ``rest.log`` between one method's last cell and the next, the pytest summaries, the
sensitivity file's ``collect_s``); steps never run on a GPU say so and how they were
guessed.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# Call 1 in the order that matters if it is cut short: is the kernel right (k), the
# candidates at the targets' cell (g), where their time goes, per kernel (pk) and as one
# captured graph (pg), what the device's Triton builds (r), the peers beside them (h).
# Call 2, today's remaining checklist in priority order: the TMA path's candidate configs
# beside both routes in one process (t: the pinned slice build awaits its timing), ours
# with idle gaps and back to back (s: the power cap), a whole training step (9b), the
# multi-rank harness on one rank (9a), the regression threshold's false-alarm rate (6),
# the slice backward's tile sweep (8b). Calls 3 and 4, for a session with more time: every
# other method at Gemma2-2B, ours' determinism across budgets and its budget curve, the
# nightly path on those results (CPU-side: runnable here too); the synthetic and trained
# workloads, the CUDA test folders, converge, the training terms.
CALLS = {
    "1": ["0a", "k", "g", "pk", "pg", "r", "h"],
    "2": ["0a", "t", "s", "9b", "9a", "6", "8b"],
    "3": ["0a", "1a", "1b", "1c", "1d", "2a", "2b", "7a", "7b", "7c", "7d", "7e"],
    "4": ["0a", "0b", "3a", "4", "5", "8a", "3b"],
}
CALLS["all"] = list(dict.fromkeys([s for c in "1234" for s in CALLS[c]] + ["8c", "8d"]))

# Call 1 may take 7 minutes of device time. Its command gets that less ~20 s for sending
# the tree (~25 MiB with .whl/) and fetching three files back: a guess, no call has timed
# its transfers. Other calls: the tool's 10-minute cap less 30 s; call 2 gets `--limit`
# from `status`'s budget_left_s (docs/gpu.md).
DEVICE_BUDGET_S = {"1": 420.0}
TRANSFERS_S = 20.0
CALL_LIMITS_S = {call: budget - TRANSFERS_S for call, budget in DEVICE_BUDGET_S.items()}
DEFAULT_LIMIT_S = 570.0
# The wrapper's offline pip install of .whl/ before the first step: on the H200 the first
# step started 2.0 s and 0.8 s after the wrapper's start (reports/nvidia-h200/raw/,
# 1-cell-tests/manifest-items.json and 3-step-tp-sensitivity-tiles/manifest-2.json: the
# first step's started_s), the rehearsal's 2.9 s and 5.3 s
# (reports/gpu-rehearsal, manifest-2.json and manifest-1.json); the slowest, rounded up.
WHEELS_S = 6.0


def _routes(root: Path):
    """kernels/routes.py, read by path: pure Python, so the plan imports no torch."""
    spec = importlib.util.spec_from_file_location("_gpu_plan_routes", root / "kernels/routes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_ROUTES = _routes(Path(__file__).resolve().parents[1])
# The route ablation method of the route the rule does not pick on the targets' device
# (an H100 or H200: sm_90, bf16); ours runs the one it picks.
OTHER_ROUTE = _ROUTES.method_for(_ROUTES.other_route(_ROUTES.route_for("sm_90", "bf16")))
# The kernel candidates at the cell the kernel's targets are stated at (Gemma2-2B bf16,
# softcap 30, β 0 and 0.1, fwd+bwd): ours, the other route, the torch-ops probe of the
# cuBLAS route and the targets' yardstick (issue 44 item 5, issue 45 item 3).
CANDIDATES = f"ours,{OTHER_ROUTE},ours-cublas,torch-compile"
# The README table's peers at the same cell, and ours' fused form, last in call 1.
CELL_PEERS = "ours-fused,liger,cce,eager"
CELL_METHODS = f"{CANDIDATES},{CELL_PEERS}"
# Where the time goes, at the targets' β: per kernel for every candidate; as one captured
# graph for both routes (the H200's captured torch-compile already: 53.8 ms, H200
# 2-profile-kernel-report/gemma2-2b-graph.json; ours-cublas's torch ops are a probe).
PROFILED_KERNELS = CANDIDATES
PROFILED_GRAPH = f"ours,{OTHER_ROUTE}"
KERNEL_BASELINE = "reports/kernel-report/baseline"
# Issue 18 item 1's methods (issue 18 and `perfsuite methods`), in three groups.
GEMMA_GROUPS = {
    "1a": ("gemma-ours", "ours,ours-fused,ours-tiles,ours-tiles-list"),
    "1b": ("gemma-peers", "cce,cce-no-filter,torch-compile,liger,eager"),
    "1c": (
        "gemma-rest",
        "ours-tiles-sort,ours-tiles-no-sort,ours-cublas,torchtune-chunked,torch-native,quack",
    ),
}
# The multi-rank harness on one GPU (call 2): ours and the two frameworks' own losses, at
# β 0: megatron and torch-parallel refuse label smoothing (H200
# 3-step-tp-sensitivity-tiles/9a-tp1.log: at β 0.1 both were unsupported, so nothing but
# ours could be measured).
TP1 = "ours,megatron,torch-parallel"
TP1_BETA = "0"
# A whole training step (call 2): the methods whose patch or loss runs on CUDA.
STEP = "ours,eager,torch-compile,liger,cce"
# The training terms beside plain ours (call 4).
TERMS = "ours,ours-zloss,ours-weighted"
# Item 3's rows: ours, the tile ablation (ours-tiles-no-sort left out: it differs from
# ours-tiles-sort only in speed, and item 1 times it), the peers that filter or not.
ABLATION = "ours,ours-tiles,ours-tiles-list,ours-tiles-sort,cce,cce-no-filter,liger"
# Sensitivity: with 0 false alarms in n trials the Wilson 95 % upper bound
# (sensitivity.rate_bounds) is z²/(n + z²): < 2 % needs n >= 189; with one false
# alarm it needs n >= 280. A trial pairs two different processes in one round:
# P·(P-1)·R trials, so 5 processes x 14 rounds = 280 (the first light had 3 x 6 = 36, < 9.6 %).
SENS_PROCESSES, SENS_ROUNDS = 5, 14


class Skip(Exception):
    """A step that cannot run here (no CUDA, an input missing); the message says why."""


@dataclass
class Step:
    id: str
    item: str  # issue 18's item (0: setup); the id itself for call 1's steps
    name: str
    what: str
    estimate_s: float
    limit_s: float
    source: str
    argv: list[str] | Callable[[Path], list[str]]
    needs: tuple[str, ...] = ()  # files in the work folder an earlier step writes
    stdout: str | None = None  # the command's stdout to this file, not the log
    env: dict[str, str] = field(default_factory=dict)

    def command(self, work: Path) -> list[str]:
        """The command line, ``{W}`` replaced by the work folder; ``Skip`` if it cannot run."""
        missing = [n for n in self.needs if not (work / n).exists()]
        if missing:
            raise Skip(f"needs {', '.join(missing)} (an earlier step's), not there")
        argv = self.argv(work) if callable(self.argv) else self.argv
        return [a.replace("{W}", str(work)) for a in argv]


def select(steps: list[Step], wanted: list[str]) -> list[Step]:
    """Steps by id (``3b``) or item number (``3``), in the order given."""
    out: list[Step] = []
    for w in (w.strip() for w in wanted if w.strip()):
        found = [s for s in steps if w in (s.id, s.item)]
        if not found:
            raise SystemExit(f"no step {w!r}: ids are {', '.join(s.id for s in steps)}")
        out += [s for s in found if s not in out]
    return out


def _trained(root: Path, given: Path | None) -> Path | None:
    if given is not None:
        return given if given.exists() else None
    # The committed dump (issue 21: perfsuite workload train), else any under workloads/.
    found = sorted((root / "reports" / "filtering").glob("trained-*.safetensors"))
    found += sorted((root / "reports" / "workloads").glob("*.safetensors"))
    return found[0] if found else None


# id: (estimate on a GPU, its limit, estimate in the CPU rehearsal, its limit, where the
# GPU estimate comes from). The rehearsal's: as measured on this project's shared 2-core CPU,
# with limits that leave room for its load (a step took 2.5x longer there on a busy hour).
# Call 1's methods, from the H200's logs (worker start to the method's last row):
# 1-cell-tests/g-gemma-cell.log: ours 22 s, ours-fused 12, torch-compile 21,
# liger 27, cce 19, and the step's 107.9 s less those 101 s: 7 s of parent;
# 5-eager-cce-no-filter/eager-cce-no-filter.log: eager 12 s;
# 4-ours-kernels-timer/ours-kernels-timer.log (--timer kernels --profile, β 0.1) ours 24 s;
# 2-profile-kernel-report/p-gemma-profile.log (--timer graph --profile, β 0.1) ours refused
# its capture in 5 s, torch-compile 10 s, the step's 18.1 s less those: 3 s of
# `run --help` and parent.
ESTIMATES = {
    "0a": (8, 60, 10, 60, "H200 1-cell-tests/manifest-items.json 0a: 5.5 s, "
           "3-step-tp-sensitivity-tiles/manifest-2.json's: 2.1 s "
           "(rehearsal on CPU: 1.7-1.8 s)"),
    "k": (30, 150, 30, 120, "H200 1-cell-tests/manifest-items.json k: 28.2 s (every test ran: "
          "9 passed, 5 errors at teardown)"),
    "g": (95, 200, 90, 240, "H200 1-cell-tests/g-gemma-cell.log (2 β, 20 samples): ours 22 s, "
          "torch-compile 21 s, parent 7 s; never ran on a GPU: the other route, as ours 22 s "
          "(its two epilogue kernels compile as ours' slice kernel does), ours-cublas 20 s "
          "(no Triton compile: ours-fused's 12 s with ours' kernels built, +4 s a β for its "
          "torch ops over fp32 slices, taken as twice ours' ~0.08 s a call)"),
    "pk": (95, 180, 60, 240, "H200 4-ours-kernels-timer/ours-kernels-timer.log: ours 24 s; "
           "never ran: the other "
           "route as ours 24 s, ours-cublas 30 s (its ~2,400 more launches a call profiled), "
           "torch-compile 10 s (its graph cell in "
           "2-profile-kernel-report/p-gemma-profile.log, compiles cached); "
           "parent and `run --help` 7 s (as g)"),
    "pg": (55, 150, 30, 240, "H200 2-profile-kernel-report/p-gemma-profile.log: "
           "3 s of `run --help` and parent; "
           "ours and the other route, once they capture, 24 s each (ours' kernels-timer cell; "
           "a refused capture took 5 s)"),
    "r": (17, 150, 60, 300, "H200 2-profile-kernel-report/manifest-items.json r: 12.3 s "
          "for the 32 builds of the 3.6.0 baseline; it now holds 44 (the 12 TMA builds): "
          "12.3 s x 44/32"),
    "h": (80, 150, 30, 240, "H200 1-cell-tests/g-gemma-cell.log: "
          "ours-fused 12 s, liger 27 s, cce 19 s, "
          "parent 7 s; 5-eager-cce-no-filter/eager-cce-no-filter.log: eager 12 s"),
    "0b": (10, 60, 15, 90, "first light methods.txt: seconds"),
    "1a": (130, 240, 30, 240, "raw/6 run.log: ours-tiles-list (then 'ours') 29 s, ours-tiles "
           "('ours-no-filter') 26 s, ours-fused (its tile version) 37 s, both β and three "
           "phases; the slice backward ('ours' now) never ran on a GPU: taken as 30 s; +8 s"),
    "1b": (190, 300, 40, 240, "raw/6 run.log: cce 28 s, torch-compile 32 s, liger 49 s, eager "
           "30 s; raw/7 rest.log: cce-no-filter <= 45 s; +6 s parent"),
    "1c": (90, 180, 35, 240, "raw/6 run.log: ours-tiles-sort ('ours-sort') 18 s, "
           "ours-tiles-no-sort 19 s; ours-cublas never ran: taken as 15 s (cuBLAS and torch "
           "ops); raw/7 rest.log: "
           "torchtune-chunked 23 s; torch-native "
           "unavailable on torch 2.11, quack unsupported with a softcap: no worker"),
    "1d": (10, 60, 20, 120, "two perfsuite imports"),
    "2a": (45, 120, 25, 120, "new: 12 fwd+bwd of <= 0.2 s (first light's slowest ours) + "
           "Triton compiles + the process's start"),
    "2b": (30, 120, 25, 120, "new: 4 budgets x 13 fwd+bwd of <= 0.2 s + compiles + start"),
    "3a": (150, 280, 45, 240, "raw/7 rerun.log (fwd+bwd only): ours-tiles-list 29 s, ours-tiles "
           "17 s, cce 20 s, liger 38 s; ours, ours-tiles-sort, cce-no-filter ~20 s; --samples 10 "
           "trims each; +6 s parent"),
    "3b": (80, 150, 30, 240, "as 3a, at the dump's (smaller) size"),
    "4": (90, 200, 30, 180, "raw/1, 2, 4-6 tests.log: 40-73 s with -n 8"),
    "5": (110, 240, 150, 480, "never run on a GPU: 4 runs of 400 steps of 4,096 tokens "
          "(V=32768, 4 layers) at ~25 s each with the worker's start"),
    "6": (100, 200, 60, 300, "first light sensitivity-cuda.json: 3 processes x 6 rounds "
          "collected in 38 s (~7 s a process's start, ~0.7 s a round): 5 x (7 + 14 x 0.7) + "
          "calibration"),
    "8a": (60, 150, 30, 240, "never run on a GPU: 3 methods x 2 β, fwd+bwd, 10 samples; "
           "first light's ours ~15 s a β with its compiles, +6 s parent"),
    "8b": (150, 200, 20, 150, "never run: 8 slice configs + 3 weighted at ~12 s each (a Triton "
           "compile and do_bench's 60 ms), the step's own --budget-s 140 stops it"),
    "t": (45, 120, 20, 120, "reports/nvidia-h200/raw/8-tma-candidates: the same step, 11 "
          "configs, best pair, cuBLAS route, portable kernels, in 36 s of wall on a fresh "
          "H200 (cold caches; 12 configs now, two of them 2 CTAs/SM); the CPU rehearsal "
          "(128x384x64, interpreted) 11 s here"),
    "s": (40, 90, 20, 60, "reports/nvidia-h200/raw/13-sustained-clocks: the same calls (30 "
          "with 0.3 s gaps, 150 back to back at ~67 ms) in 37 s of wall with the process's "
          "start, on a warm H200"),
    "8c": (60, 180, 120, 300, "never run on a GPU: converge's small preset trains 400 steps "
           "in ~25 s (its estimate, item 5), then a 4,096-row dump"),
    "8d": (90, 220, 40, 240, "never run on a GPU: 7 rows (1 + 3 filters x 2 orders at 2^-12, "
           "the grid of reports/filtering/synthetic.json), each two fp32 GEMMs of 1024 x "
           "256000 x 2304 (~1.2 TFLOP) and N x V masks; that file's 7 rows at N·V 8x smaller "
           "took 1,091 s (wall_s) on this 2-core CPU; written only at the end"),
    "8e": (40, 150, 40, 240, "never run on a GPU: as 8d on a 4,096 x 32,768 dump (N·V half "
           "of 8d's)"),
    "9a": (40, 150, 45, 240, "H200 3-step-tp-sensitivity-tiles/manifest-2.json 9a: "
           "18.1 s with ours failing at its "
           "first cell (9a-tp1.log: worker start to its error 15 s) and both peers refused "
           "at β 0.1; at β 0 the peers run: 3 launches of 1 rank (~8 s of imports and NCCL "
           "set-up each) and a Gemma2-2B bf16 reference; fwd+bwd, 5 samples of <= 0.2 s"),
    "9b": (150, 240, 60, 240, "never run on a GPU: 5 workers (~10 s of imports and a 2-layer "
           "Gemma2-2B built each), a gate step against eager in fp32, 2 + 5 steps of 8,192 "
           "tokens (~0.2 s each by FLOPs), torch.compile's compile of 2 layers ~60 s; the "
           "rehearsal (smoke model, 2 methods) ~30 s on the 2-core CPU"),
}  # fmt: skip
NIGHTLY_SOURCE = (
    "CPU-side, on small JSON files: 10-16 s each on this project's loaded 2-core CPU, nearly "
    "all of it perfsuite's import; taken as 5 s (dashboard 8 s) on the device's 16 cores"
)
for _sid, _gpu_s in (("7a", 5), ("7b", 5), ("7c", 5), ("7d", 5), ("7e", 8)):
    ESTIMATES[_sid] = (_gpu_s, 90, 20, 120, NIGHTLY_SOURCE)


def _checks_on(device: str) -> list[str]:
    """kernel_checks.py's device arguments: Gemma2-2B on the GPU, a tiny shape on CPU."""
    return [] if device == "cuda" else ["--device", "cpu", "--shape", "128,384,64"]


def _interpreted(device: str) -> dict[str, str]:
    """The CPU rehearsal runs kernel_checks.py's Triton kernels in the interpreter."""
    return {} if device == "cuda" else {"TRITON_INTERPRET": "1"}


def build_steps(device: str, py: str, root: Path, trained: Path | None = None) -> list[Step]:
    """Every step for ``device`` ("cuda": the GPU session; "cpu": the rehearsal)."""
    gpu = device == "cuda"
    ps = [py, "-m", "perfsuite"]

    def step(sid: str, name: str, what: str, argv, **kw) -> Step:
        est, limit, cpu_est, cpu_limit, source = ESTIMATES[sid]
        if not gpu:
            est, limit = cpu_est, cpu_limit
        return Step(sid, sid[0], name, what, est, limit, source, argv, **kw)

    steps = _first_call(step, device, py, root)
    steps += _steps(step, device, py, root, trained)
    steps += _nightly(step, ps, root, gpu)
    steps += _extras(step, py, gpu)
    return steps


def _first_call(step: Callable[..., Step], device: str, py: str, root: Path) -> list[Step]:
    """Call 1: the kernel's CUDA tests, the candidates' cell, their profiles, kernel-report,
    the peers' cell."""
    gpu = device == "cuda"
    ps = [py, "-m", "perfsuite"]
    # -n 0: one process (xdist's workers would each start CUDA for a handful of tests)
    tests = [py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-n", "0", "-m", "cuda"]
    tests += ["--junitxml", "{W}/cuda-tests.xml", "tests/kernels/test_cuda_checks.py"]
    if gpu:
        cell = [*ps, "run", "--device", device, "--shape", "gemma2-2b", "--softcap"]
        cell += ["--phases", "fwd+bwd", "--timeout", "120"]
        candidates, peers = CANDIDATES, CELL_PEERS
        by_kernels, by_graph = PROFILED_KERNELS, PROFILED_GRAPH
    else:  # the rehearsal: the smoke shape, a few samples (each worker costs seconds here)
        cell = [*ps, "run", "--device", device, "--shape", "smoke", "--softcap"]
        cell += ["--phases", "fwd+bwd", "--samples", "3", "--warmup", "1"]
        # ours-cublas is CUDA-only (on a CPU it is ours itself), as are liger's softcap and
        # cce: their rows would say so; the peers' step rehearses on ones that run here.
        candidates, peers = f"ours,{OTHER_ROUTE},ours-cublas,torch-compile", "ours-fused,eager"
        by_kernels, by_graph = "ours", "ours"
    profile = [*cell, "--beta", "0.1"]
    profiles = {
        timer: [*profile, "--methods", methods,
                # CUDA graphs need a GPU: the rehearsal's graph step times by kernels
                "--timer", timer if gpu else "kernels",
                "--profile", f"{{W}}/profile-{timer}", "--out", f"{{W}}/gemma2-2b-{timer}.json"]
        for timer, methods in (("kernels", by_kernels), ("graph", by_graph))
    }  # fmt: skip
    # The device's own arch in bf16, as the stored Triton 3.6.0 baseline was built here
    # (reports/kernel-report/baseline): the device's compile should give the same SASS.
    report = [*ps, "kernel-report", "--baseline", str(root / KERNEL_BASELINE)]
    report += ["--dtype", "bf16", "--arch", "sm_90a"]
    if gpu:
        report += ["--jobs", "16"]
    else:  # the rehearsal: one kernel (minutes on 2 cores else)
        report += ["--kernel", "slices", "--jobs", "2"]
    return [
        step("k", "cuda-tests", "pytest -m cuda tests/kernels/test_cuda_checks.py: the lock, "
             "the slice backward exact and bit-identical, the tile ablation race-free, fwd+bwd "
             "captured in a CUDA graph, at Gemma2-2B", tests),
        step("g", "gemma-cell", f"perfsuite run, Gemma2-2B bf16 softcap 30, β 0 and 0.1, "
             f"fwd+bwd, the determinism record: the candidates {candidates}",
             [*cell, "--beta", "0,0.1", "--methods", candidates,
              "--out", "{W}/gemma2-2b-fwdbwd.json"]),
        step("pk", "gemma-kernels", f"the same cell at β 0.1 with --timer kernels and "
             f"--profile: {by_kernels} (only if `perfsuite run` offers both)",
             _if_offered(py, root, ["run"], ("--timer", "--profile"), profiles["kernels"])),
        step("pg", "gemma-graph", f"the same cell at β 0.1 with --timer graph and --profile: "
             f"{by_graph} (only if `perfsuite run` offers both)",
             _if_offered(py, root, ["run"], ("--timer", "--profile"), profiles["graph"])),
        step("r", "kernel-report", f"perfsuite kernel-report --baseline {KERNEL_BASELINE} "
             "under the device's Triton (only if kernel-report offers --baseline)",
             _if_offered(py, root, ["kernel-report"], ("--baseline",), report)),
        step("h", "gemma-peers", f"the candidates' cell (β 0 and 0.1) for the README table's "
             f"peers and ours' fused form: {peers}",
             [*cell, "--beta", "0,0.1", "--methods", peers,
              "--out", "{W}/gemma2-2b-peers.json"]),
    ]  # fmt: skip


def _if_offered(
    py: str, root: Path, sub: list[str], options: tuple[str, ...], argv: list[str]
) -> Callable[[Path], list[str]]:
    """``argv``, or ``Skip`` naming the options ``perfsuite SUB --help`` does not list: a
    step for an option another change adds runs once that change is in the tree."""

    def build(work: Path) -> list[str]:
        missing = missing_options(py, root, sub, options)
        if missing:
            raise Skip(missing)
        return argv

    return build


def missing_options(py: str, root: Path, sub: list[str], options: tuple[str, ...]) -> str:
    """Why a step cannot run (``""``: it can): options absent from ``SUB --help``."""
    command = f"perfsuite {' '.join(sub)} --help"
    try:
        proc = subprocess.run([py, "-m", "perfsuite", *sub, "--help"], cwd=root,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"`{command}` did not answer: {err}"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"`{command}` exited {proc.returncode}: {last[:160]}"
    absent = [o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])",
                                                  proc.stdout)]  # fmt: skip
    if not absent:
        return ""
    return f"`{command}` offers no {', '.join(absent)}: not in this tree yet"


def _steps(step: Callable[..., Step], device: str, py: str, root: Path, trained) -> list[Step]:
    """Items 0-6 (item 7, the nightly path: ``_nightly``)."""
    gpu = device == "cuda"
    ps = [py, "-m", "perfsuite"]

    # The rehearsal: a tiny shape, fwd+bwd, three samples (each worker costs seconds there).
    if gpu:
        # Gemma2's softcap 30 (issues 18, 19: the targets are stated there). The first
        # light and the stored baseline ran without it (softcap null in their JSON).
        run = [*ps, "run", "--device", device, "--shape", "gemma2-2b", "--softcap"]
        run += ["--beta", "0,0.1", "--timeout", "150"]
        methods = {k: v[1] for k, v in GEMMA_GROUPS.items()}
        methods |= {"3a": ABLATION, "8a": TERMS}
    else:
        run = [*ps, "run", "--device", device, "--shape", "smoke", "--softcap", "--beta", "0"]
        run += ["--phases", "fwd+bwd", "--samples", "3", "--warmup", "1"]
        # 1c: torch-native (no softcap: unsupported) and quack (not here) show a method
        # that cannot run; one that can keeps the step's exit 0.
        methods = {"1a": "ours", "1b": "eager,cce", "1c": "ours-tiles-sort,torch-native,quack"}
        methods |= {"3a": "ours", "8a": "ours,ours-weighted"}
    ours = [py, ".ci/ours_checks.py"]
    ours_det = ["determinism", "--device", device, "--budgets", "64,16,1024" if gpu else "1,0.25"]
    ours_curve = ["curve", "--device", device]
    # β does not change the workspace: the curve is at β = 0.
    ours_curve += ["--budgets", "16,64,256,1024" if gpu else "0.25", "--beta", "0"]
    ours_curve += [] if gpu else ["--samples", "2", "--warmup", "1"]
    trials = SENS_PROCESSES * (SENS_PROCESSES - 1) * SENS_ROUNDS
    sens = ["--device", "cuda", "--processes", str(SENS_PROCESSES), "--runs", str(SENS_ROUNDS)]
    sens += ["--tokens", "2048", "--vocab", "32768", "--hidden", "1024"]
    converge = ["--preset", "small", "--dtype", "bf16"]
    if not gpu:
        converge = ["--preset", "smoke", "--steps", "3", "--beta", "0"]
    steps = [
        step("0a", "env", "GPU, driver, clocks, Python/torch/Triton, peers' versions",
             ["bash", "-c", _ENV_SCRIPT.format(py=shlex.quote(py))]),
        step("0b", "methods", "perfsuite methods: availability here", [*ps, "methods"]),
    ]  # fmt: skip
    for sid, (name, _) in GEMMA_GROUPS.items():
        out = f"{{W}}/gemma2-2b-{name.removeprefix('gemma-')}.json"
        what = f"perfsuite run, Gemma2-2B (β 0, 0.1; 3 phases): {methods[sid]}"
        steps.append(step(sid, name, what, [*run, "--methods", methods[sid], "--out", out]))
    steps += [
        step("1d", "gemma-merge", "perfsuite merge of 1a-1c into gemma2-2b.json; its report",
             _merge(py)),
        step("2a", "ours-determinism",
             "ours twice per budget and β, every gradient byte compared; across budgets too",
             [*ours, *ours_det, "--out", "{W}/ours-determinism.jsonl"]),
        step("2b", "ours-curve", "ours fwd+bwd time and peak memory over memory budgets",
             [*ours, *ours_curve, "--out", "{W}/ours-curve.jsonl"]),
        step("3a", "synthetic", f"perfsuite run --workload synthetic --entropy 2, fwd+bwd: "
             f"{methods['3a']}",
             [*run, "--workload", "synthetic", "--entropy", "2", "--phases", "fwd+bwd",
              "--samples", "10" if gpu else "3", "--methods", methods["3a"],
              "--out", "{W}/gemma2-2b-synthetic.json"]),
        step("3b", "trained", "the same rows on the trained-activation dump (if one exists)",
             _trained_run(ps, device, _trained(root, trained))),
        step("4", "cuda-tests", "pytest tests/kernels tests/baselines tests/measure",
             _tests(py, gpu)),
        step("5", "converge", "perfsuite converge: ours vs eager, bf16, β 0 and 0.1",
             [*ps, "converge", "--device", device, "--methods", "ours", *converge,
              "--out", "{W}/converge.json"]),
        step("6", "sensitivity", f"perfsuite sensitivity: {SENS_PROCESSES} processes x "
             f"{SENS_ROUNDS} rounds = {trials} trials (bound < 2 % with <= 1 false alarm)",
             [*ps, "sensitivity", "--out", "{W}/sensitivity.json",
              *(sens if gpu else ["--quick"])]),
    ]  # fmt: skip
    return steps


def _extras(step: Callable[..., Step], py: str, gpu: bool) -> list[Step]:
    """The training terms, the slice backward's tiles, the filtering study, --tp 1, step."""
    ps = [py, "-m", "perfsuite"]
    device = "cuda" if gpu else "cpu"
    if gpu:
        terms = [*ps, "run", "--device", device, "--shape", "gemma2-2b", "--softcap"]
        terms += ["--beta", "0,0.1", "--timeout", "150", "--samples", "10", "--methods", TERMS]
        train = ["--preset", "small", "--tokens", "4096"]
        study = ["--tokens", "1024", "--vocab", "256000", "--hidden", "2304", "--dtype", "bf16"]
        grid = ["--thresholds", "2^-12", "--orders", "natural,sorted"]
    else:
        terms = [*ps, "run", "--device", device, "--shape", "smoke", "--softcap", "--beta", "0"]
        terms += ["--samples", "3", "--warmup", "1", "--methods", "ours,ours-weighted"]
        train = ["--preset", "smoke", "--steps", "3", "--tokens", "64"]
        study = ["--tokens", "64", "--vocab", "512", "--hidden", "32"]
        grid = ["--thresholds", "2^-12", "--orders", "natural"]
    shape = ["--shape", "gemma2-2b", "--softcap"] if gpu else ["--shape", "smoke", "--softcap"]
    if gpu:
        train_step = ["--model", "gemma2-2b", "--layers", "2", "--seq", "4096", "--batch", "2"]
        train_step += ["--dtype", "bf16", "--beta", "0.1", "--methods", STEP, "--timeout", "180"]
        train_step += ["--samples", "5", "--warmup", "2"]
    else:
        train_step = ["--model", "smoke", "--layers", "1", "--seq", "32", "--beta", "0"]
        train_step += ["--methods", "ours,eager", "--samples", "2", "--warmup", "0"]
    tp1 = [*ps, "run", "--device", device, *shape, "--beta", TP1_BETA, "--tp", "1"]
    tp1 += ["--timeout", "150"]
    dump = "{W}/trained-small.safetensors"
    return [
        step("8a", "gemma-terms", f"perfsuite run, Gemma2-2B softcap 30, fwd+bwd: {TERMS}",
             [*terms, "--phases", "fwd+bwd", "--out", "{W}/gemma2-2b-terms.json"]),
        step("8b", "slice-tiles", "the slice backward's tile configs, plain and weighted "
             "(fwd+bwd, β 0.1, softcap 30)",
             [py, ".ci/kernel_checks.py", *_checks_on(device), "slices",
              "--kinds", "random", "--budget-s", "140"],
             stdout="slice-tiles.jsonl", env=_interpreted(device)),
        step("t", "tma-candidates", "the TMA path's configs, then the fastest pair beside "
             "both routes and the portable kernels (β 0.1, softcap 30)",
             [py, ".ci/kernel_checks.py", *_checks_on(device), "tma",
              "--kinds", "random", "--budget-s", "90"],
             stdout="tma.jsonl", env=_interpreted(device)),
        step("s", "ours-sustained", "ours with idle gaps, then back to back (β 0.1, "
             "64 MiB): a GPU at its power cap runs the second slower (beside clocks.csv)",
             [py, ".ci/ours_checks.py", "sustained", "--device", device, "--beta", "0.1",
              "--budgets", "64", *([] if gpu else ["--calls", "5", "--gap-s", "0.05"]),
              "--out", "{W}/sustained.jsonl"]),
        step("8c", "train-dump", "perfsuite workload train: converge's preset, trained on the "
             "device, dumped", [*ps, "workload", "train", "--device", device, *train,
                                "--out", dump]),
        step("8d", "filtering-gemma", "perfsuite filtering at Gemma2-2B's V and D, synthetic",
             [*ps, "filtering", "--device", device, "--workload", "synthetic", *study, *grid,
              "--out", "{W}/filtering-gemma2-2b-synthetic"]),
        step("8e", "filtering-trained", "perfsuite filtering on 8c's dump",
             [*ps, "filtering", "--device", device, "--workload", dump, *grid,
              "--out", "{W}/filtering-trained-small"], needs=("trained-small.safetensors",)),
        step("9a", "tp1", f"perfsuite run --tp 1 (the multi-rank harness, one rank) at "
             f"β {TP1_BETA}, where the peers run: {TP1}",
             [*tp1, "--phases", "fwd+bwd", "--samples", "5", "--methods", TP1,
              "--out", "{W}/tp1.json"]),
        step("9b", "step-gemma", f"perfsuite step, Gemma2-2B (2 layers, bf16, β 0.1): {STEP}",
             [*ps, "step", "--device", device, *train_step, "--out", "{W}/step-gemma2-2b.json"]),
    ]  # fmt: skip


_ENV_SCRIPT = """
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,clocks.mem,\
temperature.gpu,power.limit --format=csv || echo "no nvidia-smi"
{py} - <<'EOF'
import importlib.metadata as md, platform, torch
from perfsuite.plan.registry import all_methods
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
# triton, and every distribution a method declares (its provenance's).
declared = (d for m in all_methods().values() for d in m.distributions)
for name in dict.fromkeys(["triton", *declared]):
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        print(name, "not installed")
EOF
"""


def _merge(py: str) -> Callable[[Path], list[str]]:
    def argv(work: Path) -> list[str]:
        parts = [work / f"gemma2-2b-{n[6:]}.json" for n, _ in GEMMA_GROUPS.values()]
        found = [str(p) for p in parts if p.exists()]
        if not found:
            raise Skip("no results from 1a-1c")
        out = str(work / "gemma2-2b.json")
        ps = f"{shlex.quote(py)} -m perfsuite"
        merge = f"{ps} merge -o {out} {' '.join(map(shlex.quote, found))}"
        report = f"{ps} report {out} -o {work / 'gemma2-2b.md'}"
        return ["bash", "-c", f"{merge} && {report}"]

    return argv


def _trained_run(ps: list[str], device: str, path: Path | None) -> Callable[[Path], list[str]]:
    def argv(work: Path) -> list[str]:
        if path is None:
            raise Skip(
                "no trained-activation dump (--trained, $GPU_RUN_TRAINED or "
                "reports/filtering/trained-*.safetensors)"
            )
        methods = ABLATION if device == "cuda" else "ours"
        return [*ps, "run", "--workload", str(path), "--device", device, "--phases", "fwd+bwd",
                "--samples", "10", "--methods", methods,
                "--out", str(work / "trained.json")]  # fmt: skip

    return argv


def _tests(py: str, gpu: bool) -> Callable[[Path], list[str]]:
    def argv(work: Path) -> list[str]:
        base = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        paths = ["tests/kernels", "tests/baselines", "tests/measure"]
        if not gpu:  # the rehearsal checks the command and the paths: collecting is enough
            return [*base, "--collect-only", *paths]
        xdist = importlib.util.find_spec("xdist") is not None
        return [*base, *(["-n", "8"] if xdist else []), *paths]

    return argv


def _nightly(step: Callable[..., Step], ps: list[str], root: Path, gpu: bool) -> list[Step]:
    """Item 7: what .github/workflows/nightly-gpu.yml does, on item 1's results."""
    res = "{W}/gemma2-2b.json"
    db = "{W}/history.sqlite"
    # On CPU there is no stored baseline of the smoke shape: compare the run with itself.
    base = str(root / "reports" / "baselines") if gpu else res
    stored = sorted(str(p) for p in (root / "reports" / "baselines").glob("*/gemma2-2b.json"))
    history = (stored if gpu else []) + [res]
    res_needed = {"needs": ("gemma2-2b.json",)}
    db_needed = {"needs": ("history.sqlite",)}
    return [
        step("7a", "compare", "perfsuite compare against the stored baseline (table)",
             [*ps, "compare", base, res], **res_needed),
        step("7b", "compare-md", "the same as markdown (the nightly job's summary)",
             [*ps, "compare", base, res, "--format", "markdown"], stdout="compare.md",
             **res_needed),
        step("7c", "history-add", "history add: the stored baseline and this run",
             [*ps, "history", "add", "--db", db, *history], **res_needed),
        step("7d", "history-check", "history check -v",
             [*ps, "history", "check", "--db", db, "-v"], **db_needed),
        step("7e", "dashboard", "the static dashboard of that history",
             [*ps, "dashboard", "--db", db, "-o", "{W}/dashboard"], **db_needed),
    ]  # fmt: skip
