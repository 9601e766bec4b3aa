"""Stateless traffic: the frames a generator sends, packet after packet.

- ``perfkit.stl.fieldengine``: perfkit's own field engine, how a dataplane's traffic profile varies
  its template frame from packet to packet (byte offsets, flow variables, checksums kept right);
- ``perfkit.stl.signature``: the 12-byte signature the generator writes into every frame and the
  sink reads back;
- ``perfkit.stl.profile``: TRex STL profiles, loaded by TRex's own library and checked for what the
  local XDP generator can send (``StlProfile``);
- ``perfkit.stl.vm``: TRex's field engine (the STL "VM") modelled in Python: what TRex puts in the
  n-th packet of a stream, the reference the XDP generator is checked against.

What runs them: ``perfkit.testbed.livegen`` (a field engine, in ``bpf/gen.bpf.c``),
``perfkit.testbed.stlgen`` (an STL profile compiled for that program) and
``perfkit.trex.streams`` (a field engine as TRex's instructions).
"""
