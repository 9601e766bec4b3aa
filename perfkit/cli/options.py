"""Options shared by several commands, so that every command spells them the same way."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Callable

from perfkit import dataplanes, framemix, knobs
from perfkit.errors import ConfigError
from perfkit.generators import BACKENDS
from perfkit.generators.sim import MODELS
from perfkit.rate import Rate
from perfkit.scenario import Scenario
from perfkit.units import LINE_RATES


# -- option types: a bad value is refused by argparse, in one line naming the option -------------------
def _refuse(text: str, allowed: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed: {allowed}")


def frame_size(text: str) -> int | str:
    """A frame size [bytes] in ``FRAME_MIN .. FRAME_MAX``, or a frame mix's name (``imix``)."""
    try:
        return framemix.parse_frame_size(text)
    except ConfigError:
        raise _refuse(text, f"a frame size, {framemix.allowed()}") from None


def seconds(text: str) -> float:
    """A duration [s]: a finite number > 0 (0, negative, nan and inf are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise _refuse(text, "a number of seconds > 0") from None
    if not (math.isfinite(value) and value > 0):
        raise _refuse(text, "a number of seconds > 0")
    return value


def integer(minimum: int, maximum: int | None = None, what: str = "an integer") -> Callable[[str], int]:
    """An argparse type: an integer in ``minimum .. maximum``."""
    allowed = f"{what} >= {minimum}" if maximum is None else f"{what}, {minimum} .. {maximum}"

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise _refuse(text, allowed) from None
        if value < minimum or (maximum is not None and value > maximum):
            raise _refuse(text, allowed)
        return value

    parse.__name__ = what  # argparse names the type in some messages
    return parse


def number(minimum: float = 0.0, what: str = "a number") -> Callable[[str], float]:
    """An argparse type: a finite number >= ``minimum``."""
    allowed = f"{what} >= {minimum:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise _refuse(text, allowed) from None
        if not (math.isfinite(value) and value >= minimum):
            raise _refuse(text, allowed)
        return value

    parse.__name__ = what
    return parse


def check_writable(option: str, path: str | None) -> None:
    """Refuse, before anything runs, a file that cannot be written (missing directory, a directory,
    no permission); nothing is left behind by the check."""
    if not path:
        return
    p = Path(path)
    allowed = "a file path whose directory exists and is writable"
    if p.is_dir():
        raise ConfigError(option, path, allowed + " (this is a directory)")
    if not p.parent.is_dir():
        raise ConfigError(option, path, allowed + f" (no directory {p.parent})")
    existed = p.exists()
    try:
        with open(p, "ab"):
            pass
    except OSError as err:
        raise ConfigError(option, path, f"{allowed} ({err.strerror})") from None
    if not existed:
        os.unlink(p)


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


# -- the run store's options: perfkit.store and perfkit.report (pandas, pyarrow) are imported by the
# functions, which only the commands that read or write runs call (every other command starts without them)
def check_run(option: str, run_id: str, root: str | Path) -> None:
    """Refuse a run id that is not a run under ``root``, naming ``option`` and the recent runs."""
    from perfkit.store import list_runs

    runs = list_runs(root)
    if run_id not in runs:
        raise ConfigError(option, run_id, f"the id of a run under {root} (recent: {', '.join(runs[-5:]) or 'none'})")


def check_run_args(args: argparse.Namespace) -> None:
    """``perfkit run``: what can be refused before a campaign starts -- a campaign file that cannot be
    read (with --resume too), and a --baseline run that does not exist (the report would refuse it
    only after the whole campaign ran)."""
    if args.resume:
        check_run("--resume", args.resume, args.root)
    if args.campaign and not Path(args.campaign).is_file():
        raise ConfigError("CAMPAIGN", args.campaign, "a campaign file that exists, e.g. campaigns/default.yaml")
    if args.baseline is not None:
        if not args.report:
            raise ConfigError("--baseline", args.baseline, "only with --report (it is the report's baseline)")
        if args.baseline != "auto":
            check_run("--baseline", args.baseline, args.root)


def add_run_store(parser: argparse.ArgumentParser) -> None:
    """--resume --run --root --report --baseline --reports: the options of commands that make a run
    (``perfkit run``, ``perfkit experiment``)."""
    from perfkit.store import DEFAULT_ROOT

    parser.add_argument("--resume", default=None, metavar="RUN_ID", help="continue an interrupted run")
    parser.add_argument("--run", default=None, metavar="RUN_ID", help="id of the new run (default: a time stamp)")
    parser.add_argument("--root", default=str(DEFAULT_ROOT), help=f"runs directory (default {DEFAULT_ROOT})")
    parser.add_argument("--report", action="store_true", help="write the HTML report set at the end (perfkit report)")
    parser.add_argument("--baseline", default=None, metavar="RUN_ID",
                        help="with --report: the run to compare with (or 'auto': the last complete run of the campaign)")
    add_reports_dir(parser)


def add_reports_dir(parser: argparse.ArgumentParser) -> None:
    from perfkit.report import DEFAULT_REPORTS

    parser.add_argument("--reports", default=str(DEFAULT_REPORTS),
                        help=f"reports directory (default {DEFAULT_REPORTS}; env PERFKIT_REPORTS)")


# -- the scenario's and the trial's options --------------------------------------------------------------
def add_scenario(parser: argparse.ArgumentParser, cores: bool = True) -> None:
    """--dataplane --frame-size --flows [--dut-cores] --line-rate, and every dataplane's parameters.

    A parameter option belongs to the dataplanes that define it (``--direction``: those with directions); given for a
    dataplane without it, it is refused. Its default is the dataplane's. (So every dataplane is
    imported here: its parameters are options.)
    """
    g = parser.add_argument_group("scenario")
    g.add_argument("--dataplane", default=dataplanes.DEFAULT, type=dataplane_arg, metavar="NAME|FILE",
                   help=f"the network function under test: {', '.join(dataplanes.names())} (default "
                        f"{dataplanes.DEFAULT}), or the path of a description file (docs/descriptions.md)")
    g.add_argument("--frame-size", type=frame_size, default=64,
                   help="frame size in bytes, FCS included (the dataplane's frame: PGW-U the user-side one; default 64), "
                        "or imix: 7:4:1 frames of 64, 594 and 1518 bytes")
    g.add_argument("--flows", type=integer(1), default=1, help="number of flows (default 1)")
    if cores:
        g.add_argument("--dut-cores", type=integer(1), default=1, help="cores for the DUT's receive processing")
    g.add_argument("--line-rate", default="10GbE", choices=list(LINE_RATES),
                   help="nominal line rate that percentages refer to")
    g.add_argument("--knob", dest="knobs", action="append", default=[], metavar="NAME=VALUE",
                   help="run the DUT under a knob (repeat): an ethtool feature of its ports (gro=off, "
                        "ethtool.<feature>=on), channels.<rx|tx|other|combined>=N (ethtool -L), "
                        "ring.<rx|rx-mini|rx-jumbo|tx>=N (ethtool -G), threaded=on, napi_defer_hard_irqs=N, "
                        "gro_flush_timeout=NS, sysctl.net.<key>=V, steering=, xdp_mode=, or a dataplane's build "
                        "option (a parameter marked [build] below); set, read back, restored after")
    d = parser.add_argument_group("dataplane parameters (each dataplane's own; defaults are the dataplane's)")
    for name, owners in _scenario_params().items():
        p = dataplanes.get(owners[0]).param(name)
        choices = f" {{{','.join(str(c) for c in p.choices)}}}" if p.choices else (" {on,off}" if p.kind is bool else "")
        build = " [build]" if p.build else ""
        d.add_argument(f"--{name.replace('_', '-')}", dest=f"param_{name}", default=None, metavar=name.upper(),
                       help=f"{', '.join(owners)}{build}: {p.help}{choices} (default {_show(p.default)})".replace("%", "%%"))


def dataplane_arg(value: str) -> str:
    """``--dataplane``: a registered name that loads, or a description file (checked now: its refusal
    is the error). Only that dataplane is imported."""
    is_path = dataplanes.is_path(value)
    if is_path or value in dataplanes.registered():
        try:
            dataplanes.get(value)
            return value
        except ConfigError as err:
            if is_path:
                raise argparse.ArgumentTypeError(str(err)) from None
    raise argparse.ArgumentTypeError(f"invalid choice: {value!r} (choose from {', '.join(dataplanes.names())}, "
                                     "or the path of a description file: NAME.dataplane.yaml)")


def _scenario_params() -> dict[str, list[str]]:
    """``all_params``, and the parameters of a description file named by ``--dataplane`` on this
    command line (its options exist only then)."""
    out = dataplanes.all_params()
    argv = sys.argv[1:]
    for i, word in enumerate(argv):
        path = argv[i + 1] if word == "--dataplane" and i + 1 < len(argv) else word.partition("=")[2] \
            if word.startswith("--dataplane=") else ""
        if path and dataplanes.is_path(path) and Path(path).is_file():
            try:
                for p in dataplanes.get(path).params:
                    out.setdefault(p.name, []).append(path)
            except ConfigError:
                pass  # refused with its message when --dataplane is parsed
    return out


def _show(value: Any) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


def split_knobs(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """``--knob`` values: (the dataplane's build options, as parameters; the system knobs, checked)."""
    dp = dataplanes.get(args.dataplane)
    build = {p.name for p in dp.params if p.build}
    built: dict[str, Any] = {}
    system: list[str] = []
    for item in getattr(args, "knobs", []) or []:
        name, sep, value = str(item).partition("=")
        if sep and name.strip() in build:
            built[name.strip()] = value
        else:
            system.append(item)
    return built, knobs.parse(system)


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The dataplane parameters given on the command line, build options given as ``--knob``
    included (the dataplane validates them)."""
    dp = dataplanes.get(args.dataplane)
    own = {p.name for p in dp.params}
    given = {k[len("param_"):]: v for k, v in vars(args).items() if k.startswith("param_") and v is not None}
    for name, value in split_knobs(args)[0].items():
        if name in given and str(given[name]) != value:
            raise ConfigError(f"--knob {name}", value, f"the value --{name.replace('_', '-')} gives ({given[name]})")
        given[name] = value
    for name in given:
        if name not in own:
            raise ConfigError(f"--{name.replace('_', '-')}", given[name],
                              f"an option of dataplane {dp.name}'s parameters: "
                              + (", ".join(f"--{p.name.replace('_', '-')}" for p in dp.params) or "none"))
    return given


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    return Scenario(dataplane=args.dataplane, frame_size=args.frame_size, flows=args.flows,
                    dut_cores=getattr(args, "dut_cores", 1), line_rate=args.line_rate,
                    params=params_from_args(args), knobs=split_knobs(args)[1])


def emit(obj: Any, as_json: bool, human: Callable[[Any], str]) -> None:
    """Print ``obj`` as JSON or through ``human``."""
    if as_json:
        json.dump(obj, sys.stdout, indent=2, sort_keys=True, default=str)
        sys.stdout.write("\n")
    else:
        print(human(obj))


def add_trial(parser: argparse.ArgumentParser, duration: float | None = 2.0) -> None:
    """--rate --duration --packets --generator --capture, and the simulated DUT's --sim-* options.

    ``duration`` is the default of ``--duration`` (None lets the command pick per method).
    """
    g = parser.add_argument_group("trial")
    g.add_argument("--rate", default=None,
                   help="offered rate: 2Mpps, 150kpps, 5Gbps (L1) or 40%% of --line-rate; "
                        "searches: the maximum rate (default 100%%)")
    g.add_argument("--duration", type=seconds, default=duration,
                   help="trial duration in seconds " + (f"(default {duration:g})" if duration else
                                                            "(default 2; ndrpdr: of the final trials, 10)"))
    g.add_argument("--packets", type=integer(1), default=None, help="send exactly this many packets")
    g.add_argument("--generator", default="xdp", choices=list(BACKENDS),
                   help="traffic generator backend (default xdp: the local testbed; sim: simulated DUT)")
    g.add_argument("--capture", default=None, metavar="FILE", help="write received packets to a pcap")
    g.add_argument("--tester-cores", default=None, metavar="CPUS",
                   help="xdp: CPUs for generator and sink threads, e.g. 0 or 0,2 (default: all but the DUT's)")
    g.add_argument("--rx-queue", type=integer(0), default=None, metavar="FRAMES",
                   help="xdp: frames of the DUT's NIC-sized receive queue, 8 .. 16384; 0: the veth ports' own "
                        "256-frame rings (default 0); 4096: a NIC's ring, for searches on a VM")
    g.add_argument("--shield", action="store_true", default=None,
                   help="xdp: move every other task that may run elsewhere off the DUT cores while measuring "
                        "(guest tasks that take the DUT core for milliseconds make zero loss random)")
    g.add_argument("--speed-reference", default=None, metavar="auto|NS",
                   help="xdp, sim: speed normalization: judge every trial at this reference CPU speed [ns per "
                        "step of the stall probe's speed probe], or auto: the DUT cores' speed, and the DUT's kernel path "
                        "cost, measured by a 1 s line-rate trial at set-up (default: off, trials are judged at "
                        "their offered rate)")
    s = parser.add_argument_group("simulated DUT (--generator sim)")
    s.add_argument("--sim-model", default="sharp", choices=MODELS, help="the simulated DUT's model (default sharp)")
    s.add_argument("--sim-threshold", default="1Mpps", help="the simulated DUT's capacity (default 1Mpps)")
    s.add_argument("--sim-sigma", type=number(0.0), default=0.02,
                   help="noisy model: relative sigma of the per-trial threshold (default 0.02)")
    s.add_argument("--sim-seed", type=integer(0), default=0, help="random seed of the noisy model (default 0)")


def generator_options(args: argparse.Namespace) -> dict[str, Any]:
    """Constructor options for ``perfkit.generators.create(args.generator, scenario, **options)``."""
    options: dict[str, Any] = {}
    if args.capture:
        check_writable("--capture", args.capture)
        options["capture"] = args.capture
    if args.generator == "xdp" and getattr(args, "tester_cores", None):
        try:
            options["tester_cores"] = [int(c) for c in args.tester_cores.split(",")]
        except ValueError:
            raise ConfigError("tester_cores", args.tester_cores, "CPU numbers separated by commas") from None
    if args.generator == "xdp" and getattr(args, "rx_queue", None) is not None:
        from perfkit.testbed.dut import check_rx_queue   # here: the testbed's modules (numpy) are the trial's

        check_rx_queue(args.rx_queue)
        options["rx_queue"] = args.rx_queue
    if args.generator == "xdp" and getattr(args, "shield", None):
        options["shield"] = True
    if getattr(args, "speed_reference", None) is not None:
        options["speed_reference"] = speed_reference(args.speed_reference, args.generator)
    if args.generator == "sim":
        try:
            Rate.parse(args.sim_threshold, args.line_rate)
        except ConfigError as err:
            raise ConfigError("--sim-threshold", args.sim_threshold, err.allowed) from None
        options.update(model=args.sim_model, threshold=args.sim_threshold, sigma=args.sim_sigma,
                       seed=args.sim_seed)
    return options


def speed_reference(text: str, generator: str) -> float | str:
    """``--speed-reference``: ``auto`` or a positive number [ns per probe step]."""
    allowed = "auto, or a CPU speed in ns per probe step (0 < x < 10000), with --generator xdp or sim"
    if generator not in ("xdp", "sim"):
        raise ConfigError("--speed-reference", text, allowed)
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        raise ConfigError("--speed-reference", text, allowed) from None
    if not 0 < value < 1e4:
        raise ConfigError("--speed-reference", text, allowed)
    return value


def check_trial(args: argparse.Namespace) -> None:
    """What a trial needs besides valid options: the simulated DUT needs a rate."""
    if args.generator == "sim" and not args.rate:
        raise ConfigError("--rate", args.rate, "a rate with --generator sim, e.g. --rate 1Mpps (the simulated DUT "
                          "has no top speed to send at; only --generator xdp sends as fast as it can without one)")
