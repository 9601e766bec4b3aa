"""``perfkit lab provision``: set a lab's hosts up with ``ansible-playbook`` and the playbook shipped
with perfkit (``perfkit/lab/playbooks/provision.yml``).

What each host gets is planned here, from the inventory (``plan``), and handed to the playbook as
variables, so that the playbook holds no logic of its own:

- every host: the packages of its roles (``PACKAGES``), bpffs, perfkit at the controller's commit
  (``source_tarball``: the checkout's files, modified ones included, so a run says exactly which
  code ran) in ``<perfkit_root>/src/<id>``, a virtualenv with what perfkit needs on a host
  (``AGENT_REQUIREMENTS`` at the versions and hashes of ``requirements.lock``, copied from the
  controller: a host needs no access to PyPI), and node-exporter on its management address;
- ``dut`` and ``tester`` hosts: perfkit's BPF objects built there against their own kernel, and
  their data-plane interfaces set up (channels, IRQ affinity to the host's cores, threaded NAPI);
- the ``metrics`` host: Prometheus scraping every host's node-exporter (labels ``host`` and
  ``role``), the Pushgateway, both on its management address, and each DUT host's dataplane
  exporter (job ``dataplane``: ``perfkit exporter``, which the DUT host's agent runs on the host's
  management address and port ``PORTS["dataplane-exporter"]`` while a dataplane is loaded; a DUT
  host's ``lab.json`` names both).

With ``perfkit_metrics_password`` in the inventory, every server of the stack asks for basic auth
(``web-config.yml``: the user and a bcrypt hash, the exporters' own ``--web.config.file``), Prometheus
scrapes with the password (a file of mode 0600 on the metrics host), and the controller pushes and
queries with it (``lab_metrics``: an endpoints file of mode 0600 beside the facts).

A second provisioning changes nothing (``changed=0`` in every host's recap). ``--check`` runs the
playbook in Ansible's check mode: what would change, nothing changed. Each host's facts (kernel,
CPU, SMT, governor, NIC drivers and firmware: ``perfkit.lab.hostsetup.facts``) are written to the
facts directory, for the run's metadata.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from perfkit.errors import PerfkitError
from perfkit.lab import inventory
from perfkit.lab.inventory import Lab, LabHost
from perfkit.paths import BUILD_ROOT, CHECKOUT, PACKAGE_DIR
from perfkit.metrics.promconfig import PASSWORD_FILE, SCRAPE_INTERVAL, WEB_CONFIG_FILE, write_private

PLAYBOOK = PACKAGE_DIR / "lab" / "playbooks" / "provision.yml"
#: Debian packages by role ("all": every host).
PACKAGES = {
    "all": ["python3-venv", "iproute2", "ethtool", "make", "prometheus-node-exporter"],
    "dut": ["clang", "llvm", "libbpf-dev", "bpftool", "linux-perf"],
    "tester": ["clang", "llvm", "libbpf-dev", "bpftool"],
    "trex": [],
    "metrics": ["prometheus", "prometheus-pushgateway"],
}
#: What perfkit imports on a lab host (the agent and the host set-up), pinned by requirements.lock.
AGENT_REQUIREMENTS = ("numpy", "scapy", "pyyaml", "prometheus-client", "bcrypt")
#: TCP ports of the servers on the hosts' management addresses.
PORTS = {"node-exporter": 9100, "prometheus": 9090, "pushgateway": 9091, "dataplane-exporter": 9435}
#: Roles whose hosts need BPF objects and data-plane interfaces set up.
BPF_ROLES = ("dut", "tester")


@dataclass
class HostRecap:
    """One host's line of Ansible's PLAY RECAP."""

    host: str
    ok: int = 0
    changed: int = 0
    unreachable: int = 0
    failed: int = 0
    skipped: int = 0


@dataclass
class ProvisionResult:
    """What a provisioning did."""

    source_id: str
    """The perfkit source installed on the hosts (a commit, ``-dirty-<hash>`` when modified)."""
    check: bool
    """Check mode: nothing was changed."""
    recap: list[HostRecap] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    """Host name -> facts (``perfkit.lab.hostsetup.facts``); empty in check mode."""
    returncode: int = 0
    """ansible-playbook's exit status (0: every host provisioned)."""
    unreachable: list[str] = field(default_factory=list)
    """One line per host SSH could not reach: the host, its address and SSH's reason."""

    @property
    def changed(self) -> int:
        return sum(r.changed for r in self.recap)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "changed": self.changed}


