"""Public entry points: ``linear_cross_entropy`` and the ``LinearCrossEntropy`` module."""

from __future__ import annotations

import math

import torch

from .backward import default_filter_eps
from .checks import check_targets_in_range, check_weight_values
from .configs import DTYPE_NAMES, arch_of, interpreting
from .forward import compiled_for_interpreter
from .function import LinearCrossEntropyFunction, Params
from .op import lce_forward
from .parallel import VocabParallel, VocabParallelFunction, shard_layout
from .routes import route_for

REDUCTIONS = ("mean", "sum", "none")
IMPLS = ("split", "fused")
BACKWARDS = ("auto", "slices", "tiles")
ENGINES = ("auto", "triton", "cublas", "torch")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _validate(
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    label_smoothing: float,
    reduction: str,
    softcap: float | None,
    filter_eps: float | str | None,
    impl: str,
    weight: object,
    z_loss: object,
    return_lse: object,
) -> None:
    """Raises ``TypeError``/``ValueError`` naming the first bad argument."""
    if not isinstance(e, torch.Tensor) or not isinstance(c, torch.Tensor):
        raise TypeError("e and c must be tensors")
    if not isinstance(targets, torch.Tensor):
        raise TypeError(f"targets must be an integer tensor, got {type(targets).__name__}")
    if e.dim() < 1 or c.dim() != 2:
        raise ValueError(f"e must be (..., D) and c (V, D); got {tuple(e.shape)}, {tuple(c.shape)}")
    if e.shape[-1] != c.shape[1]:
        raise ValueError(f"mismatched D: e has D={e.shape[-1]}, c has D={c.shape[1]}")
    if e.dtype not in DTYPES:
        raise TypeError(f"e dtype {e.dtype} unsupported; use float32, bfloat16 or float16")
    if c.dtype != e.dtype:
        raise TypeError(f"c dtype {c.dtype} differs from e dtype {e.dtype}")
    if targets.dtype.is_floating_point or targets.dtype.is_complex or targets.dtype == torch.bool:
        raise TypeError(f"targets must hold integer class ids, got dtype {targets.dtype}")
    if targets.shape != e.shape[:-1]:
        raise ValueError(
            f"targets shape {tuple(targets.shape)} must equal e's leading shape "
            f"{tuple(e.shape[:-1])}"
        )
    if not (e.device == c.device == targets.device):
        raise ValueError(
            f"e, c, targets on different devices: {e.device}, {c.device}, {targets.device}"
        )
    beta = label_smoothing
    if not isinstance(beta, (int, float)) or isinstance(beta, bool) or not 0.0 <= beta <= 1.0:
        raise ValueError(f"label_smoothing must be a float in [0, 1], got {beta!r}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}; use one of {REDUCTIONS}")
    if impl not in IMPLS:
        raise ValueError(f"unknown impl {impl!r}; use one of {IMPLS}")
    if softcap is not None and not (
        isinstance(softcap, (int, float)) and softcap > 0 and math.isfinite(softcap)
    ):
        raise ValueError(f"softcap must be None or a positive float, got {softcap!r}")
    if not (
        filter_eps is None
        or filter_eps == "auto"
        or (isinstance(filter_eps, (int, float)) and filter_eps >= 0)
    ):
        raise ValueError(f"filter_eps must be 'auto', None or a float >= 0, got {filter_eps!r}")
    # The training options: z-loss, the returned LSE, class weights.
    if not isinstance(z_loss, (int, float)) or isinstance(z_loss, bool):
        raise TypeError(f"z_loss must be a float >= 0, got {z_loss!r}")
    if not (z_loss >= 0 and math.isfinite(z_loss)):
        raise ValueError(f"z_loss must be a finite float >= 0, got {z_loss!r}")
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be True or False, got {return_lse!r}")
    if return_lse and impl != "split":
        raise ValueError("return_lse needs impl='split' (fused computes gradients before it)")
    if weight is None:
        return
    if not isinstance(weight, torch.Tensor) or not weight.dtype.is_floating_point:
        raise TypeError(f"weight must be a float tensor of class weights, got {weight!r:.60}")
    if weight.shape != (c.shape[0],):
        raise ValueError(
            f"weight must have shape ({c.shape[0]},) (one per row of c), got {tuple(weight.shape)}"
        )
    if weight.device != c.device:
        raise ValueError(f"weight is on {weight.device}, c on {c.device}")
    if weight.requires_grad:
        raise ValueError("weight must not require grad (class weights are constants here)")


