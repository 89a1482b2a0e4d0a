"""Real presets through the entry point. Default: what the parent decides alone for
Gemma2's softcap (no worker). Slow (``-m slow``): every real preset's step at its real
vocabulary, one layer of 16 tokens, gated; torch.compile; bf16; Liger and torchtune on
a real model."""

from __future__ import annotations

import pytest

from step.stepping import step

ONE_STEP = ["--layers", "1", "--seq", "16", "--batch", "1", "--samples", "1", "--warmup", "0"]
REAL = ["gemma2-2b", "gemma2-9b", "llama3-8b", "llama3.2-1b", "llama3.2-3b", "mistral-7b"]
REAL += ["qwen2.5-7b"]


def test_gemma2_softcap_decides_liger_torchtune_and_cce_without_a_worker(tmp_path):
    argv = ["--model", "gemma2-2b", "--methods", "liger,torchtune-chunked,cce", "--beta", "0"]
    ran = step([*argv, *ONE_STEP], tmp_path / "r.json")
    assert ran.code == 1  # nothing measured
    liger, tune, cce = (ran.rows(method=m)[0] for m in ("liger", "torchtune-chunked", "cce"))
    # Liger's declaration decides it, as for run: its softcap path needs CUDA.
    assert liger["status"] == "unsupported" and "softcap" in liger["reason"]
    assert tune["status"] == "unsupported" and "softcap" in tune["reason"]
    assert cce["status"] == "unavailable" and "CUDA" in cce["reason"]
    assert {r["softcap"] for r in ran.document["rows"]} == {30.0}
    assert (liger["vocab"], liger["hidden"]) == (256000, 2304)


@pytest.mark.slow  # each a step worker or two
@pytest.mark.integration
@pytest.mark.parametrize("name", REAL)
def test_every_real_preset_takes_a_gated_step(tmp_path, name):
    argv = ["--model", name, "--methods", "eager,ours", "--beta", "0.1", *ONE_STEP]
    for dtype in ("fp32", "bf16"):  # bf16 halves weights, grads and AdamW (and the gate)
        ran = step([*argv, "--dtype", dtype], tmp_path / f"{dtype}.json")
        rows = ran.document["rows"]
        statuses = {r["status"] for r in rows}
        if statuses != {"skipped"}:
            break
        # this machine's RAM: the estimate says so, nothing ran
        assert ran.code == 1 and all("GiB" in r["reason"] for r in rows)
    else:
        pytest.skip(f"{name} does not fit here even in bf16: {rows[0]['reason']}")
    assert ran.code == 0 and statuses == {"ok"}, rows[0]["reason"]
    step_rows = [r for r in rows if r["phase"] == "step"]
    assert all(r["loss_err"] <= r["tolerance"]["loss"] for r in step_rows)
    assert all(r["grad_c_err"] <= r["tolerance"]["grad_c"] for r in step_rows)
    model = ran.document["env"]["step"]["models"][name]
    assert model["vocab"] == rows[0]["vocab"] and model["layers"].startswith("1 of ")


@pytest.mark.slow
@pytest.mark.integration
def test_torch_compile_is_gated_and_its_compilation_flagged(tmp_path):
    ran = step(["--methods", "torch-compile", "--samples", "3", *ONE_STEP[:6]], tmp_path / "r.json")
    assert ran.code == 0 and {r["status"] for r in ran.document["rows"]} == {"ok"}
    first = ran.rows(phase="step")[0]
    assert first["compile_ms"] > 10 * first["median_ms"]
    assert "compilation, measured once" in " ".join(ran.out.split())


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize(
    "argv",
    [
        ["--dtype", "bf16", "--methods", "eager,ours,liger,torchtune-chunked"],  # bf16 steps
        ["--model", "llama3.2-1b", "--methods", "liger,torchtune-chunked"],  # a real model
    ],
)
def test_steps_of_bf16_and_of_liger_and_torchtune_on_a_real_model(tmp_path, argv):
    ran = step([*argv, "--beta", "0", *ONE_STEP], tmp_path / "r.json")
    assert ran.code == 0 and {r["status"] for r in ran.document["rows"]} == {"ok"}, ran.out
