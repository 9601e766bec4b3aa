"""Explain a difference: where the nanoseconds per packet go between two sets of trials.

- ``kinds``: what kind of work a function is (the XDP program, a BPF helper, the driver, GRO, the
  stack, the scheduler, other).
- ``cost``: a function's cost in ns per packet in a trial (its share of the DUT's packet-thread
  samples x the trial's ``dut_ns_per_packet``), self and inclusive, with its uncertainty; the tidy
  frame of them.
- ``sets``: the two sets of trials, from stored runs (two scenarios, two values of a knob, two runs).
- ``gap``: ``explain(a, b)``, the gap decomposed into the functions that carry it.
- ``flame``: the differential flame graph of ns per packet.
- ``movers``: ``top_movers``, the functions that moved most between two runs (``perfkit ab``'s comment).

``docs/explain.md`` describes the method and ``perfkit explain``.
"""

#: Functions an explanation names at most, by default (``perfkit explain --top``).
TOP = 5


def __getattr__(name: str) -> object:
    """``top_movers``, imported when first used: its modules import scipy, which every ``perfkit``
    command would pay (``perfkit.perfci.comment`` and the CLI import this package)."""
    if name == "top_movers":
        from perfkit.explain.movers import top_movers

        return top_movers
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["TOP", "top_movers"]
