"""A lab is an Ansible inventory, read by the real ``ansible-inventory`` (``perfkit.lab.inventory``).

Inventories in YAML and as a directory (INI hosts, ``group_vars/``, ``host_vars/``) give the same
lab; a bad host variable is refused in one line naming the host, the variable, the value and what
is allowed; secrets in the inventory are never printed.
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest
import yaml

from perfkit.cli import main
from perfkit.errors import ConfigError
from perfkit.lab import inventory
from perfkit.lab.inventory import Interface, inventory_json, lab_from_json, load

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "labs" / "example.yml"

#: A four-host lab as the lab tests build it: a DUT cabled to two testers, and a metrics host.
FOUR = {"all": {"vars": {"ansible_user": "perfkit", "ansible_password": "s3cret-pw"}, "children": {
    "dut": {"hosts": {"dut": {
        "ansible_host": "198.18.100.2", "ansible_port": 2222, "dut_cores": [1],
        "vault_token": "s3cret-token",
        "interfaces": [{"name": "d0", "mac": "02:00:00:00:00:10", "address": "198.18.0.1/24", "peer": "t1:t0"},
                       {"name": "d1", "mac": "02:00:00:00:00:11", "address": "198.18.1.1/24", "peer": "t2:t0"}]}}},
    "tester": {"children": {"tester_a": {"hosts": {"t1": {
        "ansible_host": "198.18.100.3", "tester_cores": [0],
        "interfaces": [{"name": "t0", "mac": "02:00:00:00:00:20", "peer": "dut:d0"}]}}},
                            "tester_b": {"hosts": {"t2": {
        "ansible_host": "198.18.100.4",
        "interfaces": [{"name": "t0", "mac": "02:00:00:00:00:30", "peer": "dut:d1"}]}}}}},
    "metrics": {"hosts": {"m": {"ansible_host": "198.18.100.5"}}},
    "other": {"hosts": {"bastion": {"ansible_host": "198.18.100.9"}}}}}}


def write(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def four_json(tmp_path_factory) -> dict:
    """What the real ansible-inventory makes of the four-host lab."""
    return inventory_json(write(tmp_path_factory.mktemp("inv") / "four.yml", FOUR))


def perfkit(capsys, *args: str) -> tuple[int, str, str]:
    """The real command line, in this process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_documented_example_is_a_three_host_lab():
    lab = load(EXAMPLE)
    assert [(h.name, h.roles) for h in lab.hosts] == [("dut1", ("dut",)), ("trex1", ("trex",)),
                                                     ("metrics1", ("metrics",))]
    assert lab.dut.dut_cores == (2, 3) and lab.dut.user == "perfkit" and lab.dut.address == "198.19.0.20"
    assert [i.name for i in lab.dut.interfaces] == ["ens1f0", "ens1f1"]       # cabling order kept
    assert lab.dut.interfaces[0] == Interface("ens1f0", "02:00:00:00:20:00", "198.18.0.1/24", "trex1:ens1f0")


def test_roles_come_from_groups_and_their_children(four_json):
    lab = lab_from_json("four.yml", four_json)
    assert [h.name for h in lab.role("tester")] == ["t1", "t2"]                 # through tester_a, tester_b
    assert lab.dut.port == 2222 and lab.role("metrics")[0].address == "198.18.100.5"
    assert "bastion" not in [h.name for h in lab.hosts]                         # no perfkit role: not perfkit's
    assert lab.role("tester")[0].tester_cores == (0,) and lab.role("tester")[1].tester_cores == ()
    with pytest.raises(ConfigError, match=r"interface of host dut: 'eth9' is not allowed; allowed: d0, d1"):
        lab.dut.interface("eth9")


def test_a_directory_inventory_gives_the_same_lab(tmp_path, four_json):
    """INI hosts with their variables in host_vars/ and group_vars/, as Ansible reads them."""
    d = tmp_path / "inv"
    (d / "host_vars").mkdir(parents=True)
    (d / "group_vars").mkdir()
    (d / "hosts.ini").write_text("[dut]\ndut\n[tester_a]\nt1\n[tester_b]\nt2\n[tester:children]\ntester_a\ntester_b\n"
                                 "[metrics]\nm\n[other]\nbastion\n")
    groups = FOUR["all"]["children"]
    hostvars = {"dut": groups["dut"]["hosts"]["dut"], "t1": groups["tester"]["children"]["tester_a"]["hosts"]["t1"],
                "t2": groups["tester"]["children"]["tester_b"]["hosts"]["t2"], "m": groups["metrics"]["hosts"]["m"],
                "bastion": groups["other"]["hosts"]["bastion"]}
    for host, v in hostvars.items():
        write(d / "host_vars" / f"{host}.yml", v)
    write(d / "group_vars" / "all.yml", FOUR["all"]["vars"])
    assert load(d).hosts == lab_from_json("four.yml", four_json).hosts


