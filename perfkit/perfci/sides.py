"""One revision of the project, built in a git worktree of its own, and run as a subprocess.

``Side.build(repo, rev, workdir)``: ``git worktree add --detach`` of the revision under ``workdir``,
then ``make bpf`` there. That side's perfkit is the worktree's own: it runs as ``python -P -m
perfkit`` (``-P``: the working directory is not put first on ``sys.path``) with ``PYTHONPATH`` the
worktree, by the interpreter running this process (the environment's dependencies), so it loads the
worktree's Python code and the worktree's BPF objects (``paths.CHECKOUT`` is the worktree). Every
run it stores records the git commit of its source (``perfkit.version``): ``run_unit`` checks that
it is the side's, so that a side never measures another revision's code by mistake.

A side that fails to build or to run raises ``SideError``: one line naming the side and the revision.
``close()`` removes the worktree (``git worktree remove --force``); callers close every side in a
``finally``, so Ctrl-C and SIGTERM (a ``KeyboardInterrupt`` in perfkit's CLI) clean up too.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfkit.errors import ConfigError, PerfkitError

#: Exit status of a command whose side failed to build or run (``perfkit ab``, ``perfkit bisect``).
SIDE_FAILED_EXIT = 3
#: How long ``make bpf`` of a side may take [s].
BUILD_TIMEOUT_S = 900.0


class SideError(PerfkitError):
    """A side (revision) could not be built or run; the message names it."""

    exit_code = SIDE_FAILED_EXIT


def git(repo: Path, *args: str, check: bool = True) -> str:
    """``git -C repo args``; its stdout, stripped. A failure raises ``PerfkitError`` with git's line."""
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and out.returncode != 0:
        raise PerfkitError(f"git {' '.join(args)}: {_last_line(out.stderr) or 'failed'}")
    return out.stdout.strip()


def resolve(repo: Path, rev: str, option: str) -> str:
    """The full commit of ``rev`` in ``repo``; a ``ConfigError``-like one line when there is none."""
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                         capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        raise ConfigError(option, rev, f"a revision of the repository {repo} (a branch, tag or commit)")
    return out.stdout.strip()


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


