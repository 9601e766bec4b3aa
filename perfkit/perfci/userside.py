"""One revision of the user's own dataplane, measured by this perfkit: the side of ``ab --dataplane FILE``.

``DataplaneSide.build(repo, rev, workdir, name, description=FILE)``: ``git worktree add --detach`` of
the revision of the user's repository, then the description file ``FILE`` (relative to the
repository) of that worktree is read and its object built by its ``program.build`` command
(``perfkit.describe.build``: cached by the hash of its sources, the command and its build options,
so two revisions whose sources are the same share one object, and a changed source is built
again). A revision without the file, whose description does not read, or whose object does not
build, is a ``SideError`` naming the revision, as a side of perfkit's own that does not build.

perfkit is the same for both sides: the one running (``python -P -m perfkit`` with ``PYTHONPATH``
this checkout, ``perfkit.paths.CHECKOUT``, as ``perfkit bisect`` runs its steps). A unit runs as
``perfkit run`` of the unit's campaign with ``dataplane:`` the side's description; ``check_run``
checks that the run recorded this perfkit's commit and the side's commit of the dataplane
(``perfkit.provenance.dataplane_source``), so a side never measures another revision by mistake.

``side_kind(dataplane)``: what a ``--dataplane`` asks for: ``own`` (absent, or one of perfkit's own
dataplanes: the revisions are perfkit's, ``perfci.sides.Side``), or ``description`` (a file of the
user's repository). A plugin package's name is refused for now (``ConfigError``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from perfkit import dataplanes
from perfkit.campaign.model import Campaign
from perfkit.campaign.schema import from_mapping, load_campaign, load_mapping, read_text
from perfkit.describe import load
from perfkit.describe.build import object_path
from perfkit.describe.schema import is_description
from perfkit.errors import ConfigError, PerfkitError
from perfkit.paths import CHECKOUT
from perfkit.perfci.sides import Side, SideError, clean_env
from perfkit.provenance import dataplane_source, file_sha256
from perfkit.version import perfkit_version

OWN, DESCRIPTION = "own", "description"
#: perfkit's own dataplanes: their code is perfkit's, so their revisions are perfkit's.
OWN_DATAPLANES = tuple(sorted(dataplanes.BUILTIN))


def side_kind(dataplane: str | None, option: str = "--dataplane") -> str:
    """``own`` or ``description`` (module doc); a ``ConfigError`` for anything else."""
    if dataplane is None or dataplane in OWN_DATAPLANES:
        return OWN
    if is_description(dataplane) and not Path(dataplane).is_absolute() and ".." not in Path(dataplane).parts:
        return DESCRIPTION
    raise ConfigError(option, dataplane, f"one of perfkit's own dataplanes ({', '.join(OWN_DATAPLANES)}), "
                      "or a description file's path relative to --repo (NAME.dataplane.yaml)")


def running_perfkit() -> dict[str, Any]:
    """The perfkit that runs both sides: ``perfkit.version.perfkit_version`` of this checkout."""
    return perfkit_version()


@dataclass
class DataplaneSide(Side):
    """A revision of the user's repository, its description's object built, run by this perfkit."""

    description: str = ""
    """The description file, relative to the repository."""
    object_sha256: str = ""
    """sha256 of the object built with the default build options ("": the NF loads its own)."""
    perfkit_commit: str = ""
    """The commit of the perfkit that measures the side, taken when it was built."""

    @property
    def description_path(self) -> Path:
        return self.path / self.description

    def make(self) -> None:
        """Read the side's description and build its object (module doc)."""
        path = self.description_path
        if not path.is_file():
            raise SideError(f"{self.label} does not build: it has no {self.description}")
        try:
            desc = load(path).desc
            obj = object_path(desc, {}) if desc.program.object is not None else None
        except PerfkitError as err:
            raise SideError(f"{self.label} does not build: {err}") from None
        self.object_sha256 = file_sha256(obj) if obj is not None else ""
        self.perfkit_commit = running_perfkit()["git_sha_full"]

    def env(self) -> dict[str, str]:
        assert CHECKOUT is not None, "perfkit ab --dataplane runs perfkit from its checkout"
        return {**clean_env(), "PYTHONPATH": str(CHECKOUT), "PYTHONDONTWRITEBYTECODE": "1"}

    def unit_file(self, campaign_file: Path) -> Path:
        """The unit's campaign with ``dataplane:`` this side's description, beside it (``<name>-unitNNN.yaml``)."""
        raw = yaml.safe_load(campaign_file.read_text())
        raw["dataplane"] = str(self.description_path)
        out = campaign_file.with_name(f"{self.name}-{campaign_file.name}")
        out.write_text(f"# {campaign_file.name} for side {self.name} ({self.commit[:10]})\n"
                       + yaml.safe_dump(raw, sort_keys=False))
        return out

    def check_run(self, meta: dict[str, Any]) -> None:
        """A ``SideError`` unless the run recorded this perfkit and the side's commit of the dataplane."""
        mine = self.perfkit_commit or running_perfkit()["git_sha_full"]
        recorded = (meta.get("perfkit") or {}).get("git_sha_full")
        if recorded != mine:
            raise SideError(f"{self.label}: the run recorded perfkit commit {recorded}, not the running {mine[:10]}")
        source = (meta.get("dataplanes") or {}).get(str(self.description_path.resolve())) or {}
        if source.get("commit") != self.commit:
            raise SideError(f"{self.label}: the run recorded dataplane commit {source.get('commit')}, not the "
                            f"side's {self.commit[:10]}")

    def facts(self) -> dict[str, Any]:
        """Where the side's dataplane came from, for outputs (``perfkit.provenance.dataplane_source``)."""
        src = dataplane_source(str(self.description_path))
        return {"description": self.description, "repository": str(self.repo), "commit": self.commit,
                "build": src.get("build", ""), "object_sha256": self.object_sha256}


def build_side(repo: Path, rev: str, workdir: Path, name: str, option: str, dataplane: str | None) -> Side:
    """The side ``name`` of revision ``rev``: perfkit's own (``Side``) or the user's dataplane (module doc)."""
    if side_kind(dataplane) == OWN:
        return Side.build(repo, rev, workdir, name, option)
    return DataplaneSide.build(repo, rev, workdir, name, option, description=str(dataplane))


def side_campaign(path: Path, repo: Path, dataplane: str | None) -> Campaign:
    """The campaign file ``path``, its ``dataplane:`` the description ``dataplane`` of ``repo`` (as
    checked out there) for a side of the user's dataplane, so that its params are checked against
    that description; unchanged for perfkit's own."""
    if side_kind(dataplane) == OWN:
        return load_campaign(path)
    desc = (repo / str(dataplane)).resolve()
    if not desc.is_file():
        raise ConfigError("--dataplane", str(dataplane), f"a description file of the repository {repo}, relative to it")
    raw = load_mapping(read_text(path), str(path))
    raw["dataplane"] = str(desc)
    return from_mapping(raw, source=str(Path(path).absolute()))
