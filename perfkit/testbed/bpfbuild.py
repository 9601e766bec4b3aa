"""Compile a BPF program specialised for one configuration, with the flags the Makefile uses, and
load a generator object so built.

The generator (``bpf/gen.bpf.c``) is compiled once per traffic profile with its configuration as
a C initializer, so that clang folds it into the code (see the comment at the top of that file).
Objects are cached by the hash of everything that goes into them (sources, headers, the
configuration, clang's version) under ``build/bpf/cache/``, so a profile compiles once per
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
from functools import lru_cache
from pathlib import Path

from perfkit.errors import PerfkitError
from perfkit.libbpf import BpfObject
from perfkit.paths import BPF_SRC_DIR as SRC_DIR
from perfkit.paths import BUILD_DIR

CACHE_DIR = BUILD_DIR / "cache"
CLANG = os.environ.get("CLANG", "clang")
#: As BPF_CFLAGS in the Makefile.
CFLAGS = ["-O2", "-g", "-target", "bpf", f"-I/usr/include/{platform.machine()}-linux-gnu",
          f"-I{SRC_DIR / 'include'}", "-Wall", "-Werror"]


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
    if shutil.which(CLANG) is None:
        raise PerfkitError(f"{CLANG} not found: the generator is compiled per traffic profile "
                           "(`make setup` installs clang)")
    return subprocess.run([CLANG, "--version"], capture_output=True, text=True, check=True).stdout


def specialised(program: str, macro: str, config: ctypes.Structure,
                extra: dict[str, ctypes.Structure] | None = None) -> Path:
    """Path of ``bpf/<program>.bpf.c`` compiled with ``-D<macro>_FILE=<header>`` where the header
    defines ``<macro>_INIT`` as ``config``'s initializer (and ``<name>_INIT`` for each of ``extra``);
    compiled on first use, then cached."""
    src = SRC_DIR / f"{program}.bpf.c"
    header = f"#define {macro}_INIT {c_initializer(config)}\n"
    header += "".join(f"#define {name}_INIT {c_initializer(v)}\n" for name, v in (extra or {}).items())
    h = hashlib.sha256()
    for part in [_clang_version(), " ".join(CFLAGS), header, src.read_text(),
                 *(p.read_text() for p in sorted((SRC_DIR / "include").glob("*.h")))]:
        h.update(part.encode())
    key = h.hexdigest()[:20]
    obj = CACHE_DIR / f"{program}-{key}.o"
    if obj.exists():
        return obj
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    hdr = CACHE_DIR / f"{program}-{key}.h"
    tmp = obj.with_suffix(f".{os.getpid()}.tmp")
    hdr.write_text(header)
    proc = subprocess.run([CLANG, *CFLAGS, f'-D{macro}_FILE="{hdr}"', "-c", str(src), "-o", str(tmp)],
                          capture_output=True, text=True)
    if proc.returncode:
        tmp.unlink(missing_ok=True)
        raise PerfkitError(f"compiling {src.name} for this configuration failed:\n{proc.stderr}")
    tmp.replace(obj)  # atomic: parallel runs may compile the same object
    return obj


def load_generator(path: Path, tx_ifindex: int) -> BpfObject:
    """Load a generator object (``specialised("gen", ...)`` or ``gen_trivial.o``) sending on ``tx_ifindex``."""
    return BpfObject(path, initial_values={".rodata.port": struct.pack("=I", tx_ifindex)})
