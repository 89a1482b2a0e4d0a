"""The TMA fast path in kernel-report: its launches, the MMA shape and TMA counts read
from SASS/TTGIR (stored snippets of real sm_90a / sm_100a builds), the persistent grid's
waves, and the columns in the console table (Triton's binder on the TMA launches:
tests/test_kernel_report.py, in its build child)."""

from __future__ import annotations

from perfsuite import kernel_report
from perfsuite.kernel_report import launches, options, render, sass
from perfsuite.kernels.configs import tma_config

GEMMA = options.SHAPES["gemma2-2b"]


def tma(dtype: str, arch: str, kernels=("forward_tma", "slices_tma")) -> list[launches.Launch]:
    return kernel_report.collect(GEMMA, [arch], [dtype], kernels, with_cce=False)[0]


# From `cuobjdump -sass` of slices_tma[smooth+softcap] bf16 sm_90a (Triton 3.7.1).
_HOPPER = """
        /*1cc0*/                   UTMALDG.2D [UR8], [UR14], desc[UR16] ;
        /*1cd0*/                   UTMALDG.2D [UR24], [UR14], desc[UR16] ;
        /*1e20*/                   HGMMA.64x256x16.F32.BF16 R24, gdesc[UR20], R24 ;
        /*1e40*/                   HGMMA.64x256x16.F32.BF16 R24, gdesc[UR20], R24, gsb0 ;
        /*2ec0*/                   UTMASTG.2D [UR4], [UR10] ;
        /*2ed0*/              @!P0 UTMASTG.2D [UR4], [UR12] ;
"""
# From slices/forward builds on sm_100a: tcgen05's opcode has no shape; TTGIR does.
_BLACKWELL = """
        /*0a00*/                   UTMALDG.2D [UR8], [UR14], desc[UR16] ;
        /*0b00*/                   UTCHMMA gdesc[UR24], gdesc[UR26], tmem[UR6], idesc[UR29] ;
        /*0c00*/                   UTCBAR [UR10], URZ ;
"""
_TTGIR = (
    "%acc_1 = ttng.tc_gen5_mma %e_40, %acc_42, %acc_32, %false, %acc_39, %acc_34[%true] "
    "{is_async} : !ttg.memdesc<128x64xbf16, #shared, #smem, mutable>, "
    "!ttg.memdesc<64x256xbf16, #shared2, #smem, mutable>, "
    "!ttg.memdesc<128x256xf32, #tmem, #ttng.tensor_memory, mutable>, "
    "!ttg.memdesc<1xi64, #shared1, #smem, mutable> loc(#loc214)"
)


def test_mma_shape_and_tma_counts_from_sass():
    hopper = sass.instructions(_HOPPER)
    assert sass.mma_shape(hopper) == "HGMMA 64x256x16"
    c = sass.counts(hopper)
    assert (c["tma_loads"], c["tma_stores"], c["hgmma"]) == (2, 2, 2)
    blackwell = sass.instructions(_BLACKWELL)
    assert sass.mma_shape(blackwell, _TTGIR) == "UTCHMMA 128x256x16"
    # A 256-row tile is two M-128 instructions per K step.
    tall = _TTGIR.replace("memdesc<128x64xbf16", "memdesc<256x64xbf16")
    tall = tall.replace("memdesc<128x256xf32", "memdesc<256x128xf32")
    assert sass.mma_shape(blackwell, tall) == "UTCHMMA 128x128x16"
    assert sass.mma_shape(blackwell) == "UTCHMMA ?"  # no TTGIR: the shape is not guessed
    ampere = sass.instructions("        /*0160*/      HMMA.16816.F32.BF16 R12, R4, R8, R12 ;")
    assert sass.mma_shape(ampere) == "HMMA 16816"
    assert sass.mma_shape(sass.instructions("        /*0010*/     FADD R1, R2, R3 ;")) is None


