"""``perfsuite kernel-report``: builds as launched, fails on ptxas errors, reads SASS right.

Builds run in child processes started without ``TRITON_INTERPRET`` (other test
folders set it at import, which turns every kernel into an interpreter wrapper);
parsing, occupancy, costs and rendering are tested in-process on fixed inputs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from perfsuite import kernel_report
from perfsuite.cli import main
from perfsuite.kernel_report import build, cce, costs, launches, options, sass
from perfsuite.kernels.configs import tma_config

# Every test here compiles through ptxas and cuobjdump: other processes.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not os.path.exists(build.tool("ptxas")), reason="triton without NVIDIA tools"
    ),
]

GEMMA = options.SHAPES["gemma2-2b"]


def ours(shape, arch, dtype, kernels):
    return kernel_report.collect(shape, [arch], [dtype], kernels, with_cce=False)[0]


def _python(code: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**clean, **env},
        check=False,
        timeout=timeout,
    )


# --- SASS ------------------------------------------------------------------------

_LOCKED_HGMMA = """
        /*0100*/                   ATOMG.E.CAS.STRONG.GPU PT, R2, [R4.64], R6, R7 ;
        /*0110*/                   ISETP.NE.AND P0, PT, R2, 0x1, PT ;
        /*0120*/              @!P0 BRA 0x100 ;
        /*0130*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24 ;
        /*0140*/                   STG.E.U16 [R8.64], R10 ;
        /*0150*/                   ATOMG.E.EXCH.STRONG.GPU PT, RZ, [R4.64], RZ ;
"""
_UNLOCKED_HGMMA = """
        /*0080*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24 ;
        /*0100*/                   ATOMG.E.CAS.STRONG.GPU PT, R2, [R4.64], R6, R7 ;
        /*0140*/                   STG.E.U16 [R8.64], R10 ;
        /*0150*/                   ATOMG.E.EXCH.STRONG.GPU PT, RZ, [R4.64], RZ ;
        /*0160*/               @P1 HMMA.16816.F32.BF16 R12, R4, R8, R12 ;
        /*0170*/                   RED.E.ADD.F32.FTZ.RN.STRONG.GPU [R2.64], R5 ;
"""


def test_critical_section_detector_flags_tensor_ops_inside_a_lock():
    locked = sass.instructions(_LOCKED_HGMMA)
    found = sass.critical_tensor_ops(locked)
    assert [(cas, i.opcode) for cas, i in found] == [(0x100, "HGMMA.64x64x16.F32.BF16")]
    unlocked = sass.instructions(_UNLOCKED_HGMMA)
    assert sass.critical_tensor_ops(unlocked) == []
    c = sass.counts(unlocked)
    assert (c["hgmma"], c["hmma"], c["cas"], c["exch"], c["atomic_adds"]) == (1, 1, 1, 1, 1)
    # A CAS never released counts as held to the end of the listing.
    open_lock = _LOCKED_HGMMA.replace("ATOMG.E.EXCH", "STG.E")
    assert len(sass.critical_tensor_ops(sass.instructions(open_lock))) == 1


def test_blackwell_tensor_ops_counted_and_caught_in_a_lock():
    """sm_100a's tcgen05: UTC*MMA issue the MMA, LDTM reads the accumulator back."""
    listing = _LOCKED_HGMMA.replace("HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24", "UTCHMMA")
    listing += "        /*0160*/                   LDTM.x64 R24, tmem[UR8] ;\n"
    instrs = sass.instructions(listing)
    assert [i.opcode for _, i in sass.critical_tensor_ops(instrs)] == ["UTCHMMA"]
    c = sass.counts(instrs)
    assert (c["utcmma"], c["ldtm"], c["hgmma"]) == (1, 1, 0)
    assert sass.is_utc_mma(sass.Instr(0, "UTCQMMA.2CTA")) and not sass.is_utc_mma(
        sass.Instr(0, "UTCBAR")
    )


# --- ptxas log, occupancy ---------------------------------------------------------

