"""The per-VM disk: a partitioned raw disk that GRUB boots, /persist in the guest.

Layout (msdos label, as a Debian installer leaves a BIOS server): GRUB's boot.img in the MBR,
its core.img in the gap before the first partition (sector 1 on), and one ext4 partition from
1 MiB on. The partition holds /boot (the image's vmlinuz-RELEASE and initrd.img-RELEASE, GRUB's
i386-pc modules, grub/grub.cfg) and the guest's persisted state. The guest's /init mounts it on
/persist, bind-mounts /persist/boot over /boot and /persist/etc/{sysctl.d,default,fleet} over
/etc/... (and /persist/var/tmp over /var/tmp: counter windows sampled before a reboot), so
update-grub writes the grub.cfg GRUB reads at the next boot, and kernel settings and the drain
flag written before a reboot are in effect after it. The lab writes a first grub.cfg when it
makes the disk, as an installer does; the guest's first update-grub replaces it.

The guest mounts the (journaled) ext4 `sync,dirsync`: every write is committed to the disk image
when the guest's write() returns, so a hard power-off loses nothing already written. Before it
reads the disk the host replays the journal with `e2fsck -p` (falling back to `-y`). The host's
e2fsprogs reach the partition as `DISK?offset=BYTES`.
"""
from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

from fleet_rollout.errors import ConfigError, HostError

DISK_MB = 192  # /boot (kernel, a ~60 MB initrd, GRUB's modules; room for one refresh) + state
SECTOR = 512
PART_START = 2048  # sectors: the first partition at 1 MiB, GRUB's core.img in the gap before it
PART_OFFSET = PART_START * SECTOR
FS_BLOCK = 4096  # mkfs.ext4 picks 1 KiB for a disk this small: fewer, larger reads for GRUB
MBR_CODE = 440  # boot code bytes of the MBR; the disk signature and partition table follow
GRUB_PC_DIR = Path("/usr/lib/grub/i386-pc")
# GRUB reads the VM's disk through its own ahci driver, on the disk's AHCI port
# (qemu.py): through the BIOS (int 13h, biosdisk) GRUB took 5-8 s of a TCG guest's boot to load
# the kernel and initrd, with ahci under 2 s.
GRUB_PREFIX = "(ahci0,msdos1)/boot/grub"
# In core.img: the AHCI driver, the msdos label and ext4; the rest loads from GRUB_PREFIX.
GRUB_CORE_MODULES = ["ahci", "part_msdos", "ext2"]
ROOT_DEVICE = "/dev/vda1"  # the partition as the guest's kernel names it (virtio-blk)
BOOT_STAMP = "/boot/fleet-lab-image"  # image_id of the kernel and initrd on the disk
# Kernel command line words every lab guest boots with (in GRUB_CMDLINE_LINUX_DEFAULT, after
# Debian's "quiet": only errors on the console):
#   console=ttyS0     the kernel's messages on the serial console (the VM's console.log, where
#                     the backend sees the guest's /init start sshd)
#   panic=-1          a guest that panics reboots at once (no -no-reboot: a rare early-boot reset
#                     under TCG costs seconds, not the host), with the same settings, as a server
#   no_timer_check    under TCG on a loaded host the kernel's IO-APIC timer check can fail and
#                     panic ("IO-APIC + timer doesn't work!"), seen with six guests on two cores
#   cryptomgr.notests the kernel's boot-time crypto self-tests are skipped: in a CI run with a
#                     dozen TCG guests on two cores one guest spun in them for over 300 s ("soft
#                     lockup ... [cryptomgr_test]"); a lab guest needs no proof of its ciphers
BASE_CMDLINE = ["console=ttyS0", "panic=-1", "no_timer_check", "cryptomgr.notests"]
DEFAULT_GRUB = f"""\
# fleet-lab: GRUB boots this server from its disk; run update-grub after a change here.
GRUB_DEFAULT=0
# no menu and no wait: the lab's guests boot unattended
GRUB_TIMEOUT=0
GRUB_TIMEOUT_STYLE=hidden
GRUB_DISTRIBUTOR=Debian
# console=ttyS0: kernel messages on the VM's console.log; panic=-1: a guest that panics reboots;
# no_timer_check: the IO-APIC timer check can fail under TCG on a loaded host;
# cryptomgr.notests: no boot-time crypto self-tests (one spun for minutes under TCG)
GRUB_CMDLINE_LINUX_DEFAULT="quiet {' '.join(BASE_CMDLINE)}"
GRUB_CMDLINE_LINUX=""
GRUB_TERMINAL=serial
GRUB_SERIAL_COMMAND="serial --unit=0 --speed=115200"
GRUB_DISABLE_RECOVERY=true
GRUB_DISABLE_OS_PROBER=true
GRUB_DISABLE_LINUX_UUID=true
"""
CMDLINE_VARS = ("GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT")
# The VM's own SSH host key (the guest's /init installs it for sshd): /persist/etc/ssh-host/
HOST_KEY_DIR = "/etc/ssh-host"
HOST_KEY_NAME = "ssh_host_ed25519_key"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BootFiles:
    """What the disk's /boot carries from the lab's guest image."""

    kernel: Path
    initrd: Path
    release: str
    image_id: str


