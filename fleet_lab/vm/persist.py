"""The per-VM persistent disk: a small raw ext4 image, /persist in the guest.

The guest bind-mounts /persist/etc/{sysctl.d,default,fleet} over /etc/... (and /persist/var/tmp
over /var/tmp: counter windows sampled before a reboot), so kernel settings and
the drain flag written before a reboot are in effect after it. /etc/default/grub is the lab's
stand-in for GRUB: the backend reads GRUB_CMDLINE_LINUX(_DEFAULT) from the disk (host side, with
debugfs, while the VM is off) and passes them to the kernel at the next power-on.

The guest mounts the (journaled) ext4 `sync,dirsync`: every write is committed to the disk image
when the guest's write() returns, so a hard power-off loses nothing already written. Before it
reads the disk the host replays the journal with `e2fsck -p` (falling back to `-y`).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

from fleet_rollout.errors import ConfigError, HostError

DISK_MB = 32
DEFAULT_GRUB = """\
# fleet-lab: the lab's stand-in for GRUB. The VM backend passes GRUB_CMDLINE_LINUX and
# GRUB_CMDLINE_LINUX_DEFAULT (and those set in /etc/default/grub.d/*.cfg) to the kernel at the
# next power-on; update-grub is a no-op here.
GRUB_DEFAULT=0
GRUB_TIMEOUT=5
GRUB_DISTRIBUTOR=Debian
GRUB_CMDLINE_LINUX_DEFAULT="quiet"
GRUB_CMDLINE_LINUX=""
"""
CMDLINE_VARS = ("GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT")
# The VM's own SSH host key (the guest's /init installs it for sshd): /persist/etc/ssh-host/
HOST_KEY_DIR = "/etc/ssh-host"
HOST_KEY_NAME = "ssh_host_ed25519_key"


def _tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if path is None:
        raise ConfigError(f"the VM lab needs {name} (Debian package e2fsprogs)")
    return path


def create_disk(path: Path, size_mb: int = DISK_MB) -> None:
    """A fresh persistent disk with the lab's default /etc/default/grub and empty /etc/fleet."""
    with tempfile.TemporaryDirectory(prefix="fleet-persist-") as seed_dir:
        seed = Path(seed_dir)
        (seed / "etc/sysctl.d").mkdir(parents=True)
        (seed / "etc/default").mkdir(parents=True)
        (seed / "etc/fleet").mkdir(parents=True)
        (seed / "etc/default/grub").write_text(DEFAULT_GRUB)
        tmp = path.with_name(path.name + ".tmp")
        result = subprocess.run(
            [_tool("mkfs.ext4"), "-q", "-F", "-L", "fleet-persist",
             "-E", "root_owner=0:0", "-d", str(seed), str(tmp), f"{size_mb}M"],
            capture_output=True, text=True)
        if result.returncode != 0:
            raise HostError(f"creating the persistent disk {path} failed: "
                            f"{result.stderr.strip()[-400:]}")
        tmp.rename(path)


def check_disk(path: Path) -> str:
    """Replay the journal and repair what a hard power-off may leave (the VM must be off).

    e2fsck -p first; if it cannot fix everything, e2fsck -y (what an admin would run at the
    console). Returns e2fsck's report when it had to repair anything, else "".
    """
    report = ""
    for mode in ("-p", "-y"):
        result = subprocess.run([_tool("e2fsck"), mode, str(path)], capture_output=True,
                                text=True)
        if result.returncode < 4:
            if result.returncode & 1:
                report += (result.stdout + result.stderr).strip()
            return report
        report += (result.stdout + result.stderr).strip() + "\n"
    raise HostError(f"persistent disk {path} has errors e2fsck cannot fix: {report[-400:]}")


def read_file(disk: Path, guest_path: str) -> Optional[bytes]:
    """A file's bytes from the disk (path as the guest sees it under /persist), or None."""
    with tempfile.TemporaryDirectory(prefix="fleet-persist-") as out_dir:
        out = Path(out_dir) / "file"
        subprocess.run([_tool("debugfs"), "-R", f"dump {guest_path} {out}", str(disk)],
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
    with tempfile.NamedTemporaryFile("w", prefix="fleet-persist-", suffix=".cmds") as cmds:
        cmds.write("\n".join(lines) + "\n")
        cmds.flush()
        subprocess.run([_tool("debugfs"), "-w", "-f", cmds.name, str(disk)],
                       capture_output=True, text=True)
    if read_file(disk, f"{HOST_KEY_DIR}/{HOST_KEY_NAME}") != wanted[HOST_KEY_NAME]:
        raise HostError(f"could not write the SSH host key onto the persistent disk {disk}")
    return True


def _read_tree(disk: Path, guest_dir: str) -> Dict[str, bytes]:
    """Regular files under a directory of the disk: {relative path: bytes}."""
    with tempfile.TemporaryDirectory(prefix="fleet-persist-") as out_dir:
        subprocess.run([_tool("debugfs"), "-R", f"rdump {guest_dir} {out_dir}", str(disk)],
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


def cmdline_extras(disk: Path) -> List[str]:
    """The kernel command-line words the persistent disk asks for (VM off, disk checked)."""
    files = _read_tree(disk, "/etc/default")
    texts = []
    if "grub" in files:
        texts.append(files["grub"].decode(errors="replace"))
    for name in sorted(files):
        if name.startswith("grub.d/") and name.endswith(".cfg"):
            texts.append(files[name].decode(errors="replace"))
    return cmdline_from_grub(texts)
