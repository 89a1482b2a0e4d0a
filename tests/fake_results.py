"""Results documents built by hand, for tests of what reads them (report, plot, merge)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from perfsuite.results.kinds import to_disk
from perfsuite.results.results import PHASES, Row, new_document

H100_ENV = {
    "created": "2026-01-01T00:00:00Z",
    "git": {"sha": "abc", "dirty": False},
    "versions": {"torch": "2.13.0", "triton": "3.5.0"},
    "device": {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3"},
    "plan": {"methods": ["eager", "ours", "liger", "cce"], "dtypes": ["bf16"], "betas": [0.1, 0.0],
             "samples": 20, "warmup": 3, "seed": 0, "phases": list(PHASES)},
}  # fmt: skip
CPU_ENV = {**H100_ENV, "device": {"kind": "cpu", "name": "Some CPU", "cores": 2}}

# (fwd, bwd, fwd+bwd) medians in ms and peaks in MiB, from the paper's Gemma2-2B table.
GEMMA = dict(tokens=8192, vocab=256000, hidden=2304, dtype="bf16", shape="gemma2-2b")
PAPER = {
    "eager": ((41.4, 62.5, 104.9), (24000, 16000, 28000)),
    "ours": ((24.2, 49.3, 72.9), (1.1, 1163, 1164)),
    "liger": ((150.0, 5.0, 155.0), (5349, 5349, 5349)),  # grads in forward (‡)
}


def row(method: str, phase: str, status: str = "ok", ms: float | None = None,
        mib: float | None = None, kind: str = "loss", **fields: Any) -> dict[str, Any]:  # fmt: skip
    base = {**GEMMA, "beta": 0.0, "softcap": None, "device": "cuda", **fields}
    r = Row(kind=kind, method=method, phase=phase, status=status, **base)
    if status == "ok":
        r.median_ms, r.p20_ms, r.p80_ms = ms, ms * 0.99, ms * 1.01
        r.samples_ms = [ms] * 3
        r.peak_bytes = int(mib * 2**20)
    else:
        r.reason = f"{status} on purpose"
    return asdict(r)


def paper_document(env: dict[str, Any] = H100_ENV) -> dict[str, Any]:
    rows = []
    for beta in (0.1, 0.0):
        for method, (times, mems) in PAPER.items():
            for phase, ms, mib in zip(PHASES, times, mems, strict=True):
                rows.append(row(method, phase, ms=ms, mib=mib, beta=beta, entropy=2.0))
        for phase in PHASES:  # CCE has no label smoothing: N/A at beta > 0
            if beta > 0:
                rows.append(row("cce", phase, "unsupported", beta=beta))
            else:
                rows.append(row("cce", phase, ms=80.0, mib=1164, beta=beta))
    return new_document(env, rows)


def grid_document(env: dict[str, Any] = CPU_ENV) -> dict[str, Any]:
    """tokens {16, 32} x vocab {200, 300} x beta {0, 0.1}: eager and ours ok, 'broken' oom."""
    rows = []
    for tokens in (16, 32):
        for vocab in (200, 300):
            for beta in (0.0, 0.1):
                shape = dict(tokens=tokens, vocab=vocab, hidden=16, dtype="fp32", beta=beta,
                             shape=f"n{tokens}-v{vocab}-d16", device="cpu")  # fmt: skip
                size = tokens * vocab / 1000
                for phase in PHASES:
                    rows.append(row("eager", phase, ms=size, mib=size, **shape))
                    rows.append(row("ours", phase, ms=9 * size, mib=size / 4, interpreted=True,
                                    **shape))  # fmt: skip
                    rows.append(row("broken", phase, "oom", **shape))
    return new_document(env, rows)


def tp_row(method: str, tp: int | None, ms: float | None, gib: float | None,
           status: str = "ok", phase: str = "fwd+bwd", coll_share: float | None = 0.12,
           **fields: Any) -> dict[str, Any]:  # fmt: skip
    """A cell measured across ``tp`` ranks (None: one device), Gemma2-2B on the H100 unless
    ``fields`` say otherwise: ``ms`` the slowest rank's median, ``gib`` the largest peak,
    four collectives per call moving 3 MiB a rank, ``coll_share`` of the step."""
    mib = None if gib is None else gib * 1024
    kind = "loss" if tp is None else "tp"  # None: the one-device cell TP sizes are read against
    out = row(method, phase, status, ms=ms, mib=mib, kind=kind, tp=tp, **fields)
    if status == "ok" and tp is not None:
        out["collectives"], out["collective_bytes"] = 4, 3 * 2**20 * tp
        out["collective_ms"] = None if coll_share is None else ms * coll_share
    return out


def tp_document(env: dict[str, Any] = H100_ENV, sizes: tuple[int, ...] = (1, 2, 4),
                methods: tuple[str, ...] = ("torch-native", "ours"),
                **fields: Any) -> dict[str, Any]:  # fmt: skip
    """``methods`` at each TP size: time falling as K^-0.8 from 12345.6 ms (torch-native)
    or 72.9 ms, peak as K^-0.7 from 17.25 GiB."""
    base = {"torch-native": 12345.6, "ours": 72.9, "megatron": 140.2}
    rows = [
        tp_row(m, k, base.get(m, 100.0) / k**0.8, 17.25 / k**0.7, **fields)
        for m in methods
        for k in sizes
    ]
    return new_document(env, rows)


# -- malformed files: one defect each, in row 3 unless said (issue 36's table) ----------


def _set(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc["rows"][3].update(fields)


def _duplicate(doc: dict[str, Any]) -> None:
    doc["rows"][5] = copy.deepcopy(doc["rows"][3])


# (name, a defect made to the document as written, what the one error line says after
# the file's name); the rows are paper_document()'s, row 3 ours fwd at β = 0.1.
MALFORMED: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("tokens-string", _set(tokens="abc"), "row 3: tokens is 'abc', not an integer"),
    ("tokens-list", _set(tokens=[8192]), "row 3: tokens is [8192], not an integer"),
    ("beta-string", _set(beta="0.1"), "row 3: beta is '0.1', not a finite number"),
    ("status-bogus", _set(status="bogus"), "row 3: status is 'bogus', not one of 'ok', "),
    ("phase-sideways", _set(phase="sideways"),
     "row 3: phase is 'sideways', not one of 'fwd', 'bwd' or 'fwd+bwd'"),
    ("dtype-fp8", _set(dtype="fp8"), "row 3: dtype is 'fp8', not one of 'fp32', 'bf16' or "),
    ("missing-field", lambda doc: doc["rows"][3].pop("vocab"), "row 3 lacks vocab"),
    ("duplicated-cell", _duplicate, "row 5: the same cell as row 3 (ours N=8192 "),
    ("median-nan", _set(median_ms=float("nan")),
     "row 3: median_ms is nan, not a finite number >= 0"),
    ("v2-row-without-kind", lambda doc: doc["rows"][3].pop("kind"), "row 3 lacks kind"),
    # One rule for every reader (issue 46): `history add` stored it, `report` printed a
    # blank line, `plot` said two lines without `error:`; `compare` refused it.
    ("no-rows", lambda doc: doc["rows"].clear(), "holds no rows (no cell was written to it)"),
]  # fmt: skip


def malformed_text(mangle: Callable[[dict[str, Any]], None], version: int = 2) -> str:
    """paper_document() as a version 1 or 2 file would hold it, with ``mangle``'s defect."""
    document = to_disk(paper_document())
    if version == 1:  # flat rows, no kind: every file written before version 2
        document = {**paper_document(), "schema_version": 1}
        document["rows"] = [{k: v for k, v in r.items() if k != "kind"} for r in document["rows"]]
    mangle(document)
    return json.dumps(document)
