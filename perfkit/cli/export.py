"""``perfkit export --run RUN_ID --csv|--parquet [-o FILE]``: a run's trial frame, one row per trial.

The columns are the stored trial fields (``docs/trial-fields.md``), in the order trials ended, as
the run store holds them: nested fields (notes, per-core and per-reason mappings) are already JSON
text there, so CSV and Parquet carry the same values. Without ``-o`` the file is ``<run_id>.csv`` or
``<run_id>.parquet`` in the current directory; ``-o -`` writes CSV to standard output.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfkit.cli.options import check_run
from perfkit.durable import atomic_write
from perfkit.errors import ConfigError
from perfkit.store import DEFAULT_ROOT, RunStore


def cmd_export(args: argparse.Namespace) -> int:
    check_run("--run", args.run, args.root)
    trials = RunStore.open(args.run, args.root).trials()
    fmt = "parquet" if args.parquet else "csv"
    if args.output == "-":
        if fmt == "parquet":
            raise ConfigError("-o", "-", "a file name with --parquet (standard output takes CSV only)")
        trials.to_csv(sys.stdout, index=False)
        return 0
    out = Path(args.output or f"{args.run}.{fmt}")
    data = trials.to_parquet(index=False) if fmt == "parquet" else trials.to_csv(index=False).encode()
    atomic_write(out, data)
    print(f"{len(trials)} trials of run {args.run} -> {out}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a run's trials (one row each) as CSV or Parquet",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, metavar="RUN_ID", help="the run (as `perfkit run` printed it)")
    fmt = p.add_mutually_exclusive_group(required=True)
    fmt.add_argument("--csv", action="store_true", help="CSV, nested fields as JSON text")
    fmt.add_argument("--parquet", action="store_true", help="Parquet, types kept")
    p.add_argument("-o", "--output", metavar="FILE", help="where to write (default RUN_ID.csv or RUN_ID.parquet; - : stdout)")
    p.add_argument("--root", default=str(DEFAULT_ROOT), help=f"runs directory (default {DEFAULT_ROOT})")
    p.set_defaults(func=cmd_export)
