"""The VM lab boots through GRUB from each VM's disk: what update-grub writes is what boots.

The disk units (no VM) use the real mkfs.ext4, debugfs, e2fsck and grub-mkimage on image files.
The VM test boots one guest through SeaBIOS and GRUB, runs Debian's update-grub in it after a
word was added to GRUB_CMDLINE_LINUX, powers it off and on (the lab's power path, what the BMC
simulator calls) and finds the word in /proc/cmdline; then a grub.cfg put back behind
update-grub's back boots without it. The pack test runs the pack's host side (its playbooks and
fleet_host.py over Ansible) on a one-VM lab with the lab's Redfish BMC, step by step as a rollout
does: rollout A adds a kernel command line word and is verified, rollout B changes a sysctl and
is rolled back (A's word stays), rollout C's boot configuration is reverted behind its back
(verify fails, the host is restored).
"""
from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest

from fleet_lab.hosts import boot_config
from fleet_lab.vm import persist
from fleet_lab.vm.backend import VmBackend
from fleet_lab.vm.qemu import FW_CFG_NAME

MARKER = "fleet.lab.grubtest=1"


def _boot_files(tmp_path: Path, release: str, image_id: str) -> persist.BootFiles:
    """Stand-in kernel and initrd files (no VM boots them in the disk units)."""
    kernel = tmp_path / f"vmlinuz-{image_id}"
    initrd = tmp_path / f"initrd-{image_id}"
    kernel.write_bytes(b"kernel " + image_id.encode() * 1000)
    initrd.write_bytes(b"initrd " + image_id.encode() * 5000)
    return persist.BootFiles(kernel, initrd, release, image_id)


def test_disk_has_an_msdos_label_grub_in_the_mbr_gap_and_boot_on_its_partition(
        tmp_path: Path) -> None:
    boot = _boot_files(tmp_path, "6.1.0-9-cloud-amd64", "img1")
    disk = tmp_path / "persist.img"
    persist.create_disk(disk, boot)
    data = disk.read_bytes()
    assert len(data) == persist.DISK_MB << 20
    # the MBR: GRUB's boot code, then one active Linux partition from 1 MiB to the end
    boot_img = (persist.GRUB_PC_DIR / "boot.img").read_bytes()
    assert data[:persist.MBR_CODE] == boot_img[:persist.MBR_CODE]
    assert data[510:512] == b"\x55\xaa" and persist.is_partitioned(disk)
    entry = data[446:462]
    assert entry[0] == 0x80 and entry[4] == 0x83
    assert struct.unpack("<II", entry[8:16]) == (2048, (persist.DISK_MB - 1) * 2048)
    assert data[462:510] == bytes(48)
    # core.img from sector 1 (it starts with diskboot.img): the one grub-mkimage makes with the
    # lab's modules and its prefix on the partition
    diskboot = (persist.GRUB_PC_DIR / "diskboot.img").read_bytes()
    assert data[512:512 + 16] == diskboot[:16]
    made = tmp_path / "core.img"
    subprocess.run(["grub-mkimage", "-O", "i386-pc", "-o", str(made), "-p",
                    persist.GRUB_PREFIX, *persist.GRUB_CORE_MODULES], check=True)
    core = made.read_bytes()
    assert data[512:512 + len(core)] == core
    # the partition: a clean ext4 that e2fsprogs reach at its offset, with /boot and defaults
    assert persist.check_disk(disk) == ""
    release = boot.release
    assert persist.read_file(disk, f"/boot/vmlinuz-{release}") == boot.kernel.read_bytes()
    assert persist.read_file(disk, f"/boot/initrd.img-{release}") == boot.initrd.read_bytes()
    assert persist.read_file(disk, "/boot/grub/i386-pc/normal.mod") == \
        (persist.GRUB_PC_DIR / "normal.mod").read_bytes()
    assert persist.read_file(disk, persist.BOOT_STAMP) == b"img1\n"
    cfg = persist.read_file(disk, "/boot/grub/grub.cfg").decode()
    linux = [line.split() for line in cfg.splitlines() if line.startswith("linux ")]
    assert linux == [["linux", f"/boot/vmlinuz-{release}", "root=/dev/vda1", "ro",
                      "quiet", *persist.BASE_CMDLINE]]
    assert f"initrd /boot/initrd.img-{release}" in cfg
    defaults = persist.grub_defaults(disk)
    assert persist.cmdline_from_grub(defaults) == ["quiet", *persist.BASE_CMDLINE]
    assert persist.cmdline_extras(disk) == ["quiet"]
    env = persist.parse_grub_defaults(defaults)
    assert env["GRUB_TIMEOUT"] == "0" and env["GRUB_TIMEOUT_STYLE"] == "hidden"
    assert env["GRUB_DISABLE_OS_PROBER"] == "true" and env["GRUB_DISABLE_RECOVERY"] == "true"
    assert persist.read_file(disk, "/etc/fleet/maintenance") is None


