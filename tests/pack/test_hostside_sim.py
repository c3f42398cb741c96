"""The host side (real ansible-playbook, the real playbooks and host script)
against `sim` hosts: fake trees reached through Ansible's local connection with a sysroot."""
from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest
import yaml
from hostside_support import LabHostSide

from fleet_lab.hosts import boot_config
from fleet_lab.simhost import SimBackend
from fleet_rollout.connection import Connection, local_python

HOSTS = ["sim-001", "sim-002", "sim-003"]


@pytest.fixture()
def lab(tmp_path):
    backend = SimBackend(str(tmp_path / "hosts"))
    for name in HOSTS:
        backend.power_on(boot_config(name, "early", "disabled"))
    hosts = {name: {"fleet_sysroot": backend.sysroot(name)} for name in HOSTS}
    # the ghost's port stays bound and never listens for the whole test: a connection to it is
    # refused, and no other test running alongside (an sshd on a free port) can take it
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        hosts["ghost"] = {"ansible_host": "127.0.0.1", "ansible_port": closed.getsockname()[1],
                          "ansible_user": "root"}
        inventory = tmp_path / "inventory.yml"
        inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
        yield backend, LabHostSide(str(inventory), forks=5, cache_dir=str(tmp_path / "cache"))


def test_health_and_unreachable_host_is_a_per_host_error(lab):
    backend, side = lab
    results = side.health(HOSTS + ["ghost"])
    for name in HOSTS:
        assert results[name].ok, results[name]
        boot_id = open(os.path.join(backend.sysroot(name),
                                    "proc/sys/kernel/random/boot_id")).read().strip()
        assert results[name].result["boot_id"] == boot_id
        assert results[name].result["maintenance"] is False
    ghost = results["ghost"]
    assert not ghost.ok and ghost.unreachable and "unreachable" in ghost.error


def test_the_wait_for_the_os_waits_for_a_new_boot_in_one_run(lab):
    """booted.yml: a host named with its boot id before a reset is read again until another
    boot answers; a host not named only has to answer; a host that never restarts fails alone
    once the wait is over, with the boot id it still runs; an unreachable host fails alone."""
    backend, side = lab

    def boot_id(name: str) -> str:
        return open(os.path.join(backend.sysroot(name),
                                 "proc/sys/kernel/random/boot_id")).read().strip()

    before = {name: boot_id(name) for name in ("sim-001", "sim-002")}
    backend.power_off("sim-001")
    powered_on = threading.Timer(
        3.0, lambda: backend.power_on(boot_config("sim-001", "home", "disabled")))
    powered_on.start()
    started = time.monotonic()
    try:
        results = side.booted(["sim-001", "sim-002", "sim-003", "ghost"], before, wait=8,
                              poll=1)
    finally:
        powered_on.join()
    took = time.monotonic() - started
    first = results["sim-001"]
    assert first.ok, first
    assert first.result["boot_id"] == boot_id("sim-001") != before["sim-001"]
    assert results["sim-003"].ok and results["sim-003"].result["boot_id"] == boot_id("sim-003")
    stuck = results["sim-002"]
    assert not stuck.ok and f"boot id still {before['sim-002']}" in stuck.error
    ghost = results["ghost"]
    assert not ghost.ok and ghost.failed_task == "Wait until the host accepts connections"
    # the port is bound with no listener: ssh is refused, or under load its connection
    # multiplexer reports the same refusal as a broken pipe
    assert "Connection refused" in ghost.error or "Broken pipe" in ghost.error, ghost.error
    assert took >= 8  # the host that never restarts is read for the whole wait


def test_unknown_host_is_reported(lab):
    _, side = lab
    results = side.health(["sim-001", "nosuchhost"])
    assert results["sim-001"].ok
    assert not results["nosuchhost"].ok and "not in inventory" in results["nosuchhost"].error


