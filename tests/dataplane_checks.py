"""Checks every dataplane's tests make of the kernel against the reference model."""
from __future__ import annotations

from perfkit.dataplane import Dataplane, DutProgram, Emitted, Traffic


def kernel_does_as_the_model_says(dp: Dataplane, traffic: Traffic, dut: DutProgram, frame: bytes,
                                  of_the_traffic: bool = True) -> Emitted:
    """Run ``frame`` through the loaded ``dut`` (set up for ``traffic`` on the testbed's ports): its
    verdict, its output and the one counter that rose must be the model's (``dp.emit``), and, when
    every forwarded frame is one of the traffic's (``of_the_traffic``), pass ``dp.check_output``.
    Returns the model's answer."""
    want = dp.emit(traffic, frame)
    before = dut.counters()
    res = dut.program.test_run(frame)
    after = dut.counters()
    assert res.verdict == want.verdict
    assert {k: after[k] - before[k] for k in after if after[k] != before[k]} == {want.stat: 1}
    if want.out is not None:
        assert res.data_out == want.out
        assert not of_the_traffic or dp.check_output(traffic, res.data_out) is None
    return want
