"""MUFU / total SASS per softcap build (sm_90a bf16, Gemma2-2B), from kernel-report's own build."""

import collections
import re
import sys


def launches(kernels):
    from perfsuite.kernel_report import slice_launches, tma_launches
    from perfsuite.kernel_report.names import parse_shape

    shape = parse_shape("gemma2-2b")
    las = slice_launches.our_launches(shape, ["sm_90a"], ["bf16"], None)
    las += tma_launches.tma_launches(shape, ["sm_90a"], ["bf16"], None)
    return [la for la in las if "softcap" in la.variant and la.kernel in kernels.split(",")]


def one(job):
    kernels, i = job
    la = launches(kernels)[i]
    from perfsuite.kernel_report import build

    grab = {}
    real = build._run

    def run(cmd, what):
        out = real(cmd, what)
        if what == "cuobjdump -sass":
            grab["text"] = out.stdout
        return out

    build._run = run
    r = build.build(la)
    mufu = collections.Counter(re.findall(r"MUFU\.(\w+)", grab["text"]))
    return (
        f"{la.kernel}[{la.variant}] regs {r['registers']} spill {r['spill_store_bytes']} "
        f"total {r['instructions']} MUFU {sum(mufu.values())} {dict(sorted(mufu.items()))}"
    )


if __name__ == "__main__":
    from concurrent.futures import ProcessPoolExecutor

    n = len(launches(sys.argv[1]))
    with ProcessPoolExecutor(2) as ex:
        for line in ex.map(one, [(sys.argv[1], i) for i in range(n)]):
            print(line, flush=True)
