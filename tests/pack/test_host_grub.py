"""The kernel command line in GRUB's defaults, as the host script changes it on fake sysroots:
read as sh reads it (either quoting, GRUB_CMDLINE_LINUX and _DEFAULT, grub.d/*.cfg), only
the profile's words changed, a file that cannot be read with certainty refused with nothing
written, the boot configuration written by the host's own tool (update-grub, or grubby on a
RHEL-style layout: a shell stand-in of grubby, since Debian ships none, editing a BLS entry),
and a restore that undoes only what its rollout changed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest
from hostside_support import HOST_SCRIPT

SOURCE = Path(HOST_SCRIPT).read_text()
RHEL_GRUB = ("GRUB_TIMEOUT=5\n"
             "GRUB_DISTRIBUTOR=\"$(sed 's, release .*$,,g' /etc/system-release)\"\n"
             "GRUB_DEFAULT=saved\n"
             "GRUB_CMDLINE_LINUX='crashkernel=auto resume=/dev/mapper/rhel-swap "
             "rd.lvm.lv=rhel/root rd.lvm.lv=rhel/swap rhgb quiet'\n"
             "GRUB_DISABLE_RECOVERY=\"true\"\n"
             "GRUB_ENABLE_BLSCFG=true\n")
BLS_OPTIONS = "root=/dev/mapper/rhel-root ro crashkernel=auto rd.lvm.lv=rhel/root rhgb quiet"
# A stand-in of grubby (--update-kernel=ALL --args/--remove-args on the BLS entries' options
# lines), as a RHEL host runs the real one: Debian has no grubby package to run here.
GRUBBY = r"""#!/bin/sh
# stand-in of grubby for the tests: edits $FLEET_SYSROOT/boot/loader/entries/*.conf
echo "$@" >> "$FLEET_SYSROOT/grubby.log"
add=""; del=""
for a in "$@"; do
  case "$a" in --args=*) add="${a#--args=}";; --remove-args=*) del="${a#--remove-args=}";; esac
