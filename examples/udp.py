# A TRex STL profile for the examples (the same as tests/describe/udp.py).
from trex_stl_lib.api import STLPktBuilder, STLProfile, STLStream, STLTXCont, Ether, IP, UDP


class Udp:
    """UDP from 198.18.0.1 to 198.19.0.1:5001, size bytes with FCS."""

    def get_streams(self, tunables=(), **kwargs):
        import argparse
        p = argparse.ArgumentParser()
        p.add_argument("--size", type=int, default=64)
        p.add_argument("--dport", type=int, default=5001)
        args = p.parse_args(tunables)
        pkt = Ether() / IP(src="198.18.0.1", dst="198.19.0.1") / UDP(sport=1234, dport=args.dport, chksum=0)
        pkt = pkt / (b"\0" * max(0, args.size - 4 - len(pkt)))
        return [STLStream(packet=STLPktBuilder(pkt=pkt), mode=STLTXCont(pps=1000))]


def register():
    return Udp()
