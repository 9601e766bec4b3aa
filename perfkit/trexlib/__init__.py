"""TRex's own client library, kept out of perfkit's process.

``client`` (perfkit side) runs ``worker`` (TRex side, stdlib + TRex only) with the TRex
environment's Python: TRex's client swaps scapy for its bundled 2.4.3 on import.
"""
