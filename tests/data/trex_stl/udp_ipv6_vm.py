# perfkit's own test profile (not TRex's): IPv6 UDP with addresses outside 2001:2::/48, the
# field engine walking the low 64 bits of the source and the UDP checksum fixed per packet.
from trex_stl_lib.api import *


class STLUdpIpv6(object):

    def get_streams(self, direction=0, **kwargs):
        pkt = (Ether() / IPv6(src="2001:db8::1", dst="2001:db8:1::5") / UDP(sport=1025, dport=12) / ('x' * 30))
        vm = STLScVmRaw([STLVmFlowVar(name="lo", min_value=1, max_value=100, size=8, op="inc"),
                         STLVmWrFlowVar(fv_name="lo", pkt_offset="IPv6.src", offset_fixup=8),
                         STLVmFixChecksumHw(l3_offset="IPv6", l4_offset="UDP", l4_type=CTRexVmInsFixHwCs.L4_TYPE_UDP)])
        return [STLStream(packet=STLPktBuilder(pkt=pkt, vm=vm), mode=STLTXCont(pps=10))]


def register():
    return STLUdpIpv6()
