"""perfkit: measure, explain and improve eBPF/XDP network functions.

The public API, re-exported here; each name lives in the module named for its concept.
"""
from perfkit.errors import ConfigError, PerfkitError
from perfkit.generators.base import Generator
from perfkit.rate import Rate
from perfkit.scenario import Scenario
from perfkit.trial import TrialResult
from perfkit.version import VERSION

__all__ = ["ConfigError", "Generator", "PerfkitError", "Rate", "Scenario", "TrialResult"]
__version__ = VERSION
