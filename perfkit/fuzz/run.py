"""Running fuzzed frames through a dataplane's program (BPF_PROG_TEST_RUN, one call per frame) and
its reference model, and judging each. The verdicts, per frame:

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
from typing import Any, Callable

import numpy as np

from perfkit import dataplanes
from perfkit.dataplane import Dataplane, Emitted, NotProvided, Traffic
from perfkit.errors import ConfigError, PerfkitError
from perfkit.fuzz.frames import BATCH, FLOWS, MIN_FRAME, Seeds, config_name, configs, plan, seed_frames, systematic
from perfkit.fuzz.result import Failure, FuzzResult
from perfkit.libbpf import XDP_REDIRECT, XDP_TX, XDP_VERDICTS, BpfObject, BpfTestRunOpts, lib
from perfkit.testbed.bpfbuild import object_path

#: Bytes of output buffer per run: room for any growth of the frame.
OUT_CAP = 4096

Model = Callable[[Traffic, bytes], Emitted]
"""What the kernel is compared with: ``Dataplane.emit`` unless a test passes another."""


class _Runner:
    """BPF_PROG_TEST_RUN on frames that sit in a numpy array: one call per frame, no copies in."""

    def __init__(self, prog_fd: int):
        self.fd = prog_fd
        self.fn = lib().bpf_prog_test_run_opts
        self.out = ctypes.create_string_buffer(OUT_CAP)
        self.out_addr = ctypes.addressof(self.out)
        self.opts = BpfTestRunOpts()
        self.opts.sz = ctypes.sizeof(BpfTestRunOpts)
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
        for kind, rows, lens in plan(seeds, sysrec, budget, rng):
            _run_batch(dut, runner, traffic, model, name, kind, rows, lens, result, max_examples)
    finally:
        dut.close()


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
    if model is None and not dp.has_model:
        raise NotProvided("no reference model (emit): fuzzing compares the kernel with it", dp.name)
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