def _tool(name: str, package: str = "e2fsprogs") -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if path is None:
        raise ConfigError(f"the VM lab needs {name} (Debian package {package})")
    return path


def fs(disk: Path) -> str:
    """The disk's ext4 partition as e2fsprogs open it."""
    return f"{disk}?offset={PART_OFFSET}"


def partition_entry(start: int, sectors: int) -> bytes:
    """An msdos partition table entry: active, Linux (0x83), LBA start and size (CHS unused)."""
    return bytes([0x80, 0xFE, 0xFF, 0xFF, 0x83, 0xFE, 0xFF, 0xFF]) + struct.pack(
        "<II", start, sectors)


def is_partitioned(disk: Path) -> bool:
    """True if the disk has the lab's msdos label: one Linux partition at PART_START."""
    with open(disk, "rb") as handle:
        mbr = handle.read(SECTOR)
    if len(mbr) < SECTOR or mbr[510:512] != b"\x55\xaa":
        return False
    entry = mbr[446:462]
    return entry[4] == 0x83 and struct.unpack("<I", entry[8:12])[0] == PART_START


def grub_cfg(release: str, defaults: List[str]) -> str:
    """The first grub.cfg, as an installer writes it: the defaults' command line, no menu."""
    words = " ".join(cmdline_from_grub(defaults))
    return (f"# fleet-lab: written when the disk was made; update-grub replaces it\n"
            f"serial --unit=0 --speed=115200\nterminal_input serial\nterminal_output serial\n"
            f"set timeout=0\ninsmod part_msdos\ninsmod ext2\nset root='ahci0,msdos1'\n"
            f"linux /boot/vmlinuz-{release} root={ROOT_DEVICE} ro {words}\n"
            f"initrd /boot/initrd.img-{release}\nboot\n")


def _place(source: Path, target: Path) -> None:
    """target as a hard link to source where the filesystem allows, else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _seed(seed: Path, boot: Optional[BootFiles]) -> None:
    """The partition's first content: state directories, the GRUB defaults, /boot (GRUB's
    modules; the kernel, initrd and grub.cfg when `boot` is given)."""
    for rel in ("etc/sysctl.d", "etc/default", "etc/fleet", "boot/grub/i386-pc"):
        (seed / rel).mkdir(parents=True)
    (seed / "etc/default/grub").write_text(DEFAULT_GRUB)
    for module in sorted(GRUB_PC_DIR.iterdir()):
        if module.suffix in (".mod", ".lst"):
            shutil.copyfile(module, seed / "boot/grub/i386-pc" / module.name)
    if boot is None:
        return
    _place(boot.kernel, seed / f"boot/vmlinuz-{boot.release}")
    _place(boot.initrd, seed / f"boot/initrd.img-{boot.release}")
    (seed / "boot/grub/grub.cfg").write_text(grub_cfg(boot.release, [DEFAULT_GRUB]))
    (seed / BOOT_STAMP.lstrip("/")).write_text(boot.image_id + "\n")


def install_grub(disk: Path) -> None:
    """GRUB for BIOS: core.img (GRUB_CORE_MODULES, prefix on the partition) from sector 1, the
    first MBR_CODE bytes of boot.img as the MBR's code (the partition table stays). boot.img
    loads the sector it was built to load (1) and core.img's first sector the rest after it."""
    if not (GRUB_PC_DIR / "boot.img").exists():
        raise ConfigError(f"the VM lab needs {GRUB_PC_DIR}/boot.img (Debian package grub-pc-bin)")
    with tempfile.TemporaryDirectory(prefix="fleet-grub-") as tmp:
        core = Path(tmp) / "core.img"
        result = subprocess.run(
            [_tool("grub-mkimage", "grub-pc-bin"), "-O", "i386-pc", "-d", str(GRUB_PC_DIR),
             "-o", str(core), "-p", GRUB_PREFIX, *GRUB_CORE_MODULES],
            capture_output=True, text=True)
        if result.returncode != 0:
            raise HostError(f"grub-mkimage failed: {result.stderr.strip()[-400:]}")
        data = core.read_bytes()
    if SECTOR + len(data) > PART_OFFSET:
        raise HostError(f"GRUB's core.img ({len(data)} bytes) does not fit before the partition")
    boot_code = (GRUB_PC_DIR / "boot.img").read_bytes()[:MBR_CODE]
    with open(disk, "r+b") as handle:
        handle.write(boot_code)
        handle.seek(SECTOR)
        handle.write(data)


