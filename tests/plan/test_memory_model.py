"""The memory model against the real CPU meter, and its sizes in errors in their own unit
(a shape a typo made huge was refused with "predicted peak ~2235179424.3 GiB")."""

from __future__ import annotations

import pytest

from perfsuite.measure.memory import measure_cpu_peak
from perfsuite.method import Case
from perfsuite.plan.memory_model import DTYPE_BYTES, exceeds, floor_bytes, gate_bytes
from perfsuite.plan.registry import all_methods
from perfsuite.run.correctness import gate_reference, run_once
from perfsuite.run.inputs import make_inputs
from perfsuite.units import fmt_bytes


@pytest.mark.parametrize(("dtype", "softcap"), [("fp32", None), ("bf16", 30.0)])
def test_measured_peaks_stay_within_the_predicted(dtype, softcap):
    """Eager's fwd+bwd holds at most its declared logit copies (and its gradients); the
    whole gate at most ``gate_bytes``, and over half of it (a model that far off refuses
    shapes that fit). The softcap's extra reference copy was found here. Each dtype and
    each softcap once, not every pair: the model's terms for the two are independent."""
    n, v, d = 256, 2048, 64
    case = Case(n, v, d, dtype, softcap=softcap)
    eager = all_methods()["eager"]
    inputs = make_inputs(case, 0)
    loss_fn = eager.prepare(case, inputs.c)
    held = measure_cpu_peak(lambda: run_once(loss_fn, inputs)).delta
    size = DTYPE_BYTES[dtype]
    declared = eager.caps.holds.copies[softcap is not None] * n * v * size + (n + v) * d * size
    assert floor_bytes("fwd+bwd", n, v, d, dtype) <= held <= declared
    gate = measure_cpu_peak(lambda: gate_reference(case, 0, None)).delta
    predicted = gate_bytes(n, v, d, dtype, softcap is not None)
    assert predicted / 2 < gate <= predicted, (gate, predicted)


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (24_379_392, "23.2 MiB"),
        (16 * 2**30, "16 GiB"),
        (285.9 * 2**40, "286 TiB"),
        (3 * 2**50, "3 PiB"),
        (2235179424.3 * 2**30, "2.08 EiB"),
    ],
)
def test_a_size_reads_in_the_largest_unit_it_fills(nbytes, text):
    assert fmt_bytes(nbytes) == text


def test_the_too_big_wording_keeps_its_numbers_short():
    said = exceeds(int(2235179424.3 * 2**30), "the gate", 16 * 2**30, "cpu")
    assert said.startswith("predicted peak ~2.08 EiB (the gate) exceeds the 16 GiB this cpu")