def _resolve(
    device: torch.device,
    backward: str,
    engine: str,
    filter_eps: object,
    budget: object,
    dtype: torch.dtype,
) -> tuple[str, str]:
    """(backward, engine) after "auto" (on CUDA, the slice backward on ``routes.route_for``'s
    route for the device's arch and ``dtype``), or ``ValueError`` naming the conflict."""
    if backward not in BACKWARDS:
        raise ValueError(f"unknown backward {backward!r}; use one of {BACKWARDS}")
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; use one of {ENGINES}")
    if budget is not None and (
        not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0
    ):
        raise ValueError(f"memory_budget must be a positive number of bytes, got {budget!r}")
    if backward == "auto":
        backward = "tiles" if filter_eps is not None else "slices"
    elif backward == "slices" and filter_eps is not None:
        raise ValueError("filter_eps needs backward='tiles' (the slice backward is exact)")
    if engine == "auto":
        on_triton = device.type == "cuda" or interpreting() or backward == "tiles"
        engine = "triton" if on_triton else "torch"
        if device.type == "cuda" and backward == "slices":
            engine = route_for(arch_of(device), DTYPE_NAMES[dtype])
    if engine in ("torch", "cublas") and backward == "tiles":
        raise ValueError(
            f"backward='tiles' is a Triton kernel: use engine='triton' or 'auto', not {engine!r}"
        )
    interpreted = compiled_for_interpreter()
    if engine in ("triton", "cublas") and device.type != "cuda" and not interpreted:
        raise ValueError(
            f"Triton on {device.type} needs its interpreter: set TRITON_INTERPRET=1 "
            "before importing perfsuite.kernels, use engine='torch', or CUDA tensors"
        )
    return backward, engine


