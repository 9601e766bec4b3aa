"""perfkit as a package: what it declares, what it locks, what its wheel carries, and that the wheel
installed in a fresh venv outside the checkout measures.

The wheel test builds the wheel from this checkout (``pip wheel``, setuptools from the index in
pip's build isolation), makes a venv in a temporary directory, fills it with the wheel's
dependencies at the lock's versions (uv, from its cache: seconds instead of pip's minute), then has
the venv's own pip install the wheel from nothing but the venv (``--no-index``: a dependency the
wheel declares and the venv lacks fails it). From a working directory outside the checkout, with
its own ``PERFKIT_CACHE`` and ``PERFKIT_HOME``, it runs ``perfkit --version``, ``prog-bench``, a
one-second ``trial`` on the local testbed and the shipped smoke campaign: the BPF objects are
compiled from the wheel's sources into that cache, the run lands in that home.
"""
from __future__ import annotations

import ast
import email.parser
import json
import os
import re
import subprocess
import sys
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from perfkit.errors import PerfkitError
from perfkit.testbed import bpfbuild
from perfkit.version import VERSION

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
LOCK = ROOT / "requirements.lock"
#: The directories the wheel carries as perfkit/_data/<dir>/, and the files of each (as setup.py's DATA).
SHIPPED = {"bpf": ("*.bpf.c", "include/*.h"), "notebooks": ("*.ipynb",), "campaigns": ("*.yaml",),
           "trex_profiles": ("*.py", "*.md")}
#: Runtime dependencies perfkit runs without importing: the notebooks' kernel, `perfkit jupyter`; `ansible-inventory`.
RUN_NOT_IMPORTED = {"ansible-core", "ipykernel", "jupyterlab"}
#: Dev dependencies used without an import: a pytest plugin (the suite's timeout), a command (the lock, this test).
DEV_NOT_IMPORTED = {"pytest-timeout", "uv"}
#: Imported only by code that runs in TRex's own environment (build/trex-venv: trexlib/worker.py, its tests).
TREX_MODULES = {"trex", "lbr_trex_client"}


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


#: The checkout's own scripts that tests import from their directory (``ci/``).
LOCAL_MODULES = {p.stem for p in (ROOT / "ci").glob("*.py")}


def _imports(paths: list[Path]) -> set[str]:
    """Top-level modules imported by ``paths`` that are neither the standard library nor local."""
    found: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"perfkit", "tests", "__future__"} - TREX_MODULES - LOCAL_MODULES


def _distributions(modules: set[str]) -> set[str]:
    """The installed distributions that provide ``modules`` (one that none provides fails)."""
    provided = packages_distributions()
    missing = sorted(m for m in modules if m not in provided)
    assert not missing, f"imported but not installed: {missing}"
    return {canonicalize_name(d) for m in modules for d in provided[m]}


def _lock() -> dict[str, list[tuple[str, str]]]:
    """requirements.lock as {name: [(version, marker)]}; every pin must carry hashes."""
    pins: dict[str, list[tuple[str, str]]] = {}
    for entry in re.split(r"\n(?=\S)", LOCK.read_text()):
        m = re.match(r"([A-Za-z0-9_.-]+)==(\S+)(?: ; ([^\\\n]+))?", entry)
        if m:
            assert "--hash=sha256:" in entry, f"{m[1]} is pinned without a hash"
            pins.setdefault(canonicalize_name(m[1]), []).append((m[2], (m[3] or "").strip()))
    return pins


def test_perfkit_declares_what_it_imports_and_imports_what_it_declares():
    project = _project()
    runtime = _names(project["dependencies"])
    dev = _names(project["optional-dependencies"]["dev"])
    package = [p for p in (ROOT / "perfkit").rglob("*.py") if p != ROOT / "perfkit" / "trexlib" / "worker.py"]
    used = _distributions(_imports(package))
    assert used - runtime == set(), "imported by perfkit, not declared in pyproject.toml dependencies"
    assert runtime - used == RUN_NOT_IMPORTED, "declared, never imported (nor run: RUN_NOT_IMPORTED)"
    # tests/data and tests/describe hold TRex profiles: TRex's client runs them in its own environment
    # (``make trex-venv``)
    profiles = (ROOT / "tests" / "data", ROOT / "tests" / "describe")
    tests = [p for p in (ROOT / "tests").rglob("*.py") if not any(d in p.parents for d in profiles)]
    around = _distributions(_imports([*tests, *(ROOT / "bench").rglob("*.py")]))
    assert around - runtime - dev == set(), "imported by tests or benches, declared nowhere"
    assert dev - around == DEV_NOT_IMPORTED, "dev dependencies nothing uses"


