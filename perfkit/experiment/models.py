"""The experiment notebook's models of a run: the CPU models and the DUT load model, and their figures.

``fit(run)`` fits them (``perfkit.analysis``) on a loaded run (``analysis.load_run``);
``throughput_figures`` and ``cpu_figures`` draw them (``perfkit.plots``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfkit import analysis

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
    from perfkit import plots   # heavy (matplotlib): only drawing needs it

    if fits.throughput.empty:
        return {}
    return {"throughput_mpps": plots.throughput_lines(fits.throughput, "throughput_mpps", run.title),
            "rx_gbps_max": plots.throughput_bars(fits.throughput, "rx_gbps", "max", run.title)}


def cpu_figures(run: Any, fits: Fits) -> dict[str, Any]:
    """The CPU models' figures: CPU vs frame size with the fits, residuals, the DUT load measured vs
    model (``cost_fit``) and the marginal cost per scenario."""
    from perfkit import plots   # heavy (matplotlib): only drawing needs it

    out: dict[str, Any] = {}
    if not fits.cpu.empty:
        out["cpu_vs_frame_size"] = plots.cpu_vs_frame_size(fits.cpu, fits.models, fits.cpu_source.label)
    if any(m.multivariate is not None for m in fits.models):
        out["cpu_residuals"] = plots.residuals(fits.models, fits.cpu_multi_source.label)
    out["cost_fit"] = plots.load_fit(fits.load_model, run.title)
    if fits.load_model is not None:
        out["marginal_cost"] = plots.marginal_cost(fits.load_model, run.title)
    return out