def create_disk(path: Path, boot: Optional[BootFiles] = None, size_mb: int = DISK_MB) -> None:
    """A fresh disk: msdos label, GRUB, an ext4 partition with /boot and the lab's defaults.
    Without `boot` it has no kernel yet (refresh_boot puts one there, with its grub.cfg)."""
    tmp = path.with_name(path.name + ".tmp")
    with tempfile.TemporaryDirectory(prefix="fleet-persist-", dir=path.parent) as work:
        seed = Path(work) / "seed"
        _seed(seed, boot)
        part = Path(work) / "part.img"
        part_mb = size_mb - PART_OFFSET // (1 << 20)
        result = subprocess.run(
            [_tool("mkfs.ext4"), "-q", "-F", "-L", "fleet-persist", "-b", str(FS_BLOCK),
             "-E", "root_owner=0:0", "-d", str(seed), str(part), f"{part_mb}M"],
            capture_output=True, text=True)
        if result.returncode != 0:
            raise HostError(f"creating the persistent disk {path} failed: "
                            f"{result.stderr.strip()[-400:]}")
        with open(tmp, "wb") as handle:
            handle.truncate(size_mb << 20)
            handle.seek(446)
            handle.write(partition_entry(PART_START, part_mb * (1 << 20) // SECTOR))
            handle.seek(510)
            handle.write(b"\x55\xaa")
        _write_back(part, tmp, PART_OFFSET)  # into holes: all-zero blocks stay holes
    install_grub(tmp)
    tmp.rename(path)


def ensure_disk(path: Path, boot: BootFiles, progress: Optional[Progress] = None) -> None:
    """The VM's disk exists in the lab's layout (VM off). A disk without the partition table
    (a raw ext4 of an older lab) is made again: its settings are not carried over."""
    if path.exists() and not is_partitioned(path):
        if progress:
            progress(f"fleet-lab: {path} has no partition table for GRUB; making it again "
                     "(its persisted settings start from the lab's defaults)")
        path.unlink()
    if not path.exists():
        create_disk(path, boot)


def _debugfs_write(disk: Path, lines: List[str]) -> None:
    with tempfile.NamedTemporaryFile("w", prefix="fleet-persist-", suffix=".cmds") as cmds:
        cmds.write("\n".join(lines) + "\n")
        cmds.flush()
        subprocess.run([_tool("debugfs"), "-w", "-f", cmds.name, fs(disk)],
                       capture_output=True, text=True)


def _boot_names(disk: Path) -> List[str]:
    """File names directly in the disk's /boot."""
    out = subprocess.run([_tool("debugfs"), "-R", "ls -p /boot", fs(disk)],
                         capture_output=True, text=True).stdout
    names = []
    for line in out.splitlines():
        fields = line.strip().strip("/").split("/")
        if len(fields) >= 5 and fields[4] not in (".", ".."):  # inode/mode/uid/gid/name/size
            names.append(fields[4])
    return names


def refresh_boot(disk: Path, boot: BootFiles) -> bool:
    """Put the image's kernel and initrd in the disk's /boot when the lab's image changed (VM
    off, disk checked), as a kernel package upgrade does; a new kernel release also gets a
    grub.cfg for it from the disk's GRUB defaults (what the package's update-grub would
    write). True if anything was written."""
    stamp = read_file(disk, BOOT_STAMP)
    if stamp is not None and stamp.decode().strip() == boot.image_id:
        return False
    old = [n for n in _boot_names(disk) if n.startswith(("vmlinuz-", "initrd.img-"))]
    lines = [f"rm /boot/{name}" for name in old]
    kernel, initrd = f"/boot/vmlinuz-{boot.release}", f"/boot/initrd.img-{boot.release}"
    for source, target in ((boot.kernel, kernel), (boot.initrd, initrd)):
        lines += [f"write {source} {target}", f"sif {target} mode 0100644"]
    with tempfile.TemporaryDirectory(prefix="fleet-persist-") as tmp:
        stamp_file = Path(tmp) / "stamp"
        stamp_file.write_text(boot.image_id + "\n")
        lines += [f"rm {BOOT_STAMP}", f"write {stamp_file} {BOOT_STAMP}"]
        if f"vmlinuz-{boot.release}" not in old:
            cfg = Path(tmp) / "grub.cfg"
            cfg.write_text(grub_cfg(boot.release, grub_defaults(disk)))
            lines += ["rm /boot/grub/grub.cfg", f"write {cfg} /boot/grub/grub.cfg"]
        _debugfs_write(disk, lines)
    if read_file(disk, kernel) != boot.kernel.read_bytes():
        raise HostError(f"could not write the kernel onto the persistent disk {disk}")
    return True


def _e2fsck(target: str) -> tuple:
    """e2fsck -p, then -y if -p cannot fix everything: (ok, report)."""
    report = ""
    for mode in ("-p", "-y"):
        result = subprocess.run([_tool("e2fsck"), mode, target], capture_output=True,
                                text=True)
        if result.returncode < 4:
            if result.returncode & 1:
                report += (result.stdout + result.stderr).strip()
            return True, report
        report += (result.stdout + result.stderr).strip() + "\n"
    return False, report


def _write_back(source: Path, disk: Path, offset: int, block: int = 1 << 20) -> None:
    """Write the blocks of source that differ from the disk's at offset (a sparse disk's
    holes read as zeros: all-zero blocks of source are not written there)."""
    with open(source, "rb") as src, open(disk, "r+b") as dst:
        position = offset
        while True:
            data = src.read(block)
            if not data:
                break
            dst.seek(position)
            if dst.read(len(data)) != data:
                dst.seek(position)
                dst.write(data)
            position += len(data)


def check_disk(path: Path) -> str:
    """Replay the journal and repair what a hard power-off may leave (the VM must be off).

    e2fsck -p first; if it cannot fix everything, e2fsck -y (what an admin would run at the
    console). Returns e2fsck's report when it had to repair anything, else "".
    e2fsck reopens the filesystem after a journal replay without the `?offset=` it was given
    (e2fsprogs 1.47: "Bad magic number ... while trying to re-open"), so when the partition
    fails in place it is checked as a file of its own and the blocks e2fsck changed are
    written back.
    """
    ok, report = _e2fsck(fs(path))
    if ok:
        return report
    with tempfile.TemporaryDirectory(prefix="fleet-persist-", dir=path.parent) as work:
        part = Path(work) / "part.img"
        with open(path, "rb") as src, open(part, "wb") as dst:
            src.seek(PART_OFFSET)
            shutil.copyfileobj(src, dst, 1 << 20)
        ok, report = _e2fsck(str(part))
        if ok:
            _write_back(part, path, PART_OFFSET)
            return report
    raise HostError(f"persistent disk {path} has errors e2fsck cannot fix: {report[-400:]}")


def read_file(disk: Path, guest_path: str) -> Optional[bytes]:
    """A file's bytes from the disk (path as the guest sees it under /persist), or None."""
    with tempfile.TemporaryDirectory(prefix="fleet-persist-") as out_dir:
        out = Path(out_dir) / "file"
        subprocess.run([_tool("debugfs"), "-R", f"dump {guest_path} {out}", fs(disk)],
                       capture_output=True, text=True)
        return out.read_bytes() if out.exists() else None


def install_host_key(disk: Path, key: Path) -> bool:
    """Put the VM's SSH host key pair (key, key.pub) on its disk, mode 0600, owned by root
    (the VM must be off). True if it had to write; HostError if the key is not there after."""
    wanted = {HOST_KEY_NAME: key.read_bytes(), HOST_KEY_NAME + ".pub": key.with_name(
        key.name + ".pub").read_bytes()}
    if all(read_file(disk, f"{HOST_KEY_DIR}/{name}") == data for name, data in wanted.items()):
        return False
    lines = [f"mkdir {HOST_KEY_DIR}"]
    for name, mode in ((HOST_KEY_NAME, "0100600"), (HOST_KEY_NAME + ".pub", "0100644")):
        target = f"{HOST_KEY_DIR}/{name}"
        source = key if name == HOST_KEY_NAME else key.with_name(key.name + ".pub")
        lines += [f"rm {target}", f"write {source} {target}", f"sif {target} mode {mode}",
                  f"sif {target} uid 0", f"sif {target} gid 0"]
    _debugfs_write(disk, lines)
    if read_file(disk, f"{HOST_KEY_DIR}/{HOST_KEY_NAME}") != wanted[HOST_KEY_NAME]:
        raise HostError(f"could not write the SSH host key onto the persistent disk {disk}")
    return True


def _read_tree(disk: Path, guest_dir: str) -> Dict[str, bytes]:
    """Regular files under a directory of the disk: {relative path: bytes}."""
    with tempfile.TemporaryDirectory(prefix="fleet-persist-") as out_dir:
        subprocess.run([_tool("debugfs"), "-R", f"rdump {guest_dir} {out_dir}", fs(disk)],
                       capture_output=True, text=True)
        root = Path(out_dir) / Path(guest_dir).name
        files: Dict[str, bytes] = {}
        if root.is_dir():
            for path in sorted(root.rglob("*")):
                if path.is_file() and not path.is_symlink():
                    files[str(path.relative_to(root))] = path.read_bytes()
        return files


_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def _shell_value(raw: str, env: Dict[str, str]) -> str:
    """The value of a shell assignment's right-hand side: quotes, $VAR/${VAR} from env.

    Only what /etc/default/grub files use; nothing is executed (command substitution is kept
    as text).
    """
    out: List[str] = []
    i = 0
    quote = ""

    def expand(text: str) -> str:
        return _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), text)

    def dollar(at: int) -> int:
        """Append what the "$" at raw[at] stands for (a $VAR/${VAR} or itself); the next index."""
        match = _VAR.match(raw, at)
        if match:
            out.append(expand(match.group(0)))
            return match.end()
        out.append(raw[at])
        return at + 1

    while i < len(raw):
        char = raw[i]
        if quote == "'":
            if char == "'":
                quote = ""
            else:
                out.append(char)
        elif quote == '"':
            if char == '"':
                quote = ""
            elif char == "\\" and i + 1 < len(raw) and raw[i + 1] in '"\\$`':
                out.append(raw[i + 1])
                i += 1
            elif char == "$":
                i = dollar(i)
                continue
            else:
                out.append(char)
        else:
            if char in " \t" or (char == "#" and (not out)):
                break
            if char in "'\"":
                quote = char
            elif char == "$":
                i = dollar(i)
                continue
            elif char == "\\" and i + 1 < len(raw):
                out.append(raw[i + 1])
                i += 1
            else:
                out.append(char)
        i += 1
    return "".join(out)


