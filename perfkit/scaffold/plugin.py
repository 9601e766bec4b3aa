"""The project of ``perfkit dataplane new NAME --dir DIR --plugin``: a Python package ``NAME`` that
registers the dataplane ``NAME`` in the entry-point group ``perfkit.dataplanes``
(docs/dataplane-api.md): a ``Dataplane`` subclass with its traffic (the STL profile's frames, built
in Python) and a reference model (``emit``, ``check_output``), the program (compiled on first use,
or by ``make``), the STL profile, a campaign (``dataplane: NAME``), a Makefile that installs the
package into the Python environment that runs perfkit (``pip install -e``) and its tests."""
from __future__ import annotations

from perfkit.scaffold.program import C_SOURCE, CAMPAIGN, GITIGNORE, PROFILE

PYPROJECT = """# @name@: a dataplane for perfkit, found through the entry point below (perfkit's docs/dataplane-api.md).
# perfkit itself is not a dependency: install @name@ into the environment that runs perfkit (make).
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "@name@"
version = "0.1.0"
description = "@name@: an XDP program (MAC swap, XDP_TX) measured by perfkit"
requires-python = ">=3.10"

[tool.setuptools]
packages = ["@name@"]

[tool.setuptools.package-data]
@name@ = ["*.bpf.c"]

[project.entry-points."perfkit.dataplanes"]
@name@ = "@name@.dataplane:DATAPLANE"
"""

MAKEFILE = """# make: install @name@ into the Python environment that runs perfkit (pip install -e: an edit of
# the package counts at once) and compile its program; make test: the tests (as root, once installed);
# make uninstall: take it out of that environment again.
# That environment is the one of the first `perfkit` on PATH (its script's #! line); PYTHON=... for another.
PERFKIT ?= perfkit
PYTHON ?= $(shell sed -n '1s/^\\#!//p' "$$(command -v $(PERFKIT))" 2>/dev/null | grep python || echo python3)

all: install object

install:
\t$(PYTHON) -m pip install -q --disable-pip-version-check --no-deps -e .

object: install
\t$(PYTHON) -m @name@.build

test:
\t$(PYTHON) -m pytest -q tests

uninstall:
\t$(PYTHON) -m pip uninstall -q -y @name@

clean:
\trm -rf @name@/build *.egg-info

.PHONY: all install object test uninstall clean
"""

INIT = '''"""@name@: an XDP program measured by perfkit, as the dataplane plugin ``@name@`` (``dataplane.py``)."""
'''

BUILD = '''"""@name@.bpf.c compiled with clang, once per source: into build/ beside this file, named by the
source's hash (an edited program is compiled again on first use, an unchanged one is not).
``python -m @name@.build`` (what ``make`` runs) compiles it now and prints the object's path."""
from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from perfkit.errors import ConfigError

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "@name@.bpf.c"
CLANG = os.environ.get("CLANG", "clang")
CFLAGS = ["-O2", "-g", "-target", "bpf", f"-I/usr/include/{os.uname().machine}-linux-gnu", "-Wall"]


def object_file() -> Path:
    """The object of the program as it is now, compiled first if it was not yet."""
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join([CLANG, *CFLAGS]).encode()).hexdigest()[:16]
    obj = HERE / "build" / f"@name@-{digest}.o"
    if obj.is_file():
        return obj
    obj.parent.mkdir(exist_ok=True)
    tmp = obj.with_name(f".{obj.name}.{os.getpid()}")
    cmd = [CLANG, *CFLAGS, "-c", str(SOURCE), "-o", str(tmp)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-4:])
        raise ConfigError(SOURCE.name, " ".join(cmd), f"a program clang compiles; it said: {tail or proc.returncode}")
    os.replace(tmp, obj)
    return obj


if __name__ == "__main__":
    print(object_file())
'''

MODEL = '''"""The reference model of @name@.bpf.c: what it does with a frame it gets."""
from __future__ import annotations

from perfkit.dataplane import Emitted


def emit(frame: bytes) -> Emitted:
    """The verdict, the counter it goes to and the frame sent back (MAC addresses swapped)."""
    if len(frame) < 14:
        return Emitted("XDP_DROP", "runt")
    if frame[0] & 1:  # a group address cannot be a source: not sent back
        return Emitted("XDP_DROP", "group_dst")
    return Emitted("XDP_TX", "tx", frame[6:12] + frame[0:6] + frame[12:])
'''