# -- the plan --------------------------------------------------------------------------------------
def host_plan(lab: Lab, host: LabHost, source_id: str = "") -> dict[str, Any]:
    """The variables of ``host`` the playbook acts on."""
    root = Path(host.root)
    packages = list(dict.fromkeys(p for role in ("all", *host.roles) for p in PACKAGES[role]))
    plan: dict[str, Any] = {"packages": packages, "bpf": any(r in BPF_ROLES for r in host.roles),
                            "nic": None, "files": [], "secrets": [], "daemons": []}
    cores = list(host.dut_cores or host.tester_cores)
    if plan["bpf"] and host.interfaces and cores:
        plan["nic"] = {"interfaces": [i.name for i in host.interfaces], "cores": cores}
    run = root / "run"
    # what the agent on the host may touch (perfkit.lab.agent): the interfaces the inventory names;
    # on a DUT host, where its dataplane exporter serves (the address node-exporter serves on)
    # (and with the lab's basic auth, the web config it asks for it with, as node-exporter does)
    web_cfg = root / "etc" / WEB_CONFIG_FILE
    exporter = {"address": host.address, "exporter_port": PORTS["dataplane-exporter"],
                **({"web_config": str(web_cfg)} if lab.metrics_auth else {})} if "dut" in host.roles else {}
    plan["files"].append({"path": str(root / "etc" / "lab.json"), "content": json.dumps(
        {"host": host.name, "roles": list(host.roles), "interfaces": [i.name for i in host.interfaces],
         "dut_cores": list(host.dut_cores), "tester_cores": list(host.tester_cores), "source_id": source_id,
         **exporter}, indent=1, sort_keys=True) + "\n"})
    web: list[str] = []
    if lab.metrics_auth:
        user, password = lab.metrics_auth
        plan["secrets"].append({"path": str(web_cfg), "content": yaml.safe_dump(
            {"basic_auth_users": {user: stable_bcrypt(password, f"{host.name}/{user}")}})})
        web = [f"--web.config.file={web_cfg}"]
    plan["daemons"].append({"name": "node-exporter", "pidfile": str(run / "node-exporter.pid"), "config": None,
                            "argv": ["/usr/bin/prometheus-node-exporter",
                                     f"--web.listen-address={host.address}:{PORTS['node-exporter']}", *web]})
    if "metrics" in host.roles:
        cfg, scrape_pw = root / "etc" / "prometheus.yml", root / "etc" / PASSWORD_FILE
        if lab.metrics_auth:
            plan["secrets"].append({"path": str(scrape_pw), "content": lab.metrics_auth[1]})
        plan["files"].append({"path": str(cfg), "content": prometheus_config(lab, host, scrape_pw)})
        plan["daemons"] += [
            {"name": "pushgateway", "pidfile": str(run / "pushgateway.pid"), "config": None,
             "argv": ["/usr/bin/prometheus-pushgateway", f"--web.listen-address={host.address}:{PORTS['pushgateway']}",
                      f"--persistence.file={root / 'data' / 'pushgateway.db'}", *web]},
            {"name": "prometheus", "pidfile": str(run / "prometheus.pid"), "config": str(cfg),
             "argv": ["/usr/bin/prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={root / 'data' / 'prometheus'}",
                      f"--web.listen-address={host.address}:{PORTS['prometheus']}", *web]}]
    return plan


