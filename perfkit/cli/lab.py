"""``perfkit lab show -i INVENTORY``: the lab an Ansible inventory describes, as perfkit reads it.

The inventory is read by Ansible's own ``ansible-inventory`` (``perfkit.lab.inventory``): hosts by
role (``dut``, ``tester``, ``trex``, ``metrics``), their management address, SSH port and user,
data-plane interfaces in cabling order and cores. Secrets in the inventory are never printed. A bad
inventory exits 2 with one line naming the host, the variable, its value and what is allowed.
"""
from __future__ import annotations

import argparse
import json

from perfkit.cli.options import add_json
from perfkit.lab import inventory


def cmd_show(args: argparse.Namespace) -> int:
    lab = inventory.load(args.inventory)
    if args.json:
        print(json.dumps(lab.to_dict(), indent=2))
        return 0
    for h in lab.hosts:
        who = f"{h.user}@" if h.user else ""
        cores = f", dut cores {list(h.dut_cores)}" if h.dut_cores else ""
        cores += f", tester cores {list(h.tester_cores)}" if h.tester_cores else ""
        print(f"{h.name} ({', '.join(h.roles)}): ssh {who}{h.address}:{h.port}{cores}")
        for i in h.interfaces:
            extra = "".join(f" {k} {v}" for k, v in (("mac", i.mac), ("address", i.address), ("peer", i.peer)) if v)
            print(f"  {i.name}:{extra}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lab", help="labs across hosts: an Ansible inventory", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    lab = p.add_subparsers(dest="lab_command", required=True, metavar="LAB_COMMAND")
    show = lab.add_parser("show", help="the hosts, roles, interfaces and cores of an inventory",
                          description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    show.add_argument("-i", "--inventory", required=True, metavar="INVENTORY",
                      help="an Ansible inventory (file, directory or plugin source)")
    add_json(show)
    show.set_defaults(func=cmd_show)