_PTXAS_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_k' for 'sm_90a'
ptxas info    : Function properties for _k
    0 bytes stack frame, 8 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 8 bytes cumulative stack size
"""


def test_ptxas_log_parsed_or_rejected():
    assert build.parse_ptxas(_PTXAS_LOG, "_k") == {
        "registers": 255,
        "stack_bytes": 0,
        "spill_store_bytes": 8,
        "spill_load_bytes": 16,
    }
    with pytest.raises(build.BuildError, match="names no entry"):
        build.parse_ptxas(_PTXAS_LOG, "_other")
    with pytest.raises(build.BuildError, match="unparseable"):
        build.parse_ptxas(_PTXAS_LOG.replace("Used 255", "Took 255"), "_k")
    with pytest.raises(build.BuildError):
        build.parse_res_usage("garbage")


def test_ctas_per_sm():
    assert build.ctas_per_sm("sm_90a", 255, 148480, 8) == 1
    assert build.ctas_per_sm("sm_80", 128, 32768, 8) == 2
    assert build.ctas_per_sm("sm_80", 32, 0, 4) == 16  # threads bound
    assert build.ctas_per_sm("sm_80", 64, 200_000, 4) == 0  # over the per-CTA smem limit
    assert build.ctas_per_sm("sm_90a", 64, 200_000, 4) == 1
    assert build.gpu_name("sm_90a") == "sm_90a" and build.gpu_name("sm_80") == "sm_80"
    # Blackwell: Hopper's register and shared-memory limits, plus 512 TMEM columns.
    assert build.ctas_per_sm("sm_100a", 128, 98320, 8, tmem=128) == 2
    assert build.ctas_per_sm("sm_100a", 32, 1024, 4, tmem=256) == 2  # TMEM bound
    assert build.ctas_per_sm("sm_100a", 32, 1024, 4, tmem=1024) == 0
    assert build.gpu_name("sm_100a") == "sm_100a" and build.capability("sm_100") == 100


# --- cost table -------------------------------------------------------------------


def test_cost_table_at_gemma2_2b():
    table = costs.cost_rows(GEMMA, with_cce=cce.available() is None)
    rows = {(r["impl"], r["gpu"]): r for r in table}
    h100, a100 = rows["ours", "H100"], rows["ours", "A100"]
    assert h100["sms"] == 132 and a100["sms"] == 108
    assert h100["last_wave_eff"] >= 0.9 and a100["last_wave_eff"] >= 0.9
    assert h100["fwd_ctas"] <= h100["fwd_waves"] * 132
    # bf16 dC: hardware atomics on Hopper, a spin lock per (tile, D-chunk) on Ampere.
    assert h100["lock_trips_per_1k_logits"] == 0 and h100["locked_rmw_gb"] == 0
    assert a100["lock_trips_per_1k_logits"] > 0
    assert h100["recompute_gb"] > 0
    # dE's fp32 adds: one BLOCK_N×D slice per pair, so wider vocab tiles mean fewer.
    n, v, d = GEMMA.n, GEMMA.v, GEMMA.d
    pairs = h100["bwd_pairs"]
    assert h100["update_gb"] * 1e9 == pytest.approx(pairs * d * (128 * 4 + 256 * 2))
    assert pairs == (n // 128) * (v // 256)
    if cce.available() is None:
        cce_h100 = rows["cce", "H100"]
        assert cce_h100["lock_trips_per_1k_logits"] > 0
        # The bar: our backward re-reads no more than CCE's to rebuild the logits.
        assert h100["recompute_gb"] <= cce_h100["recompute_gb"]
        assert h100["bwd_l2_gb"] < cce_h100["bwd_l2_gb"]
        assert a100["recompute_gb"] <= rows["cce", "A100"]["recompute_gb"]
    # --no-cce: CCE left out of both tables (its import compiles for seconds)
    for table in (costs.cost_rows(GEMMA), costs.design_rows(GEMMA)):
        assert table and {r.get("impl", r.get("design")) for r in table} & {"cce"} == set()


def test_design_cost_table():
    """Per GPU: the slice design, the tile design and CCE's, modelled (not measured)."""
    rows = costs.design_rows(GEMMA, with_cce=cce.available() is None)
    want = {
        "gpu", "design", "config", "gemm_tflop", "hbm_bytes", "g_trip_bytes", "de_rw_bytes",
        "l2_bytes", "atomic_bytes", "locked_bytes", "gemm_ms", "hbm_ms", "l2_ms",
        "modelled_ms", "bound",
    }  # fmt: skip
    by = {(r["gpu"], r["design"]): r for r in rows}
    n, v, d = GEMMA.n, GEMMA.v, GEMMA.d
    for gpu in ("H100", "A100"):
        sl, tl_ = by[gpu, "slices"], by[gpu, "tiles"]
        assert all(want <= set(r) for r in (sl, tl_))
        assert sl["atomic_bytes"] == sl["locked_bytes"] == 0 < tl_["atomic_bytes"]
        # G: N·V·2 bytes written once, read by both GEMMs; fp32 dE read + written per slice.
        assert sl["g_trip_bytes"] * 1e9 == pytest.approx(3 * n * v * 2)
        assert sl["de_rw_bytes"] * 1e9 == pytest.approx(63 * 2 * n * d * 4)
        assert sl["gemm_tflop"] == pytest.approx(6 * n * v * d / 1e12)
        terms = [t for t in (sl["gemm_ms"], sl["hbm_ms"], sl["l2_ms"]) if t is not None]
        assert sl["modelled_ms"] == pytest.approx(max(terms))
        if cce.available() is None:
            assert sl["l2_bytes"] <= by[gpu, "cce"]["l2_bytes"]
            assert by[gpu, "cce"]["locked_bytes"] > 0 == by[gpu, "cce"]["atomic_bytes"]
    # With the same 128×128 logit tile as the tile backward (A100), the slice design moves
    # less through L2: plain GEMM loads replace the update loops' re-reads and atomics.
    assert by["A100", "slices"]["l2_bytes"] <= by["A100", "tiles"]["l2_bytes"]
    assert by["H100", "slices"]["l2_ms"] is not None and by["A100", "slices"]["l2_ms"] is None
    assert any("650 TFLOP/s" in line for line in costs.rate_notes())


