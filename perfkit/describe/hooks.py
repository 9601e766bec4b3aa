"""A description's hooks: Python functions (``module:function``) and shell commands.

Modules are imported from the description's directory (it goes first on ``sys.path``). Commands
run with ``sh -c`` in that directory, in the DUT's network namespace when there is one (entered
with ``nsenter --net``: the mount namespace, and bpffs, stay the host's); a failing
command is refused with its command line and the tail of its output.
"""
from __future__ import annotations

import importlib
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from perfkit.errors import ConfigError

NSENTER = "nsenter"
#: Lines of a failed command's output its refusal quotes.
TAIL_LINES = 4


@dataclass
class HookScenario:
    """What a ``config.python`` hook gets besides the loaded object: the scenario it configures for."""

    params: Mapping[str, Any]
    """The scenario's parameters, every one."""
    values: Mapping[str, Any]
    """The testbed values (``{ifindex_b}`` ...) by name (``perfkit.describe.values``)."""
    traffic: Any
    """The scenario's ``DescribedTraffic`` (frame size, flows, the profile's frames)."""
    map_ids: Mapping[str, int] = field(default_factory=dict)
    """Kernel ids of the program's maps, by name."""


def function(where: str, spec: str, base: Path) -> Callable[..., Any]:
    """The function ``module:function``, imported from ``base``."""
    module, _, name = spec.partition(":")
    if str(base) not in sys.path:
        sys.path.insert(0, str(base))
    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        raise ConfigError(where, spec, f"module:function of a module importable from {base} ({err})") from None
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise ConfigError(where, spec, f"a function of module {module}: "
                          + ", ".join(n for n in dir(mod) if callable(getattr(mod, n)) and not n.startswith("_")))
    return fn


def command(where: str, cmd: str, base: Path, netns: str | None = None) -> str:
    """Run ``cmd`` (already substituted) with ``sh -c`` in ``base`` (in ``netns``); its output."""
    # nsenter, not ``ip netns exec``: only the network namespace changes; /sys/fs/bpf (where loaders
    # such as libxdp's pin their programs) stays the host's
    argv = ([NSENTER, f"--net=/run/netns/{netns}"] if netns else []) + ["sh", "-c", cmd]
    proc = subprocess.run(argv, cwd=base, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-TAIL_LINES:])
        raise ConfigError(where, cmd, f"a command that succeeds; it failed with exit status {proc.returncode}: "
                          f"{tail or '(no output)'}")
    return proc.stdout
