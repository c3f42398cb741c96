"""The lab's guest image: a Debian bookworm tree packed into an initramfs, plus Debian's cloud
kernel and a lab SSH key pair, built once and cached.

Two stages, so that a change to the lab's own guest files does not redo the slow part:
  base    debootstrap (minbase + python3, openssh-server, ...), the kernel package's vmlinuz and
          the virtio modules, trimmed and packed into a cpio compressed with lz4 (else gzip);
          about a minute, needs root.
  overlay our init, the guest services and the sshd drop-in, the lab key's public half: a small
          second cpio appended to the base (the kernel unpacks concatenated archives in order).
Each stage is keyed by a hash of its recipe; a changed recipe builds a new one and prunes the old.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, List, Optional

from fleet_rollout.errors import ConfigError, HostError

# Bump when the base recipe changes in a way the lists below do not show.
BASE_RECIPE_VERSION = 2
# Bump when the overlay recipe (not the guest files: those are hashed) changes.
OVERLAY_RECIPE_VERSION = 1

SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# grub2-common + grub-pc-bin: Debian's update-grub, grub-mkconfig and grub-probe, so that what
# update-grub writes on the VM's disk is what GRUB boots (not grub-pc, whose postinst installs
# GRUB onto a disk; the lab installs it when it makes the disk).
PACKAGES = ["python3", "openssh-server", "iproute2", "ethtool", "procps", "numactl", "kmod",
            "grub2-common", "grub-pc-bin", "prometheus-node-exporter"]
KERNEL_PACKAGE = "linux-image-cloud-amd64"
# Module files (relative to lib/modules/RELEASE/kernel, globs allowed) copied into the tree.
MODULES = [
    "drivers/virtio/*.ko",
    "drivers/net/virtio_net.ko",
    "drivers/net/net_failover.ko",
    "net/core/failover.ko",
    "drivers/block/virtio_blk.ko",
    "drivers/firmware/qemu_fw_cfg.ko",
    "fs/overlayfs/overlay.ko",
    "drivers/char/hw_random/virtio-rng.ko",
    "net/sched/*.ko",
    "net/ipv4/tcp_*.ko",
]
# Trimmed from the tree: nothing in the lab reads them, and every byte is unpacked at each boot.
TRIM = [
    "var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info",
    "usr/share/locale", "usr/share/lintian", "usr/share/bug", "tmp",
]
GUEST_DIR = Path(__file__).resolve().parent / "guest"
# Overlay: guest file -> (path in the image, mode)
GUEST_FILES = {
    "init": ("init", 0o755),
    "fleet-supervise.py": ("usr/local/sbin/fleet-supervise.py", 0o755),
    "fleet-health.py": ("usr/local/sbin/fleet-health.py", 0o755),
    "fleet-udprecv.py": ("usr/local/sbin/fleet-udprecv.py", 0o755),
    "sshd-fleet-lab.conf": ("etc/ssh/sshd_config.d/fleet-lab.conf", 0o644),
}
KEY_NAME = "lab_key"

Progress = Callable[[str], None]


def default_cache_dir() -> Path:
    env = os.environ.get("FLEET_ROLLOUT_LAB_CACHE")
    if env:
        return Path(env).expanduser()
    return Path("~/.cache/fleet-rollout/lab").expanduser()


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Image:
    """A built guest image: what QEMU boots, and the key that logs in as root."""

    kernel: Path
    initrd: Path
    key: Path  # private half; key.pub is in the image's /root/.ssh/authorized_keys
    kernel_release: str
    image_id: str
    built_seconds: Optional[float] = None  # set when this call built something


def _hash(*parts: object) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else json.dumps(part, sort_keys=True).encode()
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()[:16]


def compressor() -> str:
    """lz4 if installed (the guest kernel unpacks it in a third of gzip's time under TCG)."""
    return "lz4" if shutil.which("lz4") else "gzip"


COMPRESS = {"lz4": "lz4 -l -9 -q -c", "gzip": "gzip -6 -n -c"}


def base_key(mirror: str) -> str:
    del mirror  # any Debian mirror gives the same suite
    return _hash(BASE_RECIPE_VERSION, SUITE, PACKAGES, KERNEL_PACKAGE, MODULES, TRIM,
                 compressor())


def overlay_key(base: str, public_key: bytes) -> str:
    files = {name: (GUEST_DIR / name).read_bytes() for name in sorted(GUEST_FILES)}
    return _hash(OVERLAY_RECIPE_VERSION, base, GUEST_FILES,
                 *[files[name] for name in sorted(files)], public_key)


@contextmanager
def _locked(cache: Path) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "build.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(cmd: List[str], log: Path, progress: Progress, label: str,
         every: float = 5.0, **kwargs: object) -> None:
    """Run cmd, its output to log; print the elapsed time and latest line every few seconds."""
    start = time.monotonic()
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload]
        assert proc.stdout is not None
        last_print = start
        latest = ""
        for raw in proc.stdout:
            out.write(raw)
            line = raw.decode(errors="replace").strip()
            if line:
                latest = line
            now = time.monotonic()
            if now - last_print >= every:
                progress(f"  {label}: {now - start:4.0f} s  {latest[:90]}")
                last_print = now
        code = proc.wait()
    if code != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise HostError(f"{label} failed (exit {code}); last lines of {log}:\n" + "\n".join(tail))


