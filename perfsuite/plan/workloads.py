"""What the kernel is fed: random inputs (a nearly flat softmax), a synthetic workload
peaked and Zipf-like as a trained LM's, or a ``.safetensors``/``.pt`` dump of ``e``,
``c``, ``targets`` and optionally ``softcap`` (docs/filtering.md)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch

from perfsuite.baselines.torch_methods import softcapped as _softcapped
from perfsuite.plan.geometry import embed

FILE_SUFFIXES = (".safetensors", ".pt", ".pth")
DEFAULT_ENTROPY = 2.0  # nats: the order of a trained LM's mean next-token entropy on text
DEFAULT_ZIPF = 1.0  # Zipf's law exponent of word/token frequencies
CALIBRATION_ROWS = 256
REQUIRED = ("e", "c", "targets")
# Rows per chunk when a pass over the N x V logits must not hold all of them.
_CHUNK_ELEMENTS = 1 << 24


class WorkloadError(ValueError):
    """A workload that cannot be used, named precisely."""


def parse_workload(
    text: str | None, entropy: float | None = None, zipf: float | None = None
) -> dict[str, Any] | None:
    """``--workload`` / ``--entropy`` / ``--zipf`` to a spec; ``None`` is plain random inputs."""
    if text is None and entropy is None and zipf is None:
        return None
    if text is None or text == "synthetic":
        for flag, value, unit in (("--entropy", entropy, " nats"), ("--zipf", zipf, "")):
            # ``not x >= 0`` also refuses NaN; infinity would only give error rows.
            if value is not None and not (value >= 0 and math.isfinite(value)):
                raise WorkloadError(f"{flag} must be a finite number >= 0{unit}, got {value:g}")
        return {
            "kind": "synthetic",
            "entropy": DEFAULT_ENTROPY if entropy is None else float(entropy),
            "zipf": DEFAULT_ZIPF if zipf is None else float(zipf),
        }
    if entropy is not None or zipf is not None:
        raise WorkloadError(f"--entropy/--zipf shape the synthetic workload, not --workload {text}")
    if text == "random":
        return None
    path = Path(text)
    if path.suffix in FILE_SUFFIXES or path.exists():
        if not path.is_file():
            raise WorkloadError(f"--workload {text}: no such file")
        if path.suffix not in FILE_SUFFIXES:
            raise WorkloadError(f"--workload {text}: expected a {' or '.join(FILE_SUFFIXES)} file")
        spec = {"kind": "file", "path": str(path.resolve())}
        file_info(spec)  # validate now, before any worker starts
        return spec
    raise WorkloadError(
        f"--workload {text!r}: not random, synthetic, or a {'/'.join(FILE_SUFFIXES)} file"
    )


def workload_label(spec: dict[str, Any] | None) -> str:
    """The short name rows carry: ``random``, ``synthetic(H=2,zipf=1)``, ``file:NAME``."""
    if not spec or spec.get("kind", "random") == "random":
        return "random"
    if spec["kind"] == "synthetic":
        return f"synthetic(H={spec['entropy']:g},zipf={spec['zipf']:g})"
    return f"file:{Path(spec['path']).name}"


def row_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of ``softmax(logits)`` along the last dimension, in fp32."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def _chunk_rows(vocab: int) -> int:
    return max(1, _CHUNK_ELEMENTS // max(vocab, 1))


@torch.no_grad()
def mean_entropy(
    e: torch.Tensor,
    c: torch.Tensor,
    softcap: float | None = None,
    targets: torch.Tensor | None = None,
    ignore_index: int = -100,
) -> float:
    """Mean over (non-ignored) tokens of the entropy of ``softmax(softcap(e @ cᵀ))``,
    computed in fp32 a block of rows at a time (never the whole N x V)."""
    total, count = 0.0, 0
    cf = c.detach().float()
    step = _chunk_rows(c.shape[0])
    for start in range(0, e.shape[0], step):
        h = row_entropy(_softcapped(e[start : start + step].detach().float() @ cf.T, softcap))
        if targets is not None:
            h = h[targets[start : start + step] != ignore_index]
        total += float(h.double().sum())
        count += h.numel()
    return total / count if count else float("nan")


def zipf_log_prior(vocab: int, exponent: float, generator: torch.Generator) -> torch.Tensor:
    """log π over the vocabulary: π(v) ∝ 1/rank(v)^s, ranks a seeded random permutation
    (token ids carry no frequency order, so vocab sorting has real work to do)."""
    ranks = torch.randperm(vocab, generator=generator) + 1
    logits = -exponent * ranks.double().log()
    return torch.log_softmax(logits, 0).float()


def check_synthetic(entropy: float, vocab: int, hidden: int) -> None:
    """Refuse, when planning, a synthetic workload the shape cannot carry."""
    if hidden < 2:
        raise WorkloadError("the synthetic workload needs hidden >= 2 (one direction is the prior)")
    if not 0 <= entropy <= math.log(vocab):
        raise WorkloadError(
            f"--entropy {entropy:g} is outside [0, log V = {math.log(vocab):.2f}] nats "
            f"for V={vocab}"
        )


def synthetic_inputs(
    tokens: int,
    vocab: int,
    hidden: int,
    *,
    entropy: float = DEFAULT_ENTROPY,
    zipf: float = DEFAULT_ZIPF,
    softcap: float | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    geometry: str = "trained",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
    """fp32 ``(e, c, targets, info)`` whose softmax has mean entropy ≈ ``entropy`` nats.
    One direction carries the prior (geometry.py), the others ``a·(ĉ_k + noise)`` for a
    token ``k`` drawn from π: logits linear in ``a``, calibrated by root finding."""
    check_synthetic(entropy, vocab, hidden)
    device = torch.device(device)
    gen = torch.Generator().manual_seed(seed)
    log_prior = zipf_log_prior(vocab, zipf, gen)
    body = torch.randn(vocab, hidden - 1, generator=gen) / (hidden - 1) ** 0.5
    predicted = torch.multinomial(log_prior.exp(), tokens, replacement=True, generator=gen)
    direction = body[predicted] / body[predicted].norm(dim=1, keepdim=True).clamp_min(1e-6)
    noise = torch.randn(tokens, hidden - 1, generator=gen) / (hidden - 1) ** 0.5
    structure = direction + noise  # e[:, 1:] = a * structure

    # Calibrate on a sample of rows: logits(a, γ) = a·(structure @ bodyᵀ) + γ·log π.
    sample = torch.randperm(tokens, generator=gen)[: min(tokens, CALIBRATION_ROWS)]
    body_dev, prior_dev = body.to(device), log_prior.to(device)
    part = structure[sample].to(device) @ body_dev.T

    def h(a: float, gamma: float) -> float:
        logits = _softcapped(a * part + gamma * prior_dev, softcap)
        return float(row_entropy(logits).mean())

    from scipy.optimize import brentq  # both entropies fall monotonically in a and γ

    prior_entropy = h(0.0, 1.0)
    if entropy <= prior_entropy:
        gamma = hi = 1.0
        while h(hi, gamma) > entropy and hi < 1e4:
            hi *= 2
        sharp = h(hi, gamma) > entropy  # sharper than reachable: the sharpest tried
        a = hi if sharp else brentq(lambda x: h(x, gamma) - entropy, 0.0, hi, xtol=1e-6)
    else:  # flatter than the prior: weaken it (γ = 0 is uniform, log V)
        a = 0.0
        gamma = brentq(lambda g: h(0.0, g) - entropy, 0.0, 1.0, xtol=1e-6)

    e, c, placed = embed(
        structure, body, log_prior, a, gamma, geometry=geometry, seed=seed, centre=softcap is None
    )
    e, c = e.to(device), c.to(device)
    targets = torch.empty(tokens, dtype=torch.long, device=device)
    sampler = torch.Generator(device=device).manual_seed(seed + 1)
    step = _chunk_rows(vocab)
    with torch.no_grad():
        for start in range(0, tokens, step):
            probs = torch.softmax(_softcapped(e[start : start + step] @ c.T, softcap), -1)
            targets[start : start + step] = torch.multinomial(probs, 1, generator=sampler)[:, 0]
    info = {
        "target_entropy": entropy,
        "zipf": zipf,
        "sharpness": a,
        "prior_weight": gamma,
        "prior_entropy": prior_entropy,
        "log_prior": log_prior,
        **placed,
    }
    return e, c, targets, info


def read_dump(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``{"e", "c", "targets", "softcap"}`` from a dump, validated (``WorkloadError``)."""
    path = str(path)
    if not Path(path).is_file():
        raise WorkloadError(f"{path}: no such file")
    softcap: Any = None
    if path.endswith(".safetensors"):
        from safetensors import safe_open

        try:
            with safe_open(path, framework="pt") as f:
                tensors = {k: f.get_tensor(k) for k in f.keys()}
                softcap = (f.metadata() or {}).get("softcap")
        except Exception as err:  # noqa: BLE001 - SafetensorError's home moved across versions
            raise WorkloadError(f"{path}: not a readable safetensors file ({err})") from None
    else:
        try:
            tensors = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - any unpickling failure is a bad file
            raise WorkloadError(f"{path}: not a readable torch file ({err})") from None
        if not isinstance(tensors, dict):
            raise WorkloadError(
                f"{path}: expected a dict of tensors, found {type(tensors).__name__}"
            )
    if "softcap" in tensors:
        softcap = tensors.pop("softcap")
    missing = [k for k in REQUIRED if k not in tensors]
    if missing:
        raise WorkloadError(
            f"{path}: missing tensor(s) {', '.join(missing)}; a workload file holds e (N x D), "
            f"c (V x D), targets (N) and optionally softcap; "
            f"found {', '.join(sorted(tensors)) or 'none'}"
        )
    e, c, targets = (tensors[k] for k in REQUIRED)
    for name, t in (("e", e), ("c", c), ("targets", targets)):
        if not isinstance(t, torch.Tensor):
            raise WorkloadError(f"{path}: {name!r} is a {type(t).__name__}, not a tensor")
    if e.dim() != 2 or c.dim() != 2:
        raise WorkloadError(
            f"{path}: e and c must be 2-D (N x D, V x D), "
            f"got e {tuple(e.shape)}, c {tuple(c.shape)}"
        )
    if e.shape[1] != c.shape[1]:
        raise WorkloadError(
            f"{path}: hidden sizes disagree: e is {tuple(e.shape)} (D={e.shape[1]}) but c is "
            f"{tuple(c.shape)} (D={c.shape[1]})"
        )
    if targets.dim() != 1 or targets.shape[0] != e.shape[0]:
        raise WorkloadError(
            f"{path}: targets must be 1-D with one id per row of e (N={e.shape[0]}), "
            f"got shape {tuple(targets.shape)}"
        )
    if targets.dtype.is_floating_point or targets.dtype == torch.bool:
        raise WorkloadError(f"{path}: targets must be integer token ids, got {targets.dtype}")
    if not e.dtype.is_floating_point or not c.dtype.is_floating_point:
        raise WorkloadError(f"{path}: e and c must be floating point, got {e.dtype}, {c.dtype}")
    for name, bad in (("e", (~e.isfinite()).sum()), ("c", (~c.isfinite()).sum())):
        if bad:
            raise WorkloadError(f"{path}: {name} holds {bad} NaN/inf value(s); no loss is defined")
    valid = targets[targets != -100]
    if not valid.numel():
        raise WorkloadError(f"{path}: every target is -100 (ignored): no tokens, no mean loss")
    if int(valid.min()) < 0 or int(valid.max()) >= c.shape[0]:
        raise WorkloadError(
            f"{path}: target ids must lie in [0, V={c.shape[0]}) or be -100 (ignored); "
            f"found {int(valid.min())}..{int(valid.max())}"
        )
    if softcap is not None:
        try:  # a string (safetensors' metadata) or a one-element tensor
            softcap = float(softcap.item() if isinstance(softcap, torch.Tensor) else softcap)
        except (TypeError, ValueError, RuntimeError):
            raise WorkloadError(f"{path}: 'softcap' is not a number: {softcap!r}") from None
        if not softcap > 0:
            raise WorkloadError(f"{path}: 'softcap' must be positive, got {softcap:g}")
    return {"e": e, "c": c, "targets": targets.long(), "softcap": softcap}


