"""Where perfkit's own files are: the repository, the BPF sources and the built objects."""
from __future__ import annotations

from pathlib import Path

#: The repository (the parent of the ``perfkit`` package).
REPO_ROOT = Path(__file__).resolve().parent.parent
#: BPF C sources (``bpf/*.bpf.c``) and their shared headers (``bpf/include``).
BPF_SRC_DIR = REPO_ROOT / "bpf"
#: Objects built by ``make bpf``: ``build/bpf/<name>.o``.
BUILD_DIR = REPO_ROOT / "build" / "bpf"
