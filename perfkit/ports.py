"""The MAC addresses of a measurement's ports by role, as the local testbed gives them: a neutral
module, so that the dataplane seam (``perfkit.dataplane``) and the testbed both take them from here
without the seam importing the testbed.

Roles: the tester's ports ``p0`` and ``p1``, the DUT's ports ``a`` (faces ``p0``) and ``b`` (faces
``p1``), and the tester's ``anchor``. A lab gives its inventory's addresses instead
(``perfkit.dataplane.PortMacs``).
"""
from __future__ import annotations

#: MAC address of each port by role: tester ports p0/p1, DUT ports a (faces p0) and b (faces p1).
PORT_MACS = {"a": "02:00:00:00:01:01", "p0": "02:00:00:00:01:02",
             "b": "02:00:00:00:02:01", "p1": "02:00:00:00:02:02", "anchor": "02:00:00:00:03:01"}
