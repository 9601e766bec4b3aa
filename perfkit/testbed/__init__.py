"""The local testbed: veth pairs in network namespaces (``topology``), the DUT on them (``dut``),
perfkit's XDP generator (``livegen``, compiled per profile by ``bpfbuild``) and sink (``sink``)."""
