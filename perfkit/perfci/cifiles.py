"""The CI file ``perfkit ci init`` writes into a user's repository: a job running ``perfkit ab``.

A provider's file is a template of the package (``perfkit/perfci/templates/``) with ``@@NAME@@``
placeholders (GitHub's ``${{ }}`` and GitLab's ``$VAR`` stay as they are). Values that go into a
shell command are quoted for the shell; a value is refused when it holds a newline (or, for the
runner's label, anything but a label's characters). The job installs perfkit into a virtualenv of
its own (``pip install`` of the perfkit spec), then runs ``perfkit ab --repo . --dataplane D --base
BASE --head HEAD CAMPAIGN`` on a pull (merge) request, keeps the outputs and posts or updates one
comment (``comment.COMMENT_MARKER``).
"""
from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from perfkit.errors import ConfigError
from perfkit.perfci.comment import COMMENT_MARKER
from perfkit.perfci.sides import git
from perfkit.version import VERSION

TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True)
class Provider:
    """A CI service: its template and where its file goes in the repository by default; and a linter
    configuration that names the runner's label (template, path), written only where there is none."""

    name: str
    title: str
    template: str
    path: str
    lint_config: tuple[str, str] | None = None


PROVIDERS = {p.name: p for p in (
    Provider("github", "GitHub Actions", "github-workflow.yml", ".github/workflows/perfkit-ab.yml",
             ("actionlint.yaml", ".github/actionlint.yaml")),
    Provider("gitlab", "GitLab CI", "gitlab-ci.yml", ".gitlab-ci.yml"),
)}
#: The campaign file of the repository that the job measures, unless told.
DEFAULT_CAMPAIGN = "campaign.yaml"
#: The runner's label (GitHub) or tag (GitLab), unless told.
DEFAULT_LABEL = "perfkit-dut"
#: A dataplane description file's name ends so (``perfkit ab --dataplane FILE``).
DESCRIPTION_SUFFIX = ".dataplane.yaml"
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
PLUGIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
PLACEHOLDER = re.compile(r"@@[A-Z_]+@@")


def default_perfkit_spec() -> str:
    """The pip requirement of the running perfkit's version: the job measures with the same perfkit."""
    return f"perfkit=={VERSION}"


@dataclass(frozen=True)
class CiFile:
    """What ``write_ci`` wrote."""

    provider: str
    #: the file written (absolute path)
    path: str
    #: the file, relative to the repository
    relpath: str
    repo: str
    #: a description file (relative to the repository) or a plugin's name
    dataplane: str
    #: the campaign file, relative to the repository
    campaign: str
    #: what the job's ``pip install`` installs perfkit from
    perfkit_spec: str
    #: the runner's label (GitHub) or tag (GitLab)
    label: str
    #: whether a file was there before (``force``)
    replaced: bool
    #: the linter's configuration naming the label (relative to the repository; actionlint's for GitHub)
    lint_config: str | None = None
    #: whether ``write_ci`` wrote it (it keeps one that exists)
    lint_config_written: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def provider(name: str) -> Provider:
    if name not in PROVIDERS:
        raise ConfigError("provider", name, ", ".join(PROVIDERS))
    return PROVIDERS[name]


def _repo_files(repo: Path) -> list[str]:
    """The repository's files, tracked or not (but not ignored), relative to its top."""
    return sorted({f for f in git(repo, "ls-files", "--cached", "--others", "--exclude-standard", "-z").split("\0")
                   if f})


def _in_repo(option: str, repo: Path, given: str, what: str) -> str:
    """``given`` (relative to the repository, or absolute inside it) as a path relative to its top."""
    p = Path(given)
    full = (p if p.is_absolute() else repo / p).resolve()
    if not full.is_file() or not full.is_relative_to(repo.resolve()):
        raise ConfigError(option, given, f"{what} inside {repo}")
    return full.relative_to(repo.resolve()).as_posix()