#: bcrypt's base-64 alphabet; the last of a salt's 22 characters carries 2 bits: these four.
_BCRYPT_B64 = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def stable_bcrypt(password: str, context: str, rounds: int = 10) -> str:
    """A bcrypt hash of ``password`` whose salt comes from ``context`` (a host and user): the same on
    every provisioning, so a second run changes no file. The salt need not be secret, only distinct."""
    import bcrypt
    digest = hashlib.sha256(b"perfkit lab web-config " + context.encode()).digest()
    salt = "".join(_BCRYPT_B64[b % 64] for b in digest[:21]) + _BCRYPT_B64[digest[21] % 4 * 16]
    return bcrypt.hashpw(password.encode(), f"$2b${rounds:02d}${salt}".encode()).decode()


def prometheus_config(lab: Lab, metrics: LabHost, password_file: Path | None = None) -> str:
    """prometheus.yml of the metrics host: every host's node-exporter (labels ``host``, ``role``),
    the Pushgateway (its labels kept) and each DUT host's dataplane exporter (job ``dataplane``, label
    ``host``; its series' own ``dataplane`` and ``testbed`` kept), each second as the local stack does;
    with basic auth, it scrapes all three as the lab's metrics user with the password in
    ``password_file``."""
    interval = f"{SCRAPE_INTERVAL:g}s"
    auth = {"basic_auth": {"username": lab.metrics_auth[0], "password_file": str(password_file)}} \
        if lab.metrics_auth else {}
    cfg = {"global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
           "scrape_configs": [
               {"job_name": "node", "static_configs": [
                   {"targets": [f"{h.address}:{PORTS['node-exporter']}"], "labels": {"host": h.name, "role": ",".join(h.roles)}}
                   for h in lab.hosts], **auth},
               {"job_name": "pushgateway", "honor_labels": True,
                "static_configs": [{"targets": [f"{metrics.address}:{PORTS['pushgateway']}"]}], **auth},
               {"job_name": "dataplane", "honor_labels": True, "static_configs": [
                   {"targets": [f"{h.address}:{PORTS['dataplane-exporter']}"], "labels": {"host": h.name}}
                   for h in lab.role("dut")], **auth}]}
    return "# written by perfkit lab provision\n" + yaml.safe_dump(cfg, sort_keys=False)


# -- what the controller ships ---------------------------------------------------------------------
def _checkout() -> Path:
    if CHECKOUT is None or not (CHECKOUT / ".git").exists():
        raise PerfkitError("perfkit lab provision installs the controller's checkout on the hosts: run it from a git "
                           "checkout of perfkit")
    return CHECKOUT


def source_files(checkout: Path) -> list[str]:
    """The checkout's files as git sees them: tracked and untracked, not ignored, not deleted."""
    out = subprocess.run(["git", "-C", str(checkout), "ls-files", "-z", "-co", "--exclude-standard"],
                         capture_output=True, check=True).stdout.decode()
    return sorted(f for f in set(out.split("\0")) if f and (checkout / f).is_file())


def source_tarball(dest: Path) -> tuple[str, Path]:
    """A tar.gz of the checkout's files and its id: the commit's short SHA, with ``-dirty-<hash>``
    when a file differs from it. The same files give the same archive, byte for byte."""
    checkout = _checkout()
    files = source_files(checkout)
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.encode() + b"\0" + (checkout / f).read_bytes() + b"\0")
    sha = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                         text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain"], capture_output=True,
                           text=True, check=True).stdout.strip()
    source_id = f"{sha}-dirty-{digest.hexdigest()[:8]}" if dirty else sha
    path = dest / f"perfkit-{source_id}.tar.gz"
    if not path.exists():
        dest.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for f in files:
                info = tar.gettarinfo(str(checkout / f), arcname=f)
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
                with open(checkout / f, "rb") as fh:
                    tar.addfile(info, fh)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            gz.write(buf.getvalue())
        os.replace(tmp, path)
    return source_id, path