def test_drain_and_undrain(lab):
    backend, side = lab
    flag = os.path.join(backend.sysroot("sim-001"), "etc/fleet/maintenance")
    results = side.drain(["sim-001", "sim-002"])
    assert all(r.ok and r.changed for r in results.values())
    assert os.path.exists(flag)
    assert side.health(["sim-001"])["sim-001"].result["maintenance"] is True
    again = side.drain(["sim-001"])["sim-001"]
    assert again.ok and not again.changed  # idempotent
    results = side.undrain(["sim-001", "sim-002"])
    assert all(r.ok for r in results.values())
    assert not os.path.exists(flag)


def test_a_drain_waits_for_the_hosts_own_sampler_of_the_pre_window(lab):
    """The pre window is read after the change (gate.py): a host's drain, alone or after the
    precheck's health read, first waits on the host for its own sampler of that window to take
    its last sample, so the window measures the host in service; a host with no such window
    (or whose window is done) drains at once; the wait is bounded."""
    backend, side = lab
    first_at = time.time() + 6.0  # the samplers' first snapshot; the last a step later
    started = side.start_window(HOSTS[:2], "d-1.b0.pre", 2.0, 1, first_at=first_at)
    assert all(started[h].ok for h in HOSTS[:2]), started
    results = side.drain(HOSTS, after_window=("d-1.b0.pre", 30.0))
    ended = time.time()
    for name in HOSTS:
        assert results[name].ok and results[name].changed, results[name]
        flag = os.path.join(backend.sysroot(name), "etc/fleet/maintenance")
        state = json.load(open(os.path.join(backend.sysroot(name), "var/tmp/fleet-rollout",
                                            "d-1.b0.pre.json"))) if name in HOSTS[:2] else None
        if state is not None:  # the flag came after the window's last sample
            assert state["done"] is True and os.path.getmtime(flag) >= \
                state["snapshots"][-1]["time"] - 0.01, (state, os.path.getmtime(flag))
        else:  # no such window here: nothing to wait for
            assert results[name].result["window_wait_s"] < 2.0, results[name].result
    assert ended >= first_at + 2.0
    side.undrain(HOSTS)
    # bounded: a sampler still due later is not waited for beyond the given seconds
    side.start_window(HOSTS[:1], "d-2.b0.pre", 30.0, 1, first_at=time.time() + 60.0)
    drained = side.drain(HOSTS[:1], 30.0, 0, after_window=("d-2.b0.pre", 1.0))[HOSTS[0]]
    assert drained.ok and 1.0 <= drained.result["window_wait_s"] < 5.0, drained.result
    side.undrain(HOSTS[:1])


def test_drain_timeout_fails_and_keeps_the_host_marked(lab):
    backend, side = lab
    tcp = os.path.join(backend.sysroot("sim-003"), "proc/net/tcp")
    with open(tcp, "a") as handle:  # one ESTABLISHED connection on :8080 (0x1F90)
        handle.write("   0: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 "
                     "00000000     0        0 1 1 0000000000000000 20 4 30 10 -1\n")
    result = side.drain(["sim-003"], timeout=1)["sim-003"]
    assert not result.ok
    assert "still 1 established connections on port 8080" in result.error
    assert result.failed_task == "Drain with the maintenance flag"
    assert os.path.exists(os.path.join(backend.sysroot("sim-003"), "etc/fleet/maintenance"))


SETTINGS = {
    "sysctl": {"net.core.rmem_max": 8388608, "net.core.netdev_max_backlog": 5000},
    "cmdline": {"add": ["intel_idle.max_cstate=1"], "remove": ["quiet"]},
    "nic": {"rx": 1024, "tx": 1024, "combined": 2},
    "irq_affinity": "numa-local",
}


def _read(backend, host, rel):
    return open(os.path.join(backend.sysroot(host), rel)).read()


