"""Every command in the README, CONTRIBUTING.md and docs/*.md runs as written.

The convention (CONTRIBUTING.md): commands are written in ```console blocks, one per line after a
``$ `` prompt, as typed from the checkout root in a shell that has activated ``.venv``; a line that
ends in ``\\`` continues on the next, ``#`` starts a comment, and every other line of the block is
output. Other blocks name what they hold (```text, ```yaml, ```python); ```sh, ```bash, ```shell
and unnamed blocks are refused, so that no command escapes this check.

Every command is checked for what it is, without running it:

- ``perfkit ...``: parsed by perfkit's own argument parser (an unknown option, a bad choice or a
  missing argument fails it), and every checkout file it names exists;
- ``make TARGET``: ``make -n`` knows the target;
- ``python bench/NAME.py ...``: the script exists and its ``--help`` lists every option used;
- ``python -m pytest ...``: the files it names exist;
- ``. .venv/bin/activate``, ``export NAME=VALUE``: the file exists, the shell accepts the line.

Then the commands that are cheap run as written, in order, in a scratch view of the checkout (its
files linked, a ``data/`` and ``reports/`` of its own): ``--help``, searches and trials on simulated
DUTs, prog-bench, the lab an inventory describes. The slow test runs the others that need no lab, no placeholder and no more than a
few minutes: trials on the testbed, the host check, campaigns of simulated DUTs, comparisons and
reports.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from perfkit.cli import build_parser
from perfkit.trial import TrialResult

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Fence languages that hold no commands; ``console`` holds them, anything else is refused.
QUIET_FENCES = {"text", "yaml", "python", "json", "c", "toml", "ini"}
#: The checkout's own directories whose files a command may name (they must exist).
CHECKOUT_DIRS = {"bpf", "bench", "campaigns", "docs", "examples", "labs", "notebooks", "perfkit", "tests", "trex_profiles"}
#: An argument that stands for something the reader fills in (RUN_ID, FILE, KEY=VALUE).
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]{2,}")
#: Commands cheap enough for every test run (seconds), and those for the slow tests (minutes).
FAST = (re.compile(r"(^|\s)(--help|-h)(\s|$)"),
        re.compile(r"^perfkit (search \w+|trial)\b.*--generator sim\b"),
        re.compile(r"^perfkit prog-bench\b"),
        re.compile(r"^perfkit lab show\b"))
SLOW = (re.compile(r"^perfkit run campaigns/(smoke|sim)\.yaml\b"),
        re.compile(r"^perfkit dataplane (new|check \S+\.dataplane\.yaml)\b"),   # a project of the reader's own
        re.compile(r"^perfkit (compare|report|trial|trex-profile show|host check)\b"))
#: Never run: they need a lab, move other users' processes, or take longer than a test may.
NEVER = re.compile(r"--generator trex\b|--shield\b")


@dataclass(frozen=True)
class Command:
    """One command of a document: where it is and its text, continuation lines joined."""

    doc: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: $ {self.text}"


def extract(text: str, doc: str) -> tuple[list[Command], list[str]]:
    """The commands of a Markdown text and the convention's violations (``doc:line: why``)."""
    commands: list[Command] = []
    problems: list[str] = []
    fence: str | None = None
    pending: tuple[int, str] | None = None
    found = 0
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            if fence is None:
                fence = line.strip()[3:].strip() or "<none>"
                found = 0
                if fence != "console" and fence not in QUIET_FENCES:
                    problems.append(f"{doc}:{n}: a ```{fence} block: commands go in ```console blocks, "
                                    f"anything else names its language ({', '.join(sorted(QUIET_FENCES))})")
            else:
                if fence == "console" and not found:
                    problems.append(f"{doc}:{n}: a ```console block without a `$ ` command")
                fence = None
            continue
        if fence != "console":
            continue
        if pending is not None:
            start, so_far = pending
            pending = None
        elif line.startswith("$ "):
            start, so_far = n, ""
            line = line[2:]
        else:
            continue   # output
        if line.endswith("\\"):
            pending = (start, so_far + line[:-1])
            continue
        commands.append(Command(doc, start, " ".join((so_far + line).split())))
        found += 1
    if fence is not None:
        problems.append(f"{doc}: a ``` block is never closed")
    return commands, problems


def words(text: str) -> list[str]:
    """The command's words as the shell splits them; an operator (pipe, redirection, list) is refused:
    one simple command per line."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    tokens = list(lexer)
    operators = [t for t in tokens if t and set(t) <= set("();<>|&")]
    if operators:
        raise ValueError(f"shell operator {operators[0]!r}: write one simple command per line")
    return tokens


def split_env(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """Leading ``NAME=VALUE`` assignments, and the command after them."""
    env: dict[str, str] = {}
    while argv and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0]):
        name, value = argv[0].split("=", 1)
        env[name] = value
        argv = argv[1:]
    return env, argv


def missing_files(argv: list[str]) -> list[str]:
    """Paths into the checkout's own directories that the command names and that do not exist."""
    out = []
    for arg in argv:
        part = arg.split("=")[-1]
        if "/" in part and part.split("/", 1)[0] in CHECKOUT_DIRS and not (ROOT / part).exists():
            out.append(part)
    return out


