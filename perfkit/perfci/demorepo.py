"""A user's own dataplane repository (``perfkit dataplane new demo``) with eight commits, one slower.

``demo_repo(dest)`` writes the scaffolded project into ``dest`` (its first commit), adds the small
campaign ``ab.yaml`` (``AB_CAMPAIGN``: one 64-byte max-rate unit, 0.5 s) and eight commits. Seven
change only a notes file; the fifth (``PLANTED``, in the middle) makes ``demo.bpf.c`` look its
counter up ``PLANTED_LOOKUPS`` more times for every frame it sends back: several times the work of
the MAC swap, so the max-rate figure falls well beyond the noise.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from perfkit import scaffold

#: The planted commit's position (1-based) among the eight.
PLANTED = 5
COMMITS = 8
#: Map lookups the planted commit adds per frame sent back.
PLANTED_LOOKUPS = 2000
DESCRIPTION = "demo.dataplane.yaml"
AB_CAMPAIGN = """\
name: demo-ab
dataplane: ./demo.dataplane.yaml
frame_sizes: [64]
flows: [1]
dut_cores: [1]
repeats: 1
generator:
  backend: xdp
  options: {}
  host_check_seconds: 0.2
methods:
  - method: maxrate
    params: {duration: 0.5}
perf: [maxrate]   # the DUT core's stacks: ab's comment names the functions that moved
metrics:
  enabled: false
"""
_TX_LINE = "    return count(DEMO_TX, len, XDP_TX);\n"
_PLANTED_WORK = (f"    for (__u32 i = 0; i < {PLANTED_LOOKUPS}; i++) {{   /* planted: more work per frame */\n"
                 "        __u32 k = i % DEMO_STATS;\n"
                 "        struct demo_counter *c = bpf_map_lookup_elem(&demo_stats, &k);\n"
                 "        if (c)\n"
                 "            len += c->packets & 1;\n"
                 "    }\n")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=perfkit test", "-c",
                           "user.email=perfkit@localhost", *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def plugin_repo(dest: Path, name: str) -> list[str]:
    """``perfkit dataplane new NAME --plugin`` with ``ab.yaml`` (``dataplane: NAME``), then one commit
    that plants ``PLANTED_LOOKUPS`` lookups per frame in its program; the two full ids."""
    scaffold.new(name, dest, plugin=True)
    campaign = AB_CAMPAIGN.replace("./demo.dataplane.yaml", name).replace("demo-ab", f"{name}-ab")
    (dest / "ab.yaml").write_text("".join(ln for ln in campaign.splitlines(True) if not ln.startswith("perf:")))
    git(dest, "add", "-A")
    git(dest, "commit", "--quiet", "--amend", "--no-edit")
    ids = [git(dest, "rev-parse", "HEAD")]
    src = dest / name / f"{name}.bpf.c"
    tx, work = (t.replace("demo", name).replace("DEMO", name.upper()) for t in (_TX_LINE, _PLANTED_WORK))
    text = src.read_text()
    assert tx in text, "perfkit/scaffold/program.py changed: update perfkit/perfci/demorepo.py"
    src.write_text(text.replace(tx, work + tx))
    git(dest, "commit", "--quiet", "-am", f"Look the counters up {PLANTED_LOOKUPS} more times per frame")
    ids.append(git(dest, "rev-parse", "HEAD"))
    return ids


def demo_repo(dest: Path, commits: int = COMMITS, planted: int | None = PLANTED) -> list[str]:
    """The project and its eight commits (module doc); their full ids, the scaffold's first."""
    scaffold.new("demo", dest)
    (dest / "ab.yaml").write_text(AB_CAMPAIGN)
    git(dest, "add", "-A")
    git(dest, "commit", "--quiet", "--amend", "--no-edit")
    ids = [git(dest, "rev-parse", "HEAD")]
    for i in range(1, commits + 1):
        if i == planted:
            src = dest / "demo.bpf.c"
            text = src.read_text()
            assert _TX_LINE in text, "perfkit/scaffold/program.py changed: update perfkit/perfci/demorepo.py"
            src.write_text(text.replace(_TX_LINE, _PLANTED_WORK + _TX_LINE))
            msg = f"Look the counters up {PLANTED_LOOKUPS} more times per frame"
        else:
            with (dest / "NOTES.md").open("a") as f:
                f.write(f"note {i}\n")
            msg = f"Add note {i}"
        git(dest, "add", "-A")
        git(dest, "commit", "--quiet", "-m", msg)
        ids.append(git(dest, "rev-parse", "HEAD"))
    return ids