def test_kernel_settings_apply_survive_reboot_and_restore(lab):
    backend, side = lab
    before_grub = _read(backend, "sim-001", "etc/default/grub")
    snap = side.kernel(["sim-001"], "snapshot", SETTINGS)["sim-001"]
    assert snap.ok and snap.result["changed"] == [] and not snap.changed, snap
    assert snap.result["snapshot"]["sysctl"]["net.core.rmem_max"] == "212992"
    assert _read(backend, "sim-001", "proc/sys/net/core/rmem_max").strip() == "212992"
    assert _read(backend, "sim-001", "etc/default/grub") == before_grub
    result = side.kernel(["sim-001"], "apply", SETTINGS)["sim-001"]
    assert result.ok, result
    assert result.result["reboot_required"] is True
    assert _read(backend, "sim-001", "proc/sys/net/core/rmem_max").strip() == "8388608"
    assert "net.core.rmem_max = 8388608" in _read(backend, "sim-001",
                                                  "etc/sysctl.d/90-fleet-rollout.conf")
    assert 'GRUB_CMDLINE_LINUX="intel_idle.max_cstate=1"' in _read(backend, "sim-001",
                                                                   "etc/default/grub")
    assert _read(backend, "sim-001", "proc/irq/24/smp_affinity_list").strip() == "0"
    assert _read(backend, "sim-001", "proc/irq/25/smp_affinity_list").strip() == "1"

    again = side.kernel(["sim-001"], "apply", SETTINGS)["sim-001"]
    assert again.ok and again.result["changed"] == [] and not again.changed

    backend.power_on(boot_config("sim-001", "home", "disabled"))  # the BIOS reboot
    assert _read(backend, "sim-001", "proc/sys/net/core/rmem_max").strip() == "8388608"
    reapplied = side.kernel(["sim-001"], "reapply")["sim-001"]
    assert reapplied.ok and "irq24=0" in reapplied.result["changed"]

    restored = side.kernel(["sim-001"], "restore")["sim-001"]
    assert restored.ok, restored
    assert _read(backend, "sim-001", "proc/sys/net/core/rmem_max").strip() == "212992"
    assert _read(backend, "sim-001", "etc/default/grub") == before_grub
    assert not os.path.exists(os.path.join(backend.sysroot("sim-001"),
                                           "etc/sysctl.d/90-fleet-rollout.conf"))
    nic = _read(backend, "sim-001", "run/fleet-sim/nic/eth0.json")
    assert '"rx": 256' in nic and '"combined": 1' in nic


def test_failed_task_names_task_and_reason(lab):
    _, side = lab
    result = side.kernel(["sim-002"], "snapshot", {"sysctl": {"net.core.no_such_knob": 1}})
    entry = result["sim-002"]
    assert not entry.ok
    assert entry.failed_task == "Kernel settings (snapshot)"
    assert "sysctl net.core.no_such_knob does not exist" in entry.error


def test_counters_collected_through_ansible(lab):
    backend, side = lab
    results = side.counters(HOSTS)
    for name in HOSTS:
        entry = results[name]
        assert entry.ok, entry
        doc = entry.result
        assert doc["errors"] == []
        assert doc["boot_id"] == _read(backend, name, "proc/sys/kernel/random/boot_id").strip()
        assert doc["snmp"]["Udp"]["RcvbufErrors"] == 0
        assert "eth0" in doc["interfaces"]


