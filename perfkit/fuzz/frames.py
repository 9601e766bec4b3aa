"""The frames a fuzz run feeds a program: valid ones built from the dataplane's own traffic (the
seeds), where their headers are (dissected with scapy), and their mutations:

- ``random``: random bytes;
- ``random_tail``: a valid frame cut at a header boundary, random bytes after;
- ``truncate``: every truncation of every valid frame (down to the 14 bytes the kernel's test run
  needs);
- ``byte``: every byte of the header region (at least the first 80 bytes) set to 0, 0xff, +-1 and
  with its low and high bit flipped;
- ``field16``: every 16-bit word at an even offset of every header set to values that break length
  fields: 0, 1, +-1, +-8, 0x7fff, 0x8000, 0xffff, the bytes left from the header or the word on;
- ``bitflip``, ``multi_byte``: 1-4 random bit flips, 1-6 random bytes, in the header region;
- ``length_trunc``: a random 16-bit word of a header set as in ``field16``, then truncated;
- ``pad``: a valid frame with 1-64 random bytes appended (a trailer its headers do not count).

The systematic kinds (truncate, byte, field16) come first, sampled if the budget is smaller; the
random kinds fill the rest (``plan``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import numpy as np

from perfkit.dataplane import Dataplane
from perfkit.errors import ConfigError, PerfkitError
from perfkit.progbench import TEST_RUN_MAX

#: The smallest frame BPF_PROG_TEST_RUN takes for XDP (an Ethernet header); shorter ones get EINVAL.
MIN_FRAME = 14
#: The largest frame it gives a program in one buffer (a page less the XDP headroom and skb_shared_info).
MAX_FRAME = TEST_RUN_MAX
#: Frames per batch (the counters are checked per batch).
BATCH = 2048
#: Bytes always mutated from the start of a frame, however short its headers.
MIN_HEADER_REGION = 80
#: Random bytes appended by ``pad`` at most, and beyond a cut by ``random_tail``.
PAD_MAX, TAIL_MAX = 64, 200
#: Share of the budget the systematic kinds may take (the rest is random).
SYSTEMATIC_SHARE = 0.5
#: Frame sizes the valid frames are built with, besides the dataplane's smallest.
SEED_SIZES = (128, 600)
#: Flows of the traffic the program is set up for (its frames of the first and last flow are seeds).
FLOWS = 4
#: Random kinds and their weights.
RANDOM_KINDS = {"random": 5, "random_tail": 10, "bitflip": 25, "multi_byte": 20, "length_trunc": 25, "pad": 15}
SYSTEMATIC_KINDS = ("truncate", "byte", "field16")
KINDS = SYSTEMATIC_KINDS + tuple(RANDOM_KINDS)


def configs(dp: Dataplane) -> list[dict[str, Any]]:
    """The parameter sets the program is set up with: every value of the variant, each with its
    defaults and with every boolean parameter switched (combinations the dataplane refuses are left out)."""
    base = dp.validate({})
    variant = dp.param(dp.variant) if dp.variant else None
    values = variant.choices if variant is not None and variant.choices else ((base[dp.variant],) if variant else (None,))
    flips = [p.name for p in dp.params if p.kind is bool]
    out: list[dict[str, Any]] = []
    for value in values:
        given = {dp.variant: value} if variant is not None else {}
        for flip in [None, *flips]:
            params = dict(given, **({flip: not base[flip]} if flip else {}))
            try:
                checked = dp.validate(params)
                dp.traffic(dp.min_frame_size(checked), FLOWS, checked)
            except ConfigError:
                continue
            if checked not in out:
                out.append(checked)
    return out


def config_name(dp: Dataplane, params: Mapping[str, Any]) -> str:
    base = dp.validate({})
    changed = [f"{k}={v}" for k, v in params.items() if k == dp.variant or v != base[k]]
    return " ".join(changed) or "defaults"


def header_spans(frame: bytes) -> list[tuple[str, int, int]]:
    """(layer name, start, end) of every header scapy finds in ``frame`` (Ethernet first), up to the payload."""
    from scapy.layers.l2 import Ether
    from scapy.packet import NoPayload, Padding, Raw

    out: list[tuple[str, int, int]] = []
    try:
        layer, off = Ether(frame), 0
        while not isinstance(layer, (NoPayload, Raw, Padding)):
            size = len(layer.self_build())
            if size <= 0 or off + size > len(frame):
                break
            out.append((layer.name, off, off + size))
            off += size
            layer = layer.payload
    except Exception:  # noqa: BLE001 - whatever scapy cannot dissect ends the headers
        pass
    return out or [("Ethernet", 0, min(14, len(frame)))]


@dataclass
class Seeds:
    """The valid frames, padded into one array, with where their headers are."""

    frames: list[bytes]
    arr: np.ndarray
    """(n, width) uint8: frame i in row i, zero after its length."""
    lens: np.ndarray
    region: np.ndarray
    """Bytes from the start that mutations touch: the headers, at least ``MIN_HEADER_REGION``."""
    bounds: list[np.ndarray]
    """Header boundaries per frame (where ``random_tail`` cuts)."""
    words: list[np.ndarray]
    """(offset, header start) of every 16-bit word at an even offset of a header, per frame."""

    @property
    def width(self) -> int:
        return self.arr.shape[1]

    @classmethod
    def build(cls, frames: list[bytes]) -> Seeds:
        frames = [f[:MAX_FRAME - PAD_MAX] for f in dict.fromkeys(frames) if len(f) >= MIN_FRAME]
        if not frames:
            raise PerfkitError("fuzz: the dataplane's traffic gave no frame to start from")
        width = min(MAX_FRAME, max(max(len(f) for f in frames) + PAD_MAX, MIN_HEADER_REGION + TAIL_MAX))
        arr = np.zeros((len(frames), width), dtype=np.uint8)
        lens = np.array([len(f) for f in frames], dtype=np.int64)
        region, bounds, words = [], [], []
        for i, f in enumerate(frames):
            arr[i, :len(f)] = np.frombuffer(f, dtype=np.uint8)
            spans = header_spans(f)
            end = max(e for _, _, e in spans)
            region.append(min(len(f), max(end, MIN_HEADER_REGION)))
            bounds.append(np.array(sorted({MIN_FRAME, *(s for _, s, _ in spans if s >= MIN_FRAME),
                                           *(e for _, _, e in spans)}), dtype=np.int64))
            words.append(np.array([(o, s) for _, s, e in spans for o in range(s, e - 1, 2)], dtype=np.int64).reshape(-1, 2))
        return cls(frames, arr, lens, np.array(region, dtype=np.int64), bounds, words)


def seed_frames(dp: Dataplane, params_list: list[dict[str, Any]]) -> list[bytes]:
    """Frames of every parameter set at the smallest and a few larger sizes: the first and last flow's
    offered frame, and the first flow's expected output (fed back in)."""
    out: list[bytes] = []
    for params in params_list:
        sizes = sorted({dp.min_frame_size(params), *SEED_SIZES})
        for size in sizes:
            try:
                traffic = dp.traffic(size, FLOWS, params)
            except ConfigError:
                continue
            out += [traffic.packet(0), traffic.packet(FLOWS - 1), traffic.expected_output(0)]
    return out


