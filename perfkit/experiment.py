"""Experiments driven from a notebook: parameters -> a campaign -> the campaign runner -> fits and plots.

``notebooks/experiment.ipynb`` is the notebook; this module holds everything it does, so that tests
reach it. Its parameters cell has one variable per field of ``Experiment`` (the words of a campaign
file, ``perfkit.campaign.schema``, with the generator's keys flattened: ``generator`` is the backend,
``generator_options`` its options, ``trex_server`` the lab's TRex server) plus the run controls of
``RUN_PARAMETERS`` (``run_id``, ``resume``, ``data_root``, ``progress``, ``report``, ``reports_root``).

- ``Experiment.from_parameters(mapping)`` checks the types; ``Experiment.campaign()`` builds the
  ``Campaign`` with the campaign parser (every check a campaign file gets); an error names the
  notebook parameter (``frame_sizes[1]: 9 is not allowed; allowed: 64 .. 9216``).
- ``Experiment.from_campaign(path)`` is the reverse: the parameters that express a campaign file
  (``perfkit experiment campaigns/default.yaml``, ``make run``); its campaign equals the file's.
- ``run(experiment, ...)`` runs it with ``perfkit.campaign.run_campaign`` (the code ``perfkit run``
  uses: each trial fsynced before it is pushed, a progress bar, resumable with ``resume=True``).
- ``fit(run)`` fits the CPU models and the DUT load model (``perfkit.analysis``); ``figures(...)``
  draws them (``perfkit.plots``); ``save_outputs(...)`` writes them into ``<run>/experiment/``
  (``outcome.json``, ``throughput.csv``, ``models.json``, ``figures/*.png``).

The traffic is the dataplane's own profile unless ``trex_profile`` names a TRex STL profile (with
``trex_tunables``: ``KEY=VALUE`` strings or a dict); they go into the campaign as the generator
options ``trex_profile`` and ``trex_tunables`` (the local XDP generator compiles the profile).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from perfkit.errors import ConfigError, StoreError
from perfkit.paths import NOTEBOOKS_DIR

#: Where the notebook is, and what ``perfkit experiment`` executes.
NOTEBOOK = NOTEBOOKS_DIR / "experiment.ipynb"
#: The campaign's ``source`` when it comes from the notebook's parameters.
SOURCE = "notebooks/experiment.ipynb"
#: The generator options a TRex STL profile and its tunables go into (``perfkit trial --trex-profile -t``).
PROFILE_OPTIONS = {"trex_profile": "trex_profile", "trex_tunables": "trex_tunables"}
#: The notebook's parameters that control the run rather than say what to measure.
RUN_PARAMETERS = ("run_id", "resume", "data_root", "progress", "report", "reports_root")
#: Subdirectory of the run directory the notebook's outputs go to.
OUTPUTS_DIR = "experiment"
#: The executed notebook, kept in the run directory.
KEPT_NOTEBOOK = "experiment.ipynb"
#: Generator keys of a campaign that are notebook parameters of their own (campaign key -> parameter).
_GENERATOR_PARAMS = {"backend": "generator", "options": "generator_options", "jumbo_mtu": "jumbo_mtu",
                     "setup_seconds": "setup_seconds", "trial_overhead_seconds": "trial_overhead_seconds",
                     "host_check_seconds": "host_check_seconds"}


@dataclass(frozen=True)
class Experiment:
    """What to measure: the notebook's parameters (see module doc). Defaults: a short local run."""

    name: str = "experiment"
    """The campaign's name (runs of the same name are each other's baselines)."""
    description: str = ""
    dataplane: str | None = None
    """A package of ``perfkit.dataplanes``; None: the default one."""
    params: dict[str, Any] = field(default_factory=dict)
    """The dataplane's parameters: a list is a grid axis, a value is fixed (missing: its default)."""
    trex_profile: str | None = None
    """A TRex STL profile (a ``.py`` path) instead of the dataplane's own traffic; None: built-in."""
    trex_tunables: Any = field(default_factory=list)
    """The profile's tunables: ``["KEY=VALUE", ...]`` (``-t`` of ``perfkit trial``) or a dict."""
    frame_sizes: list[int] = field(default_factory=lambda: [64, 512, 1424])
    """Frame sizes [bytes], FCS included."""
    flows: Any = field(default_factory=lambda: [1])
    """Flow counts: a list, or ``{single: 1, multi: N}``."""
    dut_cores: Any = "auto"
    """``auto``, ``auto+shared`` or a list of DUT core counts."""
    line_rate: str = "10GbE"
    repeats: int = 1
    methods: list[Any] = field(default_factory=lambda: [{"method": "maxrate", "params": {"duration": 3}}])
    """As in a campaign: a method name or ``{method, label, params}``."""
    generator: str = "xdp"
    """The backend: ``xdp`` (local testbed), ``trex`` (a lab's TRex server), ``sim`` (simulated DUT)."""
    generator_options: dict[str, Any] = field(default_factory=dict)
    """The backend's constructor options (``perfkit.generators``)."""
    trex_server: str | None = None
    """``generator: trex``: the TRex server's address (the option ``server``)."""
    jumbo_mtu: Any = "auto"
    setup_seconds: float | None = None
    """Estimate: generator set-up per scenario [s]; None: the backend's default."""
    trial_overhead_seconds: float | None = None
    """Estimate: time per trial on top of its duration [s]; None: the backend's default."""
    host_check_seconds: float | None = None
    """``generator: xdp``: how long ``perfkit host check`` measures at the start [s]; None: 5."""
    perf: Any = False
    """``perf record`` the DUT cores: false, true or a list of method labels."""
    metrics: Any = True
    """Push every trial and pull CPU back: true, false or a campaign ``metrics:`` mapping."""

    # -- parameters -> experiment ------------------------------------------------------------
    @classmethod
    def from_parameters(cls, values: Mapping[str, Any]) -> Experiment:
        """An experiment from the notebook's parameters (unknown names are refused; missing ones
        take their default). Types are checked here, everything else by ``campaign()``."""
        names = parameter_names()
        for key in values:
            if key not in names:
                raise ConfigError(str(key), values[key], "a parameter of experiment.ipynb: " + ", ".join(names))
        for key, kinds, allowed in _TYPES:
            if key in values and not isinstance(values[key], kinds):
                raise ConfigError(key, values[key], allowed)
            if key in values and isinstance(values[key], bool) and bool not in kinds:
                raise ConfigError(key, values[key], allowed)
        exp = cls(**{k: v for k, v in values.items()})
        if exp.trex_tunables and exp.trex_profile is None:
            raise ConfigError("trex_tunables", exp.trex_tunables, "nothing unless trex_profile names a TRex STL profile")
        if exp.trex_server is not None and exp.generator != "trex":
            raise ConfigError("trex_server", exp.trex_server, f"None with generator {exp.generator!r} "
                              "(a TRex server is used by generator 'trex')")
        if exp.trex_server is not None and "server" in exp.generator_options:
            raise ConfigError("generator_options.server", exp.generator_options["server"],
                              "nothing here: trex_server gives the server")
        for key in PROFILE_OPTIONS:
            if key in exp.generator_options:
                raise ConfigError(f"generator_options.{key}", exp.generator_options[key],
                                  f"nothing here: the parameter {key} gives it")
        return exp

    def parameters(self) -> dict[str, Any]:
        """The notebook's parameters for this experiment (what papermill injects)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    # -- experiment -> campaign --------------------------------------------------------------
    def campaign_dict(self) -> dict[str, Any]:
        """The campaign file this experiment is, as a mapping (keys as in ``campaigns/*.yaml``)."""
        out: dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        if self.dataplane is not None:
            out["dataplane"] = self.dataplane
        out["params"] = _plain(self.params)
        out.update(frame_sizes=_plain(self.frame_sizes), flows=_plain(self.flows), dut_cores=_plain(self.dut_cores),
                   line_rate=self.line_rate, repeats=self.repeats)
        options = _plain(self.generator_options)
        if self.trex_server is not None:
            options = {"server": self.trex_server, **options}
        if self.trex_profile is not None:
            options["trex_profile"] = _plain(self.trex_profile)
            if self.trex_tunables:
                options["trex_tunables"] = tunables_list(self.trex_tunables)
        gen: dict[str, Any] = {"backend": self.generator, "options": options, "jumbo_mtu": self.jumbo_mtu}
        if self.setup_seconds is not None:
            gen["setup_seconds"] = self.setup_seconds
        if self.trial_overhead_seconds is not None:
            gen["trial_overhead_seconds"] = self.trial_overhead_seconds
        if self.host_check_seconds is not None:
            gen["host_check_seconds"] = self.host_check_seconds
        out.update(generator=gen, methods=_plain(self.methods), perf=_plain(self.perf), metrics=_plain(self.metrics))
        return out

    def campaign_text(self) -> str:
        """The campaign as YAML (kept in the run's metadata, like a campaign file's text)."""
        return (f"# from the parameters of {SOURCE}\n"
                + yaml.safe_dump(self.campaign_dict(), sort_keys=False, default_flow_style=None, width=110))

    def campaign(self, cpus: int | None = None):
        """The validated ``Campaign`` (``cpus``: resolve ``dut_cores: auto`` for that many CPUs);
        a ``ConfigError`` names the notebook parameter."""
        from perfkit.campaign.schema import parse_campaign

        try:
            return parse_campaign(self.campaign_text(), source=SOURCE, cpus=cpus)
        except ConfigError as err:
            raise ConfigError(parameter_field(err.field), err.value, _allowed(err.allowed)) from None

    def check(self, cpus: int | None = None):
        """``campaign()`` plus the runner's checks before traffic (the backend, its options); returns
        the campaign."""
        from perfkit.campaign.runner import preflight

        campaign = self.campaign(cpus)
        try:
            preflight(campaign)
        except ConfigError as err:
            raise ConfigError(parameter_field(err.field), err.value, _allowed(err.allowed)) from None
        return campaign

    # -- campaign file -> experiment ---------------------------------------------------------
    @classmethod
    def from_campaign(cls, path: str | Path) -> Experiment:
        """The experiment a campaign file describes (``perfkit experiment CAMPAIGN``)."""
        p = Path(path)
        try:
            text = p.read_text()
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError("campaign", str(p), f"a readable YAML file ({err.__class__.__name__})") from None
        return cls.from_campaign_text(text, source=str(p))

    @classmethod
    def from_campaign_text(cls, text: str, source: str = "<string>") -> Experiment:
        from perfkit.campaign.schema import TOP_KEYS, parse_campaign
        from perfkit.yamlload import load_yaml

        parse_campaign(text, source=source)          # a bad file is refused with the campaign's words
        raw = load_yaml(text, f"campaign {source}")
        values: dict[str, Any] = {}
        for key, value in raw.items():
            if key == "generator":
                gen = {"backend": value} if isinstance(value, str) else dict(value or {})
                for gkey, gvalue in gen.items():
                    values[_GENERATOR_PARAMS[gkey]] = gvalue
            elif key in TOP_KEYS and key in parameter_names():
                values[key] = value
            else:
                raise ConfigError(f"campaign.{key}", value, "a key the experiment notebook has a parameter for: "
                                  + ", ".join(parameter_names()))
        options = dict(values.get("generator_options") or {})
        if values.get("generator") == "trex" and "server" in options:
            values["trex_server"] = options.pop("server")
        for key, param in PROFILE_OPTIONS.items():
            if key in options:
                values[param] = options.pop(key)
        values["generator_options"] = options
        values.setdefault("name", raw.get("name", Path(source).stem if source != "<string>" else "campaign"))
        values.setdefault("perf", False)
        values.setdefault("metrics", True)
        return cls.from_parameters(values)


#: (parameter, accepted types, what is allowed) checked by ``from_parameters``.
_TYPES: tuple[tuple[str, tuple[type, ...], str], ...] = (
    ("name", (str,), "a string"),
    ("description", (str,), "a string"),
    ("dataplane", (str, type(None)), "a dataplane name or None (the default)"),
    ("params", (dict,), "a dict of the dataplane's parameters (a list is a grid axis)"),
    ("trex_profile", (str, os.PathLike, type(None)), "None (built-in traffic) or the path of a TRex STL profile"),
    ("trex_tunables", (list, tuple, dict), "a list of KEY=VALUE strings or a dict of the profile's tunables"),
    ("frame_sizes", (list, tuple), "a list of frame sizes [bytes]"),
    ("flows", (list, tuple, dict), "a list of flow counts or {single: 1, multi: N}"),
    ("dut_cores", (str, int, list, tuple), "auto, auto+shared or a list of core counts"),
    ("line_rate", (str,), "a line rate name, e.g. 10GbE"),
    ("repeats", (int,), "an integer >= 1"),
    ("methods", (list, tuple), "a list of methods (names or {method, label, params})"),
    ("generator", (str,), "xdp, trex or sim"),
    ("generator_options", (dict,), "a dict of the backend's options"),
    ("trex_server", (str, type(None)), "None or the TRex server's address"),
    ("jumbo_mtu", (str, int), "auto or an MTU [bytes]"),
    ("setup_seconds", (int, float, type(None)), "None or a number of seconds"),
    ("trial_overhead_seconds", (int, float, type(None)), "None or a number of seconds"),
    ("host_check_seconds", (int, float, type(None)), "None or a number of seconds"),
    ("perf", (bool, list, tuple), "false, true or a list of method labels"),
    ("metrics", (bool, dict), "true, false or a mapping with enabled, start_local, prometheus_url ..."),
)


def parameter_names() -> tuple[str, ...]:
    """The notebook's parameters that say what to measure (the fields of ``Experiment``)."""
    return tuple(f.name for f in dataclasses.fields(Experiment))


def parameter_field(campaign_field: str) -> str:
    """The notebook parameter a campaign field (``campaign.generator.options.x``) comes from."""
    name = campaign_field.removeprefix("campaign.").removeprefix("campaign")
    if not name:
        return "experiment"
    if name.startswith("generator"):
        rest = name[len("generator"):]
        for key, param in _GENERATOR_PARAMS.items():
            if rest == f".{key}" or rest.startswith(f".{key}.") or rest.startswith(f".{key}["):
                if param == "generator_options" and rest.startswith(".options.server"):
                    return "trex_server"
                for option, profile_param in PROFILE_OPTIONS.items():
                    if param == "generator_options" and rest.startswith(f".options.{option}"):
                        return profile_param + rest[len(f".options.{option}"):]
                return param + rest[len(key) + 1:]
        return "generator" + rest
    return name


def tunables_list(tunables: Any) -> list[str]:
    """A profile's tunables as ``KEY=VALUE`` strings (``perfkit trial -t``'s words) from a list or a dict."""
    if isinstance(tunables, dict):
        return [f"{k}={v}" for k, v in tunables.items()]
    return [str(t) for t in tunables]


def _allowed(text: str) -> str:
    """A campaign error's ``allowed`` in the notebook's words."""
    return text.replace("keys of campaign.", "keys of ")


def from_namespace(namespace: Mapping[str, Any]) -> Experiment:
    """The experiment a notebook's variables describe (``from_namespace(globals())``)."""
    return Experiment.from_parameters({k: namespace[k] for k in parameter_names() if k in namespace})


def _plain(value: Any) -> Any:
    """``value`` with tuples as lists and paths as strings (YAML- and JSON-safe)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


# -- running ------------------------------------------------------------------------------------
@dataclass
class ExperimentRun:
    """What ``run`` did: the runner's outcome and every line it said."""

    run_id: str
    data_root: Path
    outcome: Any
    """``perfkit.campaign.runner.RunOutcome``."""
    messages: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return self.data_root / self.run_id

    def markdown(self) -> str:
        o = self.outcome
        lines = [f"**run `{self.run_id}`: {o.status}**, {o.units_done_before + o.units_done} of {o.units_total} "
                 f"units done, {o.trials_written} trials written"
                 + (f", {o.trials_replayed} replayed" if o.trials_replayed else "")
                 + f" in {o.wall_seconds:.0f} s; data in `{self.path}`"]
        lines += [f"- failed: {unit}: {err}" for unit, err in o.units_failed.items()]
        lines += [f"- {m}" for m in self.messages]
        if o.status != "complete":
            lines.append(f"- retry the failed units: `perfkit experiment --resume {self.run_id}` "
                         "(or set `resume = True` and `run_id` here)")
        return "\n".join(lines)

    def metrics_markdown(self) -> str:
        """Pushes to the Pushgateway and the CPU pulled back from Prometheus."""
        m = self.outcome.metrics or {}
        if not m.get("pushgateway_url"):
            return f"- {m.get('note') or 'metrics: off'}"
        total = self.outcome.trials_written
        lines = [f"- pushed {m.get('pushed', 0)} of {total} new trials to the Pushgateway {m['pushgateway_url']}"
                 + (f"; {m['push_failures']} failed (backfill: `perfkit push --run {self.run_id}`)"
                    if m.get("push_failures") else ""),
                 f"- node-exporter CPU pulled back from Prometheus {m.get('prometheus_url')}: "
                 + (m.get("cpu") or "nothing (Prometheus not reachable)")]
        return "\n".join(lines)


def default_data_root() -> Path:
    from perfkit.store import DEFAULT_ROOT

    return Path(DEFAULT_ROOT).absolute()


def run(experiment: Experiment, *, run_id: str | None = None, resume: bool = False,
        data_root: str | Path | None = None, progress: bool = True, metrics: bool = True,
        say: Callable[[str], None] | None = None) -> ExperimentRun:
    """Run ``experiment`` with the campaign runner into ``data_root/<run_id>`` (``resume``: continue
    that run, which must have been started with the same parameters). ``KeyboardInterrupt`` (Ctrl-C,
    a kernel interrupt) goes through once the testbed is down and the run marked ``interrupted``."""
    from perfkit.campaign import resume_campaign, run_campaign
    from perfkit.campaign.schema import parse_campaign
    from perfkit.store import RunStore

    root = Path(data_root).absolute() if data_root is not None else default_data_root()
    campaign = experiment.campaign()
    messages: list[str] = []

    def tell(msg: str) -> None:
        messages.append(msg)
        if say is not None:
            say(msg)
        else:
            from tqdm import tqdm

            tqdm.write(msg, file=sys.stderr)

    # bars redrawn at most once a second: each redraw is a message from the kernel (and relayed by papermill)
    os.environ.setdefault("TQDM_MININTERVAL", "1")
    common: dict[str, Any] = {"root": root, "metrics": metrics, "progress": progress, "say": tell}
    if resume:
        if not run_id:
            raise ConfigError("run_id", run_id, "the id of the run to resume (resume = True)")
        stored = RunStore.open(run_id, root).metadata().get("campaign", {})
        if "text" in stored:
            before = parse_campaign(stored["text"], source=SOURCE, cpus=stored.get("cpus"))
            now = experiment.campaign(cpus=stored.get("cpus"))
            if _comparable(before) != _comparable(now):
                raise StoreError(f"run {run_id} was started with other parameters than these; resume it with its own "
                                 f"(perfkit experiment --resume {run_id}) or start a new run (resume = False)")
        outcome = resume_campaign(run_id, **common)
    else:
        outcome = run_campaign(campaign, run_id=run_id, **common)
    return ExperimentRun(outcome.run_id, root, outcome, messages)


def _comparable(campaign: Any) -> dict[str, Any]:
    d = campaign.to_dict()
    d.pop("source", None)
    return d


def stored_experiment(run_id: str, data_root: str | Path | None = None) -> Experiment:
    """The experiment a run was started with (from the campaign it stored)."""
    from perfkit.store import RunStore

    root = Path(data_root) if data_root is not None else default_data_root()
    stored = RunStore.open(run_id, root).metadata().get("campaign", {})
    if "text" not in stored:
        raise StoreError(f"run {run_id} has no stored campaign in its metadata: it was not made by perfkit")
    return Experiment.from_campaign_text(stored["text"], source=stored.get("source", "<stored>"))


# -- analysis -----------------------------------------------------------------------------------
#: Trials of the per-core-count CPU fits; loss allowed in the multivariate model's trials.
PER_CORE_METHODS = ("maxrate",)
MAX_LOSS = 0.01


@dataclass
class Fits:
    """The CPU models and the DUT load model of a run."""

    throughput: Any
    """``analysis.throughput_table``."""
    cpu: Any
    """``analysis.cpu_frame`` of the max-rate trials (per-core-count fits)."""
    cpu_source: Any
    cpu_multi: Any
    """``analysis.cpu_frame`` of every trial with loss <= ``MAX_LOSS`` (multivariate model)."""
    cpu_multi_source: Any
    models: list[Any]
    """``analysis.fit_cpu_models``: per variant, ``CpuModels``."""
    load: Any
    """``analysis.load_frame``: the trials of the DUT load model."""
    load_model: Any
    """``analysis.fit_load`` (None: no scenario with trials at several rates)."""
    capped: int = 0
    """Max-rate trials left out of the per-core fits because the generator, not the DUT, set their rate."""

    def to_dict(self) -> dict[str, Any]:
        """The fitted models (``models.json``)."""
        return {"cpu_source": self.cpu_source.label, "cpu_multivariate_source": self.cpu_multi_source.label,
                "cpu_models": [{"variant": m.variant, "label": m.label, "fits": [f.to_dict() for f in m.fits()],
                                "notes": list(m.notes)} for m in self.models],
                "load_model": self.load_model.to_dict() if self.load_model is not None else None,
                "load_trials": int(len(self.load)), "per_core_trials_capped": self.capped}

    def markdown(self) -> str:
        lines = [f"- per-core fits: {len(self.cpu)} max-rate trials; {self.cpu_source.label}"
                 + (f" ({self.capped} more left out: the generator, not the DUT, set their rate)" if self.capped else ""),
                 f"- multivariate: {len(self.cpu_multi)} trials with loss <= {MAX_LOSS:g}; {self.cpu_multi_source.label}"]
        lines += [f"- {n}" for n in dict.fromkeys([self.cpu_source.missing_note, self.cpu_multi_source.missing_note]) if n]
        for m in self.models:
            lines += [f"- **{m.label} {f.name}**: `{f.equation()}` ({f.r2_words()}; n {f.n_samples_})" for f in m.fits()]
            lines += [f"- note: {n}" for n in m.notes]
        if self.load_model is not None:
            lines += [f"- {line}" for line in self.load_model.summary()]
        else:
            lines.append(f"- DUT load model: none ({len(self.load)} trials; no scenario has trials at several rates)")
        return "\n".join(lines)


def fit(run: Any) -> Fits:
    """Fit the CPU models (CPU from Prometheus' node-exporter samples where the run pulled them back,
    else /proc/stat) and the DUT load model of a loaded run (``analysis.load_run``)."""
    from perfkit import analysis

    tp = analysis.throughput_table(run)
    frame, source = analysis.cpu_frame(run, methods=list(PER_CORE_METHODS))
    mframe, msource = analysis.cpu_frame(run, methods=None, max_loss=MAX_LOSS)
    before = len(frame)
    if not frame.empty:
        frame = analysis.drop_generator_limited(frame, run)   # figures the generator capped are not the DUT's
    if not mframe.empty:
        mframe = analysis.drop_generator_limited(mframe, run)
    models = analysis.fit_cpu_models(frame, mframe) if not (frame.empty and mframe.empty) else []
    load = analysis.load_frame(run)
    return Fits(tp, frame, source, mframe, msource, models, load, analysis.fit_load(load), before - len(frame))


def throughput_figures(run: Any, fits: Fits) -> dict[str, Any]:
    """Throughput figures (name -> matplotlib Figure with a title, units and a legend)."""
    from perfkit import plots

    if fits.throughput.empty:
        return {}
    return {"throughput_mpps": plots.throughput_lines(fits.throughput, "throughput_mpps", run.title),
            "rx_gbps_max": plots.throughput_bars(fits.throughput, "rx_gbps", "max", run.title)}


def cpu_figures(run: Any, fits: Fits) -> dict[str, Any]:
    """The CPU models' figures: CPU vs frame size with the fits, residuals, the DUT load measured vs
    model (``cost_fit``) and the marginal cost per scenario."""
    from perfkit import plots

    out: dict[str, Any] = {}
    if not fits.cpu.empty:
        out["cpu_vs_frame_size"] = plots.cpu_vs_frame_size(fits.cpu, fits.models, fits.cpu_source.label)
    if any(m.multivariate is not None for m in fits.models):
        out["cpu_residuals"] = plots.residuals(fits.models, fits.cpu_multi_source.label)
    out["cost_fit"] = plots.load_fit(fits.load_model, run.title)
    if fits.load_model is not None:
        out["marginal_cost"] = plots.marginal_cost(fits.load_model, run.title)
    return out


def plan_markdown(campaign: Any) -> str:
    """What the campaign will do: scenarios, units, the estimate, the generator, the metrics."""
    from perfkit.campaign.units import estimate, expand

    gen = campaign.generator
    options = ", ".join(f"{k}={v!r}" for k, v in gen.options.items())
    ms = campaign.metrics
    metrics = ("off" if not ms.enabled else
               f"push to {ms.pushgateway_url}" if ms.pushgateway_url else
               "the local Prometheus/Pushgateway/node-exporter stack" if ms.start_local else "the configured endpoints")
    return "\n".join([
        f"**{campaign.name}**" + (f": {campaign.description}" if campaign.description else ""),
        f"- dataplane `{campaign.dataplane}`, parameters "
        + ", ".join(f"{n}={list(v) if len(v) > 1 else v[0]!r}" for n, v in campaign.params),
        f"- {len(campaign.scenarios())} scenarios x {len(campaign.methods)} methods "
        f"({', '.join(m.label for m in campaign.methods)}) x {campaign.repeats} repeats = {len(expand(campaign))} units",
        f"- generator `{gen.backend}`" + (f" ({options})" if options else ""),
        f"- metrics: {metrics}",
        f"- estimate: {estimate(campaign).describe()}",
    ])


def write_report(exp_run: ExperimentRun, reports_root: str | Path | None = None) -> str:
    """The run's HTML report set (``perfkit report``), as markdown saying where it is."""
    from perfkit.report import DEFAULT_REPORTS, build_report

    rep = build_report(exp_run.run_id, data_root=exp_run.data_root,
                       reports_root=reports_root if reports_root is not None else DEFAULT_REPORTS, progress=False)
    failed = [p.name for p in rep.pages if not p.ok]
    return f"report: `{rep.index}`" + (f" (failed pages: {', '.join(failed)})" if failed else "")


def save_outputs(exp_run: ExperimentRun, fits: Fits, figs: Mapping[str, Any]) -> dict[str, str]:
    """Write the outcome, the figures of the throughput table, the fitted models and the figures
    (PNG) into ``<run>/experiment/``; returns name -> path."""
    from perfkit.durable import atomic_write

    out = exp_run.path / OUTPUTS_DIR
    (out / "figures").mkdir(parents=True, exist_ok=True)
    paths: dict[str, str] = {}

    def put(name: str, data: bytes) -> None:
        atomic_write(out / name, data, point="experiment.output")
        paths[name] = str(out / name)

    put("outcome.json", json.dumps({**exp_run.outcome.to_dict(), "messages": exp_run.messages},
                                   indent=1, default=str).encode())
    put("throughput.csv", fits.throughput.to_csv(index=False).encode())
    put("models.json", json.dumps(fits.to_dict(), indent=1, default=_json_default).encode())
    import io

    for name, fig in figs.items():
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        put(f"figures/{name}.png", buf.getvalue())
    return paths


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


def render_page(executed: Path, out_dir: Path, error: str | None = None):
    """``out_dir/experiment.html`` from the executed notebook (an error page if it is missing); the
    ``perfkit.report.Page`` the report's index lists first."""
    from perfkit.report import Page, _error_page, export_html

    page = Page("experiment", "Experiment", "the notebook that drove this run: parameters, run, metrics, models",
                "experiment.html", ok=error is None, error=error)
    html = export_html(executed, page.title) if executed.exists() else _error_page(page.title, error or "not run")
    (out_dir / page.file).write_text(html)
    return page


def outcome_of(run_id: str, data_root: str | Path) -> dict[str, Any] | None:
    """The outcome the notebook saved for a run (``<run>/experiment/outcome.json``), or None."""
    p = Path(data_root) / run_id / OUTPUTS_DIR / "outcome.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


__all__ = ["Experiment", "ExperimentRun", "Fits", "NOTEBOOK", "OUTPUTS_DIR", "PROFILE_OPTIONS", "RUN_PARAMETERS",
           "cpu_figures", "fit", "from_namespace", "outcome_of", "parameter_field", "parameter_names", "run",
           "plan_markdown", "render_page", "save_outputs", "stored_experiment", "throughput_figures", "write_report"]
