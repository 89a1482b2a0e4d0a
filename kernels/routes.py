"""Which route runs the slice algorithm on a GPU per (arch, dtype), for ``engine="auto"``:
``"triton"`` or ``"cublas"`` (docs/kernel.md, "Routes"); each entry says where it comes
from. Pure Python: ``.ci/gpu_plan.py`` reads it by path.
"""

from __future__ import annotations

from typing import NamedTuple

ROUTES = ("triton", "cublas")
ARCHS = ("sm_80", "sm_90", "sm_100")  # configs.ARCHS
DTYPES = ("fp32", "bf16", "fp16")  # configs.DTYPE_NAMES' values

UNMEASURED = "unmeasured; call 1 of .ci/gpu-run measures both"


class Route(NamedTuple):
    route: str
    provenance: str


# (arch, dtype) -> the route engine="auto" runs there, and why. An entry no GPU has timed
# both routes for keeps the route that has always run (the Triton one); each (arch, dtype)
# is its own measurement (fp16 is not bf16's).
TABLE: dict[tuple[str, str], Route] = {
    (arch, dtype): Route("triton", UNMEASURED) for arch in ARCHS for dtype in DTYPES
}
TABLE["sm_90", "bf16"] = Route(
    "triton",
    "measured on an H200 at 32ea309, Gemma2-2B bf16 β 0.1 softcap 30, both routes in one "
    "process (do_bench): the Triton route with sm_90's TMA configs ('best pair') 68.7 ms "
    "fwd+bwd, the cuBLAS route 76.5, in reports/nvidia-h200/raw/8-tma-candidates/tma.jsonl "
    "(at 7ea9b07, with two unfused stages, the cuBLAS route had been the faster: "
    "reports/nvidia-h200/raw/6-issue44-call1/)",
)


def route_for(arch: str, dtype: str) -> str:
    """The route for an arch (``configs.arch_of``: sm_80, sm_90, sm_100) and a dtype name
    (fp32, bf16, fp16); ``ValueError`` naming an unknown one."""
    try:
        return TABLE[arch, dtype].route
    except KeyError:
        raise ValueError(
            f"no route for ({arch!r}, {dtype!r}): archs {ARCHS}, dtypes {DTYPES}"
        ) from None


def other_route(route: str) -> str:
    """The route ``route`` is not: what its ablation method measures."""
    if route not in ROUTES:
        raise ValueError(f"unknown route {route!r}; use one of {ROUTES}")
    return ROUTES[1 - ROUTES.index(route)]


def method_for(route: str) -> str:
    """The benchmark method that forces ``route`` (baselines/ours.py)."""
    return f"ours-route-{route}"