def _word_values(word: int, left: int, left_here: int) -> list[int]:
    """Values for a 16-bit word that break a length field: ``left`` bytes from its header's start
    to the end of the frame, ``left_here`` from the word."""
    vals = [0, 1, word - 1, word + 1, word - 8, word + 8, 0x7FFF, 0x8000, 0xFFFF, left, left - 1, left + 1,
            left_here, word * 2, word >> 1]
    return sorted({v & 0xFFFF for v in vals} - {word})


# -- recipes: (seed, new length, up to two byte writes) ----------------------------------------------------
def systematic(seeds: Seeds) -> dict[str, np.ndarray]:
    """Every truncation, byte change and 16-bit word change of every seed, as recipe arrays per kind:
    columns seed, new length (-1: unchanged), pos1, val1, pos2, val2 (pos -1: none)."""
    out: dict[str, list[tuple[int, int, int, int, int, int]]] = {k: [] for k in SYSTEMATIC_KINDS}
    for i, f in enumerate(seeds.frames):
        n = len(f)
        out["truncate"] += [(i, cut, -1, 0, -1, 0) for cut in range(MIN_FRAME, n)]
        for pos in range(int(seeds.region[i])):
            b = f[pos]
            for v in sorted({0, 0xFF, b ^ 0x01, b ^ 0x80, (b + 1) & 0xFF, (b - 1) & 0xFF} - {b}):
                out["byte"].append((i, -1, pos, v, -1, 0))
        for off, start in seeds.words[i]:
            word = (f[off] << 8) | f[off + 1]
            for v in _word_values(word, n - start, n - off):
                out["field16"].append((i, -1, off, v >> 8, off + 1, v & 0xFF))
    return {k: np.array(v, dtype=np.int64).reshape(-1, 6) for k, v in out.items()}



