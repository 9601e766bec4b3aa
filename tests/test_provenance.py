"""Where a measurement's code came from: object hashes (cached by file identity) and dataplane sources."""
from __future__ import annotations

import hashlib
import os

from perfkit.libbpf import BpfObject
from perfkit.paths import shown
from perfkit.provenance import dataplane_source, file_sha256, object_hashes
from perfkit.testbed.bpfbuild import object_path
from perfkit.version import VERSION


def test_a_file_is_hashed_again_only_when_it_changed(tmp_path):
    f = tmp_path / "x.o"
    f.write_bytes(b"one")
    assert file_sha256(f) == hashlib.sha256(b"one").hexdigest()
    f.write_bytes(b"other")        # another size
    assert file_sha256(f) == hashlib.sha256(b"other").hexdigest()
    st = f.stat()
    f.write_bytes(b"OTHER")        # the same size, the same mtime: taken for the same file
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert file_sha256(f) == hashlib.sha256(b"other").hexdigest()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1000))
    assert file_sha256(f) == hashlib.sha256(b"OTHER").hexdigest()


def test_a_loaded_object_carries_the_hash_of_the_file_it_was_loaded_from():
    path = object_path("drop")
    with BpfObject(path) as obj:
        assert object_hashes([obj, None]) == {shown(path): hashlib.sha256(path.read_bytes()).hexdigest()}


def test_a_dataplanes_source_is_its_package_or_its_description_file(tmp_path):
    assert dataplane_source("calib") == {"module": "perfkit.dataplanes.calib", "package": f"perfkit=={VERSION}"}
    desc = tmp_path / "mylb.dataplane.yaml"
    desc.write_text("program: mylb.o\n")
    assert dataplane_source(str(desc)) == {"file": str(desc), "sha256": hashlib.sha256(desc.read_bytes()).hexdigest(),
                                           "build": "", "object": "", "object_sha256": ""}   # in no git repository


def test_the_distribution_of_a_top_level_name_is_packages_distributions_answer():
    """``distribution_of``'s lookup of one name skips the distributions whose files cannot provide it,
    and answers as ``importlib.metadata.packages_distributions()`` for every name installed here."""
    import importlib.metadata

    from perfkit import provenance

    mapping = importlib.metadata.packages_distributions()
    for top in sorted(set(mapping) | {"perfkit", "no_such_package"}):
        assert provenance._distributions(top) == tuple(mapping.get(top, [])), top