_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def file_info(spec: dict[str, Any], vocab: object = None, hidden: object = None) -> dict[str, Any]:
    """N, V, D, dtype and softcap of a file workload (validates the whole file); a ``vocab``
    or ``hidden`` the user gave too is refused: the file fixes them."""
    if vocab or hidden:
        raise WorkloadError("a file workload fixes V and D; only --tokens (up to its N) applies")
    dump = read_dump(spec["path"])
    e, c = dump["e"], dump["c"]
    return {
        "name": Path(spec["path"]).stem,
        "tokens": e.shape[0],
        "vocab": c.shape[0],
        "hidden": e.shape[1],
        "dtype": _DTYPE_NAMES.get(e.dtype, "fp32"),
        "softcap": dump["softcap"],
    }


def file_inputs(case: Any, spec: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A dump's tensors for ``case``: its first ``case.tokens`` rows, on the case's device."""
    dump = read_dump(spec["path"])
    e, c, targets = dump["e"], dump["c"], dump["targets"]
    n, d = e.shape
    v = c.shape[0]
    if (case.vocab, case.hidden) != (v, d) or case.tokens > n:
        raise WorkloadError(
            f"{spec['path']}: holds N={n} V={v} D={d}; the case asks N={case.tokens} "
            f"V={case.vocab} D={case.hidden} (V and D must match, N at most the file's)"
        )
    device = torch.device(case.device)
    return e[: case.tokens].to(device), c.to(device), targets[: case.tokens].to(device)


def file_shape(
    spec: dict[str, Any], tokens: int | None = None, vocab: object = None, hidden: object = None
) -> Any:
    """The ``Shape`` a file workload fixes (its first ``tokens`` rows if given)."""
    from perfsuite.plan.shapes import Shape

    info = file_info(spec, vocab, hidden)
    if tokens is not None and not 0 < tokens <= info["tokens"]:
        raise WorkloadError(f"--tokens {tokens}: {spec['path']} holds N={info['tokens']} rows")
    if tokens is not None and (read_dump(spec["path"])["targets"][:tokens] == -100).all():
        raise WorkloadError(f"--tokens {tokens}: every target in those rows is -100 (ignored)")
    return Shape(
        info["name"] if tokens is None else f"{info['name']}*",
        tokens or info["tokens"],
        info["vocab"],
        info["hidden"],
        dtype=info["dtype"],
        softcap=info["softcap"],
    )
