"""Where perfkit's files are, from a checkout or from an installed wheel.

perfkit ships files besides its Python code: the BPF sources and headers (``bpf/``), the notebooks
(``notebooks/``), the example campaigns (``campaigns/``) and TRex profiles (``trex_profiles/``).
In a checkout they are the repository's directories; a wheel carries the same tree as package data
in ``perfkit/_data/`` (``setup.py`` copies it at build time). ``FILES_ROOT`` is whichever holds them.

What perfkit makes lives elsewhere:

- BPF objects: ``build/bpf/`` of the checkout (``make bpf``); installed, compiled on first use
  (``perfkit.testbed.bpfbuild``) into ``<cache>/bpf/<kernel release>/``, the cache being
  ``$PERFKIT_CACHE``, else ``$XDG_CACHE_HOME/perfkit``, else ``~/.cache/perfkit``;
- the run store and the local metrics stack: ``$PERFKIT_HOME`` (default ``data`` of the working
  directory), ``runs/`` and ``stack/`` in it; reports in ``$PERFKIT_REPORTS`` (default ``reports``).
"""
from __future__ import annotations

import os
import platform
from pathlib import Path

#: The ``perfkit`` package directory.
PACKAGE_DIR = Path(__file__).resolve().parent


def _checkout() -> Path | None:
    root = PACKAGE_DIR.parent
    if (root / "pyproject.toml").is_file() and (root / "bpf" / "include").is_dir():
        return root
    return None


#: The repository perfkit runs from (an editable install or ``PYTHONPATH``), None when installed.
CHECKOUT: Path | None = _checkout()
#: perfkit's shipped files, laid out as in the repository: the checkout, or the wheel's package data.
FILES_ROOT = CHECKOUT or PACKAGE_DIR / "_data"
#: BPF C sources (``*.bpf.c``) and their shared headers (``include/``).
BPF_SRC_DIR = FILES_ROOT / "bpf"
NOTEBOOKS_DIR = FILES_ROOT / "notebooks"
CAMPAIGNS_DIR = FILES_ROOT / "campaigns"
TREX_PROFILES_DIR = FILES_ROOT / "trex_profiles"
#: What the wheel's build recorded about its source (``version.build_info``); absent in a checkout.
BUILD_INFO_FILE = PACKAGE_DIR / "_data" / "build.json"


def cache_dir() -> Path:
    """Where an installed perfkit keeps what it builds: ``$PERFKIT_CACHE``, else
    ``$XDG_CACHE_HOME/perfkit``, else ``~/.cache/perfkit``."""
    if os.environ.get("PERFKIT_CACHE"):
        return Path(os.environ["PERFKIT_CACHE"]).absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "perfkit"


#: What perfkit builds: ``build/`` of the checkout, else the cache directory.
BUILD_ROOT = CHECKOUT / "build" if CHECKOUT else cache_dir()
#: BPF objects ``<name>.o`` and ``vmlinux.h``: the checkout's ``build/bpf`` (``make bpf``; its
#: ``vmlinux.h`` is ``build/vmlinux.h``), or one directory per kernel release in the cache, since
#: ``vmlinux.h`` (and so an object that reads kernel structures) belongs to one kernel.
BUILD_DIR = BUILD_ROOT / "bpf" if CHECKOUT else BUILD_ROOT / "bpf" / platform.release()
#: The directory holding ``vmlinux.h`` (the compiler's ``-I`` for it).
VMLINUX_DIR = BUILD_ROOT if CHECKOUT else BUILD_DIR
#: Tools built by ``make tools`` (inferno): ``build/tools/bin``, or ``tools/bin`` in the cache.
TOOLS_DIR = BUILD_ROOT / "tools" / "bin"
#: TRex's client environment (``make trex-venv``).
TREX_VENV = BUILD_ROOT / "trex-venv"
#: The benches (``bench/*.py``): only a checkout has them.
BENCH_DIR = FILES_ROOT / "bench"


def data_dir() -> Path:
    """perfkit's home: the run store (``runs/``) and the local metrics stack (``stack/``):
    ``$PERFKIT_HOME``, else ``$PERFKIT_DATA`` (its older name), else ``data`` of the working
    directory. Read at each call."""
    return Path(os.environ.get("PERFKIT_HOME") or os.environ.get("PERFKIT_DATA") or "data")


def reports_dir() -> Path:
    """Where reports go: ``$PERFKIT_REPORTS``, else ``reports`` of the working directory."""
    return Path(os.environ.get("PERFKIT_REPORTS") or "reports")


def bench_results_dir() -> Path:
    """Where the benches keep their measured results (``perfkit.benchresults``): ``$PERFKIT_BENCH_RESULTS``,
    else ``bench/results`` of the checkout (``bench-results`` of ``data_dir()`` when installed).
    Absolute, so that a report (whose notebooks run in ``reports/<run_id>/``) finds the same files as
    a shell in the checkout; read at each call, so that tests can point it elsewhere."""
    default = BENCH_DIR / "results" if CHECKOUT else data_dir() / "bench-results"
    return Path(os.environ.get("PERFKIT_BENCH_RESULTS") or default).absolute()


def shown(path: Path) -> str:
    """``path`` relative to the checkout when it lies inside it (as a user in the checkout types it)."""
    return str(path.relative_to(CHECKOUT)) if CHECKOUT and path.is_relative_to(CHECKOUT) else str(path)