def test_a_new_image_refreshes_boot_and_a_new_release_gets_a_grub_cfg(tmp_path: Path) -> None:
    disk = tmp_path / "persist.img"
    persist.create_disk(disk, _boot_files(tmp_path, "6.1.0-9-cloud-amd64", "img1"))
    # the guest's update-grub would have written this: kept while the release stays
    cfg = tmp_path / "grub.cfg"
    cfg.write_text("# written by update-grub in the guest\n")
    subprocess.run(["debugfs", "-w", "-R", f"write {cfg} /boot/grub/grub.cfg.new",
                    persist.fs(disk)], check=True, capture_output=True)
    same = _boot_files(tmp_path, "6.1.0-9-cloud-amd64", "img1")
    assert persist.refresh_boot(disk, same) is False

    rebuilt = _boot_files(tmp_path, "6.1.0-9-cloud-amd64", "img2")
    assert persist.refresh_boot(disk, rebuilt) is True
    assert persist.read_file(disk, "/boot/initrd.img-6.1.0-9-cloud-amd64") == \
        rebuilt.initrd.read_bytes()
    assert persist.read_file(disk, persist.BOOT_STAMP) == b"img2\n"

    upgraded = _boot_files(tmp_path, "6.1.0-10-cloud-amd64", "img3")
    assert persist.refresh_boot(disk, upgraded) is True
    assert persist.read_file(disk, "/boot/vmlinuz-6.1.0-9-cloud-amd64") is None
    assert persist.read_file(disk, "/boot/initrd.img-6.1.0-9-cloud-amd64") is None
    assert persist.read_file(disk, "/boot/vmlinuz-6.1.0-10-cloud-amd64") == \
        upgraded.kernel.read_bytes()
    new_cfg = persist.read_file(disk, "/boot/grub/grub.cfg").decode()
    assert "linux /boot/vmlinuz-6.1.0-10-cloud-amd64 root=/dev/vda1 ro" in new_cfg
    assert persist.check_disk(disk) == ""


def test_a_disk_made_without_a_kernel_gets_one_and_its_grub_cfg(tmp_path: Path) -> None:
    disk = tmp_path / "persist.img"
    persist.create_disk(disk)
    assert persist.is_partitioned(disk) and persist.read_file(disk, "/boot/grub/grub.cfg") is None
    boot = _boot_files(tmp_path, "6.1.0-9-cloud-amd64", "img1")
    assert persist.refresh_boot(disk, boot) is True
    assert persist.read_file(disk, "/boot/vmlinuz-6.1.0-9-cloud-amd64") == boot.kernel.read_bytes()
    assert b"linux /boot/vmlinuz-6.1.0-9-cloud-amd64" in persist.read_file(disk,
                                                                          "/boot/grub/grub.cfg")


def test_a_disk_without_a_partition_table_is_made_again(tmp_path: Path) -> None:
    disk = tmp_path / "persist.img"
    subprocess.run(["mkfs.ext4", "-q", "-F", str(disk), "16M"], check=True, capture_output=True)
    said = []
    persist.ensure_disk(disk, _boot_files(tmp_path, "6.1.0-9-cloud-amd64", "img1"), said.append)
    assert persist.is_partitioned(disk) and persist.check_disk(disk) == ""
    assert len(said) == 1 and "no partition table" in said[0]
    persist.ensure_disk(disk, _boot_files(tmp_path, "6.1.0-9-cloud-amd64", "img1"), said.append)
    assert len(said) == 1  # a disk in the lab's layout stays as it is


@pytest.fixture(scope="module")
def grub_vm(tmp_path_factory: pytest.TempPathFactory):
    backend = VmBackend(tmp_path_factory.mktemp("vmgrub"), progress=print)
    try:
        backend.power_on(boot_config("vm-grub", "home", "disabled"))
        backend.wait_up(["vm-grub"], timeout=400)
        yield backend
    finally:
        backend.close()


