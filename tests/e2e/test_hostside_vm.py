"""The host side against lab VMs: real Ansible over SSH to real kernels, the BMC simulator's
Redfish reset restarting a QEMU guest with the topology its new BIOS settings give."""
from __future__ import annotations

import time

import pytest
import yaml
from hostside_support import lab_host_side, vm_lab_up

from fleet_lab import lab
from fleet_rollout.redfish.client import BmcEndpoint
from fleet_rollout.redfish.operations import Timeouts, apply_bios


@pytest.fixture(scope="module")
def vm_lab(tmp_path_factory):
    yield from vm_lab_up(str(tmp_path_factory.mktemp("vmlab")), 2)


def _udp(side, host):
    entry = side.counters([host])[host]
    assert entry.ok, entry
    return entry.result["snmp"]["Udp"]


def test_counters_move_under_traffic_and_drain_stops_it(vm_lab):
    state, inventory, _ = vm_lab
    side = lab_host_side(state, inventory)
    first = _udp(side, "lab-001")
    time.sleep(3)
    second = _udp(side, "lab-001")
    assert second["InDatagrams"] > first["InDatagrams"]
    assert second["RcvbufErrors"] > first["RcvbufErrors"]  # early snoop reads too slowly
    assert side.drain(["lab-001"])["lab-001"].ok
    time.sleep(4)  # the traffic source sees the health check answer 503
    drained = _udp(side, "lab-001")
    time.sleep(4)
    assert _udp(side, "lab-001")["InDatagrams"] - drained["InDatagrams"] < 50
    assert side.undrain(["lab-001"])["lab-001"].ok
    time.sleep(4)
    assert _udp(side, "lab-001")["InDatagrams"] > drained["InDatagrams"] + 100


def test_a_window_sampled_on_a_vm_over_ssh(vm_lab):
    """A counter window on a real kernel over SSH: the start returns with the first snapshot
    while the sampler it left goes on (its session holds no SSH channel open), and the read
    gets the samples it took, a step apart, counting the traffic that flowed."""
    state, inventory, _ = vm_lab
    side = lab_host_side(state, inventory)
    # steps long enough that the early read (one more SSH run) comes before the window ends
    # even on a loaded machine (one under load took more than 4 s for it, another over 12 s)
    first = side.start_window(["lab-002"], "vmtest.b0.post", 15.0, 2)["lab-002"]
    assert first.ok, first
    early = side.read_window(["lab-002"], "vmtest.b0.post", 0.0)["lab-002"]
    assert early.ok and early.result["done"] is False, early
    doc = side.read_window(["lab-002"], "vmtest.b0.post", 60.0)["lab-002"].result
    assert doc["done"] is True and doc["t0"] == first.result["time"] and doc["errors"] == {}
    udp = [first.result["snmp"]["Udp"]] + [s["snmp"]["Udp"] for s in doc["snapshots"]]
    assert udp[0]["InDatagrams"] < udp[1]["InDatagrams"] < udp[2]["InDatagrams"]
    offsets = [s["time"] - doc["t0"] for s in doc["snapshots"]]
    # each sample at its moment on the guest's clock, never early; a TCG guest starved of CPU
    # wakes late, by seconds beside other jobs on two cores
    for due, offset in zip((15.0, 30.0), offsets):
        assert due - 0.5 <= offset <= due + 5.0, offsets
    assert {s["boot_id"] for s in doc["snapshots"]} == {first.result["boot_id"]}


def test_kernel_settings_applied_and_restored(vm_lab):
    state, inventory, _ = vm_lab
    side = lab_host_side(state, inventory)  # the lab's pack config names its known_hosts
    settings = {"sysctl": {"net.core.rmem_max": 8388608}}
    assert side.kernel(["lab-002"], "snapshot", settings)["lab-002"].ok
    applied = side.kernel(["lab-002"], "apply", settings)
    assert applied["lab-002"].ok, applied["lab-002"]
    health = side.health(["lab-002"])["lab-002"]
    assert health.ok
    restored = side.kernel(["lab-002"], "restore")["lab-002"]
    assert restored.ok and "sysctl net.core.rmem_max=212992" in restored.result["changed"]


def test_probe_sees_the_topology_change_after_a_redfish_reset(vm_lab):
    state, inventory, manifest = vm_lab
    side = lab_host_side(state, inventory)
    before = side.probe(["lab-002"], 2000)["lab-002"]
    assert before.ok, before
    assert len(before.result["topology"]["nodes"]) == 2
    boot_id = side.health(["lab-002"])["lab-002"].result["boot_id"]
    config = yaml.safe_load(open(lab.paths(state)["pack_config"]))
    host = manifest["hosts"][1]
    ep = BmcEndpoint(host["name"], host["bmc_url"], "admin",
                     config["credentials"]["lab"]["password"], ca_bundle=config["ca_bundle"])
    apply_bios(ep, {"node_interleaving": "enabled"},
               Timeouts(graceful=60, force=60, boot=300, poll=1))
    deadline = time.time() + 300
    while True:
        health = side.health(["lab-002"])["lab-002"]
        if health.ok and health.result["boot_id"] != boot_id:
            break
        assert time.time() < deadline, "the VM did not come back"
        time.sleep(2)
    after = side.probe(["lab-002"], 2000)["lab-002"]
    assert after.ok, after
    assert len(after.result["topology"]["nodes"]) == 1


def test_the_guests_node_exporter_is_scraped_by_a_real_prometheus(vm_lab):
    """node_exporter inside each guest (the lab image's), through QEMU's forwarded port, and
    a real Prometheus over the lab: every guest up, and a window read through it counts the
    traffic the guest kernel's own counters show over SSH, within the scrape resolution."""
    from fleet_lab import monitoring
    from fleet_rollout.counter_source import PrometheusSettings
    from fleet_rollout.counters.metric import DEFAULT_METRIC

    state, inventory, manifest = vm_lab
    side = lab_host_side(state, inventory)
    info = monitoring.start(state, manifest, progress=lambda _m: None, timeout=180)
    try:
        assert info["exporters"] == {}  # the guests run their own
        assert {h: t["health"] for h, t in monitoring.targets(info).items()} == {
            "lab-001": "up", "lab-002": "up"}
        prom = PrometheusSettings(info["url"], ca_bundle=info["ca"],
                                  auth_header=monitoring.auth_header(info)).source()
        first = _udp(side, "lab-002")
        start = time.time()
        time.sleep(20)
        last = _udp(side, "lab-002")
        end = time.time()
        time.sleep(2 * monitoring.VM_SCRAPE_SECONDS + 1)
        window = prom.window_counts(["lab-002"], DEFAULT_METRIC, start, end,
                                    step=monitoring.VM_SCRAPE_SECONDS)["lab-002"]
        assert window.usable, window
        received = last["InDatagrams"] + last["RcvbufErrors"] - first["InDatagrams"] - \
            first["RcvbufErrors"]
        rate = received / (end - start)
        # each end read up to a scrape (5 s) apart from the SSH read, plus the SSH reads' own
        # time on a TCG guest
        assert abs(window.detail["snmp:Udp.RcvbufErrors"] -
                   (last["RcvbufErrors"] - first["RcvbufErrors"])) <= \
            2.5 * monitoring.VM_SCRAPE_SECONDS * max(rate, 1.0)
        assert window.packets > 0
    finally:
        monitoring.stop(state, progress=lambda _m: None)
    assert monitoring.running(state)["prometheus"] is None