def apply_recipes(seeds: Seeds, recipes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = seeds.arr[recipes[:, 0]]
    lens = np.where(recipes[:, 1] >= 0, recipes[:, 1], seeds.lens[recipes[:, 0]])
    idx = np.arange(len(recipes))
    for p, v in ((2, 3), (4, 5)):
        m = recipes[:, p] >= 0
        rows[idx[m], recipes[m, p]] = recipes[m, v].astype(np.uint8)
    return rows, lens


def random_batch(seeds: Seeds, kind: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` frames of a random kind: (rows, lengths)."""
    width = seeds.width
    if kind == "random":
        rows = rng.integers(0, 256, size=(n, width), dtype=np.uint8)
        short = rng.random(n) < 0.8
        lens = np.where(short, rng.integers(MIN_FRAME, min(width, 300) + 1, n), rng.integers(MIN_FRAME, width + 1, n))
        return rows, lens
    which = rng.integers(0, len(seeds.frames), n)
    rows, lens = seeds.arr[which], seeds.lens[which].copy()
    region = seeds.region[which]
    idx = np.arange(n)
    if kind == "random_tail":
        cuts = np.array([rng.choice(seeds.bounds[w]) for w in which], dtype=np.int64)
        lens = np.minimum(cuts + rng.integers(0, TAIL_MAX + 1, n), width)
        lens = np.maximum(lens, MIN_FRAME)
        noise = rng.integers(0, 256, size=(n, width), dtype=np.uint8)
        tail = np.arange(width)[None, :] >= cuts[:, None]
        rows[tail] = noise[tail]
    elif kind == "bitflip":
        k = rng.integers(1, 5, n)
        for j in range(4):
            m = k > j
            pos = (rng.random(n) * region).astype(np.int64)
            bits = (1 << rng.integers(0, 8, n)).astype(np.uint8)
            rows[idx[m], pos[m]] ^= bits[m]
    elif kind == "multi_byte":
        k = rng.integers(1, 7, n)
        for j in range(6):
            m = k > j
            pos = (rng.random(n) * region).astype(np.int64)
            rows[idx[m], pos[m]] = rng.integers(0, 256, n, dtype=np.uint8)[m]
    elif kind == "length_trunc":
        for i, w in enumerate(which):
            words = seeds.words[w]
            off, start = words[rng.integers(0, len(words))] if len(words) else (12, 0)
            f, total = seeds.frames[w], int(seeds.lens[w])
            vals = _word_values((f[off] << 8) | f[off + 1], total - start, total - off)
            v = int(rng.choice(vals)) if rng.random() < 0.8 else int(rng.integers(0, 0x10000))
            rows[i, off], rows[i, off + 1] = v >> 8, v & 0xFF
        cut = rng.random(n) < 0.5
        lens = np.where(cut, (MIN_FRAME + rng.random(n) * (lens - MIN_FRAME + 1)).astype(np.int64), lens)
    elif kind == "pad":
        extra = rng.integers(1, PAD_MAX + 1, n)
        noise = rng.integers(0, 256, size=(n, width), dtype=np.uint8)
        cols = np.arange(width)[None, :]
        tail = (cols >= lens[:, None]) & (cols < (lens + extra)[:, None])
        rows[tail] = noise[tail]
        lens = np.minimum(lens + extra, width)
    else:
        raise ValueError(f"unknown frame kind {kind!r}")
    return rows, lens


def plan(seeds: Seeds, sysrec: dict[str, np.ndarray], budget: int,
         rng: np.random.Generator) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """Yield (kind, rows, lengths) batches: the systematic kinds (sampled to their share), then random kinds."""
    total = sum(len(r) for r in sysrec.values())
    share = int(budget * SYSTEMATIC_SHARE)
    done = 0
    for kind, rec in sysrec.items():
        if total > share:
            keep = int(round(len(rec) * share / total))
            rec = rec[np.sort(rng.choice(len(rec), size=keep, replace=False))] if keep < len(rec) else rec
        for lo in range(0, len(rec), BATCH):
            part = rec[lo:lo + BATCH][:budget - done]
            if not len(part):
                break
            rows, lens = apply_recipes(seeds, part)
            done += len(part)
            yield kind, rows, lens
    kinds = list(RANDOM_KINDS)
    weights = np.array([RANDOM_KINDS[k] for k in kinds], dtype=float)
    weights /= weights.sum()
    while done < budget:
        n = min(BATCH, budget - done)
        counts = rng.multinomial(n, weights)
        for kind, c in zip(kinds, counts):
            if c:
                rows, lens = random_batch(seeds, kind, int(c), rng)
                yield kind, rows, lens
        done += n