done
for f in "$FLEET_SYSROOT"/boot/loader/entries/*.conf; do
  python3 - "$f" "$add" "$del" <<'PY'
import sys
path, add, remove = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
lines = open(path).read().splitlines()
for i, line in enumerate(lines):
    if line.startswith("options "):
        words = line.split()[1:]
        keys = {w.split("=")[0] for w in add}
        words = [w for w in words if w not in remove and w.split("=")[0] not in keys]
        lines[i] = "options " + " ".join(words + add)
open(path, "w").write("\n".join(lines) + "\n")
PY
done
"""


def _host(root: Path, command: str, settings: Any = None) -> Dict[str, Any]:
    args = [command, "--sysroot", str(root)]
    if settings is not None:
        args += ["--settings", json.dumps(settings)]
    out = subprocess.run([sys.executable, "-I", "-S", "-c", SOURCE, *args],
                         capture_output=True, text=True, timeout=60)
    doc = json.loads(out.stdout)
    assert (out.returncode == 0) == doc["ok"], out
    return doc


def _tool(root: Path, name: str, body: str) -> None:
    exe = root / "usr" / "sbin" / name
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(body)
    exe.chmod(0o755)


def _debian(root: Path, grub: str, drop_ins: Dict[str, str] = {}) -> Path:  # noqa: B006
    (root / "etc" / "default" / "grub.d").mkdir(parents=True)
    (root / "etc" / "default" / "grub").write_text(grub)
    for name, text in drop_ins.items():
        (root / "etc" / "default" / "grub.d" / name).write_text(text)
    _tool(root, "update-grub", '#!/bin/sh\necho run >> "$FLEET_SYSROOT/update-grub.log"\n')
    return root


def _words(root: Path) -> List[str]:
    """What update-grub reads: the files sourced by sh, as grub-mkconfig does."""
    script = ('. ./etc/default/grub; for f in ./etc/default/grub.d/*.cfg; do [ -e "$f" ] && '
              '. "$f"; done; echo $GRUB_CMDLINE_LINUX $GRUB_CMDLINE_LINUX_DEFAULT')
    out = subprocess.run(["sh", "-c", script], cwd=root, capture_output=True, text=True,
                         check=True, env={"PATH": "/usr/bin:/bin"})
    return out.stdout.split()


def _unquoted(text: str) -> List[str]:
    return sorted(text.replace("'", "").replace('"', "").split())


ADD = {"cmdline": {"add": ["numa_balancing=disable", "transparent_hugepage=never"],
                   "remove": ["quiet"]}}


@pytest.mark.parametrize("grub, drop_ins", [
    ("GRUB_CMDLINE_LINUX='rd.lvm.lv=vg/root crashkernel=auto'\n"
     'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\n', {}),
    ('GRUB_DEFAULT=0\nGRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`\n'
     'GRUB_CMDLINE_LINUX="rd.lvm.lv=vg/root transparent_hugepage=always"  # tuned\n'
     "GRUB_CMDLINE_LINUX_DEFAULT=quiet\n", {}),
    ('GRUB_CMDLINE_LINUX="rd.lvm.lv=vg/root"\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\n',
     {"50-cloud.cfg": 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX console=ttyS0,115200"\n',
      "60-site.cfg": "export GRUB_CMDLINE_LINUX_DEFAULT='splash quiet'\n"}),
])
def test_only_the_profiles_words_change_and_a_restore_puts_back_every_word(
        tmp_path: Path, grub: str, drop_ins: Dict[str, str]) -> None:
    root = _debian(tmp_path, grub, drop_ins)
    before = _words(root)
    texts = {p: p.read_text() for p in (root / "etc" / "default").rglob("*") if p.is_file()}
    assert _host(root, "kernel-snapshot", ADD)["ok"]
    applied = _host(root, "kernel-apply", ADD)
    after = _words(root)
    assert "numa_balancing=disable" in after and "transparent_hugepage=never" in after
    assert "quiet" not in after and "transparent_hugepage=always" not in after
    kept = [w for w in before if w != "quiet" and not w.startswith("transparent_hugepage=")]
    assert [w for w in after if w in kept] == kept  # every other word, in its order
    assert applied["reboot_required"] is True
    assert (root / "update-grub.log").read_text() == "run\n"
    restored = _host(root, "kernel-restore")
    assert sorted(_words(root)) == sorted(before)
    assert restored["left_alone"] == []
    for path, text in texts.items():  # every word back where it was
        assert _unquoted(path.read_text()) == _unquoted(text), path


@pytest.mark.parametrize("grub, why", [
    ('GRUB_CMDLINE_LINUX="a $(cat /etc/x)"\n', "command substitution"),
    ('GRUB_CMDLINE_LINUX="a\nb"\n', "does not end on its line"),
    ('GRUB_CMDLINE_LINUX="$EXTRA root=x"\n', "expands something other"),
    ('if [ -e /x ]; then\nGRUB_CMDLINE_LINUX="a"\nfi\n', "not an assignment"),
    ('. /etc/default/site\n', "not an assignment"),
    ('GRUB_CMDLINE_LINUX=a\\\n b\n', "continued on the next"),
])
def test_a_file_not_read_with_certainty_is_refused_with_nothing_written(
        tmp_path: Path, grub: str, why: str) -> None:
    root = _debian(tmp_path, grub)
    refused = _host(root, "kernel-snapshot", ADD)
    assert not refused["ok"] and why in refused["error"], refused
    assert "etc/default/grub" in refused["error"]
    assert (root / "etc" / "default" / "grub").read_text() == grub
    assert not (root / "update-grub.log").exists()
    assert not (root / "var" / "lib" / "fleet-rollout" / "kernel-snapshot.json").exists()


def test_a_host_without_a_boot_tool_is_refused_at_the_snapshot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real root with neither update-grub nor grubby (the tree stands for one: is_sim is
    what tells a lab sysroot, whose power-on reads the GRUB defaults itself)."""
    root = _debian(tmp_path, 'GRUB_CMDLINE_LINUX=""\n')
    (root / "usr" / "sbin" / "update-grub").unlink()
    assert _host(root, "kernel-snapshot", ADD)["ok"]  # as a lab sysroot: fine
    (root / "var" / "lib" / "fleet-rollout" / "kernel-snapshot.json").unlink()
    host = _load()
    monkeypatch.setattr(host, "is_sim", lambda _root: False)
    code, doc = host.run_command("kernel-snapshot", host.parse_args(
        ["kernel-snapshot", "--sysroot", str(root), "--settings", json.dumps(ADD)]))
    assert code == 1 and "neither update-grub (Debian, Ubuntu) nor grubby" in doc["error"]
    assert not (root / "var" / "lib" / "fleet-rollout" / "kernel-snapshot.json").exists()
    assert (root / "etc" / "default" / "grub").read_text() == 'GRUB_CMDLINE_LINUX=""\n'


def _load() -> Any:
    from hostside_support import load_host_script

    return load_host_script("fleet_host_grub")


def test_a_rhel_layout_goes_through_grubby_and_its_bls_entries(tmp_path: Path) -> None:
    root = tmp_path
    (root / "etc" / "default").mkdir(parents=True)
    (root / "etc" / "default" / "grub").write_text(RHEL_GRUB)
    entries = root / "boot" / "loader" / "entries"
    entries.mkdir(parents=True)
    entry = entries / "abc-5.14.0-362.el9.x86_64.conf"
    entry.write_text(f"title Red Hat Enterprise Linux\nlinux /vmlinuz-5.14.0\n"
                     f"options {BLS_OPTIONS}\n")
    _tool(root, "grubby", GRUBBY)
    settings = {"cmdline": {"add": ["numa_balancing=disable"], "remove": ["rhgb"]}}
    assert _host(root, "kernel-snapshot", settings)["ok"]
    assert _host(root, "kernel-apply", settings)["ok"]
    grub = (root / "etc" / "default" / "grub").read_text()
    assert ("GRUB_CMDLINE_LINUX='crashkernel=auto resume=/dev/mapper/rhel-swap "
            "rd.lvm.lv=rhel/root rd.lvm.lv=rhel/swap quiet numa_balancing=disable'") in grub
    options = entry.read_text().split("options ")[1].split()
    assert "numa_balancing=disable" in options and "rhgb" not in options
    assert {"root=/dev/mapper/rhel-root", "rd.lvm.lv=rhel/root", "crashkernel=auto",
            "quiet"} <= set(options)
    assert (root / "grubby.log").read_text().split("\n")[0] == \
        "--update-kernel=ALL --args=numa_balancing=disable --remove-args=rhgb"
    assert _host(root, "kernel-restore")["ok"]
    assert _unquoted((root / "etc" / "default" / "grub").read_text()) == _unquoted(RHEL_GRUB)
    assert sorted(entry.read_text().split("options ")[1].split()) == sorted(BLS_OPTIONS.split())


def test_a_restore_leaves_a_word_changed_after_the_rollout(tmp_path: Path) -> None:
    root = _debian(tmp_path, 'GRUB_CMDLINE_LINUX="rd.lvm.lv=vg/root quiet"\n')
    settings = {"cmdline": {"add": ["hugepages=16"], "remove": []}}
    _host(root, "kernel-snapshot", settings)
    _host(root, "kernel-apply", settings)
    grub = root / "etc" / "default" / "grub"
    grub.write_text(grub.read_text().replace("hugepages=16", "hugepages=64"))  # an SRE, later
    restored = _host(root, "kernel-restore")
    assert restored["left_alone"] == ["cmdline hugepages: changed after the rollout, left alone"]
    assert _words(root) == ["rd.lvm.lv=vg/root", "quiet", "hugepages=64"]
    assert os.path.exists(grub)
