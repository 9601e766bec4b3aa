"""The testbed values a description's strings may name: ``{ifindex_a}``, ``{mac_p1}``, ``{addr_b}`` ...

``testbed_values`` gives them for the DUT ports a program is loaded for (their interface indexes,
and the local testbed's MAC addresses and IPv4 addresses by role, ``perfkit.testbed.topology``);
the scenario's parameters join them by name. ``substitute`` replaces every ``{name}`` of a string
(``{map_id[flows]}`` indexes a mapping); a name that is not known is refused, naming the known ones.
"""
from __future__ import annotations

import string
from typing import Any, Mapping

from perfkit.errors import ConfigError
from perfkit.testbed.topology import PORT_ADDRS, PORT_MACS

_FORMATTER = string.Formatter()


def testbed_values(ifindex_a: int, ifindex_b: int, params: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """Every value a description may substitute for DUT ports ``ifindex_a``/``ifindex_b``."""
    out: dict[str, Any] = {"ifindex_a": ifindex_a, "ifindex_b": ifindex_b}
    for role in ("a", "b", "p0", "p1"):
        out[f"mac_{role}"] = PORT_MACS[role]
        out[f"addr_{role}"] = PORT_ADDRS[role]
    out.update(params)
    out.update(extra)
    return out


def substitute(where: str, text: str, values: Mapping[str, Any]) -> str:
    """``text`` with each ``{name}`` replaced by ``values[name]``."""
    try:
        return _FORMATTER.vformat(text, (), dict(values))
    except (KeyError, IndexError) as err:
        raise ConfigError(where, text, "{name} of: " + ", ".join(sorted(values))
                          + f" (no {err.args[0]!r})") from None
    except ValueError as err:
        raise ConfigError(where, text, f"a string whose braces name values ({err}); {{{{ for a brace") from None


def resolve(where: str, value: Any, values: Mapping[str, Any]) -> Any:
    """A value as written, with its strings substituted (in mappings and lists too); a string that is
    only ``{name}`` becomes the value itself (an integer stays an integer)."""
    if isinstance(value, str):
        if value.startswith("{") and value.endswith("}") and value[1:-1] in values:
            return values[value[1:-1]]
        return substitute(where, value, values)
    if isinstance(value, Mapping):
        return {k: resolve(f"{where}.{k}", v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(f"{where}[{i}]", v, values) for i, v in enumerate(value)]
    return value
