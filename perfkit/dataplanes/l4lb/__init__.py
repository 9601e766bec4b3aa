"""L4 load balancer (``bpf/l4lb.bpf.c``): a Katran-like XDP balancer with Maglev hashing and IPIP
encapsulation towards the reals (L3 DSR), seeds 000 and 004."""
