# fleet_rollout: `make demo` and `make test` are the two commands a fresh machine needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
ST2CLI_VENV := .venv-st2client
ST2CLI_STAMP := $(ST2CLI_VENV)/.installed-stamp
PYTEST_ARGS ?=
# pytest-xdist workers: most tests wait on subprocesses, VMs and sockets, so 5 workers share two
# cores well (one of them holds the VM demo for most of the run, one the VM modules at its
# start); tests/conftest.py keeps the VM tests on one worker (--dist loadgroup)
PYTEST_WORKERS ?= 5
UV_VERSION := 0.13.9

.PHONY: install test lint probe bytecode demo bench bench-redfish bench-runtime bench-probe bench-judge \
        bench-lab bench-rollout bench-st2api bench-host-step bench-host-change bench-warm bench-fleet clean

$(STAMP): pyproject.toml requirements.txt requirements-dev.txt system-packages.txt
	./scripts/install-system-packages.sh system-packages.txt
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	# uv installs the requirements (scripts/pip-install.sh; pip if uv cannot be had or fails)
	test -x $(VENV)/bin/uv || $(VPY) -m pip install -q --disable-pip-version-check \
		"uv==$(UV_VERSION)" || echo "no uv: pip installs the requirements"
	./scripts/pip-install.sh $(VPY) -r requirements-dev.txt -e .
	# the package comes from pyproject.toml: a stray fleet_rollout_pack.pth would shadow it
	rm -f "$$($(VPY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/fleet_rollout_pack.pth"
	touch $@

# The st2 CLI (st2client) pins its own dependencies: a virtualenv of its own.
$(ST2CLI_STAMP): requirements-st2client.txt $(STAMP)
	./scripts/make-venv.sh $(ST2CLI_VENV) $(PYTHON)
	./scripts/pip-install.sh $(ST2CLI_VENV)/bin/python -r requirements-st2client.txt
	touch $@

# The oldest ansible-core requirements.txt allows (requirements-ansible-oldest.txt), in a
# virtualenv of its own: `make test` runs the host-side tests there too (.venv has the newest).
ANSIBLE_OLDEST_VENV := .cache/ansible-oldest-venv
ANSIBLE_OLDEST_STAMP := $(ANSIBLE_OLDEST_VENV)/.installed-stamp
$(ANSIBLE_OLDEST_STAMP): requirements-ansible-oldest.txt pyproject.toml $(STAMP)
	./scripts/make-venv.sh $(ANSIBLE_OLDEST_VENV) $(PYTHON)
	./scripts/pip-install.sh $(ANSIBLE_OLDEST_VENV)/bin/python -r requirements-ansible-oldest.txt -e .
	touch $@

# The tests that run ansible-playbook (the pack's playbooks and host script against sim hosts,
# a loopback sshd, a sim lab's host steps): run on the newest and on the oldest ansible-core
HOSTSIDE_TESTS := $(wildcard tests/pack/test_hostside_*.py) \
	tests/pack/adversarial/test_adv_hostside_injection.py \
	tests/pack/adversarial/test_adv_inventory_connection.py \
	tests/pack/adversarial/test_adv_ssh_hostkeys.py \
	tests/pack/adversarial/test_adv_hoststeps.py

# errbot + err-stackstorm for the lab's ChatOps (fleet_lab/chatops), also a virtualenv of its own.
CHATOPS_STAMP := .cache/chatops-venv/.fleet-chatops-stamp
$(CHATOPS_STAMP): requirements-chatops.txt $(STAMP)
	$(VPY) -c 'from fleet_lab.chatops import bot; bot.ensure_venv()' && touch $@

# the st2 CLI's, the chat-ops' and the oldest ansible-core's virtualenvs are independent: built
# side by side
install: $(STAMP)
	@$(MAKE) -s -j3 $(ST2CLI_STAMP) $(CHATOPS_STAMP) $(ANSIBLE_OLDEST_STAMP)

probe: install
	@if [ -f probe/Makefile ]; then $(MAKE) -s -C probe; fi

# The repo's own Python compiled ahead (what changed since the last time): where
# PYTHONDONTWRITEBYTECODE is set (as on the CI machine) nothing is compiled on import, and each
# of the thousands of processes a test run or a rollout starts (CLI, engine, lab daemon, the
# pack's callback in every ansible-playbook) would compile the pack library again
bytecode: install
	PYTHONDONTWRITEBYTECODE= $(VPY) -m compileall -q -j 0 actions fleet_runtime fleet_lab bench \
		> /dev/null

lint: install
	$(VPY) -m ruff check .
	$(VENV)/bin/vermin -q --no-tips --violations --target=3.8- actions/ >/dev/null

# every test on the newest ansible-core (.venv), then the host-side tests on the oldest; either
# failing fails `make test` (the second runs whatever the first gave)
test: install probe lint bytecode
	rc=0; \
	$(VPY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=25 $(PYTEST_ARGS) \
		|| rc=$$?; \
	echo "host-side tests on ansible-core $$($(ANSIBLE_OLDEST_VENV)/bin/python -c \
		'import ansible; print(ansible.__version__)')"; \
	$(ANSIBLE_OLDEST_VENV)/bin/python -m pytest -q -n $(PYTEST_WORKERS) --durations=10 \
		$(HOSTSIDE_TESTS) || rc=$$?; \
	exit $$rc

demo: install probe bytecode
	$(VPY) -m fleet_lab.demo

# Each bench prints its figures and writes them to bench/RESULTS.md (bench/results.py; its own
# rows only). FLEET_BENCH_RECORD=0 runs a bench without writing the file.
bench: bench-redfish bench-runtime bench-probe bench-judge bench-lab bench-rollout bench-st2api \
       bench-host-step bench-host-change bench-warm bench-fleet

bench-redfish: install bytecode
	$(VPY) bench/bench_redfish.py

bench-runtime: install bytecode
	$(VPY) bench/bench_runtime.py

bench-probe: install probe bytecode
	$(VPY) bench/bench_probe.py

bench-judge: install bytecode
	$(VPY) bench/bench_judge.py

bench-lab: install probe bytecode
	$(VPY) bench/bench_lab.py

bench-rollout: install probe bytecode
	$(VPY) bench/bench_rollout.py

bench-st2api: install bytecode
	$(VPY) bench/bench_st2api.py

bench-host-step: install bytecode
	$(VPY) bench/bench_host_step.py

bench-host-change: install probe bytecode
	$(VPY) bench/bench_host_change.py

bench-fleet: install probe bytecode
	$(VPY) bench/bench_fleet.py

bench-warm: install bytecode
	$(VPY) bench/bench_warm.py

clean:
	rm -rf $(VENV) $(ANSIBLE_OLDEST_VENV) .pytest_cache .ruff_cache
	@if [ -f probe/Makefile ]; then $(MAKE) -s -C probe clean; fi