def resolve_dataplane(repo: Path, given: str | None) -> str:
    """The job's ``--dataplane``: a description file of the repository (relative to it) or a plugin's
    name; unless given, the repository's one ``*.dataplane.yaml``."""
    if given is None:
        found = [f for f in _repo_files(repo) if f.endswith(DESCRIPTION_SUFFIX) and (repo / f).is_file()]
        if len(found) != 1:
            got = "none" if not found else ", ".join(found)
            raise ConfigError("--dataplane", got, f"exactly one *{DESCRIPTION_SUFFIX} in {repo}, or --dataplane "
                                                  "FILE|PLUGIN")
        return found[0]
    if given.endswith((".yaml", ".yml")) or "/" in given:
        return _in_repo("--dataplane", repo, given, "a dataplane description file")
    if not PLUGIN.fullmatch(given):
        raise ConfigError("--dataplane", given, "a description file of the repository or a plugin's name")
    return given


def _one_line(option: str, value: str, allowed: str) -> str:
    if not value.strip() or "\n" in value or "\r" in value:
        raise ConfigError(option, value, allowed)
    return value


def fill(template: str, values: dict[str, str]) -> str:
    """The template of the package with its ``@@NAME@@`` placeholders replaced by ``values``."""
    return PLACEHOLDER.sub(lambda m: values[m.group(0).strip("@")], (TEMPLATES / template).read_text())


def render(prov: Provider, *, dataplane: str, campaign: str, perfkit_spec: str, label: str) -> str:
    """The provider's file with the values filled in."""
    if not LABEL.fullmatch(label):
        raise ConfigError("--label", label, "a runner label: letters, digits, '.', '_', '-'")
    values = {
        "LABEL": label,
        "DATAPLANE": shlex.quote(_one_line("--dataplane", dataplane, "one line")),
        "CAMPAIGN": shlex.quote(_one_line("--campaign", campaign, "one line")),
        "PERFKIT_SPEC": shlex.quote(_one_line("--perfkit-spec", perfkit_spec, "a pip requirement on one line")),
        "PERFKIT_SPEC_TEXT": perfkit_spec,
        "MARKER": COMMENT_MARKER,
    }
    return fill(prov.template, values)


def write_ci(provider_name: str, repo: Path, *, dataplane: str | None = None, campaign: str = DEFAULT_CAMPAIGN,
             perfkit_spec: str | None = None, label: str = DEFAULT_LABEL, path: str | None = None,
             force: bool = False) -> CiFile:
    """Write the provider's CI file into the git repository whose top is ``repo`` (module doc). Refuses
    (a ``ConfigError``) an unknown provider, a dataplane or campaign the repository does not have, and a
    file that is there already unless ``force``."""
    prov = provider(provider_name)
    plane = resolve_dataplane(repo, dataplane)
    camp = _in_repo("--campaign", repo, campaign, "a campaign file")
    spec = perfkit_spec if perfkit_spec is not None else default_perfkit_spec()
    rel = path or prov.path
    target = (repo / rel).resolve()
    if not target.is_relative_to(repo.resolve()) or target.is_dir():
        raise ConfigError("--path", rel, f"a file path inside {repo}")
    replaced = target.exists()
    if replaced and not force:
        raise ConfigError("--dir", str(repo), f"a repository without {rel}, or --force to replace it")
    text = render(prov, dataplane=plane, campaign=camp, perfkit_spec=spec, label=label)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    lint, wrote = None, False
    if prov.lint_config is not None:
        lint = prov.lint_config[1]
        if not (repo / lint).exists():
            (repo / lint).write_text(fill(prov.lint_config[0], {"LABEL": label}))
            wrote = True
    return CiFile(provider=prov.name, path=str(target), relpath=target.relative_to(repo.resolve()).as_posix(),
                  repo=str(repo), dataplane=plane, campaign=camp, perfkit_spec=spec, label=label, replaced=replaced,
                  lint_config=lint, lint_config_written=wrote)
