"""TRex STL profile: perfkit's PGW-U traffic (seed 001) for TRex's own console.

    trex> start -f trex_profiles/pgwu.py --port 0 -m 1mpps -t frame_size=64,flows=1000
    trex> start -f trex_profiles/pgwu.py --port 1 -m 1mpps -t dir=dl,frame_size=512    (TRex < 2.8x)
    trex> start -f trex_profiles/pgwu.py --port 1 -t --dir dl --frame_size 512          (argparse tunables)

The streams come from ``perfkit.generators.trex.build_streams`` -- the same translation of perfkit's
traffic profile that ``TRexGenerator`` uses -- so perfkit must be importable (see README.md).
Tunables are listed in ``TUNABLES``; direction follows the port (even ports uplink) unless ``dir``
says otherwise.
"""
from __future__ import annotations

import argparse
from typing import Any

from perfkit.errors import ConfigError
from perfkit.generators.trex import LATENCY_PPS, build_streams, load_stl
from perfkit.scenario import Scenario

#: name -> (type, default, help). ``dir`` also accepts TRex's own ``direction`` (0/1 = port parity).
TUNABLES: dict[str, tuple[type, Any, str]] = {
    "dir": (str, None, "ul or dl (default: by port parity, even ports ul)"),
    "frame_size": (int, 64, "user-side frame size with FCS [bytes]; uplink frames are 36 (+4 tagged) longer"),
    "flows": (int, 1, "distinct sessions the stream walks through (TEID and UE address per flow)"),
    "sessions": (int, 0, "sessions installed in the DUT (0: as many as flows)"),
    "vlan": (int, 0, "1: 802.1Q on both sides, as the DUT is configured"),
    "udp_csum": (int, 0, "1: the DUT computes the outer UDP checksum on encapsulation"),
    "flow_op": (str, "inc", "inc, dec or random: how the flow variable walks the flows"),
    "pps": (float, 1000.0, "base rate [packets/s]; the console's -m scales it"),
    "latency_pg_id": (int, -1, "pg_id of an STLFlowLatencyStats stream of flow 0 (-1: none)"),
    "latency_pps": (float, LATENCY_PPS, "rate of the latency stream [packets/s], taken out of pps"),
    "packet_macs": (int, 1, "1: send the profile's MACs; 0: the port's (L2/L3 mode)"),
}


def parse_tunables(tunables: list[str]) -> dict[str, Any]:
    """Argparse-style tunables (``-t --flows 1000 --dir dl``) as a dict; ``-`` and ``_`` are equal."""
    parser = argparse.ArgumentParser(prog="pgwu.py", description=__doc__.splitlines()[0])
    for name, (kind, default, help_) in TUNABLES.items():
        flags = {f"--{name}", f"--{name.replace('_', '-')}"} | ({"--direction"} if name == "dir" else set())
        parser.add_argument(*sorted(flags), dest=name, type=kind, default=argparse.SUPPRESS, help=help_)
    return vars(parser.parse_args(tunables))


def direction_of(value: int | str) -> str:
    """``ul``/``dl``, or TRex's direction (port parity: 0 ul, 1 dl)."""
    if str(value).lower() in ("ul", "dl"):
        return str(value).lower()
    if str(value) in ("0", "1"):
        return ("ul", "dl")[int(value)]
    raise ConfigError("dir", value, "ul, dl (or TRex's direction 0, 1)")


class STLS1:
    """perfkit's PGW-U streams for one TRex port. ``stl``: the TRex API namespace (tests pass fakes)."""

    def __init__(self, stl: Any = None):
        self.stl = stl

    def get_streams(self, direction: int | str = "ul", frame_size: int = 64, flows: int = 1, port_id: int = 0,
                    tunables: list[str] | None = None, **kw: Any) -> list[Any]:
        """TRex calls this with ``direction`` (port parity), ``port_id`` and either the ``-t`` values as
        keywords (older consoles) or ``tunables``, the ``-t`` words for argparse (newer ones)."""
        opts: dict[str, Any] = {name: default for name, (_, default, _) in TUNABLES.items()}
        opts.update(frame_size=frame_size, flows=flows, **kw)
        opts.update(parse_tunables(list(tunables or [])))
        unknown = sorted(set(opts) - set(TUNABLES))
        if unknown:
            raise ConfigError("tunable", unknown[0], TUNABLES)
        opts = {name: kind(opts[name]) if opts[name] is not None else None
                for name, (kind, _, _) in TUNABLES.items()}
        scenario = Scenario("pgwu", frame_size=opts["frame_size"], flows=opts["flows"],
                            params={"direction": direction_of(opts["dir"] or direction), "sessions": opts["sessions"],
                                    "vlan": bool(opts["vlan"]), "udp_csum": bool(opts["udp_csum"])})
        pg_id = opts["latency_pg_id"] if opts["latency_pg_id"] >= 0 else None
        return build_streams(self.stl or load_stl(), scenario.traffic(), opts["pps"],
                             flow_op=opts["flow_op"], latency_pg_id=pg_id, latency_pps=opts["latency_pps"],
                             packet_macs=bool(opts["packet_macs"]))


def register() -> STLS1:
    return STLS1()