def parse_grub_defaults(texts: List[str]) -> Dict[str, str]:
    """Variables assigned by /etc/default/grub then grub.d/*.cfg (in that order), as sh would."""
    env: Dict[str, str] = {}
    for text in texts:
        for line in text.splitlines():
            match = _ASSIGN.match(line)
            if match and not line.lstrip().startswith("#"):
                env[match.group(1)] = _shell_value(match.group(2), env)
    return env


def cmdline_from_grub(texts: List[str]) -> List[str]:
    """Kernel command-line words GRUB would add: GRUB_CMDLINE_LINUX, then ..._DEFAULT."""
    env = parse_grub_defaults(texts)
    words: List[str] = []
    for name in CMDLINE_VARS:
        words.extend(env.get(name, "").split())
    return words


def grub_defaults(disk: Path) -> List[str]:
    """The disk's /etc/default/grub then grub.d/*.cfg texts, in update-grub's order."""
    files = _read_tree(disk, "/etc/default")
    texts = []
    if "grub" in files:
        texts.append(files["grub"].decode(errors="replace"))
    for name in sorted(files):
        if name.startswith("grub.d/") and name.endswith(".cfg"):
            texts.append(files[name].decode(errors="replace"))
    return texts


def cmdline_extras(disk: Path) -> List[str]:
    """The words the disk's GRUB defaults add to the lab's own (BASE_CMDLINE): Debian's
    "quiet" and whatever an operator or a rollout put there (VM off, disk checked)."""
    return [w for w in cmdline_from_grub(grub_defaults(disk)) if w not in BASE_CMDLINE]
