"""``perfkit lab``: labs across hosts, described by an Ansible inventory.

``perfkit lab show -i INVENTORY``: the lab an Ansible inventory describes, as perfkit reads it.
``perfkit lab provision -i INVENTORY [--check]``: set its hosts up with ``ansible-playbook``
(``perfkit.lab.provision``): packages, bpffs, perfkit at this checkout's commit, BPF objects built
on the DUT and testers, their NICs, node-exporter, and Prometheus with the Pushgateway on the
metrics host. Idempotent: a second run reports ``changed=0``. ``--check`` changes nothing and shows
what would change.

The inventory is read by Ansible's own ``ansible-inventory`` (``perfkit.lab.inventory``): hosts by
role (``dut``, ``tester``, ``trex``, ``metrics``), their management address, SSH port and user,
data-plane interfaces in cabling order and cores. Secrets in the inventory are never printed. A bad
inventory exits 2 with one line naming the host, the variable, its value and what is allowed.
"""
from __future__ import annotations

import argparse
import json
import sys

from perfkit.cli.options import add_json
from perfkit.errors import PerfkitError
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


def cmd_provision(args: argparse.Namespace) -> int:
    from perfkit.lab import provision   # imports yaml and the metrics configuration: only when used
    echo = (lambda line: print(line, file=sys.stderr)) if args.json else print
    result = provision.provision(args.inventory, check=args.check, echo=echo)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        what = "would change" if args.check else "changed"
        print(f"perfkit {result.source_id} on {len(result.recap)} hosts: {result.changed} tasks {what}")
    if result.unreachable:
        raise PerfkitError(result.unreachable[0] + (f" (and {len(result.unreachable) - 1} more)"
                                                    if len(result.unreachable) > 1 else ""))
    if result.returncode:
        failed = [r.host for r in result.recap if r.failed]
        raise PerfkitError(f"provisioning failed on {', '.join(failed) or 'the lab'} (ansible-playbook exit "
                           f"{result.returncode}; its output above says which task)")
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
    prov = lab.add_parser("provision", help="set the lab's hosts up with ansible-playbook (idempotent)",
                          description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    prov.add_argument("-i", "--inventory", required=True, metavar="INVENTORY",
                      help="an Ansible inventory (file, directory or plugin source)")
    prov.add_argument("--check", action="store_true", help="change nothing: show what would change (Ansible's check mode)")
    add_json(prov)
    prov.set_defaults(func=cmd_provision)
