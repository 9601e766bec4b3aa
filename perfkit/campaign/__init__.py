"""Campaigns: declarative sets of scenarios x methods, run into the store, resumable.

- ``perfkit.campaign.model``: ``Campaign`` and its parts, validated and frozen;
- ``perfkit.campaign.schema``: the YAML file or its mapping -> ``Campaign`` (the keys, their
  defaults; errors name the field);
- ``perfkit.campaign.units``: ``expand`` into ``Unit`` (scenario x repeat x method), ``estimate``;
- ``perfkit.campaign.runner``: ``run_campaign`` (tqdm progress, trials on disk first, pushed after);
- ``perfkit.campaign.backend``: the generator backend, checked before traffic, created on first use;
- ``perfkit.campaign.replay``: a unit's recorded trials served again to its restarted search;
- ``perfkit.campaign.resume``: ``resume_campaign``, with what a killed run left repaired;
- ``perfkit.campaign.edit``: a campaign mapping edited by dotted key (``-p KEY=VALUE``);
- ``perfkit.campaign.journal``: ``units.jsonl``, the events a resume reads;
- ``perfkit.campaign.metrics_session``: the metrics stack or endpoints, pushes that never stop a run;
- ``perfkit.campaign.metadata``: host, kernel, CPU, git sha, BPF object hashes.
"""
from perfkit.campaign.model import Campaign, GeneratorSpec, MethodSpec, MetricsSpec
from perfkit.campaign.resume import resume_campaign
from perfkit.campaign.runner import RunOutcome, run_campaign
from perfkit.campaign.schema import from_mapping, load_campaign, parse_campaign
from perfkit.campaign.units import Estimate, Unit, estimate, expand

__all__ = ["Campaign", "Estimate", "GeneratorSpec", "MethodSpec", "MetricsSpec", "RunOutcome", "Unit", "estimate",
           "expand", "from_mapping", "load_campaign", "parse_campaign", "resume_campaign", "run_campaign"]