def agent_requirements(lock: Path) -> str:
    """The lock's entries (versions, markers, hashes) of ``AGENT_REQUIREMENTS``."""
    entries = re.split(r"\n(?=\S)", lock.read_text())
    keep = [e.split("\n    # via")[0].rstrip() for e in entries
            if re.match(rf"^({'|'.join(map(re.escape, AGENT_REQUIREMENTS))})==", e)]
    return "\n".join(keep) + "\n"


def wheelhouse(dest: Path) -> tuple[str, Path]:
    """A tar of the wheels a host's virtualenv installs and their ``requirements.txt``, and its id
    (``pip download`` on the controller: the hosts need no PyPI)."""
    text = agent_requirements(_checkout() / "requirements.lock")
    wid = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = dest / f"wheels-{wid}.tar"
    if path.exists():
        return wid, path
    d = dest / wid
    d.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                           "--only-binary", ":all:", "--no-deps", "--require-hashes", "-d", str(d), "-r", "/dev/stdin"],
                          input=text, capture_output=True, text=True)
    if proc.returncode != 0:
        raise PerfkitError(f"pip download of the lab hosts' wheels failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    (d / "requirements.txt").write_text(text)
    tmp = path.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tar:
        for f in sorted(d.iterdir()):
            tar.add(f, arcname=f.name)
    os.replace(tmp, path)
    return wid, path


# -- running the playbook --------------------------------------------------------------------------
def ansible_playbook() -> str:
    beside = Path(sys.executable).parent / "ansible-playbook"
    return str(beside) if beside.exists() else "ansible-playbook"


def ansible_env() -> dict[str, str]:
    """Ansible's settings for perfkit's runs: no colour, no cows, no retry files, host keys checked."""
    return dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOWS="1",
                ANSIBLE_RETRY_FILES_ENABLED="false", ANSIBLE_HOST_KEY_CHECKING="true",
                ANSIBLE_DEPRECATION_WARNINGS="false", ANSIBLE_PIPELINING="true",
                ANSIBLE_SSH_ARGS="-o ControlMaster=auto -o ControlPersist=60s",
                ANSIBLE_LOCALHOST_WARNING="false", PYTHONUNBUFFERED="1")


RECAP_RE = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)", re.M)


def parse_recap(output: str) -> list[HostRecap]:
    """The hosts' lines of the PLAY RECAP in ``ansible-playbook``'s output."""
    recap = output.rsplit("PLAY RECAP", 1)[-1] if "PLAY RECAP" in output else ""
    return [HostRecap(m.group(1), *map(int, m.groups()[1:])) for m in RECAP_RE.finditer(recap)]


UNREACHABLE_RE = re.compile(r"^fatal: \[([^\]]+)\]: UNREACHABLE! => (\{.*\})\s*$", re.M)


def unreachable(output: str, lab: Lab) -> list[str]:
    """One line per host Ansible could not reach: the host, its address and SSH's reason."""
    out = {}
    for m in UNREACHABLE_RE.finditer(output):
        try:
            why = json.loads(m.group(2)).get("msg", "")
        except ValueError:
            why = m.group(2)
        host = next((h for h in lab.hosts if h.name == m.group(1)), None)
        where = f"{host.address}:{host.port}" if host else "?"
        out.setdefault(m.group(1), f"host {m.group(1)} ({where}) is unreachable: {' '.join(str(why).split())}")
    return list(out.values())


def facts_dir_of(source: str | os.PathLike[str]) -> Path:
    """Where provisioning keeps the facts of the lab of inventory ``source`` (one file per host)."""
    return BUILD_ROOT / "lab" / "facts" / hashlib.sha256(os.fspath(Path(source).absolute()).encode()).hexdigest()[:12]


def lab_metadata(source: str | os.PathLike[str]) -> dict[str, Any]:
    """What a run records of its lab: the hosts perfkit reads from the inventory (no secret) and the
    facts of the last provisioning (``facts``: host -> facts; empty when it was never provisioned)."""
    lab = inventory.load(source)
    d = facts_dir_of(source)
    facts = {f.stem: json.loads(f.read_text()) for f in sorted(d.glob("*.json"))} if d.is_dir() else {}
    return {**lab.to_dict(), "facts": facts}