def test_the_lock_pins_every_declared_dependency_and_conda_installs_the_lock():
    project = _project()
    pins = _lock()
    for text in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        req = Requirement(text)
        versions = [v for v, _ in pins.get(canonicalize_name(req.name), [])]
        assert versions and all(req.specifier.contains(v) for v in versions), (
            f"{text}: the lock has {versions or 'nothing'}: run `make lock`")
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    assert SpecifierSet(project["requires-python"]).contains(python.split("=")[1] + ".0")
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert pip == ["--require-hashes", f"-r {LOCK.name}"], "environment.yml installs exactly the lock"


def test_an_installed_perfkit_compiles_an_object_once_and_again_when_its_inputs_change(tmp_path, monkeypatch):
    """``bpfbuild.object_path`` as an installed perfkit runs it (no checkout): into the cache on first
    use, the cached object afterwards, a new one when the compiler's input changes."""
    monkeypatch.setattr(bpfbuild, "CHECKOUT", None)
    monkeypatch.setattr(bpfbuild, "BUILD_DIR", tmp_path)
    first = bpfbuild.object_path("drop")
    assert first == tmp_path / "drop.o" and first.stat().st_size > 0
    inode = first.stat().st_ino           # a rebuilt object replaces the file: another inode
    assert bpfbuild.object_path("drop").stat().st_ino == inode
    monkeypatch.setattr(bpfbuild, "CFLAGS", [*bpfbuild.CFLAGS, "-DPERFKIT_TEST_CHANGED"])
    assert bpfbuild.object_path("drop").stat().st_ino != inode
    with pytest.raises(PerfkitError, match="nosuch.bpf.c is missing"):
        bpfbuild.object_path("nosuch")


# -- the wheel -------------------------------------------------------------------------------------------
def _run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run([VENV_BIN / "python", "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)])
    (built,) = out.glob("perfkit-*.whl")
    return built


def _git_sha() -> str:
    return _run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]).stdout.strip()


def test_the_wheel_carries_the_programs_notebooks_and_campaigns(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for top, patterns in SHIPPED.items():
        files = [p.relative_to(ROOT).as_posix() for pattern in patterns for p in (ROOT / top).glob(pattern)]
        assert files, top
        missing = sorted(f for f in files if f"perfkit/_data/{f}" not in names)
        assert not missing, f"not in {wheel.name}: {missing}"
    info = json.loads(zipfile.ZipFile(wheel).read("perfkit/_data/build.json"))
    assert info["git_sha"] == _git_sha()
    assert not [n for n in names if n.endswith(".o")], "objects are built on the installing host"
    templates = {f"perfkit/perfci/templates/{p.name}" for p in (ROOT / "perfkit" / "perfci" / "templates").iterdir()}
    assert len(templates) >= 3 and templates <= names, "perfkit ci init's templates"
    meta = email.parser.Parser().parsestr(zipfile.ZipFile(wheel).read(
        f"perfkit-{VERSION}.dist-info/METADATA").decode())
    assert meta["License-Expression"] == "Apache-2.0" and meta["Version"] == VERSION
    assert f"perfkit-{VERSION}.dist-info/licenses/LICENSE" in names


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> dict:
    """A venv outside the checkout with the wheel installed; its bin, and the environment to run in."""
    top = tmp_path_factory.mktemp("installed")
    # none of the checkout's: on PYTHONPATH, its perfkit (and perfkit.egg-info) would stand in for the wheel's
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PERFKIT_", "VIRTUAL_ENV"))}
    env.update(PERFKIT_CACHE=str(top / "cache"), PERFKIT_HOME=str(top / "home"), PERFKIT_REPORTS=str(top / "reports"))
    venv = top / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], env=env)
    meta = email.parser.Parser().parsestr(zipfile.ZipFile(wheel).read(
        f"perfkit-{VERSION}.dist-info/METADATA").decode())
    requires = [r for r in meta.get_all("Requires-Dist") if "extra ==" not in r]
    (top / "requires.txt").write_text("\n".join(requires) + "\n")
    (top / "constraints.txt").write_text("\n".join(
        f"{name}=={version}" + (f" ; {marker}" if marker else "")
        for name, pins in _lock().items() for version, marker in pins) + "\n")
    _run([VENV_BIN / "uv", "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
          "-r", str(top / "requires.txt"), "-c", str(top / "constraints.txt")], env=env)
    _run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-index", str(wheel)], env=env)
    work = top / "work"
    work.mkdir()
    where = _run([venv / "bin" / "python", "-c", "import json, perfkit.paths as p; print(json.dumps({k: str(v) for k, v in "
                  "{'checkout': p.CHECKOUT, 'files': p.FILES_ROOT, 'objects': p.BUILD_DIR}.items()}))"], cwd=work, env=env)
    return {"bin": venv / "bin", "cwd": work, "env": env, "top": top, "paths": json.loads(where.stdout)}


