"""A minimal TRex STL profile (argparse tunables), for perfkit's tests of TRex's own loader."""
import argparse

from trex.stl.api import STLPktBuilder, STLStream, STLTXCont


class MinProfile:
    def get_streams(self, tunables=(), **kwargs):
        parser = argparse.ArgumentParser(prog="trex_min_profile.py")
        parser.add_argument("--pps", type=float, default=1)
        args = parser.parse_args(tunables)
        return [STLStream(packet=STLPktBuilder(pkt_buffer=bytes(60)), mode=STLTXCont(pps=args.pps))]


def register():
    return MinProfile()