def lab_metrics(spec: Any, source: str | os.PathLike[str]) -> Any:
    """A campaign's metrics (``MetricsSpec``) in the lab of inventory ``source``: unless the campaign or
    the environment names endpoints, the lab's metrics host (provisioned: Prometheus, Pushgateway)
    and the DUT host's node-exporter series (``host`` label) as the DUT's CPU."""
    import dataclasses
    explicit = spec.config or spec.prometheus_url or spec.pushgateway_url or any(
        os.environ.get(e) for e in ("PERFKIT_METRICS_CONFIG", "PERFKIT_PUSHGATEWAY_URL", "PERFKIT_PROMETHEUS_URL"))
    lab = inventory.load(source)
    if explicit or not lab.role("metrics"):
        return spec
    m = lab.role("metrics")[0]
    return dataclasses.replace(spec, prometheus_url=f"http://{m.address}:{PORTS['prometheus']}",
                               pushgateway_url=f"http://{m.address}:{PORTS['pushgateway']}",
                               node_selector=f'job="node",host="{lab.dut.name}"',
                               config=str(_auth_file(lab, source)) if lab.metrics_auth else None)


def _auth_file(lab: Lab, source: str | os.PathLike[str]) -> Path:
    """A metrics endpoints file (``perfkit.metrics.config``) with the lab's basic-auth user and its
    password file, both of mode 0600, beside the lab's facts on the controller."""
    assert lab.metrics_auth
    d = facts_dir_of(source)
    d.mkdir(parents=True, exist_ok=True)
    user, password = lab.metrics_auth
    password_file = write_private(d / "metrics-password", password)
    return write_private(d / "metrics-auth.yml", yaml.safe_dump({"username": user, "password_file": str(password_file)}))


def provision(source: str | os.PathLike[str], check: bool = False, facts_dir: Path | None = None,
              echo: Any = None) -> ProvisionResult:
    """Provision the lab of inventory ``source``; ``echo(line)`` sees ansible-playbook's output as it
    comes. Returns the recap; facts are read from ``facts_dir`` (default ``<build>/lab/facts``)."""
    lab = inventory.load(source)
    work = BUILD_ROOT / "lab"
    source_id, tarball = source_tarball(work / "src")
    wheels_id, wheels = wheelhouse(work / "wheels")
    facts_dir = Path(facts_dir or facts_dir_of(source))
    facts_dir.mkdir(parents=True, exist_ok=True)
    for old in facts_dir.glob("*.json") if not check else ():
        old.unlink()
    extra = {"perfkit_source": {"id": source_id, "tarball": str(tarball)}, "perfkit_wheelhouse": {"id": wheels_id, "tarball": str(wheels)},
             "perfkit_facts_dir": str(facts_dir), "perfkit_plan": {h.name: host_plan(lab, h, source_id) for h in lab.hosts}}
    # the metrics password may be in it: only for root, and removed after the run
    vars_file = write_private(work / "provision-vars.json", json.dumps(extra))
    argv = [ansible_playbook(), "-i", os.fspath(source), str(PLAYBOOK), "-e", f"@{vars_file}",
            *(["--check", "--diff"] if check else [])]
    lines = []
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ansible_env())
        assert proc.stdout
        for line in proc.stdout:
            lines.append(line)
            if echo:
                echo(line.rstrip("\n"))
        rc = proc.wait()
    finally:
        vars_file.unlink(missing_ok=True)
    result = ProvisionResult(source_id, check, parse_recap("".join(lines)), returncode=rc,
                             unreachable=unreachable("".join(lines), lab))
    if rc != 0 and not result.recap:
        raise PerfkitError(f"ansible-playbook failed (exit {rc}): {''.join(lines).strip().splitlines()[-1:]}")
    for f in sorted(facts_dir.glob("*.json")) if not check else ():
        result.facts[f.stem] = json.loads(f.read_text())
    return result
