# perfkit: the two commands are `make run` and `make test`; both set everything up themselves.
# Every target is idempotent and meant to run as root on a fresh Debian/Ubuntu machine.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Python writes the byte code of what it imports (.venv and perfkit/ __pycache__, ignored by git)
# even where the environment says not to: every test and perfkit command is a new process, and
# without byte code each one compiles pandas, scipy and perfkit again (4.3 s to import the CLI's
# libraries instead of 1.5 s on this 2-vCPU VM, whose environment sets PYTHONDONTWRITEBYTECODE=1).
unexport PYTHONDONTWRITEBYTECODE

PYTHON   ?= python3
VENV     := .venv
PY       := $(VENV)/bin/python
PERFKIT  := $(VENV)/bin/perfkit
ARCH     := $(shell uname -m)
CLANG    ?= clang
BPF_CFLAGS := -O2 -g -target bpf -I/usr/include/$(ARCH)-linux-gnu -Ibpf/include -Ibuild -Wall -Werror
BPF_SRC  := $(wildcard bpf/*.bpf.c)
BPF_HDR  := $(wildcard bpf/include/*.h)
BPF_OBJ  := $(patsubst bpf/%.bpf.c,build/bpf/%.o,$(BPF_SRC))
CAMPAIGN ?= campaigns/default.yaml
PYTEST_ARGS ?=

# Debian package names; on Ubuntu a missing one is reported and skipped.
APT_PACKAGES := clang llvm libbpf-dev bpftool iproute2 ethtool iputils-ping procps \
	prometheus prometheus-pushgateway prometheus-node-exporter openssh-server \
	tshark linux-perf python3-venv python3-pip chromium xdp-tools bpftrace=0.17.0-1

INFERNO_VERSION := 0.12.8
INFERNO := build/tools/bin/inferno-flamegraph
ACTIONLINT_VERSION := v1.7.12
ACTIONLINT := build/tools/bin/actionlint-$(ACTIONLINT_VERSION)

.PHONY: help setup apt venv bpf tools trex-venv test test-slow test-drills test-lab run jupyter bench report clean distclean cleanup-net

help:
	@echo "make run    - set up, run the default campaign on the local testbed through notebooks/experiment.ipynb, write the HTML report"
	@echo "make jupyter - set up, start JupyterLab on notebooks/ (127.0.0.1, with a token; Ctrl-C stops it)"
	@echo "make test   - set up and run the test suite, a fast test of each behaviour (root; real kernel, real servers; <= 15 min with set-up)"
	@echo "make test-slow - the long tests left out of make test (marker slow: variants, sweeps, live calibration; ~18 min)"
	@echo "make test-drills - the reliability drills: stop signals at random moments of searches and runs (~10 min)"
	@echo "make test-lab - the lab tests: a lab of namespace hosts with sshd, provisioned by ansible-playbook (~8 min)"
	@echo "make setup  - apt packages, .venv, BPF objects (done by run/test)"
	@echo "make lock   - resolve pyproject.toml's dependencies again into requirements.lock (exact versions, hashes)"
	@echo "make bench  - the benchmarks in bench/"
	@echo "make cleanup-net - remove the perfkit namespaces, links, XDP attachments, pins and servers no live process owns"
	@echo "make clean  - remove build/ (distclean also .venv)"

setup: apt venv bpf tools trex-venv

# tools: inferno (flame graphs of `perfkit trial --perf` and the report's perf page), a Rust crate
# built into build/tools with the CLI only (about 26 s on 2 cores; its compiled crates are kept in
# ~/.cache/perfkit/cargo-target, so another clone installs it in about 1 s). Without cargo it is
# left out with a warning: perf data is still recorded, flame graphs are not drawn. And actionlint,
# the linter tests/test_perfci.py runs on .github/workflows/perf.yml (a Go module, about 25 s).
tools: $(INFERNO) $(ACTIONLINT)

$(INFERNO):
	@cargo=$$(command -v cargo || echo $$HOME/.cargo/bin/cargo); \
	if [ -x "$$cargo" ]; then \
		CARGO_TARGET_DIR=$${XDG_CACHE_HOME:-$$HOME/.cache}/perfkit/cargo-target \
		$$cargo install inferno --version $(INFERNO_VERSION) --locked --no-default-features --features cli \
			--root build/tools --quiet; \
	else echo "warning: no cargo: inferno (flame graphs) not installed; install Rust, then make tools"; fi

# actionlint: installed by `go install` into build/tools/bin, then named with its version (so that a
# new pin installs again); build/tools/bin/actionlint is a link to it. Without Go: a warning, and the
# workflow test fails saying so.
$(ACTIONLINT):
	@go=$$(command -v go || echo /usr/local/go/bin/go); \
	if [ -x "$$go" ]; then \
		GOBIN=$(CURDIR)/build/tools/bin $$go install github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION) && \
		mv build/tools/bin/actionlint $@ && ln -sf $(notdir $@) build/tools/bin/actionlint; \
	else echo "warning: no go: actionlint (the workflow's linter) not installed; install Go, then make tools"; fi

# trex-venv: TRex's Python client (TRex v3.04, PyPI lbr-trex-client) in an environment of its own,
# run by perfkit/trex/worker.py: importing it swaps scapy for its bundled 2.4.3, so it cannot
# share .venv. --no-deps: the package bundles what it needs (scapy, pyzmq-ctypes, jsonrpclib ...).
TREX_CLIENT_VERSION := 3.4.0
TREX_VENV := build/trex-venv

trex-venv: $(TREX_VENV)/.installed-$(TREX_CLIENT_VERSION)

$(TREX_VENV)/.installed-$(TREX_CLIENT_VERSION): | $(VENV)/.installed
	@[ -x $(TREX_VENV)/bin/python ] || "$$(realpath $(PY))" -m venv $(TREX_VENV)
	$(TREX_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps lbr-trex-client==$(TREX_CLIENT_VERSION)
	@rm -f $(TREX_VENV)/.installed-* && touch $@

# apt: install only what is missing, so a second run does nothing and needs no network.
apt:
	@missing=""; for p in $(APT_PACKAGES); do \
		n=$${p%%=*}; v=$${p#"$$n"}; v=$${v#=}; \
		st=$$(dpkg-query -W -f='$${Status} $${Version}' $$n 2>/dev/null); \
		case "$$st" in *"ok installed"*) [ -z "$$v" ] || [ "$${st##* }" = "$$v" ] || missing="$$missing $$p";; \
			*) missing="$$missing $$p";; esac; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "apt-get install:$$missing"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -q >/dev/null; \
		avail=""; for p in $$missing; do \
			if apt-cache show $$p >/dev/null 2>&1; then avail="$$avail $$p"; else echo "warning: no apt package $$p here, skipped"; fi; \
		done; \
		[ -z "$$avail" ] || apt-get install -y -q --no-install-recommends $$avail; \
	fi
	@mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf || echo "warning: could not mount bpffs on /sys/fs/bpf"
	@mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing || echo "warning: could not mount tracefs (perfkit trace needs it)"

# venv: the exact versions of requirements.lock, each checked against its hashes, then perfkit itself
# (editable, without dependencies: the lock has them all, the dev extra included). Redone only when
# the lock, pyproject.toml or setup.py changed. --no-compile: a module is byte-compiled when first
# imported, not all of them at install (26 s instead of 55 s on a clean clone).
LOCK := requirements.lock

venv: $(VENV)/.installed

$(VENV)/.installed: $(LOCK) pyproject.toml setup.py
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --no-compile --require-hashes --only-binary :all: -r $(LOCK)
	$(PY) -m pip install -q --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	@touch $@

# lock: requirements.lock from pyproject.toml (runtime and dev dependencies), for every Python
# perfkit supports (>= 3.10) and every platform, by the uv the lock itself pins (a dev dependency).
# uv keeps the pins of the lock it is given where they still fit; the lock is replaced only when it
# changed, so that an unchanged lock does not make `venv` install again.
.PHONY: lock
lock: | $(VENV)/.installed
	@cp $(LOCK) $(LOCK).new
	$(VENV)/bin/uv pip compile pyproject.toml --extra dev --universal --python-version 3.10 --generate-hashes \
		--custom-compile-command "make lock" --quiet -o $(LOCK).new
	@if cmp -s $(LOCK).new $(LOCK); then rm $(LOCK).new; else mv $(LOCK).new $(LOCK); echo "$(LOCK) changed"; fi

bpf: $(BPF_OBJ)

build/bpf/%.o: bpf/%.bpf.c $(BPF_HDR) build/vmlinux.h
	@mkdir -p $(dir $@)
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@

# The running kernel's types, for programs that read kernel structures (stallprobe: steal_time).
build/vmlinux.h:
	@mkdir -p build
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > $@.tmp && mv $@.tmp $@

# make test: every test but those marked slow or drill, on a clean clone within 15 minutes with its
# set-up (.ci/run); the 15 slowest are listed so that a test that grows shows. A test that needs
# more than ~10 s goes in make test-slow (marker `slow`) if make test keeps a fast one of its kind.
test: setup
	$(PY) -m pytest -m "not slow and not drill and not lab" --durations=15 $(PYTEST_ARGS)

# The long tests (pytest marker `slow`): variants of a behaviour make test checks once, sweeps
# (a SIGKILL at every dangerous moment), the live calibration and the drill-like runs.
test-slow: setup
	$(PY) -m pytest -m "slow and not drill and not lab" --durations=15 $(PYTEST_ARGS)

# The reliability drills (pytest marker `drill`): SIGTERM and SIGINT at random moments of searches
# and of runs on the real testbed (about 12 minutes on 2 cores; PERFKIT_DRILL_SEED=N repeats one's
# moments).
test-drills: setup
	$(PY) -m pytest -m drill $(PYTEST_ARGS)

# The lab tests (pytest marker `lab`): a lab of hosts that are network namespaces of this machine,
# each with its own sshd (perfkit.lab.sandbox), provisioned by the real ansible-playbook over SSH.
test-lab: setup
	$(PY) -m pytest -m lab --durations=15 $(PYTEST_ARGS)

# The default campaign's values as the parameters of notebooks/experiment.ipynb, executed by papermill
# (the campaign runner of `perfkit run`); the report set as `perfkit run $(CAMPAIGN) --report` writes it.
run: setup
	$(PERFKIT) experiment $(CAMPAIGN) --report

# JupyterLab on notebooks/, 127.0.0.1 only, a new token each start; prints the URL to open.
jupyter: setup
	$(PERFKIT) jupyter

bench: setup
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

cleanup-net:
	@[ -x $(PERFKIT) ] && $(PERFKIT) clean || echo "no .venv yet: nothing of perfkit can be running"

clean:
	rm -rf build

distclean: clean
	rm -rf $(VENV) *.egg-info
