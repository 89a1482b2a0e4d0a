"""``patch(model)``: a transformers causal LM trains on our kernel with its own semantics.

Tiny models from configs (no download), fp32 on the CPU. Loss and every gradient are
compared as perfsuite/run/correctness.py does: against the unpatched model (for β > 0,
``F.cross_entropy`` on its shifted logits), within twice torch's own error (fp32 vs
fp64; bf16 in the slow tests) plus a slack of 1e-5 (1e-3 in bf16) of the largest value.
"""

from __future__ import annotations

import copy
import functools
import inspect
import itertools
import types

import pytest
import torch
import torch.nn.functional as F

transformers = pytest.importorskip("transformers")

from perfsuite.kernels import patch, unpatch  # noqa: E402
from perfsuite.kernels.patch import UnsupportedModelError, patched  # noqa: E402

VOCAB, SEQ = 300, 16
TINY = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    # Larger than the default 0.02: peaked logits, so that the softcap and the
    # smoothing change the loss by more than the tolerance.
    initializer_range=0.2,
    attn_implementation="eager",
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
# name: (config class, model class, config overrides); Gemma2's cap is made small
# enough to bend these logits (its default, 30, would hardly touch them).
ARCHS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"final_logit_softcapping": 2.0}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {}),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", {"final_logit_softcapping": 2.0}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {}),
}
REQUIRED = ("llama", "gemma2", "qwen2", "mistral")  # the rest: the slow tests


def tiny(arch: str, **overrides) -> torch.nn.Module:
    config_class, model_class, own = ARCHS[arch]
    config = getattr(transformers, config_class)(**{**TINY, **own, **overrides})
    return getattr(transformers, model_class)(config)


