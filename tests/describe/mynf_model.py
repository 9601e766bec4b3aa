"""The reference model of mynf.bpf.c and a configuration hook, for tests/test_describe.py."""
import ipaddress

P1, B = bytes.fromhex("020000000202"), bytes.fromhex("020000000201")


def expected(frame: bytes, traffic) -> bytes | str:
    """The frame mynf emits (to the tester's p1, from the DUT's b) for an allowed UDP frame to
    198.19.0.1:5001; other destinations have no flow (XDP_DROP)."""
    if frame[30:34] != ipaddress.IPv4Address("198.19.0.1").packed or frame[36:38] != (5001).to_bytes(2, "big"):
        return "XDP_DROP"
    return P1 + B + frame[12:]


def allow_more(obj, scenario) -> None:
    """A hook: one more allowed source prefix (198.18.1.0/24), by the map's raw bytes."""
    allowed = obj.map("allowed")
    allowed.update((24).to_bytes(4, "little") + ipaddress.IPv4Address("198.18.1.0").packed, (1).to_bytes(4, "little"))
