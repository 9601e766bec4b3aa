"""Tidy frames of a run for the notebooks, and the DUT CPU models.

Everything starts from ``load_run(run_id, data_root)`` (a ``RunData``: metadata, the trial frame,
the search summaries):

- ``perfkit.analysis.run``: ``RunData``, ``load_run``, ``trial_frame``, ``run_summary``, ``variant_label``;
- ``perfkit.analysis.notes``: ``run_notes``;
- ``perfkit.analysis.throughput``: ``throughput_table``, ``search_table``, ``latency_table``,
  ``search_path``, ``throughput_pivot``;
- ``perfkit.analysis.cpu``: ``cpu_per_trial``, ``cpu_frame`` (``CpuSource`` says where the figures come from);
- ``perfkit.analysis.cost``: ``load_frame``, ``fit_load``: the DUT's CPU load against the packet rate
  and what a packet costs (the DUT load model);
- ``perfkit.analysis.capacity``: ``load_capacity``, ``capacity_answer``: the cores the load model
  implies, and the one capacity table a report shows;
- ``perfkit.analysis.models``: ``fit_cpu_models``, ``fit_linear``, ``capacity_table``,
  ``drop_generator_limited`` and the tables the notebook shows (the CPU-share models).

Every model has an in-sample and a cross-validated R² (one scenario left out at a time); one whose
cross-validated R² is under ``WEAK_R2`` is weak.

Each module documents the columns of its frames.
"""
from perfkit.analysis.capacity import CapacityAnswer, capacity_answer, load_capacity
from perfkit.analysis.cost import LoadModel, fit_load, load_frame
from perfkit.analysis.cpu import CpuSource, cpu_frame, cpu_modes_per_core, cpu_per_trial
from perfkit.analysis.models import (FEATURE_UNITS, FEATURES, MIN_CV_GROUPS, TARGET_UNITS, WEAK_R2, CpuModels,
                                     LinearFit, capacity_pivot, capacity_table, capacity_tables, coefficients_table,
                                     correlation_table, correlations, drop_generator_limited, fit_cpu_models,
                                     fit_linear, r2_words)
from perfkit.analysis.notes import run_notes
from perfkit.analysis.run import (SCENARIO_COLUMNS, RunData, frame_sizes, load_run, run_summary, trial_frame,
                                  variant_label)
from perfkit.analysis.throughput import (PERCENTILES, best_worst_single, disturbed_table, goal_latency_table, goals, latency_table,
                                         limits_table,
                                         search_path, search_table, throughput_pivot, throughput_table)

__all__ = [
    "FEATURES", "FEATURE_UNITS", "MIN_CV_GROUPS", "PERCENTILES", "SCENARIO_COLUMNS", "TARGET_UNITS", "WEAK_R2",
    "CapacityAnswer", "CpuModels", "CpuSource", "LinearFit", "LoadModel", "RunData", "capacity_answer",
    "capacity_pivot", "drop_generator_limited", "fit_load", "load_capacity", "load_frame", "r2_words",
    "capacity_table", "capacity_tables",
    "coefficients_table", "correlation_table", "correlations", "cpu_frame", "cpu_modes_per_core", "cpu_per_trial", "disturbed_table",
    "best_worst_single", "fit_cpu_models", "fit_linear", "frame_sizes", "goal_latency_table", "goals", "latency_table", "limits_table", "load_run",
    "run_notes", "run_summary", "search_path", "search_table", "throughput_pivot", "throughput_table", "trial_frame",
    "variant_label",
]
