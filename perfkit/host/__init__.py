"""The host perfkit measures on: its CPUs, what takes them away, and who runs on them.

A zero-loss figure is the DUT's only if the DUT's cores ran the DUT. Everything here is about the
machine under the testbed, not about a network function or the traffic:

- ``check``: ``perfkit host check``: measure every CPU's gaps and read the host's tuning
  (``check_host`` -> ``result.HostCheck``).
- ``gaps``: the gaps of one CPU and the rate from which they overflow a receive ring (pure).
- ``verdict``: fit for zero-loss measurements at a per-core rate, and the notes on the tuning.
- ``result``: ``HostCheck`` and ``Verdict``, as JSON and as one line.
- ``cpus``, ``irqs``, ``packetthreads``: readers of the CPUs (online, SMT, governors, isolation,
  hypervisor), the device interrupts, and the kernel threads that carry packets.
- ``stallprobe``: the BPF stall probe, which measures those gaps, packet-thread waits and the CPUs'
  speed during the check and during every trial.
- ``disturbance``: the rules that call a trial stalled or disturbed by the host's stalls.
- ``cpustat``: CPU time per CPU, mode and kernel thread from ``/proc``.
- ``housekeeping``: perfkit's own processes kept off the DUT cores.

Why the last four live here: each is about the host's CPUs, whoever asks. The stall probe and
its rules (formerly ``perfkit.stalls``) measure the host taking a CPU away, the same gaps the host
check counts (the check runs the same probe with a shorter timer period); ``cpustat`` (formerly
``perfkit.cpustat``) reads what each CPU and kernel thread of the host did, for trials, the host
check and the metrics' mode names; ``housekeeping`` (formerly ``perfkit.housekeeping``) places
perfkit's own processes on the host's CPUs. None of them knows a dataplane, a generator or a
search: those import them.

The package itself imports nothing: import the module you need (``from perfkit.host.check import
check_host``), so that a generator importing the probe does not load the host check and the
testbed with it.
"""