def test_a_window_sampled_on_the_hosts_through_ansible(lab):
    """start_window: each host's first snapshot at once, and a sampler left on the host (the
    run does not wait for it); read_window: the window's samples, a step apart on the host's
    clock from the first, once they are all taken. A host without that window says so; a
    window started again replaces the earlier one (whose sampler stops)."""
    backend, side = lab
    anchor = time.time()
    # steps long enough that the early read (another Ansible run) comes before the window
    # ends on a loaded machine (a CI run under load came after a window of 3 x 2 s)
    started = side.start_window(HOSTS, "r-1.b0.post", 5.0, 3, anchor)
    firsts = {name: started[name].result for name in HOSTS}
    assert all(started[name].ok for name in HOSTS), started
    assert all(doc["boot_id"] and doc["interfaces"] for doc in firsts.values())
    early = side.read_window(HOSTS[:1], "r-1.b0.post", 0.0)[HOSTS[0]]
    assert early.ok and early.result["done"] is False and len(early.result["snapshots"]) < 3
    read = side.read_window(HOSTS + ["ghost"], "r-1.b0.post", 30.0)
    for name in HOSTS:
        doc = read[name].result
        assert read[name].ok and doc["done"] is True and doc["errors"] == {}, read[name]
        assert doc["t0"] == firsts[name]["time"] and (doc["every"], doc["samples"]) == (5.0, 3)
        # due a step apart from the anchor when the start reached the host within half a step
        # of it, else from its own first snapshot (a loaded machine reaches hosts late)
        aligned = abs(doc["t0"] - anchor) <= 2.5
        start = anchor if aligned else doc["t0"]
        assert doc["anchor"] == pytest.approx(start, abs=0.001), (aligned, doc["anchor"])
        offsets = [snap["time"] - start for snap in doc["snapshots"]]
        assert offsets == pytest.approx([5.0, 10.0, 15.0], abs=0.5), offsets
        assert {snap["host"] for snap in doc["snapshots"]} == {name}
        assert os.path.isfile(os.path.join(backend.sysroot(name), "var/tmp/fleet-rollout",
                                           "r-1.b0.post.json"))
    assert not read["ghost"].ok and read["ghost"].unreachable
    missing = side.read_window(HOSTS[:1], "r-1.b0.pre", 0.0)[HOSTS[0]]
    assert not missing.ok and "no samples on this host" in missing.error
    # started again: the new window's samples, from its own first snapshot
    again = side.start_window(HOSTS[:1], "r-1.b0.post", 0.5, 1)[HOSTS[0]]
    doc = side.read_window(HOSTS[:1], "r-1.b0.post", 10.0)[HOSTS[0]].result
    assert doc["t0"] == again.result["time"] > firsts[HOSTS[0]]["time"]
    assert doc["done"] and len(doc["snapshots"]) == 1


def test_a_window_whose_first_snapshot_is_due_later_through_ansible(lab):
    """start_window with first_at (the post window, started as the soak begins): each host
    answers with the window's claim before the first snapshot is due, and its sampler takes
    the first at that time and the others a step apart from it; read_window has them all."""
    _backend, side = lab
    # far enough ahead that a loaded CI machine (a start run of 3 hosts took over 6 s there)
    # still reaches most hosts before it
    first_at = time.time() + 15.0
    started = side.start_window(HOSTS, "r-2.b0.post", 1.0, 2, first_at=first_at)
    claims = {name for name in HOSTS if started[name].result.get("deferred")}
    # a loaded test machine may reach a host after first_at: it snapshots at once (as a start
    # without it); the run itself never waits for the time
    late = {name for name in HOSTS if started[name].result.get("time", 0) >= first_at}
    assert claims | late == set(HOSTS) and claims, started
    for name in claims:
        claim = started[name].result
        assert started[name].ok and claim["anchor"] == pytest.approx(first_at, abs=0.001)
        assert "interfaces" not in claim
    read = side.read_window(HOSTS, "r-2.b0.post", 30.0)
    for name in claims:
        doc = read[name].result
        assert read[name].ok and doc["done"] is True and doc["errors"] == {}, read[name]
        assert doc["token"] == started[name].result["token"]
        assert doc["first"]["host"] == name and doc["first"]["interfaces"]
        assert doc["t0"] == doc["first"]["time"] == pytest.approx(first_at, abs=0.5)
        offsets = [snap["time"] - first_at for snap in doc["snapshots"]]
        assert offsets == pytest.approx([1.0, 2.0], abs=0.5), offsets