def test_show_prints_no_secret_and_json_has_every_host(tmp_path, capsys):
    inv = write(tmp_path / "four.yml", FOUR)
    code, shown, err = perfkit(capsys, "lab", "show", "-i", str(inv))
    assert code == 0, err
    assert "dut (dut): ssh perfkit@198.18.100.2:2222, dut cores [1]" in shown
    code, as_json, err = perfkit(capsys, "lab", "show", "-i", str(inv), "--json")
    assert code == 0, err
    assert [h["name"] for h in json.loads(as_json)["hosts"]] == ["dut", "t1", "t2", "m"]
    for out in (shown, as_json):
        assert "s3cret" not in out


def _with(four_json: dict, host: str, **changes: object) -> dict:
    data = copy.deepcopy(four_json)
    data["_meta"]["hostvars"][host].update(changes)
    return data


@pytest.mark.parametrize("host, changes, words", [
    ("dut", {"interfaces": [{"name": "d0", "mac": "02:00:00:00:00:1g"}, {"name": "d1", "mac": "02:00:00:00:00:11"}]},
     "host dut: interfaces[0].mac: '02:00:00:00:00:1g' is not allowed; allowed: a MAC address"),
    ("t1", {"interfaces": [{"name": "t0"}]}, "host t1: interfaces[0].mac: None is not allowed"),
    ("dut", {"dut_cores": []}, "host dut: dut_cores: [] is not allowed; allowed: the CPUs that run the dataplane"),
    ("dut", {"dut_cores": [1, 1]}, "host dut: dut_cores: [1, 1] is not allowed; allowed: CPU numbers, each once"),
    ("dut", {"interfaces": [{"name": "d0", "mac": "02:00:00:00:00:10"}]}, "host dut: interfaces: ['d0'] is not allowed"),
    ("t2", {"interfaces": [{"name": "t0", "mac": "02:00:00:00:00:30", "peer": "dut:d0"}]},
     "host t2: interface t0: peer: 'dut:d0' is not allowed; allowed: dut:d1, the interface cabled to it"),
    ("m", {"interfaces": [{"name": "m0", "peer": "dut:eth9"}]},
     "host m: interface m0: peer: 'dut:eth9' is not allowed; allowed: an interface of a lab host"),
    ("t1", {"interfaces": [{"name": "t0", "mac": "02:00:00:00:00:20", "speed": 100}]},
     "host t1: interfaces[0]: key: 'speed' is not allowed; allowed: name, mac, address, peer"),
    ("t1", {"interfaces": [{"name": "t0", "mac": "02:00:00:00:00:20", "address": "198.18.0.300/24"}]},
     "host t1: interfaces[0].address: '198.18.0.300/24' is not allowed"),
    ("m", {"ansible_port": 70000}, "host m: ansible_port: 70000 is not allowed; allowed: a TCP port"),
])
def test_a_bad_host_variable_is_refused_naming_host_variable_and_value(four_json, host, changes, words):
    with pytest.raises(ConfigError) as err:
        lab_from_json("four.yml", _with(four_json, host, **changes))
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_lab_needs_one_dut_and_a_traffic_source(four_json):
    two = copy.deepcopy(four_json)
    two["dut"]["hosts"].append("m")
    two["_meta"]["hostvars"]["m"].update(two["_meta"]["hostvars"]["dut"])
    with pytest.raises(ConfigError, match=r"inventory group dut: \['dut', 'm'\] is not allowed; allowed: exactly one"):
        lab_from_json("four.yml", two)
    none = copy.deepcopy(four_json)
    none["tester"]["children"] = []
    with pytest.raises(ConfigError, match="inventory groups tester and trex: .* at least one host that sends traffic"):
        lab_from_json("four.yml", none)


def test_an_inventory_ansible_cannot_read_exits_2_with_ansibles_reason(tmp_path, capsys):
    bad = tmp_path / "bad.yml"
    bad.write_text("all:\n  hosts: [unclosed\n")
    for source, why in ((bad, "an inventory Ansible reads (yaml plugin: YAML parsing failed"),
                        (tmp_path / "missing.yml", "an inventory file or directory (no such file)")):
        code, out, err = perfkit(capsys, "lab", "show", "-i", str(source))
        assert code == 2 and out == ""
        line = err.strip()
        assert "\n" not in line and line.startswith(f"perfkit: error: inventory: '{source}' is not allowed; "
                                                    f"allowed: {why}"), line


def test_ansible_inventory_is_the_environments():
    """The ansible-inventory beside perfkit's Python, the one `make setup` pins, not another on PATH."""
    assert inventory.ansible_inventory() == str(Path(sys.executable).parent / "ansible-inventory")