def batch(rows: int = 2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and labels with padding: a prefix and scattered positions at -100."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (rows, SEQ), generator=generator)
    labels = ids.clone()
    labels[:, :3] = -100
    labels[torch.rand(rows, SEQ, generator=generator) < 0.2] = -100
    return ids, labels


def valid_count(batches) -> torch.Tensor:
    """transformers' num_items_in_batch: the shifted labels that count."""
    return sum((labels[:, 1:] != -100).sum() for _, labels in batches)


def reference_loss(model, ids, labels, beta: float, z_loss: float, num_items) -> torch.Tensor:
    """The unpatched model's loss; with β > 0 (or a z-loss) computed on its shifted logits."""
    if beta == 0 and z_loss == 0:
        return model(ids, labels=labels, num_items_in_batch=num_items).loss
    logits = model(ids).logits[:, :-1].flatten(0, 1).float()
    targets = labels[:, 1:].flatten()
    loss = F.cross_entropy(logits, targets, label_smoothing=beta, reduction="sum")
    valid = targets != -100
    loss = loss + z_loss * torch.logsumexp(logits, -1)[valid].square().sum()
    return loss / (valid.sum() if num_items is None else num_items)


def step(model, batches, beta: float, z_loss: float, accumulate: bool) -> dict[str, torch.Tensor]:
    """Loss summed over the micro-batches and every parameter's gradient after them."""
    model.zero_grad(set_to_none=True)
    num_items = valid_count(batches) if accumulate else None
    total = 0.0
    for ids, labels in batches:
        if patched(model):
            loss = model(ids, labels=labels, num_items_in_batch=num_items).loss
        else:
            loss = reference_loss(model, ids, labels, beta, z_loss, num_items)
        loss.backward()
        total = total + loss.detach().double()
    out = {"loss": total}
    out.update({name: p.grad.double() for name, p in model.named_parameters()})
    return out


def assert_same_training(model, batches, beta=0.0, z_loss=0.0, accumulate=False, low=None):
    """The patched copy's loss and gradients against the unpatched model's (module doc).

    ``low``: "bf16" (the model cast) or "autocast" (CPU autocast to bf16) runs ours and
    torch's own version there (correctness.py's bf16 rule: slack 1e-3, not 1e-5)."""
    terms = (beta, z_loss, accumulate)
    reference = step(model, batches, *terms)
    ours = patch(copy.deepcopy(model), label_smoothing=beta, z_loss=z_loss)
    if low is None:
        torch_version, slack = step(copy.deepcopy(model).double(), batches, *terms), 1e-5
        ours = step(ours, batches, *terms)
    else:
        cast = (lambda m: m.bfloat16()) if low == "bf16" else (lambda m: m)
        region = torch.autocast("cpu", torch.bfloat16, enabled=low == "autocast")
        with region:
            torch_version, slack = step(cast(copy.deepcopy(model)), batches, *terms), 1e-3
            ours = step(cast(ours), batches, *terms)
    assert ours.keys() == reference.keys()
    for name, ref in reference.items():
        torch_err = (torch_version[name] - ref).abs().max().item()
        bound = 2 * torch_err + slack * max(ref.abs().max().item(), 1e-6)
        err = (ours[name] - ref).abs().max().item()
        assert err <= bound, f"{name}: error {err:.3g} > bound {bound:.3g} (torch {torch_err:.3g})"


# Each required architecture at both β, accumulating over two micro-batches in one of them
# (transformers' own num_items_in_batch path at β = 0, ours at β = 0.1, both accumulated).
@pytest.mark.parametrize(
    "arch, beta, accumulate",
    [(arch, beta, (i + j) % 2 == 1) for (i, arch), (j, beta) in itertools.product(
        enumerate(REQUIRED), enumerate([0.0, 0.1]))],
)  # fmt: skip
def test_loss_and_gradients_match_the_model(arch, beta, accumulate):
    micro_batches = [batch(seed=1), batch(rows=3, seed=2)] if accumulate else [batch()]
    assert_same_training(tiny(arch), micro_batches, beta, accumulate=accumulate)


def test_z_loss_and_tied_embeddings():
    model = tiny("llama", tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight  # both uses' gradients
    assert_same_training(model, [batch()], beta=0.1, z_loss=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("layers, z_loss", [(1, 0.0), (2, 1e-4)])
@pytest.mark.parametrize("beta", [0.0, 0.1])
@pytest.mark.parametrize("arch", list(ARCHS))
def test_every_architecture_accumulating(arch, beta, layers, z_loss):
    micro_batches = [batch(rows=4, seed=3), batch(rows=1, seed=4)]
    model = tiny(arch, num_hidden_layers=layers)
    assert_same_training(model, micro_batches, beta, z_loss=z_loss, accumulate=True)


def test_softcap_comes_from_the_config_and_matters():
    model = tiny("gemma2")
    ids, labels = batch()
    capped = patch(copy.deepcopy(model))(ids, labels=labels).loss
    uncapped = patch(copy.deepcopy(model), softcap=None)(ids, labels=labels).loss
    assert torch.allclose(capped, model(ids, labels=labels).loss, rtol=1e-5)
    assert not torch.allclose(capped, uncapped, rtol=1e-3)


def test_generate_and_logits_are_unchanged():
    model = tiny("gemma2").eval()
    ours = patch(copy.deepcopy(model))
    ids, _ = batch(rows=1)
    assert torch.equal(ours(ids).logits, model(ids).logits)
    assert torch.equal(ours(ids, logits_to_keep=1).logits, model(ids, logits_to_keep=1).logits)
    prompt = dict(input_ids=ids[:, :5], attention_mask=torch.ones_like(ids[:, :5]))
    expected = model.generate(**prompt, max_new_tokens=6, do_sample=False)
    assert torch.equal(ours.generate(**prompt, max_new_tokens=6, do_sample=False), expected)


def test_logits_with_labels_only_when_asked():
    model = patch(tiny("llama"))
    ids, labels = batch()
    assert model.training and model(ids, labels=labels).logits is None
    asked = model(ids, labels=labels, return_logits=True)
    assert asked.logits.shape == (2, SEQ, VOCAB)
    assert patch(model, return_logits=True)(ids, labels=labels).logits is not None
    model.eval()  # the Trainer's evaluation loop reads them
    assert patch(model)(ids, labels=labels).logits is not None
    assert model(ids, labels=labels, return_logits=False).logits is None
    loss, logits = model(ids, labels=labels, return_dict=False)[:2]
    assert loss.dim() == 0 and logits.shape == (2, SEQ, VOCAB)


def test_shift_labels_and_logits_to_keep():
    model = tiny("qwen2")
    ours = patch(copy.deepcopy(model))
    ids, labels = batch()
    expected = model(ids, labels=labels).loss
    shifted = F.pad(labels, (0, 1), value=-100)[:, 1:]
    torch.testing.assert_close(ours(ids, shift_labels=shifted).loss, expected)
    last = ours(ids, labels=labels[:, -4:], logits_to_keep=4).loss
    torch.testing.assert_close(last, model(ids, labels=labels[:, -4:], logits_to_keep=4).loss)
    with pytest.raises(ValueError, match="do not match the kept positions"):
        ours(ids, labels=labels, logits_to_keep=4)


def test_the_instance_is_patched_and_unpatch_restores_it():
    model, other = tiny("mistral"), tiny("mistral")
    cls_forward = type(model).forward
    assert patch(model) is model and patched(model) and not patched(other)
    ids, labels = batch()
    assert other(ids, labels=labels).logits is not None  # the class is untouched
    assert patched(copy.deepcopy(model))  # a copy keeps the patch
    patch(model, label_smoothing=0.1)  # re-patching replaces the options
    assert unpatch(model) is model and not patched(model)
    assert "forward" not in model.__dict__ and model.forward.__func__ is cls_forward
    assert model(ids, labels=labels).logits is not None
    assert unpatch(model) is model  # a no-op on an unpatched model
    # generate() and the Trainer read the signature: the class's, self aside.
    assert inspect.signature(patch(model).forward) == inspect.signature(other.forward)


def test_unpatch_refuses_to_drop_a_later_wrapper():
    model = patch(tiny("llama"))
    inner = model.forward.__func__
    model.forward = types.MethodType(functools.wraps(inner)(lambda *a, **k: inner(*a, **k)), model)
    assert not patched(model)
    with pytest.raises(UnsupportedModelError, match="wrapped after patch"):
        unpatch(model)


def test_all_labels_ignored_is_zero_not_nan():
    model = patch(tiny("llama"))
    ids, labels = batch()
    loss = model(ids, labels=torch.full_like(labels, -100)).loss
    loss.backward()
    assert loss.item() == 0.0 and not model.lm_head.weight.grad.any()


def test_compiled_after_patching_trains():
    """Dynamo traces the patched forward whole (the kernel is a custom op); AOT
    autograd builds its backward. Inductor: the slow test below."""
    model = tiny("llama")
    ids, labels = batch()
    eager = step(patch(copy.deepcopy(model)), [(ids, labels)], 0.0, 0.0, False)
    compiled = torch.compile(patch(model), backend="aot_eager", fullgraph=True)
    loss = compiled(ids, labels=labels).loss
    loss.backward()
    torch.testing.assert_close(loss.double(), eager["loss"])
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad.double(), eager[name], rtol=1e-4, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("low", ["bf16", "autocast"])
@pytest.mark.parametrize("arch", list(ARCHS))
def test_bf16_within_torchs_own_error(arch, low):
    micro_batches = [batch(seed=1), batch(rows=3, seed=2)]
    assert_same_training(tiny(arch), micro_batches, 0.1, accumulate=True, low=low)


@pytest.mark.slow
@pytest.mark.integration  # inductor starts its C++ compiler
def test_compiled_with_inductor_matches_eager():
    model = tiny("gemma2")
    ids, labels = batch()
    expected = step(
        patch(copy.deepcopy(model), label_smoothing=0.1), [(ids, labels)], 0.1, 0, False
    )
    patched_model = patch(copy.deepcopy(model), label_smoothing=0.1)
    compiled = torch.compile(patched_model)
    loss = compiled(ids, labels=labels).loss
    loss.backward()
    torch.testing.assert_close(loss.double(), expected["loss"])
    for name, p in patched_model.named_parameters():
        torch.testing.assert_close(p.grad.double(), expected[name], rtol=1e-4, atol=1e-6)


def extra_argument() -> torch.nn.Module:
    """A causal LM whose forward takes an argument ours cannot pass on (defined here,
    not at import: Llama's modules take seconds to import at every collection)."""

    class ExtraArgument(transformers.LlamaForCausalLM):
        def forward(self, input_ids=None, labels=None, temperature=1.0, **kwargs):
            return super().forward(input_ids=input_ids, labels=labels, **kwargs)

    return ExtraArgument(tiny("llama").config)


def replaced_forward() -> torch.nn.Module:
    model = tiny("llama")
    model.forward = model.forward  # what accelerate and peft do, in effect
    return model


def build(name: str, **overrides):
    """A builder of a transformers causal LM on the tiny config (its classes are looked up
    when it is called, not at collection)."""
    return lambda: getattr(transformers, f"{name}ForCausalLM")(
        getattr(transformers, f"{name}Config")(**{**TINY, **overrides})
    )


cohere = build("Cohere")


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: tiny("llama").model, "LlamaModel is not a causal LM"),
        (lambda: torch.nn.Linear(2, 2), "takes a transformers causal LM, got Linear"),
        (build("BioGpt"), "BioGptForCausalLM has no lm_head"),
        (build("GPTNeoX", num_key_value_heads=2), r"GPTNeoXForCausalLM has no \.model decoder"),
        (build("Phi"), "lm_head has a bias"),
        (extra_argument, r"parameters \['temperature'\]"),
        (cohere, "CohereForCausalLM.forward is untested"),
        (lambda: torch.compile(tiny("llama")), "patch\\(model\\) first, then torch.compile"),
        (replaced_forward, "already replaced on this instance"),
    ],
    ids="base module no-head no-decoder bias signature untested compiled wrapped".split(),
)
def test_unsupported_models_are_named(build, message):
    with pytest.raises(UnsupportedModelError, match=message):
        patch(build())


def test_untested_can_be_allowed_and_options_fail_at_patch_time():
    model = tiny("llama")
    with pytest.raises(ValueError, match="label_smoothing must be a float in"):
        patch(model, label_smoothing=2.0)
    with pytest.raises(TypeError, match="unknown kernel options \\['reduction'\\]"):
        patch(model, reduction="sum")
    assert not patched(model)
    # Patching anyway drops Cohere's logit_scale: why it is refused by default.
    model = cohere()
    ids, labels = batch()
    ours = patch(copy.deepcopy(model), allow_untested=True)(ids, labels=labels).loss
    assert not torch.allclose(ours, model(ids, labels=labels).loss, rtol=1e-3)
