"""YAML as perfkit reads it (campaign files, metrics configurations): safe, and strict about keys.

PyYAML keeps the last of two equal keys in a mapping without a word, so a campaign that says
``repeats: 1`` and, further down, ``repeats: 3`` would run with 3. ``load_yaml`` refuses such a
file: a ``ConfigError`` names the key and both lines. Merge keys (``<<: *defaults``) may still
override what they merge.
"""
from __future__ import annotations

from typing import Any

import yaml

from perfkit.errors import ConfigError

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping."""

    source = "YAML"


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: the safe constructor refuses it itself
            continue
        line = key_node.start_mark.line + 1
        if first is not None:
            raise ConfigError(f"{loader.source} line {line}", key,
                              f"each key once in a mapping (it is already on line {first})")
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_yaml(text: str, source: str = "YAML") -> Any:
    """``yaml.safe_load(text)``, but a duplicate key raises ConfigError naming ``source``, the key
    and its lines. Syntax errors stay ``yaml.YAMLError`` (the callers word them)."""
    loader = _StrictLoader(text)
    loader.source = source
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