def linear_cross_entropy(
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    *,
    label_smoothing: float = 0.0,
    ignore_index: int = -100,
    reduction: str = "mean",
    softcap: float | None = None,
    weight: torch.Tensor | None = None,
    z_loss: float = 0.0,
    return_lse: bool = False,
    vocab_parallel: VocabParallel | None = None,
    memory_budget: int | None = None,
    engine: str = "auto",
    impl: str = "split",
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Smoothed cross-entropy of ``softcap(e @ c.T)`` without materialising the logits.

    Equal in value and in the gradients of ``e`` and ``c`` (returned in their dtype) to
    ``F.cross_entropy(softcap(e.float() @ c.float().T), targets, ...)`` plus
    ``z_loss·lse²`` per valid row, except that a ``mean`` over no valid row (or zero
    total target weight) is 0 with zero gradients, not NaN. The loss is fp32. The
    backward is the exact, bit-deterministic slice backward (kernels/slices.py); the
    tile backward and its filters are ablations (kernels/ablations.py). docs/kernel.md.

    Args:
        e: (..., D) embeddings, fp32/bf16/fp16, any strides.
        c: (V, D) classifier, same dtype as ``e``.
        targets: integer ids of e's leading shape, in [0, V) or ``ignore_index``; out of
            range: ``ValueError`` on CPU, an asynchronous device assert on CUDA (a sync
            and ``ValueError`` with ``PERFSUITE_DEBUG=1``).
        label_smoothing: β in [0, 1] (β = 0 and β > 0 compile separate kernels).
        softcap: Gemma2's ``s·tanh(l/s)``.
        weight: class weights, a float (V,) tensor ≥ 0, ``F.cross_entropy``'s semantics.
        z_loss: coefficient of PaLM's ``lse²`` per valid row; ``mean`` averages it over
            the valid rows, unweighted.
        return_lse: also return the fp32, differentiable per-row LSE (split only).
        vocab_parallel: ``VocabParallel(start, stop, group)`` when ``c`` is this rank's
            rows of a vocab-sharded classifier (kernels/parallel.py; split only).
        memory_budget: bytes of slice workspace beyond the fp32 dE accumulator
            (``slices.slice_width``); default 64 MiB, or a sixteenth of the vocabulary's.
        engine: "triton" (CUDA, or CPU under ``TRITON_INTERPRET=1``), "cublas" (cuBLAS
            logit slices, Triton epilogues) or "torch" (torch ops: the native CPU path);
            "auto": kernels/routes.py's rule on CUDA, torch on a CPU without the
            interpreter, else triton.
        impl: "split" (a recomputing backward) or "fused" (gradients computed in the
            forward call, none under ``torch.no_grad()``).
    """
    return _linear_cross_entropy(
        e, c, targets, label_smoothing=label_smoothing, ignore_index=ignore_index,
        reduction=reduction, softcap=softcap, weight=weight, z_loss=z_loss,
        return_lse=return_lse, vocab_parallel=vocab_parallel, memory_budget=memory_budget,
        engine=engine, impl=impl,
    )  # fmt: skip


def _linear_cross_entropy(
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    *,
    label_smoothing: float = 0.0,
    ignore_index: int = -100,
    reduction: str = "mean",
    softcap: float | None = None,
    weight: torch.Tensor | None = None,
    z_loss: float = 0.0,
    return_lse: bool = False,
    vocab_parallel: VocabParallel | None = None,
    backward: str = "auto",
    memory_budget: int | None = None,
    engine: str = "auto",
    filter_eps: float | str | None = None,
    sort_vocab: bool = True,
    impl: str = "split",
    accum_fp32: bool = False,
    tile_list: bool = True,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``linear_cross_entropy`` with the ablations' knobs (kernels/ablations.py)."""
    options = (label_smoothing, reduction, softcap, filter_eps, impl, weight, z_loss, return_lse)
    _validate(e, c, targets, *options)
    backward, engine = _resolve(e.device, backward, engine, filter_eps, memory_budget, e.dtype)
    if backward == "tiles" and (weight is not None or z_loss or return_lse or vocab_parallel):
        raise ValueError(
            "weight, z_loss, return_lse and vocab_parallel need the slice backward "
            "(backward='slices', filter_eps=None)"
        )
    vocab, dim = c.shape
    if vocab_parallel is not None:
        if not isinstance(vocab_parallel, VocabParallel):
            raise TypeError(f"vocab_parallel must be a VocabParallel, got {vocab_parallel!r:.60}")
        if impl != "split":
            raise ValueError("vocab_parallel needs impl='split'")
        vocab = shard_layout(vocab_parallel, c.shape[0], c.device)
    # The default path is the custom op (op.py), which checks values inside, untraced.
    use_op = vocab_parallel is None and impl == "split" and backward == "slices"
    if not use_op:
        check_targets_in_range(targets, vocab, ignore_index)
        check_weight_values(weight)
    eps = default_filter_eps(e.dtype) if filter_eps == "auto" else filter_eps
    params = Params(
        beta=float(label_smoothing),
        softcap=None if softcap is None else float(softcap),
        ignore_index=int(ignore_index),
        reduction=reduction,
        filter_eps=None if eps is None else float(eps),
        sort_vocab=bool(sort_vocab),
        accum_fp32=bool(accum_fp32) and e.dtype != torch.float32,
        tile_list=bool(tile_list),
        grad_mode=torch.is_grad_enabled(),
        backward=backward,
        engine=engine,
        budget=memory_budget,
        z_loss=float(z_loss),
        return_lse=return_lse,
        fused=impl == "fused",
    )
    batch_shape = targets.shape
    e2 = e.reshape(-1, dim)  # a view whenever the strides allow it
    flat_targets = targets.reshape(-1)
    w = None if weight is None else weight.detach().float().contiguous()
    if e2.shape[0] == 0:
        zero = (e.sum() + c.sum()).float() * 0.0
        loss = zero.expand(batch_shape) if reduction == "none" else zero
        return (loss, zero.expand(batch_shape)) if return_lse else loss
    if use_op:  # the options travel to the custom op as scalars
        scalars = (params.beta, params.softcap, params.ignore_index, reduction, params.z_loss)
        out = lce_forward(e2, c, flat_targets, w, *scalars, engine, memory_budget)[:2]
        out = out if return_lse else out[0]
    elif vocab_parallel is not None:
        out = VocabParallelFunction.apply(e2, c, flat_targets, w, params, vocab_parallel, vocab)
    else:
        out = LinearCrossEntropyFunction.apply(e2, c, flat_targets, w, params)
    loss, lse = out if return_lse else (out, None)
    if reduction == "none":
        loss = loss.reshape(batch_shape)
    return (loss, lse.reshape(batch_shape)) if lse is not None else loss


class LinearCrossEntropy(torch.nn.Module):
    """Module form of ``linear_cross_entropy``; keyword options fixed at construction."""

    def __init__(
        self,
        *,
        label_smoothing: float = 0.0,
        ignore_index: int = -100,
        reduction: str = "mean",
        softcap: float | None = None,
        weight: torch.Tensor | None = None,
        z_loss: float = 0.0,
        return_lse: bool = False,
        vocab_parallel: VocabParallel | None = None,
        memory_budget: int | None = None,
        engine: str = "auto",
        impl: str = "split",
    ) -> None:
        super().__init__()
        # A buffer: class weights move with .to(device) and live in the state dict.
        self.register_buffer("weight", weight)
        self.options = dict(
            label_smoothing=label_smoothing,
            ignore_index=ignore_index,
            reduction=reduction,
            softcap=softcap,
            z_loss=z_loss,
            return_lse=return_lse,
            vocab_parallel=vocab_parallel,
            memory_budget=memory_budget,
            engine=engine,
            impl=impl,
        )

    def forward(self, e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return linear_cross_entropy(e, c, targets, weight=self.weight, **self.options)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.options.items())
