"""Traffic generators: the hardware boundary of every trial and search.

A ``Generator`` is set up for one ``Scenario`` (testbed up, traffic profile loaded, DUT configured)
and then answers ``measure(rate_pps, duration)`` as often as a search wants. Backends, by name:

- ``xdp``: perfkit's own XDP live-frames generator on the local veth testbed (the embedded default);
- ``trex``: a TRex STL client (lab);
- ``sim``: simulated DUTs with known behaviour, for tests and benchmarks;
- ``lab``: the agents of a lab's DUT and tester hosts, over SSH (``perfkit.lab``).
"""
from __future__ import annotations

import importlib
from typing import Any

from perfkit.errors import ConfigError
from perfkit.generators.base import Generator
from perfkit.scenario import Scenario

#: Backend name -> "module:class". Modules are imported only when used.
BACKENDS = {
    "xdp": "perfkit.generators.xdp:XdpGenerator",
    "trex": "perfkit.generators.trex:TRexGenerator",
    "sim": "perfkit.generators.sim:SimGenerator",
    "lab": "perfkit.generators.lab:LabGenerator",
}


def create(backend: str, scenario: Scenario, **options: Any) -> Generator:
    """Create the generator called ``backend`` for ``scenario``; ``options`` go to its constructor."""
    if backend not in BACKENDS:
        raise ConfigError("generator", backend, BACKENDS)
    module_name, cls_name = BACKENDS[backend].split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    return cls(scenario, **options)


__all__ = ["BACKENDS", "Generator", "create"]