def _power_cycle(lab: VmBackend, host: str) -> None:
    lab.power_off(host)
    lab.power_on(boot_config(host, "home", "disabled"))
    lab.wait_up([host], timeout=400)


def _cmdline(lab: VmBackend, host: str) -> list:
    return lab.ssh(host, "cat /proc/cmdline").stdout.split()


@pytest.mark.vm
@pytest.mark.timeout(1200)
def test_what_update_grub_writes_is_what_boots(grub_vm: VmBackend) -> None:
    lab, host = grub_vm, "vm-grub"
    words = _cmdline(lab, host)
    # GRUB booted the disk's kernel with the disk's defaults; the BIOS settings come as
    # firmware data, not on the command line
    assert words[0].startswith("BOOT_IMAGE=") and "root=/dev/vda1" in words
    assert set(persist.BASE_CMDLINE) <= set(words)
    assert not [w for w in words if w.startswith("fleet.") or w == MARKER]
    firmware = lab.ssh(host, f"cat /sys/firmware/qemu_fw_cfg/by_name/{FW_CFG_NAME}/raw").stdout
    assert firmware.split()[:2] == ["fleet.host=vm-grub", "fleet.snoop=home"]
    assert lab.ssh(host, "grub-probe --target=device /boot").stdout.strip() == "/dev/vda1"

    lab.ssh(host, "cp /boot/grub/grub.cfg /boot/grub/grub.cfg.first && "
                  f"sed -i 's/^GRUB_CMDLINE_LINUX=.*/GRUB_CMDLINE_LINUX=\"{MARKER}\"/' "
                  "/etc/default/grub && update-grub", timeout=180)
    cfg = lab.ssh(host, "cat /boot/grub/grub.cfg").stdout
    linux = [line.split() for line in cfg.splitlines() if line.strip().startswith("linux")]
    assert linux and all(MARKER in line and "cryptomgr.notests" in line for line in linux)
    assert "recovery mode" not in cfg
    _power_cycle(lab, host)
    assert MARKER in _cmdline(lab, host)
    assert set(persist.BASE_CMDLINE) <= set(_cmdline(lab, host))

    # the defaults still ask for the word, but the grub.cfg GRUB reads is put back: it does not
    # boot with the word (the lab reads no command line from /etc/default/grub)
    lab.ssh(host, "cp /boot/grub/grub.cfg.first /boot/grub/grub.cfg")
    _power_cycle(lab, host)
    assert MARKER not in _cmdline(lab, host)
    assert MARKER in lab.ssh(host, "cat /etc/default/grub").stdout


# The pack's host side on a VM lab (its playbooks and fleet_host.py over Ansible and SSH, the
# lab's Redfish BMC resetting the guest): what a rollout runs on a host, step by step.
WORD_A = "skew_tick=1"  # rollout A's profile adds it
WORD_C = "nosoftlockup"  # rollout C's, whose boot configuration is reverted behind its back
SYSCTL_B = {"sysctl": {"net.core.rmem_max": 8388608}}  # rollout B's, rolled back


@pytest.fixture(scope="module")
def pack_vm(tmp_path_factory: pytest.TempPathFactory):
    from hostside_support import vm_lab_up

    yield from vm_lab_up(str(tmp_path_factory.mktemp("vmgrubpack")), 1)


def _side(state: str, inventory: str, rollout_id: str):
    from hostside_support import lab_host_side

    side = lab_host_side(state, inventory)
    side.rollout_id = rollout_id
    return side


def _bmc_reboot(state: str, inventory: str, manifest: dict, interleave: str) -> None:
    """A BIOS change through the lab's Redfish BMC: staged, then the reset that applies it (the
    guest powers off and boots again through GRUB); returns once the pack's health check
    answers from the new boot, as a rollout waits for it."""
    import time

    import yaml

    from fleet_lab import lab
    from fleet_rollout.redfish.client import BmcEndpoint
    from fleet_rollout.redfish.operations import Timeouts, apply_bios

    config = yaml.safe_load(open(lab.paths(state)["pack_config"]))
    host = manifest["hosts"][0]
    endpoint = BmcEndpoint(host["name"], host["bmc_url"], "admin",
                           config["credentials"]["lab"]["password"],
                           ca_bundle=config["ca_bundle"])
    side = _side(state, inventory, "")
    boot_id = _host_ok(side.health([host["name"]]), host["name"])["boot_id"]
    apply_bios(endpoint, {"node_interleaving": interleave},
               Timeouts(graceful=60, force=60, boot=400, poll=1))
    deadline = time.monotonic() + 400
    while True:
        health = side.health([host["name"]])[host["name"]]
        if health.ok and health.result["boot_id"] != boot_id:
            return
        assert time.monotonic() < deadline, f"{host['name']} did not come back: {health}"
        time.sleep(2)