def test_a_window_starts_and_reads_many_hosts_at_once(monkeypatch):
    """A window's start and read reach up to 100 hosts at once (the configured forks if
    more): the hosts' windows start close together, and a host waiting for its samples holds
    no fork another host needs. A plain collection runs with the configured forks."""
    seen = []
    side = LabHostSide("inventory.yml", forks=20)
    monkeypatch.setattr(side, "_run", lambda playbook, hosts, extra=None, forks=None:
                        seen.append((playbook, len(hosts), forks, sorted(extra or {}))) or {})
    side.start_window([f"h{i}" for i in range(150)], "w", 5.0, 2)
    side.read_window([f"h{i}" for i in range(30)], "w", 3.0)
    side.counters([f"h{i}" for i in range(30)])
    side.forks = 200
    side.start_window([f"h{i}" for i in range(150)], "w", 5.0, 2)
    side.start_window([f"h{i}" for i in range(150)], "w", 5.0, 2, 1.0, first_at=9.0)
    start = ["fleet_collector_script", "fleet_window", "fleet_window_every",
             "fleet_window_samples"]
    assert seen == [("counters", 150, 100, start),
                    ("counters", 30, 30, ["fleet_collector_script", "fleet_window_read",
                                          "fleet_window_wait"]),
                    ("counters", 30, None, ["fleet_collector_script"]),
                    ("counters", 150, 200, start),
                    ("counters", 150, 200, start[:2] + ["fleet_window_every",
                                                        "fleet_window_first_at",
                                                        "fleet_window_samples"])]


def test_drain_and_undrain_through_the_configured_command(tmp_path):
    """fleet_drain_method: command (a load balancer's API, here a file the command writes;
    the pack config's drain_command and undrain_command, `{host}` the host's name, no shell),
    in the same run as a host drained with the flag: each host gets its own method's result."""
    backend = SimBackend(str(tmp_path / "hosts"))
    for name in HOSTS[:2]:
        backend.power_on(boot_config(name, "early", "disabled"))
    marks = tmp_path / "lb"
    marks.mkdir()
    hosts = {name: {"fleet_sysroot": backend.sysroot(name)} for name in HOSTS[:2]}
    hosts["sim-002"]["fleet_drain_method"] = "command"
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    connection = Connection(allow_local=True,
                            drain_command=("touch", f"{marks}/{{host}}.out"),
                            undrain_command=("rm", f"{marks}/{{host}}.out; id"))
    side = LabHostSide(str(inventory), forks=5, cache_dir=str(tmp_path / "cache"),
                       connection=connection)
    drained = side.drain(HOSTS[:2])
    assert drained["sim-001"].ok and drained["sim-001"].result["drained"] is True
    assert "method" not in drained["sim-001"].result  # the flag's own result
    assert drained["sim-002"].ok and drained["sim-002"].result == {
        "method": "command", "rc": 0, "drained": True}
    assert (marks / "sim-002.out").exists()
    assert not os.path.exists(os.path.join(backend.sysroot("sim-002"), "etc/fleet/maintenance"))
    (marks / "sim-002.out; id").write_text("")  # one argument, never a shell's two commands
    undrained = side.undrain(HOSTS[:2])
    assert undrained["sim-002"].result == {"method": "command", "rc": 0, "drained": False}
    assert undrained["sim-001"].ok and undrained["sim-001"].result["drained"] is False
    assert not (marks / "sim-002.out; id").exists() and (marks / "sim-002.out").exists()


def test_the_command_playbook_runs_only_when_a_host_of_the_run_drains_by_command():
    """A skipped task costs every host a forked worker: drain.yml and undrain.yml carry the
    maintenance flag's task only, and their command playbooks join a run only for a host whose
    resolved variables ask for the command (the run above: both in one ansible-playbook)."""
    from fleet_rollout.hostside.ansible_run import COMMAND_PLAYBOOKS, PLAYBOOK_DIR, playbooks_for
    from fleet_rollout.hostvars import HostEntry

    flag = HostEntry("sim-001", {"fleet_drain_method": "flag"})
    plain = HostEntry("sim-003", {})
    command = HostEntry("sim-002", {"fleet_drain_method": "command"})
    for name, companion in sorted(COMMAND_PLAYBOOKS.items()):
        path = os.path.join(PLAYBOOK_DIR, name)
        assert playbooks_for(path, [flag, plain]) == [path]
        assert playbooks_for(path, [flag, command]) == [path, os.path.join(PLAYBOOK_DIR,
                                                                          companion)]
        with open(path) as handle:  # the flag's playbook has no command task left
            assert "fleet_command" not in handle.read()
        with open(os.path.join(PLAYBOOK_DIR, companion)) as handle:
            plays = yaml.safe_load(handle)
        assert [t["name"].split(":")[0] for p in plays for t in p["tasks"]] == ["fleet_command"]
    health = os.path.join(PLAYBOOK_DIR, "health.yml")
    assert playbooks_for(health, [command]) == [health]


