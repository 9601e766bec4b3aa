"""Folded stacks: one ``comm;outermost;...;leaf <samples>`` line per distinct stack, and the tables
made of them (who used the recorded CPUs, which functions, with which shares).

``perf script`` output folded by ``inferno-collapse-perf --all`` (``perfkit.perf.record``): the
first frame is the process name, ``--all`` marks kernel frames ``_[k]`` (``_[j]`` JIT, ``_[i]``
inlined), and BPF programs are named ``bpf_prog_<tag>_<function>``.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    import pandas as pd

#: Process names (prefixes) of packet-processing kernel threads: threaded NAPI and cpumap.
PACKET_THREADS = ("napi/", "cpumap/")
#: Process names of CPU idle: their samples are the DUT cores' idle time, not a symbol's.
IDLE_COMMS = ("swapper",)
_BPF_RE = re.compile(r"^bpf_prog_[0-9a-f]{16}_(?P<name>\w+)$")
_KERNEL_MARK = "_[k]"
_OTHER_MARKS = ("_[j]", "_[i]")


@dataclass(frozen=True)
class SymbolShare:
    """One function's part of the samples (all samples of the recorded CPUs, idle included)."""

    symbol: str
    """Function name without perf's annotation: ``veth_poll``, ``bpf_prog_<tag>_xdp_sink``."""
    kind: str
    """``bpf`` (a BPF program), ``kernel`` or ``other`` (user space, unknown)."""
    self_samples: int
    """Samples in this function itself (the leaf of the stack)."""
    inclusive_samples: int
    """Samples with this function anywhere on the stack (each stack counted once)."""
    self_share: float
    """``self_samples`` / all samples [0..1]: with a timer event, its share of the CPUs' time."""
    inclusive_share: float
    """``inclusive_samples`` / all samples [0..1]."""


def parse_folded(text: str) -> list[tuple[list[str], int]]:
    """``[(frames, samples), ...]`` of folded stacks; a ``ValueError`` names the first bad line."""
    stacks = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit() or int(count) < 1:
            raise ValueError(f"folded stacks line {n}: {line[:120]!r} is not 'frame;frame;... <samples>'")
        stacks.append((stack.split(";"), int(count)))
    return stacks


def symbol_kind(frame: str) -> str:
    """``bpf``, ``kernel`` or ``other`` for one frame of ``inferno-collapse-perf --all`` output."""
    name = strip_annotation(frame)
    if _BPF_RE.match(name):
        return "bpf"
    return "kernel" if frame.endswith(_KERNEL_MARK) else "other"


def strip_annotation(frame: str) -> str:
    """The function name without inferno's ``_[k]``/``_[j]``/``_[i]`` annotation."""
    for mark in (_KERNEL_MARK, *_OTHER_MARKS):
        if frame.endswith(mark):
            return frame[:-len(mark)]
    return frame


def bpf_program_name(symbol: str) -> str | None:
    """``xdp_sink`` for ``bpf_prog_55de28cda8ea9ac6_xdp_sink``; None for anything else."""
    m = _BPF_RE.match(strip_annotation(symbol))
    return m.group("name") if m else None


_BPF_TAG_RE = re.compile(r"\bbpf_prog_[0-9a-f]{16}_")
#: What ``untagged`` puts for every BPF program's tag.
NO_TAG = "0" * 16


def untagged(folded: str) -> str:
    """``folded`` with every BPF program's tag (a hash of its instructions: another for every build
    of it) zeroed, so that two builds of one program compare as one function (a knob that is a
    build option)."""
    return _BPF_TAG_RE.sub(f"bpf_prog_{NO_TAG}_", folded)


def idle_share(folded: str) -> float:
    """Share of the samples whose process is the idle task [0..1] (0 without samples)."""
    stacks = parse_folded(folded)
    total = sum(c for _, c in stacks)
    idle = sum(c for frames, c in stacks if is_idle(frames[0]))
    return idle / total if total else 0.0


def is_idle(comm: str) -> bool:
    """The process name (a stack's first frame) is the idle task's."""
    return comm.split("/")[0] in IDLE_COMMS


def symbol_table(folded: str) -> pd.DataFrame:
    import pandas as pd   # here: a lab host's agent records perf without pandas
    """Every function of the stacks but the idle task's, most inclusive samples first.

    Columns: symbol, kind (``bpf``/``kernel``/``other``), self_samples, inclusive_samples,
    self_share, inclusive_share (of all samples, idle included: ``idle_share`` is the rest). The
    first frame of a stack is the process name, not a function: it is left out.
    """
    stacks = parse_folded(folded)
    total = sum(c for _, c in stacks)
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    kinds: dict[str, str] = {}
    for frames, count in stacks:
        funcs = frames[1:]
        if not funcs or is_idle(frames[0]):
            continue
        for f in funcs:
            kinds.setdefault(strip_annotation(f), symbol_kind(f))
        self_c[strip_annotation(funcs[-1])] += count
        for name in {strip_annotation(f) for f in funcs}:
            incl[name] += count
    cols = ["symbol", "kind", "self_samples", "inclusive_samples", "self_share", "inclusive_share"]
    rows = [(s, kinds[s], self_c[s], incl[s], self_c[s] / total, incl[s] / total) for s in incl]
    df = pd.DataFrame(rows, columns=cols)
    return df.sort_values(["inclusive_samples", "self_samples", "symbol"], ascending=[False, False, True],
                          ignore_index=True)


def process_table(folded: str) -> pd.DataFrame:
    import pandas as pd
    """Samples per process name (the first frame), most first: who used the recorded CPUs.

    Columns: process, samples, share (of all samples [0..1]), packet_thread (a NAPI or cpumap
    kernel thread: ``napi/<dev>-<id>``, ``cpumap/...``; the DUT's own, or another testbed's on the
    same CPUs), idle (the idle task).
    """
    counts: Counter[str] = Counter()
    for frames, count in parse_folded(folded):
        counts[frames[0]] += count
    total = sum(counts.values())
    rows = [(p, c, c / total, p.startswith(PACKET_THREADS), is_idle(p)) for p, c in counts.most_common()]
    return pd.DataFrame(rows, columns=["process", "samples", "share", "packet_thread", "idle"])


def top_symbols(folded: str, n: int = 20, kinds: Sequence[str] = ("kernel", "bpf")) -> list[SymbolShare]:
    """The ``n`` functions of ``kinds`` with the most self samples (ties: inclusive), with their shares."""
    df = symbol_table(folded)
    df = df[df["kind"].isin(kinds)].sort_values(["self_samples", "inclusive_samples", "symbol"],
                                                  ascending=[False, False, True])
    return [SymbolShare(r.symbol, r.kind, int(r.self_samples), int(r.inclusive_samples), float(r.self_share),
                        float(r.inclusive_share)) for r in df.head(n).itertuples()]


def merge_folded(texts: Iterable[str]) -> str:
    """Several folded texts as one (counts of identical stacks added), sorted by stack."""
    total: Counter[str] = Counter()
    for text in texts:
        for frames, count in parse_folded(text):
            total[";".join(frames)] += count
    return "".join(f"{s} {c}\n" for s, c in sorted(total.items()))