DATAPLANE = '''"""@name@ as a perfkit dataplane (perfkit's docs/dataplane-api.md): its program and counters, its
traffic (the frames of udp.py, built here in Python) and its reference model (model.py)."""
from __future__ import annotations

import ctypes
import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from perfkit.dataplane import API_VERSION, BpfControl, BpfDut, Dataplane, Emitted, PortMacs, Traffic
from perfkit.layouts import Struct
from perfkit.stl.fieldengine import FieldEngine, flow_engine
from perfkit.stl.signature import SIGNATURE, SIGNATURE_MAGIC

from @name@ import model
from @name@.build import object_file

IP_OFF, L4_OFF, SIG_OFF = 14, 34, 42
FCS_LEN = 4
SPORT = 10000


class @name@_counter(Struct):
    """struct @name@_counter (``perfkit dataplane check`` compares it with the object's BTF)."""

    _fields_ = [("packets", ctypes.c_uint64), ("bytes", ctypes.c_uint64)]


class Stat(enum.IntEnum):
    """enum @name@_stat: the counters' indexes; the last member is their count."""

    TX = 0
    GROUP_DST = 1
    RUNT = 2
    STATS = 3

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass
class Control(BpfControl):
    """The program loaded: no configuration, per-CPU counters in @name@_stats."""

    name: ClassVar[str] = "@name@"
    object_file: ClassVar = object_file
    entry: ClassVar[str] = "xdp_@name@"
    config_map: ClassVar[str | None] = None
    stats_map: ClassVar[str] = "@name@_stats"
    stat: ClassVar[type[Stat]] = Stat
    stat_rec: ClassVar[type[@name@_counter]] = @name@_counter
    config: Any = None


@dataclass(frozen=True)
class UdpTraffic(Traffic):
    """udp.py's frames: IPv4/UDP from 198.18.0.1 to 198.19.0.1:5001, one UDP source port per flow,
    perfkit's signature after the UDP header; sent back out of the port they came in by."""

    frame_size: int = 64
    flows: int = 1
    ingress: str = "a"
    verdict: str = "XDP_TX"
    macs: PortMacs = field(default_factory=PortMacs)

    def packet(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        src, dst = self.macs.into(self.ingress)
        hdr = (Ether(src=src, dst=dst) / IP(src="198.18.0.1", dst="198.19.0.1", id=0, ttl=64) /
               UDP(sport=SPORT + flow % self.flows, dport=5001, chksum=0))
        pad = self.frame_size - FCS_LEN - len(hdr) - SIGNATURE.size
        return bytes(hdr / Raw(SIGNATURE.pack(SIGNATURE_MAGIC, stream, seq, ts) + b"\\0" * pad))

    def expected_output(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        out = model.emit(self.packet(flow, seq, stream, ts)).out
        assert out is not None, "the model sends every frame of the traffic back"
        return out

    def field_engine(self, flow_op: str = "inc") -> FieldEngine:
        writes = [("udp.sport", L4_OFF, 2, SPORT)] if self.flows > 1 else []
        return flow_engine(writes, self.flows, [IP_OFF + 10], [[(IP_OFF, L4_OFF)]], SIG_OFF, flow_op,
                           l3_offset=IP_OFF)

    def on_ports(self, macs: PortMacs) -> UdpTraffic:
        return dataclasses.replace(self, macs=macs)


class MacSwap(Dataplane):
    name = "@name@"
    title = "@name@ (MAC swap, XDP_TX; plugin)"
    api_version = API_VERSION
    forward_counters = frozenset({"tx"})
    layouts = {"@name@_counter": @name@_counter}

    def traffic(self, frame_size: int, flows: int, params: Mapping[str, Any]) -> UdpTraffic:
        return UdpTraffic(frame_size=frame_size, flows=flows)

    def load(self, traffic: Traffic, ifindex_a: int, ifindex_b: int, cpumap: bool = False) -> BpfDut:
        return BpfDut(Control(Control.open(cpumap=cpumap)), None, traffic)

    def emit(self, traffic: Traffic, frame: bytes) -> Emitted:
        return model.emit(frame)

    def check_output(self, traffic: Traffic, frame: bytes) -> str | None:
        """None when ``frame`` is what the program sends back for the traffic's frame of its flow and
        signature, else the first difference."""
        if len(frame) < SIG_OFF + SIGNATURE.size:
            return f"frame is {len(frame)} bytes: too short for perfkit's signature at byte {SIG_OFF}"
        magic, stream, seq, ts = SIGNATURE.unpack_from(frame, SIG_OFF)
        if magic != SIGNATURE_MAGIC:
            return f"no signature at byte {SIG_OFF} (magic 0x{magic:04x})"
        flow = int.from_bytes(frame[L4_OFF:L4_OFF + 2], "big") - SPORT
        if not 0 <= flow < traffic.flows:
            return f"UDP source port {flow + SPORT} is not one of the traffic's {traffic.flows} flows"
        want = traffic.expected_output(flow, seq, stream, ts)
        if len(frame) != len(want):
            return f"frame is {len(frame)} bytes, expected {len(want)}"
        for i, (got, exp) in enumerate(zip(frame, want)):
            if got != exp:
                return f"byte {i} is 0x{got:02x}, expected 0x{exp:02x}"
        return None


DATAPLANE = MacSwap()
'''

