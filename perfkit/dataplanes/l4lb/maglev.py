"""Maglev consistent hashing (Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load
Balancer", NSDI 2016, section 3.4): the lookup table a VIP's flows are hashed into.

Each backend i has a preference list of table slots, ``permutation[i][j] = (offset + j * skip) mod
M`` with ``offset = h1(name) mod M`` and ``skip = h2(name) mod (M - 1) + 1``; M prime makes every
list a permutation of all slots. Backends take turns claiming their next preferred free slot until
the table is full, so each gets M/N slots (+-1) and a change of backends moves few slots of the
others. Weights work as in Katran's ``MaglevHash``: per round every backend adds its weight to a
credit and claims a slot when the credit reaches the largest weight, so turns are proportional to
weights.

h1 and h2 are BLAKE2b (8-byte digests) of the backend's name with two different personalisations:
deterministic across processes and machines (unlike Python's ``hash``), independent of each other.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from perfkit.errors import ConfigError

#: Default table size: prime, Katran's and the paper's 65537.
DEFAULT_SIZE = 65537


def is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def _h(name: str, person: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8, person=person).digest(), "little")


def offset_skip(name: str, size: int) -> tuple[int, int]:
    """(offset, skip) of a backend's preference list in a table of ``size`` slots."""
    return _h(name, b"maglev-offset") % size, _h(name, b"maglev-skip") % (size - 1) + 1


def maglev_table(reals: Sequence[str], weights: Sequence[int] | None = None, size: int = DEFAULT_SIZE) -> np.ndarray:
    """The lookup table: ``size`` entries, each the index in ``reals`` of the backend owning the slot.

    ``reals`` are the backends' names (their addresses); ``weights`` (default all 1) are
    non-negative integers, a backend of weight 0 gets no slot. An empty ``reals`` (or all weights
    0) gives an empty table. The result is read-only (tables are cached).
    """
    if not is_prime(size) or size < 3:
        raise ConfigError("size", size, "a prime >= 3 (Maglev needs a prime table size)")
    if len(set(reals)) != len(reals):
        raise ConfigError("reals", list(reals), "distinct names")
    w = tuple(1 for _ in reals) if weights is None else tuple(int(x) for x in weights)
    if len(w) != len(reals):
        raise ConfigError("weights", list(w), f"one per real ({len(reals)})")
    if any(x < 0 for x in w):
        raise ConfigError("weights", list(w), "integers >= 0")
    return _table(tuple(reals), w, size)


@lru_cache(maxsize=64)
def _table(reals: tuple[str, ...], weights: tuple[int, ...], size: int) -> np.ndarray:
    if not reals or max(weights, default=0) == 0:
        out = np.zeros(0, dtype=np.int32)
        out.setflags(write=False)
        return out
    pref = [offset_skip(r, size) for r in reals]
    nxt = [0] * len(reals)
    credit = [0] * len(reals)
    top = max(weights)
    entry = [-1] * size
    filled = 0
    while True:
        for i, (offset, skip) in enumerate(pref):
            credit[i] += weights[i]
            if credit[i] < top:
                continue
            credit[i] -= top
            j = nxt[i]
            slot = (offset + j * skip) % size
            while entry[slot] >= 0:
                j += 1
                slot = (offset + j * skip) % size
            entry[slot] = i
            nxt[i] = j + 1
            filled += 1
            if filled == size:
                out = np.array(entry, dtype=np.int32)
                out.setflags(write=False)
                return out


@dataclass(frozen=True)
class Pool:
    """The reals of one VIP and their Maglev table (what ``ch_rings`` holds for it)."""

    reals: tuple[str, ...]
    """Real addresses, in the order the table's entries index."""
    weights: tuple[int, ...] | None = None
    """One per real (Katran-style), None = all 1."""
    size: int = DEFAULT_SIZE
    """Table entries; must be the program's L4LB_RING_SIZE."""

    @property
    def table(self) -> np.ndarray:
        """Index into ``reals`` per slot (cached); empty when no real can take traffic."""
        return maglev_table(self.reals, self.weights, self.size)

    def real(self, slot: int) -> str | None:
        """The real owning ``slot`` (< size), None when the pool is empty."""
        t = self.table
        return self.reals[int(t[slot])] if len(t) else None

    def without(self, real: str) -> Pool:
        """This pool with ``real`` removed (the others keep their weights)."""
        if real not in self.reals:
            raise ConfigError("real", real, ", ".join(self.reals) or "none (the VIP has no real)")
        keep = [i for i, r in enumerate(self.reals) if r != real]
        return Pool(tuple(self.reals[i] for i in keep),
                    None if self.weights is None else tuple(self.weights[i] for i in keep), self.size)
