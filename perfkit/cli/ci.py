"""``perfkit ci init --github|--gitlab [--dir REPO]``: a CI job for a user's repository that runs ``perfkit ab``.

Writes into the repository (``--dir``, default the current directory) a GitHub Actions workflow
(``.github/workflows/perfkit-ab.yml``) or a GitLab CI file (``.gitlab-ci.yml``): on a pull (merge)
request, on a self-hosted runner with root on the DUT machine, it installs perfkit (``--perfkit-spec``,
a pip requirement; default this perfkit's version), runs ``perfkit ab --repo . --dataplane D --base
BASE --head HEAD CAMPAIGN``, keeps ``pr-comment.md``, ``summary.json`` and the plots, and posts or
updates one comment. Exit status: 0; 2 bad input (not a git repository, no dataplane to name, the
file exists without --force).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from perfkit.cli.ab import repo_root
from perfkit.cli.options import add_json, emit
from perfkit.perfci.cifiles import DEFAULT_CAMPAIGN, DEFAULT_LABEL, DESCRIPTION_SUFFIX, PROVIDERS, write_ci


def _human(d: dict) -> str:
    verb = "replaced" if d["replaced"] else "wrote"
    return (f"{verb} {d['path']} ({PROVIDERS[d['provider']].title})\n"
            f"  perfkit ab --repo . --dataplane {d['dataplane']} --base BASE --head HEAD {d['campaign']}\n"
            f"  perfkit: pip install {d['perfkit_spec']}; runner label: {d['label']}\n"
            + (f"wrote {d['lint_config']} (actionlint: the runner's label)\n" if d["lint_config_written"] else
               f"kept {d['lint_config']}: its self-hosted-runner labels must name {d['label']}\n"
               if d["lint_config"] else "")
            + "commit, and register a root runner on the DUT machine (perfkit's docs/ci.md)")


def cmd_init(args: argparse.Namespace) -> int:
    repo = repo_root("--dir", args.dir)
    res = write_ci(args.provider, repo, dataplane=args.dataplane, campaign=args.campaign,
                   perfkit_spec=args.perfkit_spec, label=args.label, path=args.path, force=args.force)
    emit(res.to_dict(), args.json, _human)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ci", help="CI files for a repository of your own (ci init)", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ci = p.add_subparsers(dest="ci_command", required=True, metavar="SUBCOMMAND")
    init = ci.add_parser("init", help="write a CI job that runs perfkit ab on pull (merge) requests",
                         description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = init.add_mutually_exclusive_group(required=True)
    for prov in PROVIDERS.values():
        which.add_argument(f"--{prov.name}", dest="provider", action="store_const", const=prov.name,
                           help=f"a {prov.title} file ({prov.path})")
    init.add_argument("--dir", default=".", metavar="DIR", help="the git repository (default: the current directory)")
    init.add_argument("--dataplane", default=None, metavar="FILE|NAME",
                      help=f"a description file of the repository or a plugin's name (default: the repository's "
                           f"one *{DESCRIPTION_SUFFIX})")
    init.add_argument("--campaign", default=DEFAULT_CAMPAIGN, metavar="FILE",
                      help=f"the campaign file of the repository (default {DEFAULT_CAMPAIGN})")
    init.add_argument("--perfkit-spec", default=None, metavar="REQUIREMENT",
                      help="what the job pip-installs perfkit from: a requirement, a wheel or a directory on the "
                           "runner (default: perfkit==this perfkit's version)")
    init.add_argument("--label", default=DEFAULT_LABEL,
                      help=f"the self-hosted runner's label (GitHub) or tag (GitLab) (default {DEFAULT_LABEL})")
    init.add_argument("--path", default=None, metavar="FILE",
                      help="where in the repository the file goes (default: the provider's, as above)")
    init.add_argument("--force", action="store_true", help="replace the file if it exists")
    add_json(init)
    init.set_defaults(func=cmd_init)
