"""Fuzz a dataplane's XDP program against its reference model, frame by frame (BPF_PROG_TEST_RUN).

For every registered dataplane (``perfkit.dataplanes.names()``) the program is loaded as the
testbed loads it (``Dataplane.load(traffic, 1, 2)``) and fed frames built from the dataplane's own
traffic (``Traffic.packet`` and ``Traffic.expected_output`` of every value of its variant and
every boolean parameter switched): nothing here knows a protocol. Where headers are comes from
dissecting those frames with scapy. The frames:

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
random kinds fill the rest. The verdicts, per frame:

- never ``XDP_ABORTED`` (nor an unknown return code);
- the kernel's action is the model's (``Dataplane.emit``), and a forwarded frame (``XDP_TX`` /
  ``XDP_REDIRECT``) is byte for byte the model's;
- per batch, the program's counters rose exactly by the model's ``stat`` of each frame.

``fuzz(name, frames)`` runs one dataplane (in ``workers`` processes, each with its own copy of the
program); ``bench/fuzz.py`` runs a million frames per dataplane, ``tests/test_fuzz.py`` a sample.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from perfkit import dataplanes
from perfkit.dataplane import Dataplane, Emitted, Traffic
from perfkit.errors import ConfigError, PerfkitError
from perfkit.libbpf import XDP_VERDICTS, XDP_REDIRECT, XDP_TX, _TestRunOpts, lib
from perfkit.progbench import TEST_RUN_MAX

#: The smallest frame BPF_PROG_TEST_RUN takes for XDP (an Ethernet header); shorter ones get EINVAL.
MIN_FRAME = 14
#: The largest frame it gives a program in one buffer (a page less the XDP headroom and skb_shared_info).
MAX_FRAME = TEST_RUN_MAX
#: Bytes of output buffer per run: room for any growth of the frame.
OUT_CAP = 4096
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
FAILURE_KINDS = ("aborted", "verdict", "output", "counters", "model_error")

Model = Callable[[Traffic, bytes], Emitted]
"""What the kernel is compared with: ``Dataplane.emit`` unless a test passes another."""


@dataclass
class Failure:
    """One frame (or batch) where the program and the model disagree."""

    kind: str
    """aborted, verdict, output, counters or model_error."""
    config: str
    frame_kind: str
    frame: bytes
    kernel: str
    model: str
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "config": self.config, "frame_kind": self.frame_kind, "frame": self.frame.hex(),
                "kernel": self.kernel, "model": self.model, "detail": self.detail}

    def __str__(self) -> str:
        return (f"{self.kind} [{self.config}, {self.frame_kind}, {len(self.frame)} bytes]: kernel {self.kernel}, "
                f"model {self.model}{': ' + self.detail if self.detail else ''}; frame {self.frame.hex()}")


@dataclass
class FuzzResult:
    """What fuzzing one dataplane found."""

    dataplane: str
    frames: int = 0
    seconds: float = 0.0
    """Wall time of the fuzzing (set-up included)."""
    busy_seconds: float = 0.0
    """Time the workers spent running frames and models, summed over workers."""
    workers: int = 1
    verdicts: Counter = field(default_factory=Counter)
    """Frames per kernel verdict."""
    kinds: Counter = field(default_factory=Counter)
    """Frames per frame kind."""
    kind_verdicts: dict[str, Counter] = field(default_factory=dict)
    """Frame kind -> frames per kernel verdict."""
    stats: Counter = field(default_factory=Counter)
    """Frames per counter the model named."""
    failures: Counter = field(default_factory=Counter)
    """Failures per kind (``FAILURE_KINDS``); empty when the program agrees with the model."""
    examples: list[Failure] = field(default_factory=list)
    configs: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.frames > 0 and not sum(self.failures.values())

    @property
    def frames_per_second(self) -> float:
        return self.frames / self.seconds if self.seconds else 0.0

    def merge(self, other: FuzzResult, max_examples: int) -> None:
        self.frames += other.frames
        self.busy_seconds += other.busy_seconds
        self.verdicts.update(other.verdicts)
        self.kinds.update(other.kinds)
        for k, c in other.kind_verdicts.items():
            self.kind_verdicts.setdefault(k, Counter()).update(c)
        self.stats.update(other.stats)
        self.failures.update(other.failures)
        self.examples.extend(other.examples[:max(0, max_examples - len(self.examples))])
        self.configs.extend(c for c in other.configs if c not in self.configs)

    def to_dict(self) -> dict[str, Any]:
        return {"dataplane": self.dataplane, "frames": self.frames, "seconds": self.seconds,
                "frames_per_second": self.frames_per_second, "busy_seconds": self.busy_seconds,
                "workers": self.workers, "ok": self.ok, "verdicts": dict(self.verdicts), "kinds": dict(self.kinds),
                "kind_verdicts": {k: dict(v) for k, v in self.kind_verdicts.items()}, "stats": dict(self.stats),
                "failures": {k: self.failures.get(k, 0) for k in FAILURE_KINDS},
                "examples": [e.to_dict() for e in self.examples], "configs": self.configs}


# -- the valid frames and where their headers are ------------------------------------------------------
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


def _apply(seeds: Seeds, recipes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


# -- running frames -------------------------------------------------------------------------------------
class _Runner:
    """BPF_PROG_TEST_RUN on frames that sit in a numpy array: one call per frame, no copies in."""

    def __init__(self, prog_fd: int):
        self.fd = prog_fd
        self.fn = lib().bpf_prog_test_run_opts
        self.out = ctypes.create_string_buffer(OUT_CAP)
        self.out_addr = ctypes.addressof(self.out)
        self.opts = _TestRunOpts()
        self.opts.sz = ctypes.sizeof(_TestRunOpts)
        self.opts.data_out = self.out_addr
        self.opts.repeat = 1
        self.ref = ctypes.byref(self.opts)


def _fuzz_one(dp: Dataplane, params: dict[str, Any], seeds: Seeds, sysrec: dict[str, np.ndarray], budget: int,
              rng: np.random.Generator, model: Model, result: FuzzResult, max_examples: int) -> None:
    """Fuzz the program set up for ``params`` with ``budget`` frames (``sysrec``: this worker's share of
    the systematic recipes); adds to ``result``."""
    name = config_name(dp, params)
    result.configs.append(name)
    traffic = dp.traffic(dp.min_frame_size(params), FLOWS, params)
    dut = dp.load(traffic, 1, 2)
    try:
        runner = _Runner(dut.program.fd)
        for kind, rows, lens in _plan(seeds, sysrec, budget, rng):
            _run_batch(dut, runner, traffic, model, name, kind, rows, lens, result, max_examples)
    finally:
        dut.close()


def _plan(seeds: Seeds, sysrec: dict[str, np.ndarray], budget: int, rng: np.random.Generator):
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
            rows, lens = _apply(seeds, part)
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


def _run_batch(dut: Any, runner: _Runner, traffic: Traffic, model: Model, config: str, kind: str,
               rows: np.ndarray, lens: np.ndarray, result: FuzzResult, max_examples: int) -> None:
    rows = np.ascontiguousarray(rows)
    lens = np.clip(lens, MIN_FRAME, rows.shape[1]).astype(np.int64)
    width = rows.shape[1]
    base = rows.ctypes.data
    buf = rows.data.cast("B")
    opts, fn, fd, ref, out_addr = runner.opts, runner.fn, runner.fd, runner.ref, runner.out_addr
    string_at = ctypes.string_at
    verdicts: Counter = Counter()
    stats: Counter = Counter()
    failures = result.failures
    examples = result.examples

    def fail(what: str, frame: bytes, kernel: str, want: str, detail: str = "") -> None:
        failures[what] += 1
        if len(examples) < max_examples:
            examples.append(Failure(what, config, kind, frame, kernel, want, detail))

    before = dut.counters()
    t0 = time.perf_counter()
    for i, n in enumerate(lens.tolist()):
        off = i * width
        opts.data_in = base + off
        opts.data_size_in = n
        opts.data_size_out = OUT_CAP
        rc = fn(fd, ref)
        frame = buf[off:off + n].tobytes()
        if rc:
            raise PerfkitError(f"fuzz: bpf_prog_test_run_opts failed ({os.strerror(-rc)}) on a {n}-byte frame "
                               f"{frame.hex()}")
        got = XDP_VERDICTS.get(opts.retval, f"UNKNOWN({opts.retval})")
        verdicts[got] += 1
        try:
            want = model(traffic, frame)
        except Exception as err:  # noqa: BLE001 - a model that cannot answer is a finding
            fail("model_error", frame, got, f"{type(err).__name__}: {err}")
            continue
        stats[want.stat] += 1
        if got != want.verdict:
            fail("aborted" if got == "XDP_ABORTED" or got.startswith("UNKNOWN") else "verdict",
                 frame, got, f"{want.verdict}/{want.stat}")
        elif opts.retval == XDP_TX or opts.retval == XDP_REDIRECT:
            out = string_at(out_addr, opts.data_size_out)
            if out != want.out:
                fail("output", frame, got, f"{want.verdict}/{want.stat}", _difference(out, want.out))
    result.busy_seconds += time.perf_counter() - t0
    after = dut.counters()
    rose = Counter({k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)})
    if rose != stats and not failures["model_error"]:
        diff = {k: (rose.get(k, 0), stats.get(k, 0)) for k in set(rose) | set(stats) if rose.get(k, 0) != stats.get(k, 0)}
        failures["counters"] += 1
        if len(examples) < max_examples:
            frame, detail = _pinpoint(dut, runner, traffic, model, rows, lens)
            examples.append(Failure("counters", config, kind, frame, "counters rose " + str(dict(rose)),
                                    "stats " + str(dict(stats)), f"(kernel, model) per counter: {diff}; {detail}"))
    result.frames += len(lens)
    result.verdicts.update(verdicts)
    result.kinds[kind] += len(lens)
    result.kind_verdicts.setdefault(kind, Counter()).update(verdicts)
    result.stats.update(stats)


def _pinpoint(dut: Any, runner: _Runner, traffic: Traffic, model: Model, rows: np.ndarray,
              lens: np.ndarray) -> tuple[bytes, str]:
    """The first frame of a batch whose counter rise is not its model stat (frame by frame)."""
    opts = runner.opts
    for i, n in enumerate(lens.tolist()):
        frame = rows[i, :n].tobytes()
        before = dut.counters()
        opts.data_in, opts.data_size_in, opts.data_size_out = rows.ctypes.data + i * rows.shape[1], n, OUT_CAP
        runner.fn(runner.fd, runner.ref)
        after = dut.counters()
        rose = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        want = model(traffic, frame)
        if rose != {want.stat: 1}:
            return frame, f"first such frame: counters rose {rose}, model says {want.stat}"
    return b"", "no single frame reproduces it"


def _difference(got: bytes, want: bytes | None) -> str:
    if want is None:
        return "the model gives no frame"
    if len(got) != len(want):
        return f"length {len(got)} != model's {len(want)}"
    i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
    return f"byte {i}: {got[i]:#04x} != model's {want[i]:#04x}"


def harness_rate(frames: int = 100_000, seed: int = 1) -> float:
    """Frames per second of the same per-frame loop with an XDP_DROP program and no model: the
    ceiling of this harness on this machine (a baseline for ``bench/fuzz.py``)."""
    from perfkit.libbpf import BpfObject
    from perfkit.testbed.bpfbuild import object_path

    rng = np.random.default_rng(seed)
    rows = rng.integers(0, 256, size=(BATCH, 700), dtype=np.uint8)
    lens = rng.integers(MIN_FRAME, 700, BATCH)
    with BpfObject(object_path("drop")) as obj:
        runner = _Runner(obj.program("xdp_drop").fd)
        opts, fn, fd, ref = runner.opts, runner.fn, runner.fd, runner.ref
        buf, base, done = rows.data.cast("B"), rows.ctypes.data, 0
        counts: Counter = Counter()
        t0 = time.perf_counter()
        while done < frames:
            for i, n in enumerate(lens.tolist()[:frames - done]):
                opts.data_in, opts.data_size_in, opts.data_size_out = base + i * 700, n, OUT_CAP
                if fn(fd, ref):
                    raise PerfkitError("fuzz: bpf_prog_test_run_opts failed on the XDP_DROP baseline")
                buf[i * 700:i * 700 + n].tobytes()
                counts[opts.retval] += 1
            done += min(BATCH, frames - done)
        return frames / (time.perf_counter() - t0)


# -- entry points -----------------------------------------------------------------------------------------
def _shard(name: str, frames: int, seed: int, shard: int, shards: int, max_examples: int,
           model: Model | None = None) -> FuzzResult:
    """One worker's share: ``frames`` split over the parameter sets, ``shard`` of ``shards`` of each."""
    dp = dataplanes.get(name)
    params_list = configs(dp)
    seeds = Seeds.build(seed_frames(dp, params_list))
    sysrec = {k: r[shard::shards] for k, r in systematic(seeds).items()}  # each worker its own part
    result = FuzzResult(name)
    rng = np.random.default_rng([seed, shard])
    per = [frames // len(params_list) + (i < frames % len(params_list)) for i in range(len(params_list))]
    for params, budget in zip(params_list, per):
        mine = budget // shards + (shard < budget % shards)
        if mine:
            _fuzz_one(dp, params, seeds, sysrec, mine, rng, model or dp.emit, result, max_examples)
    return result


def fuzz(name: str, frames: int = 1_000_000, seed: int = 1, workers: int = 1, model: Model | None = None,
         max_examples: int = 20) -> FuzzResult:
    """Fuzz dataplane ``name`` with ``frames`` frames (split evenly over its parameter sets).

    ``workers`` > 1 runs shards in forked processes, each with its own copy of the program (the
    model is then the dataplane's: ``model`` is for tests and needs ``workers=1``). Needs root.
    """
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
        raise ConfigError("frames", frames, "an integer >= 1")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError("workers", workers, "an integer >= 1")
    if model is not None and workers != 1:
        raise ConfigError("workers", workers, "1 when a model is given")
    dataplanes.get(name)
    t0 = time.perf_counter()
    if workers == 1:
        result = _shard(name, frames, seed, 0, 1, max_examples, model)
    else:
        result = FuzzResult(name, workers=workers)
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            futures = [pool.submit(_shard, name, frames, seed, w, workers, max_examples) for w in range(workers)]
            for fut in futures:
                result.merge(fut.result(), max_examples)
    result.seconds = time.perf_counter() - t0
    return result