# --- builds (child processes) -----------------------------------------------------


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Specialisations of the bf16 Gemma2-2B launches (TMA's too), a few real builds, a launch table
    that passes an argument its kernel does not take and the report's exit status and
    output under a ptxas that fails or writes nothing, in one child process."""
    tmp = tmp_path_factory.mktemp("ptxas")
    failing = tmp / "ptxas-fails"
    failing.write_text("#!/bin/sh\necho 'ptxas fatal   : boom' >&2\nexit 3\n")
    silent = tmp / "ptxas-silent"
    # `ptxas --version` (the report records it) answers; a compile writes an empty cubin
    silent.write_text(
        '#!/bin/sh\n[ "$1" = --version ] && { echo "release 12.8"; exit 0; }\n'
        'for a; do o="$a"; done\n: > "$o"\necho hello\n'
    )
    for script in (failing, silent):
        script.chmod(0o755)
    out = _python(
        """
        import contextlib, dataclasses, io, json, os
        from perfsuite import kernel_report
        from perfsuite.cli import main
        from perfsuite.kernel_report import build, options
        shape = options.SHAPES["gemma2-2b"]
        ours = lambda a, k: kernel_report.collect(shape, [a], ["bf16"], [k], with_cce=False)[0]
        res = {}
        first = {"forward": "plain", "backward": "list", "slices": "smooth+softcap"}
        for arch in ("sm_80", "sm_90a"):  # the TMA kernels: sm_90a only
            for kernel in ("forward", "backward", "slices", "forward_tma", "slices_tma"):
                for la in ours(arch, kernel):
                    spec = build.specialise(la)
                    name = "" if la.variant == first.get(kernel) else f"[{la.variant}]"
                    res[f"{kernel}{name} {arch}"] = {
                        "constants": {spec.jit.arg_names[k[0]]: v
                                      for k, v in spec.constexprs.items() if len(k) == 1},
                        "divisible": spec.divisible(),
                        "signature": {k: str(v) for k, v in spec.signature.items()},
                    }
            bwd = [la for la in ours(arch, "backward") if la.variant == "list"][0]
            res[f"build backward {arch}"] = build.build(bwd)
        # The default backward's slice GEMM, its heaviest variant, on Hopper.
        grad = ours("sm_90a", "slices")[-1]
        res["build slices sm_90a"] = {"variant": grad.variant, **build.build(grad)}
        bwd = ours("sm_90a", "backward")[0]
        try:
            build.specialise(dataclasses.replace(bwd, args={**bwd.args, "Targets": None}))
        except build.BuildError as exc:
            res["bad table"] = str(exc)
        argv = ["kernel-report", "--arch", "sm_80", "--kernel", "tile_keep", "--dtype", "fp32",
                "--no-cce", "--jobs", "1"]
        for script in ("failing", "silent"):
            build.ptxas_path = lambda arch, s=os.environ[script]: s
            said = io.StringIO()
            with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
                res[script] = [main(argv), " ".join(said.getvalue().split())]
        print(json.dumps(res))
        """,
        failing=str(failing),
        silent=str(silent),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_launch_specialised_as_the_jit_would(probe):
    fwd = probe["forward sm_90a"]
    assert fwd["constants"]["EVEN_D"] is True  # D = 2304 is a multiple of BLOCK_D
    assert fwd["constants"]["EVEN_V"] is True  # V = 256000 is a multiple of BLOCK_V
    for unit in ("stride_ed", "stride_cd"):
        assert fwd["constants"][unit] == 1
    # The default forward (slice backward, no filter) writes no tile LSEs.
    assert fwd["constants"]["HAS_TILE_LSE"] is False and fwd["constants"]["softcap"] is None
    assert probe["forward[list+smooth+softcap] sm_90a"]["constants"]["HAS_TILE_LSE"] is True
    assert {"E", "C", "N", "V", "D", "stride_en", "stride_cv"} <= set(fwd["divisible"])
    assert {"E", "C", "dE", "dC", "N", "V", "D"} <= set(probe["backward sm_90a"]["divisible"])
    # dE is fp32 (hardware adds everywhere); bf16 dC: atomics on sm_90a, the lock on sm_80.
    assert probe["backward sm_90a"]["constants"]["DC_ATOMIC"] is True
    assert probe["backward sm_80"]["constants"]["DC_ATOMIC"] is False
    assert probe["backward sm_80"]["constants"]["DE_ATOMIC"] is True
    assert probe["backward sm_90a"]["constants"]["USE_LIST"] is True
    # β = 0 with softcap and β > 0 without it: the flags a real launch gets.
    for arch in ("sm_80", "sm_90a"):
        for kernel in ("forward", "backward"):
            cap = probe[f"{kernel}[softcap] {arch}"]["constants"]
            smooth = probe[f"{kernel}[smooth] {arch}"]["constants"]
            assert cap["HAS_SOFTCAP"] is True and cap["HAS_SMOOTHING"] is False
            assert smooth["HAS_SOFTCAP"] is False and smooth["HAS_SMOOTHING"] is True
    # A launch that passes an argument the kernel does not take is a broken table.
    assert probe["bad table"].startswith("the launch table passes ['Targets']")


def test_tma_launches_specialise_with_tensor_descriptors(probe):
    """Triton's binder accepts the TMA launch table (tests/kernel_report/test_tma.py):
    descriptor arguments become ``tensordesc<…>`` with the config's block, the flags are
    the variant's."""
    fwd = probe["forward_tma[smooth+softcap] sm_90a"]
    cfg = tma_config("forward", "sm_90")
    assert fwd["signature"]["e_desc"] == f"tensordesc<bf16[{cfg.block_n}, 64]>"
    assert fwd["signature"]["c_desc"] == f"tensordesc<bf16[{cfg.block_v}, 64]>"
    assert fwd["constants"]["HAS_SOFTCAP"] is True and fwd["constants"]["EVEN_V"] is False
    weighted = probe["slices_tma[smooth+softcap+weight] sm_90a"]
    assert weighted["signature"]["out_desc"] == "tensordesc<bf16[128, 64]>"
    assert weighted["constants"]["SUBTILES"] == 4
    plain = probe["slices_tma[plain] sm_90a"]
    assert plain["signature"]["out_desc"] == "tensordesc<bf16[128, 128]>"
    assert plain["constants"]["SUBTILES"] == 2 and plain["constants"]["HAS_SMOOTHING"] is False
    assert {"N", "D", "v0", "width"} <= set(plain["divisible"])


def test_slice_kernel_specialised_and_built_without_spills(probe):
    """The default backward's Triton GEMM: every variant's flags, the slice's ints
    divisible by 16 (v0 = 0 and width 4096 at Gemma2-2B bf16), no spill on sm_90a."""
    for arch in ("sm_80", "sm_90a"):
        for variant in launches.VARIANTS:
            smooth, cap, weighted = launches.flags(variant, "smooth softcap weight")
            key = "slices" if variant == "smooth+softcap" else f"slices[{variant}]"
            spec = probe[f"{key} {arch}"]
            assert spec["constants"]["HAS_SMOOTHING"] is smooth
            assert spec["constants"]["HAS_SOFTCAP"] is cap
            assert spec["constants"]["HAS_WEIGHT"] is weighted
            assert spec["constants"]["EVEN_D"] is True
            assert {"E", "C", "Out", "v0", "width", "stride_on", "D"} <= set(spec["divisible"])
    built = probe["build slices sm_90a"]  # the heaviest: class weights spilled 84 B once
    assert built["variant"] == "smooth+softcap+weight"
    assert built["spill_store_bytes"] == built["spill_load_bytes"] == 0
    assert built["hgmma"] > 0 and built["atomic_adds"] == built["cas"] == 0
    assert 0 < built["registers"] <= 255 and built["ctas_per_sm"] >= 1


def test_every_variant_listed_for_every_dtype_and_arch():
    """Rows the report builds: the slice kernel's six variants and the two default
    variants the report used to skip, for every dtype and arch, at the slice width."""
    for arch in ("sm_80", "sm_90a"):
        for dtype in ("bf16", "fp16", "fp32"):
            todo = ours(GEMMA, arch, dtype, ["forward", "backward", "slices"])
            by_kernel: dict[str, set[str]] = {}
            for la in todo:
                by_kernel.setdefault(la.kernel, set()).add(la.variant)
            assert by_kernel["slices"] == set(launches.VARIANTS)
            for kernel in ("forward", "backward"):
                assert {"plain", "softcap", "smooth", "smooth+softcap"} <= by_kernel[kernel]
            width = launches.slice_width(GEMMA, dtype)
            for la in todo:
                if la.kernel == "slices":
                    assert la.args["v0"] == 0 and la.args["width"] == width
                    assert la.args["stride_on"] == width and la.config.endswith(f"-W{width}")
    # 64 MiB of bf16 G over N = 8192 rows: 4096 columns, 63 slices (the default's).
    assert launches.slice_width(GEMMA, "bf16") == 4096  # 63 slices: test_design_cost_table


def test_slice_specialisations_split_off_an_odd_last_slice():
    odd = options.Shape("odd", 8192, 256008, 2304)
    starts = launches.slice_starts(odd, 4096)
    assert [(s, v0) for s, v0, _ in starts] == [("", 0), ("+last", 62 * 4096)]
    assert starts[-1][2] == 256008 - 62 * 4096
    assert len(launches.slice_starts(GEMMA, 4096)) == 1


@pytest.mark.skipif(cce.available() is not None, reason="cut-cross-entropy not importable")
def test_cce_backward_gets_the_int32_vocab_order_cce_passes():
    import inspect

    from cut_cross_entropy import cce as cce_module

    assert "torch.int32" in inspect.getsource(cce_module.sort_logit_avg)
    for la in cce.launches(GEMMA, "bf16", "sm_90a"):
        if la.kernel == "cce_backward":
            assert la.args["VocabOrdering"].dtype == torch.int32
            assert la.args["grad_scale"] == 1.0 / GEMMA.n


def test_backward_locks_hold_no_tensor_core_work(probe):
    ampere, hopper = probe["build backward sm_80"], probe["build backward sm_90a"]
    assert ampere["cas"] >= 1 and ampere["hmma"] > 0  # the detector had a lock to look in
    assert ampere["critical_tensor_ops"] == 0
    assert ampere["nanosleep"] >= 1  # a failed acquire backs off instead of hammering
    assert hopper["cas"] == 0 and hopper["hgmma"] > 0 and hopper["critical_tensor_ops"] == 0
    for row in (ampere, hopper):
        assert row["spill_store_bytes"] == row["spill_load_bytes"] == 0
        assert 0 < row["registers"] <= 255 and row["ctas_per_sm"] >= 1


def test_failing_or_unreadable_ptxas_fails_the_report(probe):
    assert probe["failing"][0] == probe["silent"][0] == 1
    assert "ptxas failed (exit 3" in probe["failing"][1] and "boom" in probe["failing"][1]
    assert "ptxas -v log names no entry" in probe["silent"][1]


def test_cli_under_interpreter_env(monkeypatch, capfd):
    """TRITON_INTERPRET=1 must not stop the build (a child process does it): one build.
    ``main`` in this process (``python -m perfsuite``: the child's, and tests/test_cli.py)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    argv = ["kernel-report", "--arch", "sm_90a", "--kernel", "tile_keep", "--dtype", "bf16"]
    code, (out, err) = main([*argv, "--no-cce", "--json"]), capfd.readouterr()
    assert code == 0, err[-2000:]
    report = json.loads(out)
    (row,) = report["rows"]
    assert (row["kernel"], row["arch"], row["ok"], row["spill_store_bytes"]) == (
        "tile_keep",
        "sm_90a",
        True,
        0,
    )
    assert report["shape"]["v"] == 256000 and len(report["costs"]) >= 2


@pytest.mark.slow  # 7-30 s of ranks, workers or compiles here; `-m slow` runs it
def test_blackwell_is_accepted_and_launched_as_on_a_b200():
    """Issue 30: ``--arch sm_100a`` was refused. A Blackwell launch takes the configs
    ``configs.arch_of`` gives capability 10 and hardware 16-bit atomics, sizes its grids
    for a B200's 148 SMs and builds with the ptxas Triton ships for it; the CLI exits 0."""
    from perfsuite.kernels import forward
    from perfsuite.kernels.configs import PINNED

    assert options.cfg_arch("sm_100a") == "sm_100" and launches.GPUS["sm_100"][1] == 148
    assert os.path.basename(build.ptxas_path("sm_100a")) == "ptxas-blackwell"
    for kernel in ("forward", "backward", "slices"):
        for la in ours(GEMMA, "sm_100a", "bf16", [kernel]):
            assert la.config.startswith(PINNED[kernel, "sm_100", "bf16"].describe())
            assert la.overrides.get("DC_ATOMIC", True) is True  # as backward.native_atomics
    fwd = ours(GEMMA, "sm_100a", "bf16", ["forward"])[0]
    splits = -(-GEMMA.v // fwd.args["split_size"])
    assert splits == forward.splits_for(GEMMA.n, GEMMA.v, 128, 148) != 33  # H100: 33
    cmd = [sys.executable, "-m", "perfsuite", "kernel-report", "--arch", "sm_100a"]
    cmd += ["--kernel", "column_sum,target_logit", "--dtype", "bf16", "--no-cce", "--json"]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout)["rows"]
    assert len(rows) == 4 and {r["arch"] for r in rows} == {"sm_100a"}
    assert all(r["ok"] and r["spill_store_bytes"] == 0 and r["ctas_per_sm"] >= 1 for r in rows)


@pytest.mark.parametrize(
    ("capability", "arch"), [((8, 0), "sm_80"), ((9, 0), "sm_90a"), ((10, 0), "sm_100a")]
)
def test_report_keys_configs_as_the_launcher_does(monkeypatch, capability, arch):
    """``configs.arch_of`` on a GPU of ``capability`` and the report's ``cfg_arch`` for the
    arch it builds pick the same shipped configs."""
    from perfsuite.kernels import configs

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert configs.arch_of(torch.device("cuda", 0)) == options.cfg_arch(arch)


@pytest.mark.slow
def test_blackwell_slice_kernel_runs_on_tcgen05():
    """The default backward's heaviest slice build on sm_100a: tcgen05 MMAs, the fp32
    accumulator in 128 TMEM columns, no wgmma, no spill."""
    out = _python("""
        import dataclasses, json
        from perfsuite import kernel_report
        from perfsuite.kernel_report import build, options
        la = kernel_report.collect(options.SHAPES["gemma2-2b"], ["sm_100a"], ["bf16"],
                                   ["slices"], with_cce=False)[0][-1]
        print(json.dumps({"variant": la.variant, **build.build(la)}))
    """)
    assert out.returncode == 0, out.stderr[-3000:]
    built = json.loads(out.stdout)
    assert built["variant"] == "smooth+softcap+weight"
    assert built["utcmma"] > 0 and built["ldtm"] > 0 and built["hgmma"] == built["hmma"] == 0
    assert built["tmem_cols"] == 128 and built["spill_store_bytes"] == 0
    assert 0 < built["registers"] <= 255 and built["ctas_per_sm"] >= 1


@pytest.mark.slow  # 7-30 s of ranks, workers or compiles here; `-m slow` runs it
def test_launched_fraction_on_a_sample():
    """--launched runs the real tile-list kernels (interpreted) on a sample of rows:
    a flat softmax keeps every pair, and the modelled costs are the full ones."""
    cmd = [sys.executable, "-m", "perfsuite", "kernel-report", "--arch", "sm_90a", "--json"]
    cmd += ["--shape", "256,2048,64", "--kernel", "target_logit", "--dtype", "bf16"]
    cmd += ["--no-cce", "--launched", "random", "--sample-rows", "256"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    (row,) = report["launched"]
    assert row["gpu"] == "H100" and row["rows"] == 256 and row["workload"] == "random"
    assert row["pairs"] == (256 // 128) * (2048 // 256) and row["launched"] == row["pairs"]
    full = next(r for r in report["costs"] if r["impl"] == "ours" and r["gpu"] == "H100")
    assert row["bwd_l2_gb"] == pytest.approx(full["bwd_l2_gb"])


@pytest.mark.slow
def test_every_shipped_config_builds_without_spills():
    argv = ["kernel-report", "--arch", "sm_80,sm_90a,sm_100a", "--jobs", "2"]
    code = f"from perfsuite.cli import main\nraise SystemExit(main({argv!r}))"
    out = _python(code, timeout=900)  # ~3.5 min on a quiet 2-core CPU
    assert out.returncode == 0 and "FAIL" not in out.stdout, out.stdout[-3000:]


# --- CLI, tables ------------------------------------------------------------------


def test_cli_hooks():
    parser = argparse.ArgumentParser()
    kernel_report.add_arguments(parser)
    args = parser.parse_args(["--arch", "sm_80", "--json", "--shape", "8192,128256,4096"])
    assert args.arch == "sm_80" and args.json
    assert options.parse_shape(args.shape).d == 4096
    defaults = parser.parse_args([])
    assert defaults.arch == "sm_80,sm_90a" and options.parse_shape(defaults.shape) == GEMMA
    with pytest.raises(ValueError):
        options.parse_shape("8192,abc,2304")
