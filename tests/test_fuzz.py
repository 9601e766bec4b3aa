"""Fuzzing every registered dataplane against its reference model (``perfkit.fuzz``), a sample of a
few thousand frames each; ``bench/fuzz.py`` runs the million. The fuzzer itself is tested too: it
must notice a model that is wrong in the output, in the verdict or in the counter it names."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from perfkit import dataplanes
from perfkit.dataplane import Emitted, Traffic
from perfkit.fuzz import FuzzResult, fuzz
from perfkit.fuzz.frames import KINDS, MIN_FRAME, Seeds, configs, header_spans, seed_frames, systematic

SAMPLE = 4000


@pytest.mark.parametrize("name", dataplanes.names())
def test_fuzzed_frames_agree_with_the_model(name: str) -> None:
    res = fuzz(name, SAMPLE, seed=7)
    assert res.frames == SAMPLE
    assert res.ok, "\n".join(map(str, res.examples)) or str(res.failures)
    assert res.verdicts.get("XDP_ABORTED", 0) == 0
    # the sample reaches every kind of frame and both sides of the program: forwarded and not
    assert set(res.kinds) == set(KINDS)
    assert res.verdicts.get("XDP_DROP", 0) and res.verdicts.get("XDP_TX", 0) + res.verdicts.get("XDP_REDIRECT", 0)
    assert len(res.configs) == len(configs(dataplanes.get(name)))


def _flip_output(dp):
    def model(traffic: Traffic, frame: bytes) -> Emitted:
        want = dp.emit(traffic, frame)
        if want.out is None:
            return want
        out = bytearray(want.out)
        out[len(out) // 2] ^= 0x01
        return dataclasses.replace(want, out=bytes(out))
    return model


def _pass_for_drop(dp):
    def model(traffic: Traffic, frame: bytes) -> Emitted:
        want = dp.emit(traffic, frame)
        return Emitted("XDP_PASS", want.stat) if want.verdict == "XDP_DROP" else want
    return model


def _rename_stat(dp):
    def model(traffic: Traffic, frame: bytes) -> Emitted:
        want = dp.emit(traffic, frame)
        return dataclasses.replace(want, stat="no_such_counter") if want.verdict == "XDP_DROP" else want
    return model


@pytest.mark.parametrize("wrong, kind", [(_flip_output, "output"), (_pass_for_drop, "verdict"),
                                         (_rename_stat, "counters")], ids=["output", "verdict", "counter"])
def test_a_wrong_model_is_caught(wrong, kind: str) -> None:
    name = dataplanes.DEFAULT
    res = fuzz(name, 1500, seed=3, model=wrong(dataplanes.get(name)))
    assert not res.ok and res.failures[kind] > 0
    example = next(e for e in res.examples if e.kind == kind)
    assert len(example.frame) >= MIN_FRAME and kind in str(example)


def test_a_model_that_raises_is_a_failure() -> None:
    def model(traffic: Traffic, frame: bytes) -> Emitted:
        raise IndexError("model bug")
    res = fuzz(dataplanes.DEFAULT, 200, model=model)
    assert res.failures["model_error"] == 200 and not res.ok


@pytest.mark.parametrize("name", dataplanes.names())
def test_headers_and_systematic_frames(name: str) -> None:
    """Headers come from dissecting the dataplane's frames; every truncation is in the systematic set."""
    dp = dataplanes.get(name)
    seeds = Seeds.build(seed_frames(dp, configs(dp)))
    for frame in seeds.frames:
        spans = header_spans(frame)
        assert spans[0] == ("Ethernet", 0, 14) and len(spans) >= 2, spans
        assert all(a[2] == b[1] for a, b in zip(spans, spans[1:]))
    rec = systematic(seeds)
    first = seeds.frames[0]
    cuts = rec["truncate"][rec["truncate"][:, 0] == 0][:, 1]
    assert sorted(cuts.tolist()) == list(range(MIN_FRAME, len(first)))
    # every byte of the header region changed at least once, every 16-bit word of each header too
    pos = set(rec["byte"][rec["byte"][:, 0] == 0][:, 2].tolist())
    assert pos == set(range(int(seeds.region[0])))
    words = set(rec["field16"][rec["field16"][:, 0] == 0][:, 2].tolist())
    assert words == {int(o) for o, _ in seeds.words[0]}
    assert np.all(rec["field16"][:, 4] == rec["field16"][:, 2] + 1)


def test_shards_in_processes_add_up() -> None:
    res = fuzz(dataplanes.DEFAULT, 600, seed=2, workers=2)
    assert isinstance(res, FuzzResult) and res.frames == 600 and res.ok and res.workers == 2
    assert sum(res.verdicts.values()) == 600 == sum(res.kinds.values())
