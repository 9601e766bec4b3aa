"""``perfkit trex-profile show``: the first frames perfkit's XDP generator sends for a TRex STL
profile, built by the real generator program (BPF_PROG_TEST_RUN), without a testbed -- to diff
against TRex's own simulator (``stl-sim``). The IP addresses are TRex's; ``--testbed-addresses``
shows them as the local testbed sends them (``perfkit.stl.addresses``)."""
from __future__ import annotations

import argparse
from typing import Any

from perfkit.cli.options import add_json, check_writable, emit, integer
from perfkit.errors import ConfigError
from perfkit.stl import addresses as stladdresses
from perfkit.stl import macs as stlmacs
from perfkit.stl import profile as stlprofile
from perfkit.testbed import stlgen
from perfkit.testbed.sink import Capture, write_pcap


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trex-profile", help="TRex STL profiles on the local generator", description=__doc__)
    cmds = p.add_subparsers(dest="trex_profile_command", required=True, metavar="COMMAND")
    show = cmds.add_parser("show", help="the first frames the local generator sends for a profile",
                           description=__doc__)
    show.add_argument("path", metavar="PATH", help="the TRex STL profile (.py, .yaml, .pcap)")
    show.add_argument("-t", dest="tunables", action="append", default=[], metavar="KEY=VALUE",
                      help="a tunable of the profile, as TRex's console takes it (repeat, or KEY=VALUE,KEY=VALUE)")
    show.add_argument("--port", type=integer(0, 255, "a TRex port number"), default=0,
                      help="the TRex port the profile is loaded for (profiles get the port's parity; default 0)")
    show.add_argument("--count", type=integer(1, 1_000_000, "a frame count"), default=16,
                      help="frames to build (default 16)")
    show.add_argument("--pcap", default=None, metavar="FILE", help="write the frames to this pcap file")
    show.add_argument("--no-signature", action="store_true",
                      help="leave perfkit's signature out: the frames exactly as TRex sends them")
    show.add_argument("--testbed-addresses", action="store_true",
                      help="the frames the local testbed sends: IP addresses outside 198.18.0.0/15 and 2001:2::/48 "
                           "mapped into them (default: the addresses as TRex sends them)")
    macs = show.add_mutually_exclusive_group()
    macs.add_argument("--port-mac", default=None, metavar="SRC[,DST]",
                      help="the TRex port's MAC and the destination its configuration gives (default: the local "
                           "testbed's tester port and the DUT port it faces)")
    macs.add_argument("--trex-cfg", default=None, metavar="FILE",
                      help="TRex's trex_cfg.yaml: the port's port_info src_mac and dest_mac")
    add_json(show)
    show.set_defaults(func=run_show)


def run_show(args: argparse.Namespace) -> int:
    if args.pcap:
        check_writable("--pcap", args.pcap)
    macs = port_macs(args.port, args.port_mac, args.trex_cfg)
    profile = stlprofile.load(args.path, args.tunables, args.port, macs=macs)
    maps: tuple[stladdresses.Mapping, ...] = ()
    if args.testbed_addresses:
        profile, maps = stladdresses.for_testbed(profile)
    compiled = stlgen.compile_profile(profile, signature=not args.no_signature)
    frames = stlgen.show(compiled, args.count)
    if args.pcap:
        write_pcap(args.pcap, [Capture(i * 1000, len(f), f) for i, f in enumerate(frames)])
    streams = [{"name": st.name, "weight": w, "frame_size": len(c.frame) + 4, "mode": _mode(st),
                "mac_src_override_by_pkt": bool(st.flags & stlmacs.SRC_FROM_PACKET),
                "mac_dst_override_mode": (st.flags >> 1) & 3, "signature_offset": c.sig_offset or None,
                "signature": "yes" if c.sig_offset else f"no: {c.why_unsigned}"}
               for st, c, w in zip(profile.streams, compiled.streams, compiled.weights)]
    out: dict[str, Any] = {"profile": profile.source, "streams": streams, "pcap": args.pcap,
                           "port_mac": macs.src.hex(":"), "dest_mac": macs.dst.hex(":"), "macs_from": macs.origin,
                           "testbed_addresses": bool(args.testbed_addresses), "address_maps": [str(m) for m in maps],
                           "frames": [f.hex() for f in frames]}
    emit(out, args.json, _human)
    return 0


def port_macs(port: int, port_mac: str | None, trex_cfg: str | None) -> stlmacs.PortMacs:
    """The MACs of TRex port ``port``: ``--port-mac``, else ``--trex-cfg``, else the local testbed's."""
    if port_mac:
        return stlmacs.parse_port_mac(port_mac, port)
    if trex_cfg:
        return stlmacs.from_trex_cfg(trex_cfg, port)
    return stlmacs.testbed_macs(port)


def _human(d: dict) -> str:
    lines = [f"{d['profile']}: port {d['port_mac']}, destination {d['dest_mac']} ({d['macs_from']})"]
    lines += [f"  stream {s['name']}: {s['mode']}, weight {s['weight']}, {s['frame_size']}-byte frames (FCS included), signature "
              f"{s['signature']}" + (f" at byte {s['signature_offset']}" if s["signature_offset"] else "")
              for s in d["streams"]]
    if d["address_maps"]:
        lines.append(f"  addresses mapped for the testbed: {', '.join(d['address_maps'])}")
    for i, f in enumerate(d["frames"]):
        lines.append(f"{i:6d}  {f}")
    if d["pcap"]:
        lines.append(f"wrote {len(d['frames'])} frames to {d['pcap']}")
    return "\n".join(lines)


def _mode(st: stlprofile.StlStream) -> str:
    what = "continuous" if not st.count else f"{st.count} packets" + (
        f" in bursts of {st.burst}, {st.ibg:g} us apart" if st.burst else " (single burst)")
    return what + (f", starting after {st.isg:g} us" if st.isg else "")


__all__ = ["register", "ConfigError"]
