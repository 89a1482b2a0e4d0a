"""``perfsuite run`` of eager and ours, quiet and beside a competing load (reports/cpu-busy/).

``python reports/cpu-busy/cpu_busy_runs.py OUT_DIR [--rounds 3]`` runs, per round,
``perfsuite run`` of eager and ours at the smoke shape (β 0, fwd and fwd+bwd, 10 samples)
once as the machine is and once beside ``reports/cpu-busy/cpu_load.py`` (a busy loop pinned
on CPU 1, started a second before the run so its workers start on a busy machine, stopped
after it), writes each results file to OUT_DIR, and prints each run's medians, what other
processes used (the run's own record), and per cell the median over rounds and the
busy/quiet ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUN = [
    sys.executable, "-m", "perfsuite", "run", "--shape", "smoke", "--methods", "eager,ours",
    "--beta", "0", "--phases", "fwd,fwd+bwd", "--samples", "10", "--warmup", "2", "--force",
]  # fmt: skip
CELLS = ("eager/fwd", "eager/fwd+bwd", "ours/fwd", "ours/fwd+bwd")


def measure(out: Path, loaded: bool) -> dict[str, float]:
    """Medians (ms) by method/phase of one run, and ``others``: other processes' cores."""
    load = None
    if loaded:
        command = [sys.executable, str(HERE / "cpu_load.py"), "--cores", "1", "--seconds", "900"]
        load = subprocess.Popen(command)
        time.sleep(1.0)
    try:
        subprocess.run([*RUN, "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    finally:
        if load is not None:
            load.terminate()
            load.wait()
    doc = json.loads(out.read_text())
    result = {f"{r['method']}/{r['phase']}": r["median_ms"] for r in doc["rows"]}
    groups = doc["env"]["machine"]["groups"]
    result["others"] = statistics.mean(g["cpu"]["other_cores"] for g in groups)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, float]]] = {"quiet": [], "busy": []}
    for i in range(args.rounds):
        for kind, results in runs.items():
            result = measure(args.out / f"{kind}-{i + 1}.json", kind == "busy")
            results.append(result)
            cells = " ".join(f"{c}={result[c]:.2f}" for c in CELLS)
            print(f"round {i + 1} {kind}: {cells} (others used {result['others']:.2f} cores)")
    for cell in CELLS:
        quiet = statistics.median(r[cell] for r in runs["quiet"])
        busy = statistics.median(r[cell] for r in runs["busy"])
        ratio = busy / quiet
        print(f"{cell:14} quiet {quiet:8.2f} ms  busy {busy:8.2f} ms  busy/quiet {ratio:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
