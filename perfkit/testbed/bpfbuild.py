"""Compile perfkit's BPF programs (into a cache when perfkit is installed), with the flags the
Makefile uses; compile a program specialised for one configuration and load a generator object so
built.

``object_path(name)`` is the object of ``bpf/<name>.bpf.c``: in a checkout, ``build/bpf/<name>.o``
as ``make bpf`` built it; in an installed perfkit, compiled on first use into the cache
(``paths.BUILD_DIR``, one directory per kernel release), again whenever its inputs change (perfkit
upgraded, another clang), with ``vmlinux.h`` made by ``bpftool`` from the running kernel's BTF for
the programs that read kernel structures. All of them compile in about 3 s.

``specialised(...)``: the generator (``bpf/gen.bpf.c``) is compiled once per traffic profile with its configuration as
a C initializer, so that clang folds it into the code (see the comment at the top of that file).
Objects are cached by the hash of everything that goes into them (sources, headers, the
configuration, clang's version) under ``<BUILD_DIR>/cache/``, so a profile compiles once per
checkout, about 0.3 s.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import struct
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from perfkit.errors import PerfkitError
from perfkit.libbpf import BpfObject
from perfkit.paths import BPF_SRC_DIR as SRC_DIR
from perfkit.paths import BUILD_DIR, CHECKOUT, VMLINUX_DIR

CACHE_DIR = BUILD_DIR / "cache"
CLANG = os.environ.get("CLANG", "clang")
BPFTOOL = os.environ.get("BPFTOOL", "bpftool")
#: As BPF_CFLAGS in the Makefile.
CFLAGS = ["-O2", "-g", "-target", "bpf", f"-I/usr/include/{platform.machine()}-linux-gnu",
          f"-I{SRC_DIR / 'include'}", f"-I{VMLINUX_DIR}", "-Wall", "-Werror"]
#: The running kernel's types (``bpftool btf dump``), for programs that ``#include "vmlinux.h"``.
VMLINUX_H = VMLINUX_DIR / "vmlinux.h"
KERNEL_BTF = Path("/sys/kernel/btf/vmlinux")


def c_initializer(value: object) -> str:
    """``value`` (a ctypes structure, array or integer) as a C initializer, fields by name."""
    if isinstance(value, ctypes.Structure):
        return "{" + ", ".join(f".{name} = {c_initializer(getattr(value, name))}"
                               for name, *_ in value._fields_) + "}"
    if isinstance(value, ctypes.Array):
        return "{" + ", ".join(c_initializer(v) for v in value) + "}"
    if int(value) < 0:  # a signed field (ULL would wrap and trip -Wconstant-conversion)
        return f"({int(value)}LL)"
    return f"{int(value):#x}ULL"


@lru_cache(maxsize=1)
def _clang_version() -> str:
    """``clang --version``, kept in the cache beside the objects under the identity of the binary
    (the path found, the file it resolves to, its inode, mtime and size): every run computes the
    objects' keys with it, and starting clang for it took ~50 ms of each run."""
    found = shutil.which(CLANG)
    if found is None:
        raise PerfkitError(f"{CLANG} not found: perfkit compiles its BPF programs with it "
                           "(`make apt` installs it, or apt-get install clang llvm libbpf-dev)")
    real = os.path.realpath(found)
    try:
        st = os.stat(real)
    except OSError:
        st = None
    memo = None
    if st is not None:
        ident = f"{found}\0{real}\0{st.st_ino}\0{st.st_mtime_ns}\0{st.st_size}"
        memo = CACHE_DIR / f"clang-{hashlib.sha256(ident.encode()).hexdigest()[:20]}.version"
        try:
            return memo.read_text()
        except OSError:
            pass
    version = subprocess.run([CLANG, "--version"], capture_output=True, text=True, check=True).stdout
    if memo is not None and version:
        try:
            memo.parent.mkdir(parents=True, exist_ok=True)
            tmp = memo.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(version)
            tmp.replace(memo)
        except OSError:   # a read-only cache: asked again next time
            pass
    return version


def _inputs_key(*parts: str) -> str:
    """A short hash of what goes into an object: clang, the flags, ``parts``, every shared header."""
    h = hashlib.sha256()
    for part in [_clang_version(), " ".join(CFLAGS), *parts,
                 *(p.read_text() for p in sorted((SRC_DIR / "include").glob("*.h")))]:
        h.update(part.encode())
    return h.hexdigest()[:20]


def _source(program: str) -> Path:
    """``bpf/<program>.bpf.c``, or a PerfkitError when perfkit was installed without it."""
    src = SRC_DIR / f"{program}.bpf.c"
    if not src.is_file():
        raise PerfkitError(f"{src} is missing: perfkit's BPF sources were not installed with it (reinstall perfkit)")
    return src


