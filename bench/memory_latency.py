#!/usr/bin/env python3
"""The time of one random memory load by working-set size, on the DUT's core: what a table lookup
that misses the caches costs on this host, whatever the program around it.

A small C program (compiled here with clang) chases pointers through a working set in random order,
one pointer per 64-byte line, so that every load waits for the one before. It prints ns per load
for each size, with 4 KiB pages and with transparent huge pages asked for (``MADV_HUGEPAGE``), and
each figure against the smallest size's, measured in the same run (the L1 hit). Issue 25's
``teid_array`` bar is judged against these figures (bench/RESULTS.md). Run on a quiet machine:

    .venv/bin/python bench/memory_latency.py [--cpu N] [--steps N] [--json]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tqdm import tqdm

from perfkit import benchcli

#: Working sets [bytes]: L1, L2, past L2, past a share of L3, seed 001's session table's size.
SIZES = (32 << 10, 512 << 10, 3 << 19, 6 << 20, 24 << 20)

CHASE_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <sys/mman.h>

/* argv: bytes, steps, huge (0/1). Prints ns per dependent load. */
int main(int argc, char **argv)
{
	size_t bytes = strtoull(argv[1], 0, 10), lines = bytes / 64, steps = strtoull(argv[2], 0, 10);
	size_t align = 2 << 20;
	char *raw = mmap(0, bytes + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *buf = (char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
	size_t *order = malloc(lines * sizeof(*order));
	struct timespec a, b;
	char *p;

	if (raw == MAP_FAILED || !order)
		return 1;
	madvise(buf, bytes, atoi(argv[3]) ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
	for (size_t i = 0; i < lines; i++)
		order[i] = i;
	srand(1);
	for (size_t i = lines - 1; i > 0; i--) {	/* Fisher-Yates: one cycle through every line */
		size_t j = (((size_t)rand() << 16) ^ (size_t)rand()) % (i + 1), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	for (size_t i = 0; i < lines; i++)
		*(char **)(buf + order[i] * 64) = buf + order[(i + 1) % lines] * 64;
	p = buf + order[0] * 64;
	for (size_t i = 0; i < lines; i++)	/* warm: pages mapped, caches as full as they get */
		p = *(char **)p;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (size_t i = 0; i < steps; i++)
		p = *(char **)p;
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%.3f %p\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / steps, (void *)p);
	return 0;
}
"""


def build(workdir: Path) -> Path:
    src, exe = workdir / "chase.c", workdir / "chase"
    src.write_text(CHASE_C)
    subprocess.run(["clang", "-O2", "-o", str(exe), str(src)], check=True)
    return exe


def chase(exe: Path, size: int, steps: int, huge: bool, cpu: int) -> float:
    """ns per dependent load over ``size`` bytes."""
    out = subprocess.run(["taskset", "-c", str(cpu), str(exe), str(size), str(steps), "1" if huge else "0"],
                         check=True, capture_output=True, text=True).stdout
    return float(out.split()[0])


def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(Path(tmp))
        chase(exe, SIZES[0], args.steps, False, args.cpu)  # warm-up: the core's clock and caches, not measured
        configs = [(size, huge) for huge in (False, True) for size in SIZES]
        ns = {c: chase(exe, c[0], args.steps, c[1], args.cpu)
              for c in tqdm(configs, desc="pointer chase", unit="size", file=sys.stderr)}
    base = ns[(SIZES[0], False)]
    rows = [{"bytes": size, "huge_pages": huge, "ns_per_load": v, "x_l1": v / base} for (size, huge), v in ns.items()]
    if args.json:
        benchcli.print_json({"cpu": args.cpu, "steps": args.steps, "rows": rows})
        return 0
    print(f"{'working set':>12} {'4 KiB pages':>12} {'x L1':>6} {'huge pages':>11} {'x L1':>6}   ns per load")
    for size in SIZES:
        small, huge = ns[(size, False)], ns[(size, True)]
        print(f"{size / 2**20:>9.2f} MiB {small:>12.1f} {small / base:>6.1f} {huge:>11.1f} {huge / base:>6.1f}")
    return 0


if __name__ == "__main__":
    ap = benchcli.parser(__doc__)
    ap.add_argument("--cpu", type=int, default=os.cpu_count() - 1 if os.cpu_count() else 0,
                    help="CPU to run on (default: the last one, the testbed's DUT core)")
    ap.add_argument("--steps", type=int, default=20_000_000, help="loads timed per size")
    benchcli.run(main, ap)
