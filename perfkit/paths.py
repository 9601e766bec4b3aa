"""Where perfkit's own files are: the repository, the BPF sources and the built objects, the benches'
measured results."""
from __future__ import annotations

import os
from pathlib import Path

#: The repository (the parent of the ``perfkit`` package).
REPO_ROOT = Path(__file__).resolve().parent.parent
#: BPF C sources (``bpf/*.bpf.c``) and their shared headers (``bpf/include``).
BPF_SRC_DIR = REPO_ROOT / "bpf"
#: Objects built by ``make bpf``: ``build/bpf/<name>.o``.
BUILD_DIR = REPO_ROOT / "build" / "bpf"
#: The benches (``bench/*.py``).
BENCH_DIR = REPO_ROOT / "bench"


def bench_results_dir() -> Path:
    """Where the benches keep their measured results (``perfkit.benchresults``): ``$PERFKIT_BENCH_RESULTS``,
    else ``bench/results`` of the checkout. Absolute, so that a report (whose notebooks run in
    ``reports/<run_id>/``) finds the same files as a shell in the checkout; read at each call, so that
    tests can point it elsewhere."""
    return Path(os.environ.get("PERFKIT_BENCH_RESULTS") or BENCH_DIR / "results").absolute()