def _perfkit(installed: dict, *argv: str) -> subprocess.CompletedProcess:
    return _run([installed["bin"] / "perfkit", *argv], cwd=installed["cwd"], env=installed["env"])


@pytest.mark.slow   # installing the wheel takes 12 s; make test keeps what the wheel carries
def test_the_installed_wheel_knows_its_version_and_finds_its_files(installed):
    out = _perfkit(installed, "--version").stdout
    assert out.startswith(f"perfkit {VERSION} (git {_git_sha()}"), out
    paths = installed["paths"]
    assert paths["checkout"] == "None"
    assert Path(paths["files"]).is_relative_to(installed["top"] / "venv")
    assert Path(paths["objects"]) == installed["top"] / "cache" / "bpf" / os.uname().release


@pytest.mark.slow   # make test keeps the installed wheel's version and files (the same install)
def test_the_installed_wheel_builds_its_programs_and_measures(installed):
    bench = json.loads(_perfkit(installed, "prog-bench", "--rounds", "3", "--repeat", "1000", "--json").stdout)
    assert bench["path_verified"] and bench["ns_per_packet"] > 0
    objects = installed["top"] / "cache" / "bpf" / os.uname().release
    assert {"bench.o", "drop.o", "pgwu.o"} <= {p.name for p in objects.glob("*.o")}
    trial = json.loads(_perfkit(installed, "trial", "--duration", "1", "--rate", "10kpps", "--json").stdout)
    assert trial["generator"] == "xdp" and trial["rx_packets"] > 0
    assert (objects / "vmlinux.h").is_file() and (objects / "stallprobe.o").is_file()
    campaign = Path(installed["paths"]["files"]) / "campaigns" / "smoke.yaml"
    run = json.loads(_perfkit(installed, "run", str(campaign), "--no-progress", "--json").stdout)
    assert run["status"] == "complete"
    assert Path(run["path"]).parent == installed["top"] / "home" / "runs"
    assert not (installed["cwd"] / "data").exists()


def test_installed_builds_use_the_makefiles_bpf_flags():
    """An installed perfkit compiles with ``bpfbuild.CFLAGS``, a checkout with the Makefile's
    ``BPF_CFLAGS``: the same flags, the include directories aside (each build has its own)."""
    line = next(ln for ln in (ROOT / "Makefile").read_text().splitlines() if ln.startswith("BPF_CFLAGS"))
    make_flags = line.split(":=", 1)[1].replace("$(ARCH)", os.uname().machine).split()
    local = lambda flags: [f for f in flags if not (f.startswith("-I") and "/usr/include" not in f)]  # noqa: E731
    assert local(bpfbuild.CFLAGS) == local(make_flags)