def _need_tools(*tools: str) -> None:
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        raise ConfigError("building the lab image needs " + ", ".join(missing)
                          + " (Debian packages: see system-packages.txt)")


def _pack(tree: Path, out: Path, owner_root: bool = False) -> None:
    """tree -> compressed newc cpio at out (sorted names, so builds are repeatable)."""
    owner = "-R 0:0" if owner_root else ""
    script = (f"set -eo pipefail; cd {_q(tree)}; find . -mindepth 1 | LC_ALL=C sort | "
              f"cpio -o -H newc --quiet {owner} | {COMPRESS[compressor()]} > {_q(out)}")
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    if result.returncode != 0:
        raise HostError(f"packing {tree} into {out} failed: {result.stderr.strip()[-500:]}")


def _q(path: Path) -> str:
    return "'" + str(path).replace("'", "'\\''") + "'"


def _build_base(cache: Path, key: str, mirror: str, progress: Progress) -> Path:
    if os.geteuid() != 0:
        raise ConfigError("building the lab image needs root (debootstrap, chroot); "
                          "or point FLEET_ROLLOUT_LAB_CACHE at a cache built by root")
    _need_tools("debootstrap", "chroot", "cpio", compressor(), "dpkg-deb")
    work = Path(tempfile.mkdtemp(prefix="tmp-base-", dir=cache))
    log = work / "build.log"
    tree = work / "tree"
    started = time.monotonic()
    try:
        progress(f"[1/4] debootstrap {SUITE} (minbase + {', '.join(PACKAGES)}), ~45 s; "
                 f"log: {log}")
        _run(["debootstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES), SUITE,
              str(tree), mirror], log, progress, "debootstrap")

        progress(f"[2/4] kernel: {KERNEL_PACKAGE}")
        release, vmlinuz = _fetch_kernel(tree, work, log, progress)

        progress("[3/4] trimming the tree, configuring it for the lab")
        for rel in TRIM:
            target = tree / rel
            if target.is_dir():
                for child in target.iterdir():
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child)
                    else:
                        child.unlink()
        (tree / "tmp").chmod(0o1777)
        (tree / "etc/resolv.conf").write_text("")  # no DNS in the lab: fail fast, never wait
        (tree / "etc/fstab").write_text("# fleet-lab: RAM root; /persist is mounted by /init\n")

        progress(f"[4/4] packing the tree into a {compressor()}-compressed cpio")
        _pack(tree, work / "base.cpio")
        shutil.copy2(vmlinuz, work / "vmlinuz")
        manifest = {"key": key, "suite": SUITE, "packages": PACKAGES, "compressor": compressor(),
                    "kernel_release": release, "built": time.time(),
                    "seconds": round(time.monotonic() - started, 1)}
        (work / "manifest.json").write_text(json.dumps(manifest, indent=2))
        shutil.rmtree(tree)
        shutil.rmtree(work / "kernel", ignore_errors=True)
        return _publish(work, cache / f"base-{key}")
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _fetch_kernel(tree: Path, work: Path, log: Path, progress: Progress) -> tuple[str, Path]:
    """Download the cloud kernel package with the tree's apt, unpack it beside the tree, and
    copy the modules the lab needs into the tree (no initramfs-tools, no postinst)."""
    debs = tree / "tmp/kernel-debs"
    debs.mkdir(parents=True, exist_ok=True)
    in_chroot = "/tmp/kernel-debs"
    _run(["chroot", str(tree), "sh", "-c", f"cd {in_chroot} && apt-get download {KERNEL_PACKAGE}"],
         log, progress, "apt-get download")
    meta = next(debs.glob(f"{KERNEL_PACKAGE}_*.deb"))
    depends = subprocess.run(["dpkg-deb", "-f", str(meta), "Depends"], capture_output=True,
                             text=True, check=True).stdout
    image_pkg = next((d.strip().split()[0] for d in depends.split(",")
                      if d.strip().startswith("linux-image-")), None)
    if image_pkg is None:
        raise HostError(f"{meta.name}: no linux-image-* dependency in {depends!r}")
    _run(["chroot", str(tree), "sh", "-c", f"cd {in_chroot} && apt-get download {image_pkg}"],
         log, progress, "apt-get download")
    deb = next(debs.glob(f"{image_pkg}_*.deb"))
    kdir = work / "kernel"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(kdir)], check=True)
    releases = sorted(p.name for p in (kdir / "lib/modules").iterdir())
    if len(releases) != 1:
        raise HostError(f"{deb.name}: expected one kernel release, found {releases}")
    release = releases[0]
    vmlinuz = kdir / "boot" / f"vmlinuz-{release}"
    src = kdir / "lib/modules" / release
    dst = tree / "lib/modules" / release
    copied = 0
    for pattern in MODULES:
        for module in sorted(src.glob("kernel/" + pattern)):
            target = dst / module.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(module, target)
            copied += 1
    for name in ("modules.order", "modules.builtin", "modules.builtin.modinfo"):
        if (src / name).exists():
            shutil.copy2(src / name, dst / name)
    _run(["chroot", str(tree), "depmod", release], log, progress, "depmod")
    shutil.rmtree(debs)
    progress(f"  kernel {release}: vmlinuz + {copied} modules")
    return release, vmlinuz


