"""Experiments driven from a notebook: a campaign -> the campaign runner -> fits and plots.

``notebooks/experiment.ipynb`` is the notebook; this package holds everything it does, so that
tests reach it. Its parameters are ``campaign``, a mapping with a campaign file's keys (what it
leaves out takes the schema's default, ``perfkit.campaign.schema``), and how to run it:
``run_id``, ``resume``, ``root``, ``progress``, ``report``, ``reports`` (``perfkit experiment``'s
``--run``, ``--resume``, ``--root``, ``--no-progress``, ``--report``, ``--reports``).

- ``perfkit.experiment.measure``: ``check(campaign)``, ``plan_markdown``, ``run(campaign, ...)``
  with the campaign runner, ``stored_campaign(run_id)``;
- ``perfkit.experiment.models``: ``fit(run)``, the CPU models and the DUT load model, and their figures;
- ``perfkit.experiment.outputs``: ``save_outputs`` into ``<run>/experiment/``, ``render_page``,
  ``write_report``;
- ``perfkit.experiment.notebook``: ``run_notebook(campaign, edits=..., ...)``, executing the
  notebook with papermill (``perfkit experiment FILE -p KEY=VALUE``).
"""
from perfkit.experiment.measure import SOURCE, ExperimentRun, check, plan_markdown, run, stored_campaign
from perfkit.experiment.models import Fits, cpu_figures, fit, throughput_figures
from perfkit.experiment.notebook import (KEPT_NOTEBOOK, NOTEBOOK, RUN_PARAMETERS, NotebookRun, default_campaign,
                                         run_notebook)
from perfkit.experiment.outputs import OUTPUTS_DIR, outcome_of, render_page, save_outputs, write_report

__all__ = ["KEPT_NOTEBOOK", "NOTEBOOK", "OUTPUTS_DIR", "RUN_PARAMETERS", "SOURCE", "ExperimentRun", "Fits",
           "NotebookRun", "check", "cpu_figures", "default_campaign", "fit", "outcome_of", "plan_markdown",
           "render_page", "run", "run_notebook", "save_outputs", "stored_campaign", "throughput_figures",
           "write_report"]
