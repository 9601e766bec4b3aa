"""Fuzz a dataplane's XDP program against its reference model, frame by frame (BPF_PROG_TEST_RUN).

For every registered dataplane (``perfkit.dataplanes.names()``) the program is loaded as the
testbed loads it (``Dataplane.load(traffic, 1, 2)``) and fed frames built from the dataplane's own
traffic (``Traffic.packet`` and ``Traffic.expected_output`` of every value of its variant and
every boolean parameter switched): nothing here knows a protocol.

- ``perfkit.fuzz.frames``: the valid frames, where their headers are, and the kinds of mutation;
- ``perfkit.fuzz.run``: running them through the kernel and the model, and the verdicts;
- ``perfkit.fuzz.result``: what a run found (``FuzzResult``, ``Failure``).

``fuzz(name, frames)`` runs one dataplane (in ``workers`` processes, each with its own copy of the
program); ``bench/fuzz.py`` runs a million frames per dataplane, ``tests/test_fuzz.py`` a sample.
"""
from perfkit.fuzz.frames import KINDS
from perfkit.fuzz.result import FAILURE_KINDS, Failure, FuzzResult
from perfkit.fuzz.run import fuzz, harness_rate

__all__ = ["FAILURE_KINDS", "KINDS", "Failure", "FuzzResult", "fuzz", "harness_rate"]
