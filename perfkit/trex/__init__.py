"""perfkit's side of TRex: its client library kept out of perfkit's process, and TRex's terms.

- ``client`` (perfkit side) runs ``worker`` (TRex side, stdlib + TRex only) with the TRex
  environment's Python: TRex's client swaps scapy for its bundled 2.4.3 on import;
- ``streams``: perfkit's traffic as the stream specs the worker makes into TRex streams;
- ``stats``: TRex's counters and latency histogram as a ``TrialResult``.

The ``Generator`` on a TRex server is ``perfkit.generators.trex``; TRex STL profiles on perfkit's
own generator are ``perfkit.stl``.
"""
