"""The build-by-build comparison and the console tables, on fixed rows (no builds)."""

from __future__ import annotations

import argparse

import pytest

from perfsuite import kernel_report
from perfsuite.kernel_report import cce, costs, diff, options


def row(variant: str = "plain", **over) -> dict:
    base = {
        "kernel": "forward", "variant": variant, "config": "N256-V128-D32-w8-s3",
        "dtype": "bf16", "arch": "sm_90a", "ours": True, "ok": True, "error": None,
        "registers": 186, "spill_store_bytes": 0, "spill_load_bytes": 0,
        "shared_bytes": 74752, "tmem_cols": 0, "ctas_per_sm": 2, "hgmma": 4, "hmma": 0,
        "utcmma": 0, "ldtm": 0, "ldgsts": 18, "membar": 1, "cas": 0, "exch": 0,
        "atomic_adds": 0, "nanosleep": 0, "critical_tensor_ops": 0, "instructions": 1000,
        "sass_hash": "aaaaaaaaaaaa", "declared_ctas_per_sm": 1,
    }  # fmt: skip
    return {**base, **over}


def one(old: dict, new: dict, **kw) -> diff.Change:
    comparison = diff.compare([old], [new], **kw)
    assert comparison.unchanged == 0 and len(comparison.changed) == 1
    return comparison.changed[0]


def test_same_sass_is_unchanged_whatever_else():
    c = diff.compare([row(), row("softcap")], [row(), row("softcap", registers=1)])
    assert (c.unchanged, c.changed, c.only_in_this_run, c.only_in_baseline) == (2, [], [], [])


@pytest.mark.parametrize(
    ("over", "reasons"),
    [
        (dict(registers=207), []),  # registers alone: ptxas takes what it may
        (dict(registers=207, ctas_per_sm=1), ["fewer CTAs/SM"]),
        (dict(spill_store_bytes=8, spill_load_bytes=8), ["new spill store", "new spill load"]),
        (dict(instructions=1049), []),
        (dict(instructions=1090), ["instructions +9.0%"]),
        (dict(membar=2), ["MEMBAR +100.0%"]),
        (dict(cas=1), ["new CAS"]),
        (dict(instructions=900, ctas_per_sm=3), []),  # better: never fails
    ],
)
def test_what_fails_one_of_ours(over, reasons):
    change = one(row(), row(**over, sass_hash="bbbbbbbbbbbb"))
    assert change.reasons == reasons and change.fails == bool(reasons)
    assert change.verdict == (f"FAIL: {', '.join(reasons)}" if reasons else "ok")


def test_change_names_what_moved():
    new = row(registers=207, ctas_per_sm=1, instructions=1090, sass_hash="b" * 12)
    change = one(row(), new)
    assert change.build == "forward[plain] N256-V128-D32-w8-s3 bf16 sm_90a"
    assert change.changes == [
        "registers 186 → 207",
        "CTAs/SM 2 → 1",
        "instructions 1000 → 1090 (+9.0%)",
    ]
    same_counts = one(row(), row(sass_hash="b" * 12))
    assert same_counts.changes == ["other SASS, same counts"] and not same_counts.fails


def test_threshold_is_a_setting():
    new = row(instructions=1040, sass_hash="b" * 12)
    assert not one(row(), new).fails
    assert one(row(), new, threshold=0.03).reasons == ["instructions +4.0%"]


def test_cce_and_other_triton_versions_never_fail():
    worse = dict(ctas_per_sm=1, sass_hash="b" * 12)
    peer = one(row(ours=False), row(ours=False, **worse))
    assert not peer.fails and peer.verdict == "not gated (CCE's); would fail: fewer CTAs/SM"
    across = one(row(), row(**worse), across=True)
    assert not across.fails and "across Triton versions" in across.verdict


def test_builds_on_one_side_are_listed_and_a_new_config_paired():
    old = [row(), row("softcap"), row("sorted")]
    new = [row(), row("softcap", config="N128-V128-D32-w8-s3", sass_hash="c" * 12)]
    new.append(row("smooth"))
    c = diff.compare(old, new)
    assert c.unchanged == 1 and c.failing() == []
    (retuned,) = c.changed
    assert retuned.build == "forward[softcap] bf16 sm_90a"
    assert retuned.changes[0] == "config N256-V128-D32-w8-s3 → N128-V128-D32-w8-s3"
    assert retuned.verdict.startswith("not gated (config changed)")
    assert c.only_in_baseline == ["forward[sorted] N256-V128-D32-w8-s3 bf16 sm_90a"]
    assert c.only_in_this_run == ["forward[smooth] N256-V128-D32-w8-s3 bf16 sm_90a"]


