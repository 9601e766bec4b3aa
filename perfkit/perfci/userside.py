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
dataplanes: the revisions are perfkit's, ``perfci.sides.Side``), ``description`` (a file of the
user's repository) or, where the command takes it (``plugins``: ``perfkit ab``), ``plugin``: the
registry name of a plugin package whose source is the repository (``PluginSide``).

``PluginSide``: the revision's worktree installed with ``pip install --no-deps --target ENV`` into
a side environment of its own, a directory put first on the side's ``PYTHONPATH`` (before this
checkout): perfkit and its dependencies are the running ones on both sides, the plugin is the
revision's (it wins over a copy installed in perfkit's environment: entry points and modules are
found in ``sys.path`` order). ``check_run`` checks that the run imported the plugin from that
environment (``dataplane_source``: ``file``, ``package``).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
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
from perfkit.perfci.sides import BUILD_TIMEOUT_S, Side, SideError, _last_line, clean_env
from perfkit.provenance import dataplane_source, file_sha256
from perfkit.version import perfkit_version

OWN, DESCRIPTION, PLUGIN = "own", "description", "plugin"
_PLUGIN_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
#: perfkit's own dataplanes: their code is perfkit's, so their revisions are perfkit's.
OWN_DATAPLANES = tuple(sorted(dataplanes.BUILTIN))


def side_kind(dataplane: str | None, option: str = "--dataplane", plugins: bool = False) -> str:
    """``own``, ``description`` or (``plugins``) ``plugin`` (module doc); a ``ConfigError`` for anything else."""
    if dataplane is None or dataplane in OWN_DATAPLANES:
        return OWN
    if is_description(dataplane) and not Path(dataplane).is_absolute() and ".." not in Path(dataplane).parts:
        return DESCRIPTION
    if plugins and _PLUGIN_NAME.match(dataplane):
        return PLUGIN
    plugin = ", or the name of the plugin package whose source --repo is" if plugins else ""
    raise ConfigError(option, dataplane, f"one of perfkit's own dataplanes ({', '.join(OWN_DATAPLANES)}), "
                      f"a description file's path relative to --repo (NAME.dataplane.yaml){plugin}")


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

    @property
    def dataplane(self) -> str:
        """What the unit's campaign names as its ``dataplane:``."""
        return str(self.description_path)

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
        return {**clean_env(), "PYTHONPATH": str(CHECKOUT)}

    def unit_file(self, campaign_file: Path) -> Path:
        """The unit's campaign with ``dataplane:`` this side's (``dataplane``), beside it (``<name>-unitNNN.yaml``)."""
        raw = yaml.safe_load(campaign_file.read_text())
        raw["dataplane"] = self.dataplane
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


@dataclass
class PluginSide(DataplaneSide):
    """A revision of the user's repository installed as the plugin package ``plugin`` into a side
    environment (module doc), run by this perfkit."""

    plugin: str = ""
    """The dataplane's registry name (its entry point's)."""
    env_dir: Path | None = None
    """The side environment: the directory ``pip install --target`` wrote."""
    package: str = ""
    """``<distribution>==<version>`` of the plugin installed there."""

    def make(self) -> None:
        """Install the worktree into the side environment; check that it registers ``plugin``."""
        self.env_dir = self.path.with_name(f"{self.path.name}-env")
        shutil.rmtree(self.env_dir, ignore_errors=True)
        if not (self.path / "pyproject.toml").is_file() and not (self.path / "setup.py").is_file():
            raise SideError(f"{self.label} does not build: it has no pyproject.toml (not a Python package)")
        pip = [self.python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
               "--target", str(self.env_dir), str(self.path)]
        try:
            out = subprocess.run(pip, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, env=clean_env())
        except subprocess.TimeoutExpired:
            raise SideError(f"{self.label}: pip install took more than {BUILD_TIMEOUT_S:.0f} s") from None
        if out.returncode != 0:
            raise SideError(f"{self.label} does not build: pip install: {_last_line(out.stderr or out.stdout)}")
        probe = ("import json; from perfkit import dataplanes; from perfkit.provenance import dataplane_source; "
                 f"dataplanes.get({self.plugin!r}); print(json.dumps(dataplane_source({self.plugin!r})))")
        out = subprocess.run([self.python, "-P", "-c", probe], capture_output=True, text=True, env=self.env())
        if out.returncode != 0:
            raise SideError(f"{self.label}: the package does not register {self.plugin}: {_last_line(out.stderr)}")
        src = json.loads(out.stdout)
        if not str(src.get("file", "")).startswith(str(self.env_dir)):
            raise SideError(f"{self.label}: {self.plugin} was imported from {src.get('file')}, not the side's {self.env_dir}")
        self.package = str(src.get("package", ""))
        self.perfkit_commit = running_perfkit()["git_sha_full"]

    def env(self) -> dict[str, str]:
        assert CHECKOUT is not None and self.env_dir is not None, "perfkit ab --dataplane runs perfkit from its checkout"
        return {**clean_env(), "PYTHONPATH": f"{self.env_dir}:{CHECKOUT}"}

    @property
    def dataplane(self) -> str:
        return self.plugin

    def check_run(self, meta: dict[str, Any]) -> None:
        """A ``SideError`` unless the run recorded this perfkit and the plugin of the side's environment."""
        mine = self.perfkit_commit or running_perfkit()["git_sha_full"]
        recorded = (meta.get("perfkit") or {}).get("git_sha_full")
        if recorded != mine:
            raise SideError(f"{self.label}: the run recorded perfkit commit {recorded}, not the running {mine[:10]}")
        source = (meta.get("dataplanes") or {}).get(self.plugin) or {}
        if not str(source.get("file", "")).startswith(str(self.env_dir)):
            raise SideError(f"{self.label}: the run imported {self.plugin} from {source.get('file')}, not the "
                            f"side's environment {self.env_dir}")

    def facts(self) -> dict[str, Any]:
        return {"plugin": self.plugin, "package": self.package, "repository": str(self.repo), "commit": self.commit,
                "environment": str(self.env_dir)}

    def close(self) -> None:
        super().close()
        if self.env_dir is not None:
            shutil.rmtree(self.env_dir, ignore_errors=True)


def build_side(repo: Path, rev: str, workdir: Path, name: str, option: str, dataplane: str | None) -> Side:
    """The side ``name`` of revision ``rev``: perfkit's own (``Side``) or the user's dataplane (module doc)."""
    kind = side_kind(dataplane, plugins=True)
    if kind == OWN:
        return Side.build(repo, rev, workdir, name, option)
    if kind == PLUGIN:
        return PluginSide.build(repo, rev, workdir, name, option, plugin=str(dataplane))
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


def use_plugin(side: PluginSide) -> None:
    """Make this process find the plugin of ``side``'s environment (the campaign's parameters, the
    comparison's records): its directory first on ``sys.path``, the registry found again."""
    import sys
    assert side.env_dir is not None
    sys.path.insert(0, str(side.env_dir))
    dataplanes.refresh()


def plugin_campaign(path: Path, plugin: str) -> Campaign:
    """The campaign file ``path`` with ``dataplane:`` the plugin (found through ``use_plugin``)."""
    raw = load_mapping(read_text(path), str(path))
    raw["dataplane"] = plugin
    return from_mapping(raw, source=str(Path(path).absolute()))