def test_tma_launches_only_where_the_path_runs():
    assert tma("bf16", "sm_80") == [] and tma("fp32", "sm_90a") == []
    for arch in ("sm_90a", "sm_100a"):
        todo = tma("bf16", arch)
        kernels = {la.kernel for la in todo}
        assert kernels == {"forward_tma", "slices_tma"}
        for la in todo:
            weighted = "weight" in la.variant
            cfg = tma_config(la.kernel.removesuffix("_tma"), options.cfg_arch(arch), weighted)
            tile = (la.args["BLOCK_N"], la.args["BLOCK_V"], la.args["BLOCK_D"])
            assert tile == (cfg.block_n, cfg.block_v, cfg.block_d)
            assert tile[2] == 64 and {tile[0], tile[1]} <= {128, 256}  # over BLOCK_D 64
            assert la.num_stages == cfg.num_stages and la.work is not None
            assert la.args["e_desc"].block_shape == [cfg.block_n, 64]
            assert la.args["c_desc"].block_shape == [cfg.block_v, 64]
        weighted = [la for la in todo if la.kernel == "slices_tma" and "weight" in la.variant]
        assert weighted and all(la.args["out_desc"].block_shape == [128, 64] for la in weighted)


def test_persistent_grid_is_one_wave_at_gemma():
    fwd, cfg = tma("bf16", "sm_90a")[0], tma_config("forward", "sm_90")
    splits, split_size, items = launches.forward_grid(GEMMA, "sm_90a", cfg)
    row_blocks = GEMMA.n // cfg.block_n
    assert items == row_blocks * splits and split_size % 256 == 0
    assert splits * split_size >= GEMMA.v > (splits - 1) * split_size
    grid = launches.persistent_grid(fwd, measured_ctas=1)
    assert grid["grid"] == 132 and grid["waves"] == 1.0  # H100: 132 SMs × 1 CTA
    assert grid["work_per_cta"] == items / 132
    # Two CTAs per SM (as sm_100a's lighter builds fit): the launcher's grid doubles.
    assert launches.persistent_grid(fwd, measured_ctas=2)["grid"] == 264
    assert launches.persistent_grid(fwd, measured_ctas=2)["waves"] == 1.0
    assert launches.persistent_grid(fwd, measured_ctas=0) == {}  # fits no CTA: no grid
    small = launches.Launch("k", "v", "bf16", "sm_90a", None, {}, 8, work=20)
    assert launches.persistent_grid(small, 1) == {"grid": 20, "waves": 20 / 132, "work_per_cta": 1}
    no_work = launches.Launch("k", "v", "bf16", "sm_80", None, {}, 8)
    assert launches.persistent_grid(no_work, 1) == {}


def _row(**over) -> dict:
    row = {
        "kernel": "slices_tma", "variant": "plain", "config": "N128-V256-D64-w8-s2-W4096",
        "dtype": "bf16", "arch": "sm_90a", "ours": True, "ok": True, "error": None,
        "declared_ctas_per_sm": 1, "registers": 254, "spill_store_bytes": 0,
        "spill_load_bytes": 0, "shared_bytes": 115728, "tmem_cols": 0, "ctas_per_sm": 1,
        "hgmma": 4, "hmma": 0, "utcmma": 0, "ldtm": 0, "ldgsts": 0, "membar": 0, "cas": 0,
        "exch": 0, "atomic_adds": 0, "nanosleep": 0, "critical_tensor_ops": 0,
        "instructions": 2304, "mma_shape": "HGMMA 64x256x16", "tma_loads": 6,
        "tma_stores": 4, "grid": 132, "waves": 1.0, "work_per_cta": 7.76,
    }  # fmt: skip
    return {**row, **over}


def test_table_shows_shape_tma_and_waves(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    rows = [
        _row(),
        _row(variant="softcap", registers=194, instructions=5048),
        _row(kernel="forward", variant="plain", mma_shape="HGMMA 64x128x16", tma_loads=0,
             tma_stores=0, grid=None, waves=None, work_per_cta=None),
    ]  # fmt: skip
    console = render.TrimmedConsole()
    for kernel, mine in render.by_kernel(rows).items():
        render.kernel_table(console, kernel, mine)
    text = capsys.readouterr().out
    assert max(map(len, text.splitlines())) <= 80
    tma, portable = text.split("forward:")
    assert "HGMMA 64x256x16" in tma  # shared by both builds: named once, above the table
    header = tma.splitlines()[3].split()
    assert header[-4:] == ["TMA", "instrs", "grid", "waves"]
    assert tma.splitlines()[5].split()[-4:] == ["6/4", "2304", "132", "1.00"]
    # The portable forward: no TMA (0 in every build) and no persistent grid (no column).
    assert "HGMMA 64x128x16" in portable and "TMA, TMEM" in " ".join(portable.split())
    assert "waves" not in portable and "grid" not in portable
