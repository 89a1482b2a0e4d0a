"""The filtering study: per filter, threshold and vocabulary order, what is kept and lost
(docs/filtering.md); the ``none`` row drops nothing. It materialises N·V fp32 logits."""

from __future__ import annotations

import time
from typing import Any

import torch

from perfsuite.filtering import emulate
from perfsuite.filtering.rules import DEFAULT_THRESHOLDS
from perfsuite.filtering.stats import frequency_shares, softmax_stats
from perfsuite.method import Case
from perfsuite.run.correctness import distance, reference_outcome, tolerances, torch_error_outcome
from perfsuite.run.inputs import Inputs

# N·V: fp32 logits, softmax and masks of 256 MiB each on CPU, 1 GiB on a GPU.
MAX_ELEMENTS = {"cpu": 1 << 26, "cuda": 1 << 28}


def _errors(prefix: str, got: torch.Tensor, ref: torch.Tensor, torch_err: float, tol: float):
    diff = (got - ref).abs()
    err = float(diff.max())
    scale = float(ref.abs().max())
    out = {
        f"{prefix}_max_abs": err,
        f"{prefix}_rel_max": err / scale if scale else float("nan"),
        f"{prefix}_rel_fro": float(diff.norm() / ref.norm()) if ref.norm() else float("nan"),
        f"{prefix}_vs_torch": err / torch_err if torch_err else float("inf"),
        f"{prefix}_within_gate": bool(err <= tol),
    }
    if prefix == "grad_e":
        per_dim = diff.double().pow(2).sum(0)
        total = float(per_dim.sum())
        out["grad_e_worst_dim_share"] = float(per_dim.max()) / total if total else 0.0
    return out


class Study:
    """The fixed part of one workload's study: inputs, softmax, reference, torch's error."""

    def __init__(self, case: Case, inputs: Inputs) -> None:
        limit = MAX_ELEMENTS["cuda" if case.device == "cuda" else "cpu"]
        if case.tokens * case.vocab > limit:
            raise ValueError(
                f"N·V = {case.tokens * case.vocab:,} logits is past the study's "
                f"{limit:,} on {case.device} (it materialises them): use fewer --tokens"
            )
        self.case = case
        self.dtype = case.torch_dtype
        self.e32, self.c32 = inputs.e.detach().float(), inputs.c.detach().float()
        self.targets = inputs.targets
        self.live = self.targets != case.ignore_index
        if not bool(self.live.any()):
            raise ValueError("every target is ignored: nothing to measure")
        raw = self.e32 @ self.c32.T
        if case.softcap is None:
            self.logits, self.scale = raw, None
        else:
            t = torch.tanh(raw / case.softcap)
            self.logits, self.scale = case.softcap * t, 1 - t * t
        self.lse = torch.logsumexp(self.logits, -1)
        self.probs = torch.exp(self.logits - self.lse[:, None])
        self.reference = ref = reference_outcome(case, inputs)
        same_dtype = torch_error_outcome(case, inputs)
        self.bounds = tolerances(case.dtype, ref, same_dtype)
        self.torch_err = {q: distance(same_dtype.get(q), ref.get(q)) for q in ("grad_e", "grad_c")}

    def summary(self) -> dict[str, Any]:
        """Entropy, entries ≥ 2⁻¹², geometry and torch's own gradient errors."""
        return {
            **softmax_stats(self.e32, self.c32, self.targets, self.case.softcap),
            **frequency_shares(self.e32, self.c32),
            "torch_grad_e_max_abs": self.torch_err["grad_e"],
            "torch_grad_c_max_abs": self.torch_err["grad_c"],
            "grad_e_ref_max": float(self.reference.grad_e.abs().max()),
            "grad_c_ref_max": float(self.reference.grad_c.abs().max()),
        }

    def measure(
        self, name: str, order: str, threshold: float | None, mask: torch.Tensor | None
    ) -> dict[str, Any]:
        """One row: ``mask`` (N, V) in natural column order, or None (nothing dropped)."""
        in_tile = name in emulate.FILTERS and emulate.FILTERS[name].target_in_tile
        d = emulate.softmax_part(self.probs, self.targets, self.live, self.scale, mask, in_tile)
        # The exact fp32 sums over what is kept, rounded once to the dtype, as kernels return.
        grads = {"grad_e": d @ self.c32, "grad_c": d.T @ self.e32}
        grads = {q: g.to(self.dtype).float() for q, g in grads.items()}
        row: dict[str, Any] = {"filter": name, "order": order, "threshold": threshold}
        if mask is None:
            row["tiles_kept"] = 1.0
        kept = torch.ones(()) if mask is None else mask.float()
        lost = (self.probs * (1 - kept))[self.live].sum(1)
        row.update(entries_kept=float(kept.mean()), dropped_mass_mean=float(lost.mean()))
        row["dropped_mass_max"] = float(lost.max())
        for q, got in grads.items():
            row.update(_errors(q, got, self.reference.get(q), self.torch_err[q], self.bounds[q]))
        ref_nonzero = self.reference.grad_c.abs().amax(1) > 0
        zero = (grads["grad_c"].abs().amax(1) == 0) & ref_nonzero
        row["zero_dc_rows"] = float(zero.float().mean())
        return row

    def keep(self, name: str, order: str, threshold: float) -> tuple[torch.Tensor, dict]:
        """Entry mask (natural order) of filter ``name`` in ``order``, and its counts."""
        flt = emulate.FILTERS[name]
        perm = emulate.vocab_order(order, self.logits, self.live)
        back = None if perm is None else torch.argsort(perm)  # to natural order
        logits = self.logits if perm is None else self.logits[:, perm]
        probs = self.probs if perm is None else self.probs[:, perm]
        extra: dict[str, Any] = {}
        if name == "tile-list":
            tiles, tau = emulate.tile_list_tiles(
                logits, self.lse, self.live, threshold, self.dtype, flt
            )
            extra["rows_tau_zero"] = float((tau[self.live] == 0).float().mean())
        else:
            terms = probs
            if flt.target_in_tile:
                terms = probs.clone()
                rows = torch.nonzero(self.live).squeeze(1)
                terms[rows, self.targets[rows] if back is None else back[self.targets[rows]]] -= 1.0
            tiles = emulate.element_tiles(terms, self.live, threshold, flt)
        n, v = logits.shape
        mask = emulate.expand(tiles, n, v, flt.tile_n, flt.tile_v)
        if perm is not None:
            mask = mask[:, back]
        extra["tiles_kept"] = float(tiles.float().mean())
        return mask, extra


def run_study(
    case: Case,
    inputs: Inputs,
    thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS,
    filters: tuple[str, ...] = tuple(emulate.FILTERS),
    orders: tuple[str, ...] = emulate.ORDERS,
) -> dict[str, Any]:
    """``{"summary": ..., "rows": [...]}`` for one workload (module doc)."""
    start = time.perf_counter()
    study = Study(case, inputs)
    rows = [study.measure("none", "-", None, None)]
    for threshold in thresholds:
        above = float((study.probs[study.live] >= threshold).float().mean())
        for name in filters:
            for order in orders:
                mask, extra = study.keep(name, order, threshold)
                row = study.measure(name, order, threshold, None if bool(mask.all()) else mask)
                row.update(extra, entries_above=above)
                rows.append(row)
    summary = study.summary()
    summary["wall_s"] = round(time.perf_counter() - start, 1)
    return {"summary": summary, "rows": rows}
