"""Editing a campaign mapping key by key: ``perfkit experiment FILE -p KEY=VALUE``.

A KEY is a campaign file's keys joined by dots, a list item by its index: ``repeats``,
``generator.backend``, ``generator.options.flow_op``, ``metrics.enabled``, ``params.direction``,
``methods[1].params.relative_width`` (or ``methods.1.params.relative_width``). VALUE is YAML:
``-p frame_sizes=[64,1518]``, ``-p flows='{single: 1, multi: 1024}'``, ``-p metrics=false``.

An edit sets one value and creates the mappings on its way (``generator.options.x`` in a campaign
without ``generator``); a value written short is made long first (``generator: sim`` becomes
``{backend: sim}`` before ``generator.options.x`` goes in; ``schema.SHORT_FORMS``). A key the schema
does not have is refused here, in the schema's words; everything else (values, the dataplane's
parameters, the backend's options) is checked with the whole campaign by ``schema.from_mapping``.
"""
from __future__ import annotations

import copy
import re
from typing import Any, Mapping

import yaml

from perfkit.campaign.schema import GENERATOR_KEYS, METHOD_KEYS, METRICS_KEYS, SHORT_FORMS, TOP_KEYS, check_keys
from perfkit.errors import ConfigError

#: The keys of the campaign's mappings whose keys the schema fixes, by where they are (``methods[]``:
#: each method); the others (``params``, ``generator.options``, a method's ``params``) are open here.
FIXED_KEYS: dict[str, tuple[str, ...]] = {"": TOP_KEYS, "generator": GENERATOR_KEYS, "metrics": METRICS_KEYS,
                                          "methods[]": METHOD_KEYS, "flows": ("single", "multi")}
#: Where a campaign holds mappings or lists an edit may go into; below the open mappings
#: (``OPEN``) anything may.
CONTAINERS = ("params", "frame_sizes", "flows", "dut_cores", "generator", "generator.options", "methods", "methods[]",
              "methods[].params", "metrics", "perf")
OPEN = ("params.", "generator.options.", "methods[].params.")
#: What an edit looks like (the words of every error about its form).
EDIT_FORM = "KEY=VALUE: KEY a campaign key (nested: generator.backend, methods[0].params.duration), VALUE YAML"

_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+|\[\d+\])*")
_PART_RE = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_]*)|\.?(\d+)|\[(\d+)\]")


def parse_edits(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings (``-p``) -> {KEY: the YAML value}; an empty VALUE is None."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not _KEY_RE.fullmatch(key):
            raise ConfigError("-p", item, EDIT_FORM)
        try:
            out[key] = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError as err:
            raise ConfigError(f"-p {key}", text, f"a YAML value ({' '.join(str(err).split())[:80]})") from None
    return out


def apply_edits(raw: Mapping[str, Any], edits: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the campaign mapping ``raw`` with each edit (KEY -> value) made, in order."""
    out = copy.deepcopy(dict(raw))
    for key, value in edits.items():
        _set(out, key, value)
    return out


def split_key(key: str) -> list[str | int]:
    """``methods[0].params.duration`` -> ``["methods", 0, "params", "duration"]``."""
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise ConfigError("-p", key, EDIT_FORM)
    return [name if name else int(dot or index) for name, dot, index in _PART_RE.findall(key)]


def _set(root: dict[str, Any], key: str, value: Any) -> None:
    parts = split_key(key)
    target = "campaign" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)
    node: Any = root
    where, shape = "campaign", ""
    for i, part in enumerate(parts):
        if isinstance(part, int):
            if not isinstance(node, list):
                raise ConfigError(target, value, f"a key of {where}, a mapping: [{part}] is for lists")
            if not 0 <= part <= len(node):
                raise ConfigError(target, value, f"an item of {where}: 0 .. {len(node) - 1} (or {len(node)}: a new one)")
            if part == len(node):
                node.append(None)
            where, shape = f"{where}[{part}]", f"{shape}[]"
        else:
            if not isinstance(node, dict):
                raise ConfigError(target, value, f"an index of {where}, a list: [0], [1] ...")
            if shape in FIXED_KEYS:
                check_keys(where, {part: value}, FIXED_KEYS[shape])
            where, shape = f"{where}.{part}", f"{shape}.{part}".lstrip(".")
        if i == len(parts) - 1:
            node[part] = value
            return
        child = _descendable(shape, node[part] if isinstance(part, int) else node.get(part),
                             list_next=isinstance(parts[i + 1], int))
        if child is None or not (shape in CONTAINERS or shape.startswith(OPEN)):
            raise ConfigError(target, value, f"a key of a mapping; {where} holds a value, not keys (set it whole: "
                              f"-p {where.removeprefix('campaign.')}=VALUE)")
        node[part] = node = child


def _descendable(shape: str, value: Any, list_next: bool) -> dict[str, Any] | list[Any] | None:
    """The mapping or list an edit goes on in: ``value``, a short form made long (``SHORT_FORMS``),
    or a new one where there is none; None if ``value`` has no keys (a number, a string)."""
    if value is None:
        return [] if list_next else {}
    if shape in SHORT_FORMS:
        kind, key = SHORT_FORMS[shape]
        if isinstance(value, kind):
            return {key: value}
    return value if isinstance(value, (dict, list)) else None