def ensure_key(cache: Path) -> Path:
    """The lab SSH key pair (ed25519, no passphrase: a lab-only key), created once."""
    key = cache / KEY_NAME
    if key.exists() and key.with_suffix(".pub").exists():
        return key
    _need_tools("ssh-keygen")
    for stale in (key, key.with_suffix(".pub")):
        if stale.exists():
            stale.unlink()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fleet-lab",
                    "-f", str(key)], check=True, stdin=subprocess.DEVNULL)
    key.chmod(0o600)
    return key


def _build_overlay(cache: Path, base_dir: Path, key: Path, image_id: str) -> Path:
    work = Path(tempfile.mkdtemp(prefix="tmp-image-", dir=cache))
    try:
        stage = work / "overlay"
        for name, (rel, mode) in GUEST_FILES.items():
            target = stage / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(GUEST_DIR / name, target)
            target.chmod(mode)
        ssh_dir = stage / "root/.ssh"
        ssh_dir.mkdir(parents=True)
        (ssh_dir / "authorized_keys").write_bytes(key.with_suffix(".pub").read_bytes())
        (ssh_dir / "authorized_keys").chmod(0o600)
        ssh_dir.chmod(0o700)
        (stage / "root").chmod(0o700)
        (stage / "etc/fleet-lab-image").write_text(image_id + "\n")
        for directory in [p for p in stage.rglob("*") if p.is_dir()] + [stage]:
            if directory not in (ssh_dir, stage / "root"):
                directory.chmod(0o755)
        _pack(stage, work / "overlay.cpio", owner_root=True)
        with open(work / "initrd.img", "wb") as out:
            for part in (base_dir / "base.cpio", work / "overlay.cpio"):
                with open(part, "rb") as handle:
                    shutil.copyfileobj(handle, out)
        shutil.copy2(base_dir / "vmlinuz", work / "vmlinuz")
        base_manifest = json.loads((base_dir / "manifest.json").read_text())
        manifest = {"image_id": image_id, "base": base_manifest["key"],
                    "kernel_release": base_manifest["kernel_release"], "built": time.time()}
        (work / "manifest.json").write_text(json.dumps(manifest, indent=2))
        shutil.rmtree(stage)
        return _publish(work, cache / f"image-{image_id}")
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _publish(work: Path, final: Path) -> Path:
    """Move a finished build directory to its final name (replacing an older one there)."""
    if final.exists():
        shutil.rmtree(final)
    work.chmod(0o755)
    work.rename(final)
    return final


def _prune(cache: Path, keep: List[str]) -> None:
    for entry in cache.iterdir():
        if entry.is_dir() and entry.name.startswith(("base-", "image-", "tmp-base-", "tmp-image-")):
            if entry.name not in keep:
                shutil.rmtree(entry, ignore_errors=True)


def ensure_image(cache_dir: Optional[Path] = None, progress: Optional[Progress] = None,
                 force: bool = False, mirror: Optional[str] = None) -> Image:
    """The cached guest image, built first if missing or if its recipe changed."""
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    say = progress or _stderr
    mirror = mirror or os.environ.get("FLEET_ROLLOUT_LAB_MIRROR") or DEFAULT_MIRROR
    started = time.monotonic()
    built = False
    with _locked(cache):
        key = ensure_key(cache)
        bkey = base_key(mirror)
        base_dir = cache / f"base-{bkey}"
        if force or not (base_dir / "manifest.json").exists():
            say(f"fleet-lab: building the guest image base in {cache} (about a minute)")
            base_dir = _build_base(cache, bkey, mirror, say)
            built = True
        image_id = overlay_key(bkey, key.with_suffix(".pub").read_bytes())
        image_dir = cache / f"image-{image_id}"
        if built or not (image_dir / "manifest.json").exists():
            image_dir = _build_overlay(cache, base_dir, key, image_id)
            built = True
        _prune(cache, [base_dir.name, image_dir.name])
        manifest = json.loads((image_dir / "manifest.json").read_text())
    seconds = round(time.monotonic() - started, 1) if built else None
    if built:
        say(f"fleet-lab: guest image {image_id} ready ({seconds} s): {image_dir}")
    return Image(image_dir / "vmlinuz", image_dir / "initrd.img", key,
                 manifest["kernel_release"], image_id, seconds)