def test_a_build_that_no_longer_builds_fails():
    change = one(row(), row(ok=False, error="BuildError: ptxas failed"))
    assert change.fails and change.changes == ["did not build"]


def _run(monkeypatch, rows: list[dict], **more) -> int:
    """``kernel-report`` as typed (its defaults), with this report of ``rows`` at Gemma2-2B."""
    gemma = options.SHAPES["gemma2-2b"]
    cce_too = cce.available() is None
    report = {"shape": vars(gemma), "rows": rows, "costs": costs.cost_rows(gemma, with_cce=cce_too)}
    report |= {"designs": costs.design_rows(gemma, with_cce=cce_too), "notes": [], **more}
    monkeypatch.setattr(kernel_report, "kernel_report", lambda *a, **k: report)
    parser = argparse.ArgumentParser()
    kernel_report.add_arguments(parser)
    return kernel_report.run(parser.parse_args([]))


def test_failures_name_the_reason():
    rows = [
        row("list"),
        row("spilly", spill_store_bytes=8),
        row("locked", critical_tensor_ops=2),
        row("crowded", ctas_per_sm=1, declared_ctas_per_sm=2),
        row("broken", ok=False, error="BuildError: ptxas failed"),
        row("train", kernel="cce_backward", ours=False, spill_store_bytes=512),
    ]
    problems = kernel_report.failures(rows)
    assert len(problems) == 4
    assert "spills 8B" in problems[0] and "tensor-core ops inside a spin lock" in problems[1]
    assert "fits 1 CTAs per SM, config declares 2" in problems[2]
    assert "ptxas failed" in problems[3]


def test_default_output_is_a_table_per_kernel_at_80_columns(monkeypatch, capsys):
    """Issue 36: one 20-column table became a block of key/value lines per build. The
    launched-fraction table, too wide with two workloads, is turned per GPU (it was a
    ValueError: it names no impl). Issue 20: hundreds of columns; variant names such as
    "[plain]" must not vanish as rich markup."""
    sampled = dict(gpu="H100", entropy=5.5, rows=256, bwd_config="N128-V256-D64x32-w8-s3")
    sampled |= dict(pairs=10**5, launched=9 * 10**4, launched_fraction=0.9, recompute_gb=1.5)
    launched = [{**sampled, "workload": w, "bwd_l2_gb": 45678.9} for w in ("a", "b")]
    rows = []
    for arch, mma in (("sm_80", "hmma"), ("sm_90a", "hgmma"), ("sm_100a", "utcmma")):
        for dtype in ("bf16", "fp16", "fp32"):
            for i, variant in enumerate(("plain", "softcap", "smooth+softcap+weight")):
                cfg = "N64-V64-D32-w8-s2" if dtype == "fp32" else "N128-V128-D32-w8-s3"
                counts = {"hgmma": 0, mma: 8, "registers": 150 + i}
                for kernel in ("forward", "backward"):
                    rows.append(row(variant, kernel=kernel, arch=arch, dtype=dtype, config=cfg))
                    rows[-1].update(counts)
    rows.append(row("train", kernel="cce_backward", ours=False, config="N64-V64-D32x32-w8-s3"))
    monkeypatch.setenv("COLUMNS", "80")
    notes = ["CCE side by side skipped: test"]
    assert _run(monkeypatch, rows, launched=launched, notes=notes) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in text
    builds = text[: text.index("Static costs")].splitlines()
    # a header per kernel, then a line (or two, a folded variant) per build
    assert sum(line.lstrip().startswith("variant ") for line in builds) == 3
    assert len(builds) < 2 * len(rows) + 20
    assert "forward: " in text and "backward: " in text
    assert "0 in every build: spill" in text
    assert " plain" in text and " train" in text and "(CCE)" in text
    assert "H100" in text and "A100" in text and "100.0%" in text
    assert "CCE side by side skipped" in text
    flat = " ".join(text.split())  # titles and headers fold at 80 columns
    assert "a MODEL, not a measurement" in flat and "total bwd L2 GB" in flat
    assert " slices " in flat and "modelled ms" in flat
    # a config folds nowhere: whole at 80 columns
    for cell in ("sm_100a", "N64-V64-D32-w8-s2", "N128-V128-D32-w8-s3", "N64-V64-D32x32-w8-s3"):
        assert cell in text
    assert "152" in text and "45,678.9" in text


def test_help_names_the_baseline_options(capsys):
    """``--threshold``'s help once held a bare ``%``: ``--help`` was a traceback."""
    from perfsuite.cli import main

    with pytest.raises(SystemExit) as done:
        main(["kernel-report", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for option in ("--save DIR", "--baseline DIR", "--threshold PCT", "--across-triton"):
        assert option in text
    assert "percent, that fails (default 5)" in text
