"""The dump helper on tiny transformers models built here (no download)."""

from __future__ import annotations

import json
import re

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from perfsuite.activations.dump import dump_workload
from perfsuite.cli import main
from perfsuite.plan.workloads import WorkloadError, read_dump

# One layer, hidden size 16: the head's input is what matters, not the model.
TINY = dict(
    hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
    max_position_embeddings=32,
)  # fmt: skip


def _llama(vocab: int = 96, bias: bool = False) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, num_key_value_heads=2, tie_word_embeddings=False, **TINY)
    model = LlamaForCausalLM(cfg).eval()
    if bias:
        model.lm_head = torch.nn.Linear(16, vocab, bias=True)
    return model


def test_a_dump_holds_what_the_head_sees_and_the_next_tokens(tmp_path):
    model = _llama()
    ids = torch.randint(0, 96, (2, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0  # right padding: positions 6.. of the second sequence
    info = dump_workload(
        model, ids, tmp_path / "d.safetensors", attention_mask=mask, metadata={"why": "test"}
    )
    dump = read_dump(tmp_path / "d.safetensors")
    assert (info["tokens"], info["vocab"], info["hidden"]) == (16, 96, 16)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].reshape(-1, 96)
    torch.testing.assert_close(dump["e"] @ dump["c"].T, logits, rtol=1e-5, atol=1e-5)
    expected = ids[:, 1:].clone()
    expected[1, 5:] = -100  # positions whose next token is padding, and padding itself
    assert torch.equal(dump["targets"], expected.reshape(-1))
    assert dump["softcap"] is None and info["ignored"] == 3
    with safe_open(str(tmp_path / "d.safetensors"), framework="pt") as f:
        assert json.loads(f.metadata()["provenance"]) == {"why": "test"}


def test_a_softcapped_model_records_its_softcap(tmp_path):
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    cap = dict(num_key_value_heads=1, head_dim=8, final_logit_softcapping=5.0)
    cfg = Gemma2Config(vocab_size=64, **cap, **TINY)
    model = Gemma2ForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(2))
    dump_workload(model, ids, tmp_path / "g.safetensors", dtype="bf16")
    dump = read_dump(tmp_path / "g.safetensors")
    assert dump["softcap"] == 5.0 and dump["e"].dtype == torch.bfloat16
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float()
    got = 5.0 * torch.tanh((dump["e"].float() @ dump["c"].float().T) / 5.0)
    torch.testing.assert_close(got, logits, rtol=0.05, atol=0.05)  # bf16 e and c


def test_bad_models_and_batches_are_refused_in_one_line(tmp_path):
    ids = torch.randint(0, 96, (1, 6))
    with pytest.raises(WorkloadError, match="has a bias"):
        dump_workload(_llama(bias=True), ids, tmp_path / "b.safetensors")
    nan = _llama()
    with torch.no_grad():
        nan.lm_head.weight[3, 2] = float("nan")
    with pytest.raises(WorkloadError, match="c holds 1 NaN/inf"):
        dump_workload(nan, ids, tmp_path / "n.safetensors")
    assert not (tmp_path / "n.safetensors").exists() and not list(tmp_path.glob(".*"))
    mask = torch.zeros_like(ids)
    mask[0, 0] = 1
    with pytest.raises(WorkloadError, match="every target is -100"):
        dump_workload(_llama(), ids, tmp_path / "i.safetensors", attention_mask=mask)
    with pytest.raises(WorkloadError, match="at least 2 tokens"):
        dump_workload(_llama(), ids[:, :1], tmp_path / "s.safetensors")


def _said(capsys) -> str:
    captured = capsys.readouterr()  # what it printed, and its errors (stderr)
    return " ".join((captured.out + captured.err).split())


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("targets", torch.tensor([0, 1, 12, 2]), "target ids must lie in [0, V=10)"),
        ("c", torch.randn(10, 6), "hidden sizes disagree"),
        ("e", torch.full((4, 8), float("nan")), "e holds 32 NaN/inf"),
        ("targets", torch.full((4,), -100), "every target is -100"),
    ],
)
def test_inspect_and_filtering_refuse_bad_dumps_in_one_line(
    tmp_path, capsys, field, value, message
):
    """A good dump (N 4, V 10, D 8) with one tensor replaced by a bad one."""
    path = tmp_path / "bad.safetensors"
    tensors = {"e": torch.randn(4, 8), "c": torch.randn(10, 8), "targets": torch.zeros(4).long()}
    save_file({**tensors, field: value}, str(path))
    for argv in (
        ["workload", "inspect", str(path)],
        ["filtering", "--workload", str(path), "--out", str(tmp_path / "s")],
    ):
        assert main(argv) == 2
        out = _said(capsys)
        assert message in out and "Traceback" not in out


def test_workload_dump_from_a_saved_model_folder(tmp_path, capsys):
    """The command a user runs on their own model: save_pretrained folder + text file."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    text = "the quick brown fox jumps over the lazy dog. " * 40
    words = ["[UNK]", *dict.fromkeys(re.findall(r"\w+|[^\w\s]+", text))]  # a word a token
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    folder = tmp_path / "model"
    PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(folder)
    _llama(vocab=tok.get_vocab_size()).save_pretrained(folder)
    (tmp_path / "t.txt").write_text(text)
    out = tmp_path / "mine.safetensors"
    text_file = ["--text", str(tmp_path / "t.txt")]
    argv = ["workload", "dump", "--model", str(folder), *text_file]
    argv += ["--tokens", "24", "--seq", "8", "--out", str(out)]
    assert main(argv) == 0
    dump = read_dump(out)
    assert dump["e"].shape == (24, 16) and dump["c"].shape[0] == tok.get_vocab_size()
    assert "mean_entropy" in _said(capsys)
    assert main(argv) == 2 and "exists; pass --force" in _said(capsys)
    assert main([*argv[:-2], "--out", str(tmp_path / "x.pt")]) == 2
    nowhere = ["workload", "dump", "--model", str(tmp_path / "none"), *text_file]
    assert main([*nowhere, "--out", str(tmp_path / "y.safetensors")]) == 2
    assert "not a folder" in _said(capsys)
