"""Every launch of ours the report builds: the launch tables of each kernel in one registry.

Apart from ``launches`` so that the slice kernel's table (``slice_launches``, which builds
on ``launches``' helpers) joins the others without an import cycle.
"""

from __future__ import annotations

from .launches import Launch, Shape, _backward, _forward, _helpers, cfg_arch
from .slice_launches import launches as _slices

OURS = {
    "forward": _forward,
    "slices": _slices,
    "backward": _backward,
    "helpers": _helpers,
}


def our_launches(
    shape: Shape, archs: list[str], dtypes: list[str], kernels: list[str] | None = None
) -> list[Launch]:
    """Every shipped (kernel, arch, dtype) config × variant, optionally for some kernels."""
    from perfsuite.kernels.configs import shipped_configs

    shipped = {(k, a, dt) for k, a, dt, _ in shipped_configs()}
    out = []
    for arch in archs:
        for dtype in dtypes:
            for group, make in OURS.items():
                if group != "helpers" and (group, cfg_arch(arch), dtype) not in shipped:
                    continue
                out += [
                    launch
                    for launch in make(shape, dtype, arch)
                    if kernels is None or launch.kernel in kernels
                ]
    return out
