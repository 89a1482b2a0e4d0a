"""Read ``cuobjdump -sass`` listings: instruction counts and spin-lock critical sections
(from a global CAS, the lock's acquire, to the next global EXCH, its release: a tensor-core
instruction there holds the lock for a matrix multiply while other CTAs spin)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

TENSOR_OPS = ("HGMMA", "HMMA", "IMMA", "IGMMA", "QGMMA", "DMMA", "BMMA", "OMMA", "UTCHMMA")
_UTC_MMA = re.compile(r"UTC[A-Z]*MMA")  # tcgen05.mma: UTCHMMA, UTCQMMA, UTCIMMA, UTCOMMA
# "/*0a80*/   @!P0 HGMMA.64x128x16.F32.BF16 gdesc[UR4], RZ, !UPT ;"
_LINE = re.compile(
    r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_x]+)*)"
)


@dataclass(frozen=True)
class Instr:
    addr: int
    opcode: str  # with modifiers: ATOMG.E.CAS.STRONG.GPU

    @property
    def base(self) -> str:
        return self.opcode.split(".")[0]

    @property
    def mods(self) -> set[str]:
        return set(self.opcode.split(".")[1:])


def instructions(text: str) -> list[Instr]:
    return [Instr(int(m.group(1), 16), m.group(2)) for m in _LINE.finditer(text)]


def is_utc_mma(i: Instr) -> bool:
    """A Blackwell ``tcgen05.mma`` (any input kind)."""
    return _UTC_MMA.fullmatch(i.base) is not None


def _atomic(i: Instr, kind: str) -> bool:
    """A global ``CAS`` (a lock's acquire) or ``EXCH`` (its release)."""
    return i.base == "ATOMG" and kind in i.mods


def is_add(i: Instr) -> bool:
    """A global reduction/atomic add (``RED.E.ADD.F32``, ``REDG.E.ADD``, ``ATOMG.E.ADD``)."""
    adds = any(m == "FADD" or m.startswith("ADD") for m in i.mods)
    return i.base in ("RED", "REDG", "ATOMG") and adds


def counts(instrs: list[Instr]) -> dict[str, int]:
    return {
        "hgmma": sum(i.base == "HGMMA" for i in instrs),
        "hmma": sum(i.base == "HMMA" for i in instrs),
        "utcmma": sum(is_utc_mma(i) for i in instrs),
        "ldtm": sum(i.base == "LDTM" for i in instrs),
        "ldgsts": sum(i.base == "LDGSTS" for i in instrs),
        "membar": sum(i.base == "MEMBAR" for i in instrs),
        "cas": sum(_atomic(i, "CAS") for i in instrs),
        "exch": sum(_atomic(i, "EXCH") for i in instrs),
        "atomic_adds": sum(is_add(i) for i in instrs),
        "nanosleep": sum(i.base == "NANOSLEEP" for i in instrs),
        # TMA: bulk tensor loads / stores (and reductions) through a tensor descriptor.
        "tma_loads": sum(i.base == "UTMALDG" for i in instrs),
        "tma_stores": sum(i.base in ("UTMASTG", "UTMAREDG") for i in instrs),
        "instructions": len(instrs),
    }


def critical_tensor_ops(instrs: list[Instr]) -> list[tuple[int, Instr]]:
    """(address of the acquiring CAS, tensor instruction) for each one inside a lock (a CAS
    with no EXCH after it is open to the end of the listing)."""
    found = []
    held: int | None = None
    for i in instrs:
        if _atomic(i, "CAS"):
            held = i.addr if held is None else held
        elif _atomic(i, "EXCH"):
            held = None
        elif held is not None and (i.base in TENSOR_OPS or is_utc_mma(i)):
            found.append((held, i))
    return found


def digest(instrs: list[Instr]) -> str:
    """A short hash of the opcode sequence (two builds differ iff their code does)."""
    return hashlib.sha1("\n".join(i.opcode for i in instrs).encode()).hexdigest()[:12]


# HGMMA.64x256x16 or HMMA.16816: the shape in the opcode.
_SHAPE = re.compile(r"\d+x\d+x\d+|(?<=\.)\d{4,5}(?=\.|$)")
# tcgen05.mma's is in its instruction descriptor: TTGIR's ``ttng.tc_gen5_mma`` names the
# A (MxK) and D (MxN) tiles.
_TC_GEN5 = re.compile(
    r"ttng\.tc_gen5_mma [^:]*: !ttg\.memdesc<(\d+)x(\d+)x(\w+),[^>]*>, "
    r"!ttg\.memdesc<\d+x\d+x\w+,[^>]*>, !ttg\.memdesc<\d+x(\d+)xf32"
)


def mma_shape(instrs: list[Instr], ttgir: str = "") -> str | None:
    """The tensor-core instructions and their M×N×K (``HGMMA 64x256x16``; several joined
    with ``+``), or None; Blackwell's from TTGIR's ``tc_gen5_mma`` tile."""
    shapes = {}
    for i in instrs:
        if i.base in ("HGMMA", "HMMA"):
            found = _SHAPE.search(i.opcode)
            shapes.setdefault(f"{i.base} {found.group(0) if found else '?'}", None)
    base = next((i.base for i in instrs if is_utc_mma(i)), None)
    if base:
        for m, _k, dtype, n in _TC_GEN5.findall(ttgir):
            # One instruction covers at most M 128 and N 256 (cta_group::1): a larger tile
            # is issued as several; kind::f16 takes K = 16 per instruction.
            k = 16 if dtype in ("bf16", "f16") else "?"
            shapes.setdefault(f"{base} {min(int(m), 128)}x{min(int(n), 256)}x{k}", None)
        if not any(s.startswith(base) for s in shapes):
            shapes[f"{base} ?"] = None
    return "+".join(shapes) or None