def test_health_reads_and_changes_nothing(lab):
    """The health playbook does one thing: one task per host that reads; no flag is set, no
    kernel snapshot is taken, on a host in maintenance or not; an unknown host is an error of
    its own."""
    backend, side = lab
    side.drain(["sim-003"])  # someone else's maintenance
    before = {name: sorted(os.listdir(backend.sysroot(name))) for name in HOSTS}
    results = side.health(HOSTS + ["ghost"])
    for name in HOSTS:
        entry = results[name]
        assert entry.ok and entry.tasks == ["Read host state"] and not entry.changed, entry
        assert entry.result["maintenance"] is (name == "sim-003")
        assert sorted(os.listdir(backend.sysroot(name))) == before[name]
        assert not os.path.exists(os.path.join(backend.sysroot(name),
                                               "var/lib/fleet-rollout"))
    assert not os.path.exists(os.path.join(backend.sysroot("sim-001"), "etc/fleet/maintenance"))
    assert not results["ghost"].ok and results["ghost"].result is None


def test_a_later_rollouts_restore_leaves_the_earlier_rollouts_settings(lab, tmp_path):
    """Rollout A adds a command-line word and a sysctl, then is done with the host (its
    undrain drops A's snapshot there); rollout B changes another sysctl and a word and is
    restored: every setting of A is still in effect, B's are gone."""
    backend, side = lab
    inventory = side.inventory
    a = LabHostSide(inventory, forks=5, cache_dir=str(tmp_path / "cache"), rollout_id="roll-a")
    b = LabHostSide(inventory, forks=5, cache_dir=str(tmp_path / "cache"), rollout_id="roll-b")
    a_settings = {"sysctl": {"net.core.rmem_max": 8388608},
                  "cmdline": {"add": ["intel_idle.max_cstate=1"], "remove": []}}
    b_settings = {"sysctl": {"net.core.netdev_budget": 600},
                  "cmdline": {"add": ["numa_balancing=disable"], "remove": []}}
    assert a.kernel(["sim-001"], "snapshot", a_settings)["sim-001"].ok
    applied = a.kernel(["sim-001"], "apply", a_settings)["sim-001"]
    assert applied.ok, applied
    assert a.undrain(["sim-001"])["sim-001"].ok  # A is done with the host
    state_dir = os.path.join(backend.sysroot("sim-001"), "var/lib/fleet-rollout")
    assert not [n for n in os.listdir(state_dir) if "roll-a" in n]
    budget = _read(backend, "sim-001", "proc/sys/net/core/netdev_budget").strip()
    assert b.kernel(["sim-001"], "snapshot", b_settings)["sim-001"].ok
    assert b.kernel(["sim-001"], "apply", b_settings)["sim-001"].ok
    persisted = _read(backend, "sim-001", "etc/sysctl.d/90-fleet-rollout.conf")
    assert "net.core.rmem_max = 8388608" in persisted  # A's line kept beside B's
    assert "net.core.netdev_budget = 600" in persisted
    restored = b.kernel(["sim-001"], "restore")["sim-001"]
    assert restored.ok, restored
    grub = _read(backend, "sim-001", "etc/default/grub")
    assert "intel_idle.max_cstate=1" in grub and "numa_balancing=disable" not in grub
    assert _read(backend, "sim-001", "proc/sys/net/core/rmem_max").strip() == "8388608"
    assert _read(backend, "sim-001", "proc/sys/net/core/netdev_budget").strip() == budget
    persisted = _read(backend, "sim-001", "etc/sysctl.d/90-fleet-rollout.conf")
    assert "net.core.rmem_max = 8388608" in persisted and "netdev_budget" not in persisted
    # A's forced rollback later: the snapshot the pack kept (the host's is gone)
    back = a.kernel(["sim-001"], "restore", snapshot=applied.result["snapshot"])["sim-001"]
    assert back.ok and back.result["reboot_required"] is True, back
    assert "intel_idle.max_cstate=1" not in _read(backend, "sim-001", "etc/default/grub")
    assert _read(backend, "sim-001", "proc/sys/net/core/rmem_max").strip() == "212992"
    assert not os.path.exists(os.path.join(backend.sysroot("sim-001"),
                                           "etc/sysctl.d/90-fleet-rollout.conf"))


