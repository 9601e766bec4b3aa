"""A dataplane description shipped to a lab host through the agent's protocol (op ``describe``).

A lab host shares nothing with the controller but the SSH session, so the controller sends the
description's directory (``pack``: the description, its traffic profile, hooks and sources, and the
object when the description names one it does not build; hidden files, other objects and
``build/`` stay behind), and the agent writes it under ``<perfkit_root>/dataplanes/<sha256>/``
(``unpack``), where ``load`` builds the object against the host's own kernel (into
``<perfkit_root>/cache``) and the tester's ``tester`` builds its frames. Only what ``describe`` wrote
loads as a description on a host (``delivered``): a path of the host's own file system is refused.

A description whose NF attaches itself runs its commands (``attach.setup``, ``attach.teardown``,
``config.command``) on the DUT host, in the agent's network namespace: a command that names an
interface of the host the inventory does not name for it is refused before anything runs
(``check_commands``).
"""
from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
from pathlib import Path, PurePosixPath
from typing import Any, Iterable

from perfkit.describe import build
from perfkit.describe.schema import Description
from perfkit.errors import ConfigError

#: The most a description's files may weigh, together [bytes] (they travel as one JSON line).
MAX_BYTES = 16 << 20
#: What splits a command into the words that may name an interface.
_WORD_SEP = re.compile(r"[\s=,:;|&()<>'\"`$/\\]+")


def files(desc: Description) -> list[Path]:
    """The files of ``desc`` a host needs: its directory's tree (as ``build.source_files`` walks it),
    the description, its profile, and the object it loads unbuilt; all under its directory."""
    out = set(build.source_files(_as_tree(desc))) | set(build.source_files(desc)) | {desc.path, desc.traffic.profile}
    if desc.program.object is not None and not desc.program.build:
        out.add(desc.program.object)
    for f in sorted(out):
        if not f.resolve().is_relative_to(desc.dir):
            raise ConfigError(f"{desc.path.name}: a file of the description", str(f),
                              f"a file under {desc.dir} (a lab host gets the description's directory)")
    return sorted(f for f in out if f.is_file())


def _as_tree(desc: Description) -> Description:
    """``desc`` with no ``program.sources``: ``build.source_files`` then walks its whole directory."""
    from dataclasses import replace
    return replace(desc, program=replace(desc.program, sources=()))


def pack(desc: Description) -> dict[str, Any]:
    """The arguments of op ``describe``: the description's file name and its files (base64), by
    path relative to its directory."""
    out: dict[str, str] = {}
    total = 0
    for f in files(desc):
        data = f.read_bytes()
        total += len(data)
        if total > MAX_BYTES:
            raise ConfigError(f"{desc.path.name}: the description's directory", str(desc.dir),
                              f"at most {MAX_BYTES >> 20} MiB of files to send to a lab host")
        out[f.resolve().relative_to(desc.dir).as_posix()] = base64.b64encode(data).decode()
    return {"description": desc.path.name, "files": out}


def for_scenario(desc: Description, frame_size: int, flows: int, params: dict[str, Any]) -> dict[str, Any]:
    """Op ``describe``'s arguments for a scenario: the files (``pack``) and the streams of its
    traffic profile, loaded here with TRex's library (a lab host has none: ``perfkit.stl.profile.GIVEN``)."""
    from perfkit.describe.traffic import profile_words
    from perfkit.stl import profile as stlprofile
    words = stlprofile.check_tunables(profile_words(desc, frame_size, flows, params))
    port = stlprofile.port_of(desc.traffic.ingress)
    streams = stlprofile.streams_of(desc.traffic.profile, words, port)
    return {**pack(desc), "streams": [{"profile": desc.traffic.profile.resolve().relative_to(desc.dir).as_posix(),
                                       "tunables": words, "port": port, "streams": streams}]}


def give_streams(base: Path, given: Any) -> None:
    """Register the streams op ``describe`` brought (``for_scenario``) for the profiles under ``base``."""
    from perfkit.stl import profile as stlprofile
    if not isinstance(given, list):
        raise ConfigError("describe.streams", type(given).__name__, "a list of {profile, tunables, port, streams}")
    for i, g in enumerate(given):
        if not isinstance(g, dict) or not isinstance(g.get("streams"), list) or not isinstance(g.get("tunables"), list):
            raise ConfigError(f"describe.streams[{i}]", g if not isinstance(g, dict) else sorted(g),
                              "{profile, tunables, port, streams}")
        key = stlprofile.given_key(base / _relative(g.get("profile")), [str(t) for t in g["tunables"]], int(g.get("port", 0)))
        stlprofile.GIVEN[key] = g["streams"]


def digest(description: str, file_map: dict[str, str]) -> str:
    """sha256 of the description's name and its files (names and contents, base64 as sent)."""
    h = hashlib.sha256(description.encode() + b"\0")
    for rel in sorted(file_map):
        h.update(rel.encode() + b"\0" + file_map[rel].encode() + b"\0")
    return h.hexdigest()


def _relative(rel: Any) -> PurePosixPath:
    p = PurePosixPath(rel) if isinstance(rel, str) else None
    if p is None or p.is_absolute() or not p.parts or ".." in p.parts or "\0" in str(rel):
        raise ConfigError("describe.files", rel, "a path relative to the description's directory, without ..")
    return p


def unpack(base: Path, description: Any, file_map: Any) -> Path:
    """Write the files under ``base/<sha256>/`` (once: the same files land in the same directory)
    and return the description's path there."""
    if not isinstance(file_map, dict) or not file_map:
        raise ConfigError("describe.files", type(file_map).__name__, "a mapping of relative paths to base64 contents")
    if not isinstance(description, str) or description not in file_map:
        raise ConfigError("describe.description", description, f"one of the files sent: {', '.join(sorted(file_map))}")
    rels = {rel: _relative(rel) for rel in file_map}
    if sum(len(v) for v in file_map.values()) * 3 // 4 > MAX_BYTES:
        raise ConfigError("describe.files", f"{len(file_map)} files", f"at most {MAX_BYTES >> 20} MiB")
    target = base / digest(description, file_map)
    if not target.is_dir():
        tmp = base / f".{target.name}.{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        for rel, p in rels.items():
            try:
                data = base64.b64decode(file_map[rel], validate=True)
            except (ValueError, TypeError):
                raise ConfigError(f"describe.files.{rel}", "(not base64)", "the file's bytes in base64") from None
            dest = tmp / p
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        os.replace(tmp, target)
    return target / description


def command_interfaces(cmd: str, present: Iterable[str]) -> list[str]:
    """The words of ``cmd`` that are names of interfaces ``present`` on the host, in order."""
    names = set(present)
    return [w for w in _WORD_SEP.split(cmd) if w in names]


def check_commands(desc: Description, host: str, allowed: Iterable[str], present: Iterable[str]) -> None:
    """Refuse a description whose commands name an interface of the host (``present``) the
    inventory does not name for it (``allowed``): the NF's loader runs on the inventory's only."""
    allowed = list(allowed)
    for where, cmd in (("attach.setup", desc.attach.setup), ("attach.teardown", desc.attach.teardown),
                       ("config.command", desc.config.command)):
        for name in command_interfaces(cmd or "", present):
            if name not in allowed:
                raise ConfigError(f"{desc.path.name}: {where}: interface of host {host}", name,
                                  f"an interface the inventory names for it: {', '.join(allowed) or 'none'}")
