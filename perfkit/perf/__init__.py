"""perf attribution: where the DUT cores' time went during a trial, from ``perf record`` to the report.

- ``record``: ``PerfRecorder``, ``perf record`` of the DUT cores around one trial, folded into a
  ``PerfProfile``.
- ``folded``: folded stacks and the tables made of them (processes, symbols, top functions).
- ``flamegraph``: interactive flame graphs (SVG) and the HTML that shows them.
- ``store``: a run's ``perf/<trial_id>.folded`` files, and ``perfkit trial --perf DIR``'s files.
- ``report``: the report's perf sections, per scenario and in one summary table.
- ``tools``: finding perf and inferno, and ``PerfError``.

The package itself imports nothing: import the module you need (``from perfkit.perf.record import
PerfRecorder``).
"""
