"""``perfkit dataplane new NAME --dir DIR [--plugin]``: a small project of the user's own, outside perfkit.

It writes an XDP program that sends every frame back out of the port it came in by (``XDP_TX``)
with its MAC addresses swapped and counts per CPU (indexes from a BTF enum), a TRex STL profile, a
small campaign, a Makefile and pytest tests that check the program against a model through
``BPF_PROG_TEST_RUN``; then ``git init`` and a first commit. The program is measured either from
its description file (``NAME.dataplane.yaml``, ``perfkit.scaffold.description``) or, with
``--plugin``, as a Python package that registers a ``Dataplane`` with a reference model in the
entry-point group ``perfkit.dataplanes`` (``perfkit.scaffold.plugin``).
"""
from __future__ import annotations

import keyword
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from perfkit.errors import ConfigError

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


@dataclass(frozen=True)
class Project:
    """A project written by ``new``."""

    dir: Path
    name: str
    files: tuple[str, ...]
    """Paths relative to ``dir``."""
    plugin: bool = False
    """A plugin package (``--plugin``), else a description file."""


def check(name: str, directory: Path) -> None:
    if not _NAME.match(name) or keyword.iskeyword(name):
        raise ConfigError("NAME", name, "a lower-case identifier (a letter, then letters, digits, _; at most 32)")
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ConfigError("--dir", str(directory), "a directory that does not exist or is empty")


def templates(plugin: bool = False) -> dict[str, str]:
    """The project's files (relative path -> text), with ``@name@``/``@NAME@`` for its name."""
    if plugin:
        from perfkit.scaffold.plugin import FILES
    else:
        from perfkit.scaffold.description import FILES
    return FILES


def new(name: str, directory: str | Path, plugin: bool = False) -> Project:
    """Write the project ``name`` into ``directory`` (created; it must not exist or be empty), and
    commit it; ``plugin``: the plugin package rather than a description file."""
    d = Path(directory)
    check(name, d)
    files = []
    for rel, text in templates(plugin).items():
        path = d / rel.replace("@name@", name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("@name@", name).replace("@NAME@", name.upper()))
        files.append(str(path.relative_to(d)))
    git = ["git", "-C", str(d), "-c", "user.name=perfkit", "-c", "user.email=perfkit@localhost"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", f"Start {name}: perfkit dataplane new"], check=True)
    return Project(d, name, tuple(files), plugin)