def test_the_check_reads_what_booted(lab):
    """A sim host boots with the words its GRUB defaults give (as a boot loader passes them):
    a word applied is on /proc/cmdline after the reboot; one whose GRUB change was reverted
    behind the pack's back is not, and the check says so."""
    backend, side = lab
    settings = {"sysctl": {"net.core.rmem_max": 8388608},
                "cmdline": {"add": ["intel_idle.max_cstate=1"], "remove": ["quiet"]}}
    assert side.kernel(["sim-001"], "snapshot", settings)["sim-001"].ok
    assert side.kernel(["sim-001"], "apply", settings)["sim-001"].ok
    backend.power_on(boot_config("sim-001", "home", "disabled"))
    booted = _read(backend, "sim-001", "proc/cmdline").split()
    assert "intel_idle.max_cstate=1" in booted and "quiet" not in booted
    checked = side.kernel(["sim-001"], "check", settings)["sim-001"]
    assert checked.ok and checked.result["in_effect"] is True, checked
    grub = os.path.join(backend.sysroot("sim-001"), "etc/default/grub")
    with open(grub, "w") as handle:  # someone else's tool rewrites the defaults
        handle.write('GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX=""\n')
    backend.power_on(boot_config("sim-001", "home", "disabled"))
    checked = side.kernel(["sim-001"], "check", settings)["sim-001"]
    assert checked.ok and checked.result["in_effect"] is False
    assert checked.result["missing"] == [
        "cmdline intel_idle.max_cstate=1: not on /proc/cmdline",
        "cmdline quiet: still on /proc/cmdline"]


def test_ansible_never_sees_the_actions_st2_token(tmp_path, monkeypatch):
    """st2's ST2_* variables (the action's token among them) stay out of the Ansible process
    and of what it runs: a host's Python (the lab's local_hosts_python, a wrapper here) records
    the environment it was started with."""
    backend = SimBackend(str(tmp_path / "hosts"))
    backend.power_on(boot_config("sim-001", "early", "disabled"))
    seen = tmp_path / "env.txt"
    python = tmp_path / "recording-python"
    python.write_text(f"#!/bin/sh\nenv > {seen}\nexec {local_python()} \"$@\"\n")
    python.chmod(0o755)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"sim-001": {
        "fleet_sysroot": backend.sysroot("sim-001")}}}}))
    monkeypatch.setenv("ST2_ACTION_AUTH_TOKEN", "token-of-the-action-user")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-of-the-action-runner")
    monkeypatch.setenv("ST2_ACTION_API_URL", "http://127.0.0.1:9/api/v1")
    side = LabHostSide(str(inventory), forks=1, cache_dir=str(tmp_path / "cache"),
                       connection=Connection(allow_local=True, local_python=str(python)))
    assert side.health(["sim-001"])["sim-001"].ok
    recorded = seen.read_text()
    assert "PATH=" in recorded  # the shell ran, with an environment
    assert "ST2_" not in recorded and "token-of-the-action-user" not in recorded
    assert "secret-of-the-action-runner" not in recorded  # a minimal environment