def _guest(state: str, host: str, command: str) -> str:
    """A command's output in the lab's guest, over SSH with the lab key (a backend object of
    this process's own: it starts no VM, the lab daemon runs them)."""
    return VmBackend(Path(state), accel="tcg").ssh(host, command, timeout=120).stdout


def _host_ok(result: dict, host: str):
    entry = result[host]
    assert entry.ok, entry
    return entry.result


@pytest.mark.vm
@pytest.mark.timeout(1800)
def test_pack_cmdline_changes_boot_through_grub_verify_and_restore(pack_vm) -> None:
    state, inventory, manifest = pack_vm
    host = manifest["hosts"][0]["name"]
    settings_a = {"cmdline": {"add": [WORD_A]}}
    # rollout A: the word goes into /etc/default/grub and update-grub runs; the BMC's reset
    # boots it; the verify step finds it on /proc/cmdline
    side_a = _side(state, inventory, "rollout-a")
    _host_ok(side_a.kernel([host], "snapshot", settings_a), host)
    _host_ok(side_a.kernel([host], "apply", settings_a), host)
    _bmc_reboot(state, inventory, manifest, "enabled")
    checked = _host_ok(side_a.kernel([host], "check", settings_a), host)
    assert checked["in_effect"] is True and checked["missing"] == [], checked
    assert WORD_A in _guest(state, host, "cat /proc/cmdline").split()

    # rollout B changes a sysctl and is rolled back: A's word stays in the defaults and boots
    side_b = _side(state, inventory, "rollout-b")
    _host_ok(side_b.kernel([host], "snapshot", SYSCTL_B), host)
    _host_ok(side_b.kernel([host], "apply", SYSCTL_B), host)
    _bmc_reboot(state, inventory, manifest, "disabled")
    restored = _host_ok(side_b.kernel([host], "restore"), host)
    assert "sysctl net.core.rmem_max=212992" in restored["changed"], restored
    assert WORD_A in _guest(state, host, "cat /proc/cmdline").split()
    assert WORD_A in _guest(state, host, ". /etc/default/grub; echo $GRUB_CMDLINE_LINUX").split()
    _bmc_reboot(state, inventory, manifest, "enabled")
    assert WORD_A in _guest(state, host, "cat /proc/cmdline").split()

    # rollout C: update-grub writes its word, then the boot configuration is put back behind
    # the pack's back before the reset: the word does not boot, verify finds it missing, and
    # the restore takes it out of the defaults again (A's word stays)
    settings_c = {"cmdline": {"add": [WORD_C]}}
    side_c = _side(state, inventory, "rollout-c")
    _guest(state, host, "cp /boot/grub/grub.cfg /boot/grub/grub.cfg.before-c")
    _host_ok(side_c.kernel([host], "snapshot", settings_c), host)
    _host_ok(side_c.kernel([host], "apply", settings_c), host)
    assert WORD_C in _guest(state, host, "cat /boot/grub/grub.cfg")
    _guest(state, host, "cp /boot/grub/grub.cfg.before-c /boot/grub/grub.cfg")
    _bmc_reboot(state, inventory, manifest, "disabled")
    checked = _host_ok(side_c.kernel([host], "check", settings_c), host)
    assert checked["in_effect"] is False, checked
    assert any(WORD_C in line for line in checked["missing"]), checked
    restored = _host_ok(side_c.kernel([host], "restore"), host)
    assert any(WORD_C in line for line in restored["changed"]), restored
    defaults = _guest(state, host, ". /etc/default/grub; echo $GRUB_CMDLINE_LINUX").split()
    assert WORD_C not in defaults and WORD_A in defaults
    cfg = _guest(state, host, "cat /boot/grub/grub.cfg")
    assert WORD_C not in cfg and WORD_A in cfg
