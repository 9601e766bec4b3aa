"""What a reader of a run's report must know about the run as a whole (``run_notes``)."""
from __future__ import annotations

from perfkit.analysis.run import RunData
from perfkit.analysis.throughput import throughput_table


def run_notes(run: RunData) -> list[str]:
    """What a reader of the report must know about the run as a whole."""
    m = run.metadata
    notes = []
    if m.get("generator") == "sim":
        notes.append("simulated DUTs (generator sim): the figures show the model, not a measurement")
    status = m.get("status")
    if status and status != "complete":
        notes.append(f"the run is {status}: {m.get('units_done', '?')} of {m.get('units_total', '?')} units done")
    for unit, err in (m.get("units_failed") or {}).items():
        notes.append(f"unit {unit} failed: {err}")
    if m.get("resumes"):
        notes.append(f"resumed {len(m['resumes'])} time(s); interrupted searches were replayed from their stored trials")
    if not run.trials.empty and run.trials["shared_cores"].any():
        notes.append("some trials had DUT and generator on a shared core: their figures are pessimistic")

    tp = throughput_table(run)
    limited = tp[tp["generator_limited"]]["scenario_key"].nunique() if not tp.empty else 0
    if limited:
        notes.append(f"{limited} scenario(s) were generator-limited: the generator, not the DUT, set the maximum")
    if not run.trials.empty and run.trials["retried"].any():
        r = run.trials[run.trials["retried"]]
        lossy = int(r["disturbed"].sum())
        notes.append(f"{len(r)} trial(s) had a DUT core stalled by the host as long as its queue lasts and were run "
                     f"again whatever they lost ({r['duration'].sum():.0f} s of traffic; {lossy} of them lost frames "
                     "the stalls explain); see the search page")
    if not run.trials.empty and "stalled" in run.trials and (still := run.trials["notes"].astype(str)
                                                               .str.contains("still stalled", regex=False)).any():
        notes.append(f"{int(still.sum())} trial(s) still stalled after their retries were judged with their loss")
    met = m.get("metrics") or {}
    if met.get("note"):
        notes.append(met["note"])
    if met.get("push_failures"):
        notes.append(f"{met['push_failures']} push(es) failed; backfill with `perfkit push --run {run.run_id}`")
    return notes