TEST = r'''"""@name@ against its reference model, through BPF_PROG_TEST_RUN (as root, once `make` installed it)."""
import pytest

from perfkit import dataplanes
from perfkit.dataplane import Emitted


@pytest.fixture(scope="module")
def nf():
    dp = dataplanes.get("@name@")  # the installed package, found through its entry point
    traffic = dp.traffic(64, 4, dp.validate({}))
    dut = dp.load(traffic, 1, 2)
    yield dp, traffic, dut
    dut.close()


def test_perfkit_finds_the_installed_package():
    assert dataplanes.origins()["@name@"].distribution == "@name@"
    assert "@name@" not in dataplanes.broken()


def test_frames_go_back_with_their_macs_swapped(nf):
    dp, traffic, dut = nf
    before = dut.counters()
    for flow in range(traffic.flows):
        frame = traffic.packet(flow, seq=flow)
        res = dut.program.test_run(frame)
        assert (res.verdict, res.data_out) == ("XDP_TX", dp.emit(traffic, frame).out)
        assert dp.check_output(traffic, res.data_out) is None
    assert dut.counters()["tx"] == before["tx"] + traffic.flows


def test_a_group_address_is_dropped_and_counted(nf):
    dp, traffic, dut = nf
    before = dut.counters()
    frame = b"\xff" * 6 + traffic.packet(0)[6:]
    assert dut.program.test_run(frame).verdict == "XDP_DROP"
    assert dp.emit(traffic, frame) == Emitted("XDP_DROP", "group_dst")
    assert dut.counters()["group_dst"] == before["group_dst"] + 1


def test_check_output_refuses_a_frame_not_sent_back(nf):
    dp, traffic, _ = nf
    why = dp.check_output(traffic, traffic.packet(1))  # its MAC addresses not swapped
    assert why is not None and "expected" in why
'''

README = """# @name@

An XDP program measured by perfkit as a dataplane plugin: the package `@name@` registers the
dataplane `@name@` in perfkit's entry-point group `perfkit.dataplanes` (`pyproject.toml`).

| file | what |
|---|---|
| `@name@/@name@.bpf.c` | the XDP program: every frame back out of the port it came in by (`XDP_TX`), MAC addresses swapped |
| `@name@/dataplane.py` | the `Dataplane`: its counters, its traffic (`udp.py`'s frames, in Python), its model |
| `@name@/model.py` | the reference model: the verdict, counter and frame sent back for a frame |
| `@name@/build.py` | compiles the program on first use (or by `make`), once per source |
| `udp.py` | the same traffic as a TRex STL profile (tunables `size`, `flows`) |
| `campaign.yaml` | `dataplane: @name@`: two frame sizes, a max-rate trial and a short NDR search |

`make` installs the package (`pip install -e .`) into the Python environment that runs perfkit
(the first `perfkit` on PATH; `make PYTHON=/path/to/python` for another) and compiles the
program; `make test` runs the tests, `make uninstall` takes the package out again. Then, as root:
`perfkit dataplane check @name@`, `perfkit trial --dataplane @name@`, `perfkit run campaign.yaml --report`.
"""

FILES = {"@name@/@name@.bpf.c": C_SOURCE, "@name@/__init__.py": INIT, "@name@/build.py": BUILD,
         "@name@/model.py": MODEL, "@name@/dataplane.py": DATAPLANE, "pyproject.toml": PYPROJECT,
         "Makefile": MAKEFILE, "udp.py": PROFILE, "campaign.yaml": CAMPAIGN.replace("@dataplane@", "@name@"),
         "tests/test_@name@.py": TEST, ".gitignore": GITIGNORE + "build/\n*.egg-info/\n", "README.md": README}