def check_perfkit(args: list[str]) -> str | None:
    """perfkit's own parser takes ``args``; None when it does, else what it said."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            build_parser().parse_args(args)
    except SystemExit as e:
        if e.code not in (0, None):
            return err.getvalue().strip() or f"exit {e.code}"
    return None


def check_make(args: list[str]) -> str | None:
    targets = [a for a in args if not a.startswith("-") and "=" not in a]
    if not targets:
        return "make without a target: name the target"
    for target in targets:
        res = subprocess.run(["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True,
                             env={**os.environ, "LC_ALL": "C"})
        if res.returncode != 0:
            return f"make {target}: {res.stderr.strip().splitlines()[-1] if res.stderr.strip() else 'failed'}"
    return None


def check_python(args: list[str]) -> str | None:
    if args[:2] == ["-m", "pytest"]:
        return None   # its files are checked by missing_files
    if args and args[0] == "-c":
        try:
            compile(args[1], "<doc>", "exec")
        except (SyntaxError, IndexError) as e:
            return f"python -c: {e}"
        return None
    if not args or not args[0].endswith(".py"):
        return "python: a script of the checkout (bench/NAME.py), -m pytest or -c CODE"
    script = ROOT / args[0]
    if not script.exists():
        return f"no such script: {args[0]}"
    res = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                         cwd=ROOT, env=run_env(), timeout=60)
    if res.returncode != 0:
        return f"{args[0]} --help failed: {res.stderr.strip()[-300:]}"
    unknown = [a.split("=")[0] for a in args[1:] if a.startswith("--")
               and not re.search(rf"(^|[\s\[,]){re.escape(a.split('=')[0])}\b", res.stdout)]
    return f"{args[0]} has no option {', '.join(unknown)}" if unknown else None


def check(command: Command) -> str | None:
    """Whether the command would run as written: None, or why not (without running it)."""
    try:
        env, argv = split_env(words(command.text))
    except ValueError as e:
        return str(e)
    if not argv:
        return "no command"
    missing = missing_files(argv)
    if missing:
        return f"no such file in the checkout: {', '.join(missing)}"
    head, args = argv[0], argv[1:]
    if head == "perfkit":
        return check_perfkit(args)
    if head == "make":
        return check_make(args)
    if head == "python":
        return check_python(args)
    if head in (".", "source"):
        return None if args and (ROOT / args[0]).exists() else f"no such file to source: {args[:1]}"
    if head == "export":
        res = subprocess.run(["bash", "-n", "-c", command.text], capture_output=True, text=True)
        return None if res.returncode == 0 and all("=" in a for a in args) else f"export: {res.stderr.strip()}"
    return f"no rule for {head!r} in tests/test_docs.py: use perfkit, make, python, export or . .venv/bin/activate"


def cost(command: Command) -> str:
    """``fast`` or ``slow`` for a command that runs as written here, ``parse`` for one only checked."""
    text = command.text
    if NEVER.search(text) or any(PLACEHOLDER.fullmatch(p) for w in split_env(words(text))[1]
                                 for p in w.split("=")):
        return "parse"
    if any(p.search(text) for p in FAST):
        return "fast"
    if any(p.search(text) for p in SLOW):
        return "slow"
    return "parse"


def run_env() -> dict[str, str]:
    """The environment of an activated ``.venv`` on this checkout; runs land in the working
    directory's ``data/`` and ``reports/``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PERFKIT_DATA", "PERFKIT_REPORTS", "PERFKIT_HOME")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def scratch_checkout(where: Path) -> Path:
    """A directory that looks like the checkout (its entries linked) with a data/ and reports/ of
    its own, so that runs as written neither see nor touch the checkout's."""
    where.mkdir(parents=True, exist_ok=True)
    for entry in ROOT.iterdir():
        if entry.name not in ("data", "reports", ".git", ".pytest_cache"):
            (where / entry.name).symlink_to(entry)
    return where


def run_in_order(commands: list[Command], cwd: Path, timeout: float) -> list[str]:
    """Run each command as written with bash in ``cwd``; the failures, with what they printed."""
    failures = []
    for command in commands:
        res = subprocess.run(["bash", "-c", command.text], cwd=cwd, env=run_env(), capture_output=True,
                             text=True, timeout=timeout)
        if res.returncode != 0:
            failures.append(f"{command}\n    exit {res.returncode}: {(res.stderr or res.stdout).strip()[-600:]}")
    return failures


def doc_commands(doc: Path) -> list[Command]:
    return extract(doc.read_text(), str(doc.relative_to(ROOT)))[0]


def test_the_documents_follow_the_convention():
    problems = [p for doc in DOCS for p in extract(doc.read_text(), str(doc.relative_to(ROOT)))[1]]
    assert not problems, "\n".join(problems)
    # the extraction finds the commands the README shows (a broken extractor would pass everything)
    readme = [c.text for c in doc_commands(ROOT / "README.md")]
    assert "make run" in readme and "make test" in readme and len(readme) >= 10


