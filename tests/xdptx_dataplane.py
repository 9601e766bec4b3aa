"""A reflector perfkit did not write (``tests/data/xdp_tx.bpf.c``): every frame goes back out of the
port it came in on (XDP_TX) with its Ethernet addresses swapped. perfkit loads and attaches it;
the sink on the tester port that sent the frames counts and checks them."""
from __future__ import annotations

import contextlib
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from perfkit import dataplanes
from perfkit.dataplane import BenchSpec, Dataplane, DutProgram, Emitted, Traffic
from perfkit.dataplanes.calib.traffic import SIG_OFF, CalibTraffic
from perfkit.errors import ConfigError
from perfkit.libbpf import BpfObject, Program
from perfkit.stl.signature import SIGNATURE

NAME = "xdptx"
SOURCE = Path(__file__).parent / "data" / "xdp_tx.bpf.c"


def build(out_dir: Path) -> Path:
    """The reflector's object, compiled into ``out_dir`` (outside perfkit's tree)."""
    obj = out_dir / "xdp_tx.o"
    subprocess.run(["clang", "-O2", "-g", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu", "-c", str(SOURCE),
                    "-o", str(obj)], check=True)
    return obj


@dataclass(frozen=True)
class TxTraffic(CalibTraffic):
    verdict: str = "XDP_TX"

    def expected_output(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        frame = self.packet(flow, seq, stream, ts)
        return frame[6:12] + frame[:6] + frame[12:]


class TxDut(DutProgram):
    def __init__(self, obj_path: Path):
        self.obj = BpfObject(obj_path)

    @property
    def program(self) -> Program:
        return self.obj.program("xdp_reflect")

    def counters(self) -> dict[str, int]:
        m = self.obj.map("tx_count")
        return {"tx": sum(struct.unpack("=Q", v)[0] for v in m.percpu_values(m.lookup(struct.pack("=I", 0)) or b""))}

    def close(self) -> None:
        self.obj.close()


class TxDataplane(Dataplane):
    name = NAME
    title = "reflector"
    forward_counters = frozenset({"tx"})

    def __init__(self, obj_path: Path):
        self.obj_path = obj_path

    def traffic(self, frame_size: int, flows: int, params: Mapping[str, Any]) -> Traffic:
        return TxTraffic(frame_size=frame_size, flows=flows)

    def load(self, traffic: Traffic, ifindex_a: int, ifindex_b: int, cpumap: bool = False) -> DutProgram:
        if cpumap:
            raise ConfigError("dut_cores", "several", "1")
        return TxDut(self.obj_path)

    def emit(self, traffic: Traffic, frame: bytes) -> Emitted:
        return Emitted("XDP_TX", "tx", frame[6:12] + frame[:6] + frame[12:])

    def check_output(self, traffic: Traffic, frame: bytes) -> str | None:
        """The frame the model emits for the offered packet of the flow and signature it carries."""
        assert isinstance(traffic, TxTraffic)
        magic, stream, seq, ts = SIGNATURE.unpack_from(frame, SIG_OFF)
        flow = (struct.unpack_from("!H", frame, 34)[0] - 10000) % traffic.flows
        want = traffic.expected_output(flow, seq, stream, ts)
        return None if frame == want else f"differs from the model's {want[:16].hex()}... at the Ethernet header"

    def bench_spec(self, frame_size: int, params: Mapping[str, Any], seed: int = 1) -> tuple[BenchSpec, DutProgram]:
        raise ConfigError("dataplane xdptx", "prog-bench", "no bench spec")


@contextlib.contextmanager
def registered(obj_path: Path) -> Iterator[Dataplane]:
    """``perfkit.dataplanes.get("xdptx")`` finds it while the block runs."""
    dp, original = TxDataplane(obj_path), dataplanes.get

    def get(name: str) -> Dataplane:
        return dp if name == NAME else original(name)

    dataplanes.get = get  # type: ignore[assignment]
    try:
        yield dp
    finally:
        dataplanes.get = original  # type: ignore[assignment]