def _compile(src: Path, obj: Path, *defines: str) -> None:
    """clang ``src`` into ``obj``, atomically (parallel runs may compile the same object)."""
    obj.parent.mkdir(parents=True, exist_ok=True)
    tmp = obj.with_suffix(f".{os.getpid()}.tmp")
    proc = subprocess.run([CLANG, *CFLAGS, *defines, "-c", str(src), "-o", str(tmp)], capture_output=True, text=True)
    if proc.returncode:
        tmp.unlink(missing_ok=True)
        raise PerfkitError(f"compiling {src.name} failed:\n{proc.stderr}")
    tmp.replace(obj)


def _vmlinux_h() -> Path:
    """``vmlinux.h`` of the running kernel, dumped from its BTF once per kernel release."""
    if VMLINUX_H.exists():
        return VMLINUX_H
    if shutil.which(BPFTOOL) is None:
        raise PerfkitError(f"{BPFTOOL} not found: it writes vmlinux.h from {KERNEL_BTF} "
                           "(`make apt` installs it, or apt-get install bpftool)")
    VMLINUX_H.parent.mkdir(parents=True, exist_ok=True)
    tmp = VMLINUX_H.with_suffix(f".{os.getpid()}.tmp")
    with tmp.open("w") as out:
        proc = subprocess.run([BPFTOOL, "btf", "dump", "file", str(KERNEL_BTF), "format", "c"], stdout=out,
                              stderr=subprocess.PIPE, text=True)
    if proc.returncode:
        tmp.unlink(missing_ok=True)
        raise PerfkitError(f"bpftool btf dump file {KERNEL_BTF} failed: {' '.join(proc.stderr.split())}")
    tmp.replace(VMLINUX_H)
    return VMLINUX_H


def object_path(program: str) -> Path:
    """The object of ``bpf/<program>.bpf.c``: ``build/bpf/<program>.o`` in a checkout (``make bpf``
    builds it; ``BpfObject`` says so when it is missing), else compiled into the cache when it is
    missing or its inputs changed."""
    obj = BUILD_DIR / f"{program}.o"
    if CHECKOUT is not None:
        return obj
    src = _source(program)
    text = src.read_text()
    parts = [text]
    if '"vmlinux.h"' in text:
        parts.append(_vmlinux_h().read_text())
    key = _inputs_key(*parts)
    stamp = obj.with_suffix(".key")      # the inputs' hash the object was compiled from
    if obj.exists() and stamp.exists() and stamp.read_text() == key:
        return obj
    _compile(src, obj)
    tmp = stamp.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(key)
    tmp.replace(stamp)
    return obj


@dataclass(frozen=True)
class Built:
    """``object_path(program)`` as a value: a built-in dataplane's ``BpfControl.object_file``."""

    program: str

    def __call__(self) -> Path:
        return object_path(self.program)


def built_with(program: str, defines: dict[str, int]) -> Path:
    """The object of ``bpf/<program>.bpf.c`` compiled with ``-D<name>=<value>`` for each of ``defines``
    (a dataplane's build options); ``object_path(program)`` when there are none. Compiled on first
    use, then cached by the hash of its inputs."""
    if not defines:
        return object_path(program)
    src = _source(program)
    flags = [f"-D{name}={int(value)}" for name, value in sorted(defines.items())]
    key = _inputs_key(" ".join(flags), src.read_text())
    obj = CACHE_DIR / f"{program}-{key}.o"
    if not obj.exists():
        _compile(src, obj, *flags)
    return obj


def specialised(program: str, macro: str, config: ctypes.Structure,
                extra: dict[str, ctypes.Structure] | None = None) -> Path:
    """Path of ``bpf/<program>.bpf.c`` compiled with ``-D<macro>_FILE=<header>`` where the header
    defines ``<macro>_INIT`` as ``config``'s initializer (and ``<name>_INIT`` for each of ``extra``);
    compiled on first use, then cached."""
    src = _source(program)
    header = f"#define {macro}_INIT {c_initializer(config)}\n"
    header += "".join(f"#define {name}_INIT {c_initializer(v)}\n" for name, v in (extra or {}).items())
    key = _inputs_key(header, src.read_text())
    obj = CACHE_DIR / f"{program}-{key}.o"
    if obj.exists():
        return obj
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    hdr = CACHE_DIR / f"{program}-{key}.h"
    hdr.write_text(header)
    _compile(src, obj, f'-D{macro}_FILE="{hdr}"')
    return obj


def load_generator(path: Path, tx_ifindex: int) -> BpfObject:
    """Load a generator object (``specialised("gen", ...)`` or ``gen_trivial.o``) sending on ``tx_ifindex``."""
    return BpfObject(path, initial_values={".rodata.port": struct.pack("=I", tx_ifindex)})