@dataclass
class Side:
    """A revision checked out and built in its own worktree."""

    name: str
    """What the side is called in outputs: ``base``, ``head``, ``good``, or a short commit."""
    rev: str
    """The revision as the user wrote it."""
    commit: str
    """Its full commit id."""
    repo: Path
    """The repository the worktree belongs to."""
    path: Path
    """The worktree."""
    python: str = sys.executable
    """The interpreter that runs the side's perfkit."""
    runs: list[str] = field(default_factory=list)
    """Run ids this side stored (one per unit run)."""

    @property
    def short(self) -> str:
        return self.commit[:10]

    @property
    def label(self) -> str:
        return f"{self.name} {self.rev} ({self.commit[:7]})" if self.rev != self.commit else f"{self.name} {self.commit[:7]}"

    @classmethod
    def build(cls, repo: Path, rev: str, workdir: Path, name: str, option: str = "--rev", **extra: Any) -> Side:
        """Check ``rev`` out into ``workdir/<name>-<commit>`` and build it there (``make bpf``;
        ``extra``: the fields a subclass adds)."""
        commit = resolve(repo, rev, option)
        path = workdir / f"{name}-{commit[:10]}"
        if path.exists():
            _remove_worktree(repo, path)
        workdir.mkdir(parents=True, exist_ok=True)
        out = subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(path), commit],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SideError(f"{name} {rev}: git worktree add failed: {_last_line(out.stderr)}")
        side = cls(name, rev, commit, repo, path, **extra)
        try:
            side.make()
        except BaseException:
            side.close()
            raise
        return side

    def make(self) -> None:
        """Build the checked-out revision: ``make bpf`` (its BPF objects; its perfkit is Python)."""
        try:
            out = subprocess.run(["make", "-C", str(self.path), "--no-print-directory", "bpf"], capture_output=True,
                                 text=True, timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise SideError(f"{self.label}: make bpf took more than {BUILD_TIMEOUT_S:.0f} s") from None
        if out.returncode != 0:
            raise SideError(f"{self.label} does not build: make bpf: {_last_line(out.stderr or out.stdout)}")

    def env(self) -> dict[str, str]:
        return {**clean_env(), "PYTHONPATH": str(self.path)}

    def command(self, *args: str) -> list[str]:
        return [self.python, "-P", "-m", "perfkit", *args]

    def run_unit(self, campaign_file: Path, root: Path) -> dict[str, Any]:
        """``perfkit run CAMPAIGN_FILE --json`` by this side's perfkit into ``root``; its JSON outcome.

        A run that does not complete, or that recorded another commit than the side's, raises
        ``SideError``."""
        cmd = self.command("run", str(self.unit_file(campaign_file)), "--root", str(root), "--no-metrics", "--no-progress", "--json")
        out = run_child(cmd, cwd=self.path, env=self.env())
        try:
            outcome = json.loads(out.stdout)
        except ValueError:
            outcome = None
        if out.returncode != 0 or not isinstance(outcome, dict) or outcome.get("status") != "complete":
            why = _last_line(out.stderr) or f"exit status {out.returncode}"
            if isinstance(outcome, dict) and outcome.get("units_failed"):
                why = "; ".join(f"{u}: {e}" for u, e in outcome["units_failed"].items())
            raise SideError(f"{self.label}: perfkit run failed: {why}")
        run_id = str(outcome["run_id"])
        self.check_run(json.loads((root / run_id / "metadata.json").read_text()))
        self.runs.append(run_id)
        return outcome

    def unit_file(self, campaign_file: Path) -> Path:
        """The campaign file this side runs for a unit's: the unit's own."""
        return campaign_file

    def check_run(self, meta: dict[str, Any]) -> None:
        """A ``SideError`` unless the run (its metadata) measured this side's code: its perfkit commit."""
        recorded = (meta.get("perfkit") or {}).get("git_sha_full")
        if recorded != self.commit:
            raise SideError(f"{self.label}: the run recorded perfkit commit {recorded}, not the side's "
                            f"{self.commit[:10]}: the worktree's perfkit was not the one imported")

    def close(self) -> None:
        """Remove the worktree (whatever it holds: its build/ is untracked)."""
        _remove_worktree(self.repo, self.path)


def clean_env() -> dict[str, str]:
    """This process's environment without git's ``GIT_*`` variables: ``git bisect run`` sets
    ``GIT_DIR`` for its command, which would make every ``git -C`` (the side's perfkit asking for its
    own commit) answer for the bisected worktree instead."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


def run_child(cmd: list[str], cwd: Path | None, env: dict[str, str], capture: bool = True,
              group: bool = False) -> subprocess.CompletedProcess:
    """Run a command; a stop of this process (KeyboardInterrupt) stops the child first (SIGTERM, then
    SIGKILL after 60 s), so that it takes its testbed down before we remove its worktree. ``group``:
    the child leads a process group of its own, and the whole group gets the signals (``git bisect
    run`` and the step it runs)."""
    pipe = subprocess.PIPE if capture else None
    child = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=pipe, text=True,
                             start_new_session=group)

    def send(sig: int) -> None:
        try:
            os.killpg(child.pid, sig) if group else child.send_signal(sig)
        except ProcessLookupError:
            pass

    try:
        stdout, stderr = child.communicate()
    except BaseException:
        if child.poll() is None:
            send(signal.SIGTERM)
            try:
                child.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                send(signal.SIGKILL)
                child.wait()
        raise
    return subprocess.CompletedProcess(cmd, child.returncode, stdout, stderr)


def _remove_worktree(repo: Path, path: Path) -> None:
    subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(path)], capture_output=True)
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)
    subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)
