"""Device interrupts: their lines, affinities and counts per CPU (``/proc/interrupts``,
``/proc/irq/<n>``), and whether irqbalance moves them."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from perfkit.host.cpus import PROC, cpu_list, mask_list, read_text

#: ``irq_counts()``: {irq: (name, {cpu: interrupts since boot})}.
IrqCounts = dict[int, tuple[str, dict[int, int]]]


@dataclass
class Irq:
    """One device interrupt line (``/proc/irq/<n>``, ``/proc/interrupts``)."""

    irq: int
    name: str
    """Its handlers (``virtio1-req.0``, ``eth0-TxRx-3`` ...)."""
    affinity: list[int]
    """CPUs it may be delivered to (``smp_affinity_list``)."""
    effective: list[int]
    """CPUs it is delivered to (``effective_affinity_list``; ``affinity`` when the kernel has none)."""
    counts: dict[int, int]
    """{cpu: interrupts since boot}."""


def irq_counts() -> IrqCounts:
    """{irq: (name, {cpu: count})} of the numbered (device) lines of /proc/interrupts."""
    lines = read_text(PROC / "interrupts").splitlines()
    if not lines:
        return {}
    cols = [int(c[3:]) for c in lines[0].split() if c.startswith("CPU")]
    out = {}
    for line in lines[1:]:
        head, _, rest = line.partition(":")
        if not head.strip().isdigit():
            continue
        parts = rest.split()
        counts = {cpu: int(n) for cpu, n in zip(cols, parts) if n.isdigit()}
        tail = parts[len(cols):]
        name = " ".join(tail[2:]) if len(tail) > 2 else (tail[-1] if tail else "")
        out[int(head)] = (name, counts)
    return out


def irqs(counts: IrqCounts) -> list[Irq]:
    """The named lines of ``counts`` with their affinities now."""
    out = []
    for irq, (name, n) in sorted(counts.items()):
        if not name:
            continue
        base = PROC / "irq" / str(irq)
        affinity = cpu_list(read_text(base / "smp_affinity_list"))
        effective = read_text(base / "effective_affinity_list")
        out.append(Irq(irq, name, affinity, cpu_list(effective) if effective else affinity, n))
    return out


def irq_rates(before: IrqCounts, after: IrqCounts, cpu: int, seconds: float) -> dict[str, float]:
    """{device interrupt: interrupts per second on ``cpu``} between two ``irq_counts()``, busiest first."""
    out = {}
    for irq, (name, counts) in after.items():
        n = counts.get(cpu, 0) - before.get(irq, ("", {}))[1].get(cpu, 0)
        if n > 0 and name:
            out[name] = round(n / seconds, 1) if seconds > 0 else 0.0
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def default_irq_affinity(online: list[int]) -> list[int]:
    """The CPUs a new interrupt may go to (``/proc/irq/default_smp_affinity``; ``online`` if unreadable)."""
    return mask_list(read_text(PROC / "irq/default_smp_affinity")) or online


def irqbalance_running() -> bool:
    """An irqbalance daemon is running (it moves interrupts while trials run)."""
    for entry in os.scandir(PROC):
        if entry.name.isdigit() and read_text(Path(entry.path) / "comm") == "irqbalance":
            return True
    return False