#: Commands that make what later commands of the same document name (a project of the reader's own,
#: whose description ``--dataplane`` reads when it parses): the parse check runs them first.
MAKES = re.compile(r"^perfkit dataplane new\b")


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_command_parses(doc, tmp_path):
    failures = []
    with contextlib.chdir(scratch_checkout(tmp_path / "checkout")):   # ``../demo`` is the test's own
        for c in doc_commands(doc):
            if (why := check(c)) is None and MAKES.search(c.text):
                args = build_parser().parse_args(words(c.text)[1:])
                why = None if args.func(args) == 0 else "exit status not 0"
            if why:
                failures.append(f"{c}\n    {why}")
    assert not failures, "commands that would not run as written:\n" + "\n".join(failures)


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_cheap_commands_run(doc, tmp_path):
    commands = [c for c in doc_commands(doc) if cost(c) == "fast"]
    failures = run_in_order(commands, scratch_checkout(tmp_path / "checkout"), timeout=120)
    assert not failures, "\n".join(failures)


@pytest.mark.slow
@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_slow_commands_run(doc, tmp_path):
    commands = [c for c in doc_commands(doc) if cost(c) == "slow"]
    failures = run_in_order(commands, scratch_checkout(tmp_path / "checkout"), timeout=600)
    assert not failures, "\n".join(failures)


BROKEN = {
    "a misspelt option": "$ perfkit trial --dataplane pgwu --frame-sise 64 --rate 1Mpps",
    "a value outside the choices": "$ perfkit search ndr --generator scapy",
    "an unknown subcommand": "$ perfkit serach ndr",
    "a missing checkout file": "$ perfkit run campaigns/nonesuch.yaml",
    "an unknown make target": "$ make tset",
    "a bench option it lacks": "$ python bench/testbed_noise.py --rate 1Mpps",
    "an unknown program": "$ perfkt --help",
    "a pipe": "$ perfkit --help | head",
}


@pytest.mark.parametrize("line", BROKEN.values(), ids=BROKEN.keys())
def test_a_broken_command_fails_the_check(line):
    (command,), problems = extract(f"```console\n{line}\n```\n", "doc.md")
    assert not problems and check(command) is not None


def test_a_block_that_hides_commands_is_refused():
    for fence in ("```sh", "```bash", "```"):
        assert extract(f"{fence}\nperfkit --frame-sise 64\n```\n", "doc.md")[1]


def test_continuation_lines_and_output():
    text = "```console\n$ perfkit trial \\\n    --rate 1Mpps   # a comment\noffered 1 packets\n$ make run\n```\n"
    commands, problems = extract(text, "doc.md")
    assert not problems
    assert [c.text for c in commands] == ["perfkit trial --rate 1Mpps # a comment", "make run"]
    assert [c.line for c in commands] == [2, 5]
    assert check(commands[0]) is None


def test_commands_are_sorted_by_cost():
    fast, slow, parse = (Command("d", 1, t) for t in (
        "perfkit search ndr --generator sim --sim-threshold 1Mpps",
        "perfkit report --run tour-b --baseline tour-a",
        "perfkit report --run RUN_ID"))
    assert (cost(fast), cost(slow), cost(parse)) == ("fast", "slow", "parse")
    assert cost(Command("d", 1, "perfkit trial --generator trex --rate 1Mpps")) == "parse"
    # the reader's own project, made and checked in order in the slow test; a built-in's check is only parsed
    assert cost(Command("d", 1, "perfkit dataplane new demo --dir ../demo")) == "slow"
    assert cost(Command("d", 1, "perfkit dataplane check ../demo/demo.dataplane.yaml")) == "slow"
    assert cost(Command("d", 1, "perfkit dataplane check calib")) == "parse"


def test_every_trial_field_is_documented():
    """docs/trial-fields.md has a table row for every field ``--json`` prints, and no other."""
    rows = [line for line in (ROOT / "docs" / "trial-fields.md").read_text().splitlines()
            if line.startswith("| `")]
    documented = {name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[1])}
    trial = TrialResult(dataplane="calib", frame_size=64, wire_frame_size=64, flows=1, dut_cores=1,
                        generator="sim", duration=1.0, intended_pps=1e6, intended_packets=1_000_000,
                        tx_packets=1_000_000, rx_packets=999_000)
    fields = set(trial.to_dict())
    assert fields >= {f.name for f in dataclasses.fields(TrialResult)}
    assert not fields - documented, f"undocumented trial fields: {sorted(fields - documented)}"
    assert not documented - fields, f"documented fields a trial does not have: {sorted(documented - fields)}"


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def test_links_lead_somewhere():
    """Every relative link of the documents names a file of the checkout, and a heading it has."""
    broken = []
    for doc in [*DOCS, ROOT / "CHANGELOG.md", ROOT / "bench" / "RESULTS.md"]:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}: no such file")
            elif anchor and dest.suffix == ".md":
                anchors = {slug(line.lstrip("#")) for line in dest.read_text().splitlines() if line.startswith("#")}
                if anchor not in anchors:
                    broken.append(f"{doc.relative_to(ROOT)}: {target}: no such heading")
    assert not broken, "\n".join(broken)
