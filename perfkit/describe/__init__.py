"""Dataplane descriptions: a network function measured with no code inside perfkit.

A YAML file the user keeps beside their XDP program (``mylb.dataplane.yaml``) says what perfkit
needs: the object (or how to build it) and its XDP program, how it is attached, its configuration
written through BTF, its counters, its traffic (a TRex STL profile) and, optionally, a model.
``load(path)`` reads it into a ``perfkit.dataplane.Dataplane``; ``perfkit.dataplanes.get`` calls it
for any ``--dataplane`` (or campaign ``dataplane:``) that is a path. The format is in
``docs/descriptions.md``.

- ``schema``: the file's keys, checked (``Description``);
- ``build``: the object, built by the file's command and cached by the hash of its sources;
- ``values``: the testbed values strings substitute (``{ifindex_b}``, ``{mac_p1}`` ...);
- ``btfconfig``: globals and map entries written by their BTF names and types;
- ``counters``: the program's counters (index names from a BTF enum), for trials and the exporter;
- ``traffic``: the STL profile as the scenario's ``Traffic``;
- ``hooks``: Python and shell hooks (large tables, the NF's own loader);
- ``dataplane``: ``DescribedDataplane`` and its loaded program ``DescribedDut``.
"""
from __future__ import annotations

from pathlib import Path

from perfkit.describe.dataplane import DescribedDataplane, DescribedDut
from perfkit.describe.schema import Description, is_description, read

__all__ = ["DescribedDataplane", "DescribedDut", "Description", "is_description", "load", "read"]


def load(path: str | Path) -> DescribedDataplane:
    """The dataplane the description file at ``path`` describes (checked; nothing built or loaded yet)."""
    return DescribedDataplane(read(path))
