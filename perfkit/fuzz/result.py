"""What fuzzing one dataplane found: ``FuzzResult`` (frames per verdict, kind and counter, failures
per kind) and ``Failure`` (one disagreement between the program and the model)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

FAILURE_KINDS = ("aborted", "verdict", "output", "counters", "model_error")


@dataclass
class Failure:
    """One frame (or batch) where the program and the model disagree."""

    kind: str
    """aborted, verdict, output, counters or model_error."""
    config: str
    frame_kind: str
    frame: bytes
    kernel: str
    model: str
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "config": self.config, "frame_kind": self.frame_kind, "frame": self.frame.hex(),
                "kernel": self.kernel, "model": self.model, "detail": self.detail}

    def __str__(self) -> str:
        return (f"{self.kind} [{self.config}, {self.frame_kind}, {len(self.frame)} bytes]: kernel {self.kernel}, "
                f"model {self.model}{': ' + self.detail if self.detail else ''}; frame {self.frame.hex()}")


@dataclass
class FuzzResult:
    """What fuzzing one dataplane found."""

    dataplane: str
    frames: int = 0
    seconds: float = 0.0
    """Wall time of the fuzzing (set-up included)."""
    busy_seconds: float = 0.0
    """Time the workers spent running frames and models, summed over workers."""
    workers: int = 1
    verdicts: Counter = field(default_factory=Counter)
    """Frames per kernel verdict."""
    kinds: Counter = field(default_factory=Counter)
    """Frames per frame kind."""
    kind_verdicts: dict[str, Counter] = field(default_factory=dict)
    """Frame kind -> frames per kernel verdict."""
    stats: Counter = field(default_factory=Counter)
    """Frames per counter the model named."""
    failures: Counter = field(default_factory=Counter)
    """Failures per kind (``FAILURE_KINDS``); empty when the program agrees with the model."""
    examples: list[Failure] = field(default_factory=list)
    configs: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.frames > 0 and not sum(self.failures.values())

    @property
    def frames_per_second(self) -> float:
        return self.frames / self.seconds if self.seconds else 0.0

    def merge(self, other: FuzzResult, max_examples: int) -> None:
        self.frames += other.frames
        self.busy_seconds += other.busy_seconds
        self.verdicts.update(other.verdicts)
        self.kinds.update(other.kinds)
        for k, c in other.kind_verdicts.items():
            self.kind_verdicts.setdefault(k, Counter()).update(c)
        self.stats.update(other.stats)
        self.failures.update(other.failures)
        self.examples.extend(other.examples[:max(0, max_examples - len(self.examples))])
        self.configs.extend(c for c in other.configs if c not in self.configs)

    def to_dict(self) -> dict[str, Any]:
        return {"dataplane": self.dataplane, "frames": self.frames, "seconds": self.seconds,
                "frames_per_second": self.frames_per_second, "busy_seconds": self.busy_seconds,
                "workers": self.workers, "ok": self.ok, "verdicts": dict(self.verdicts), "kinds": dict(self.kinds),
                "kind_verdicts": {k: dict(v) for k, v in self.kind_verdicts.items()}, "stats": dict(self.stats),
                "failures": {k: self.failures.get(k, 0) for k in FAILURE_KINDS},
                "examples": [e.to_dict() for e in self.examples], "configs": self.configs}
