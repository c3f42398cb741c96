#!/usr/bin/env python3
"""fleet_rollout's host-side helper, shipped by the playbooks with ansible.builtin.script.

Stdlib only, Python 3.6+. Every sub-command prints one JSON document on stdout and exits 0 on
success, 1 on a failure it can explain (the JSON then has "error"). `--sysroot DIR` makes it work
on a lab `sim` host (a fake tree) exactly as on a real root.

  health                       boot id, uptime, maintenance flag, established connections
          [--boot-id-not B]    fails while the boot id is still B (the host has not restarted)
  drain   --port P ...         set the maintenance flag, wait until connections drain
  undrain                      clear the maintenance flag
  kernel-snapshot --settings J record the current values of what J would change (changes
                               nothing; the rollout's existing snapshot is kept: the first wins)
  kernel-apply --settings J    apply kernel settings; refuses unless kernel-snapshot ran first;
                               the snapshot records each value and word it writes
  kernel-reapply               re-apply the runtime-only settings after a reboot (IRQ affinity)
  kernel-restore [--snapshot J]  put back what the rollout wrote, while it is still what it
                               wrote (else reported in left_alone); J: the pack's record, used
                               when the host's snapshot is gone
  kernel-forget                drop the rollout's snapshot and settings (undrain does too)
  kernel-check --settings J    after the reboot: J's words on /proc/cmdline (removed ones
                               gone), its sysctls live; what is not in effect in "missing"
The kernel commands and undrain take --rollout ID: each rollout keeps its own snapshot and
settings under var/lib/fleet-rollout, so a restore never puts back another rollout's values.

Kernel settings are checked again here with the same allowlists as the pack's profile loader
(defense in depth): a bad word never reaches the GRUB defaults file (sourced by update-grub as
root) nor /etc/sysctl.d.
"""
# Only what every command needs is imported here (re comes with json anyway). argparse,
# subprocess and shutil (with what they import) cost a host about 15 ms of CPU per run, and the
# health, drain and undrain commands most runs are need none of them: the options are parsed by
# parse_args below, and the kernel commands import subprocess and shutil where they use them.
import json
import math
import os
import re
import sys
import time

FLAG = "etc/fleet/maintenance"
STATE_DIR = "var/lib/fleet-rollout"
SNAPSHOT = STATE_DIR + "/kernel-snapshot.json"
SETTINGS = STATE_DIR + "/kernel-settings.json"
SYSCTL_FILE = "etc/sysctl.d/90-fleet-rollout.conf"
GRUB = "etc/default/grub"
SIM_NIC = "run/fleet-sim/nic"
# The same allowlists as actions/lib/fleet_rollout/profile.py (keep them in step).
CMDLINE_TOKEN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(=[A-Za-z0-9_.,:/+=-]{1,190})?\Z"
SYSCTL_KEY = r"^[a-z0-9_]+(\.[A-Za-z0-9_-]+){1,7}\Z"
SYSCTL_VALUE = r"^[A-Za-z0-9 _.,:/-]{1,256}\Z"
NIC_NAME = r"^[A-Za-z0-9_.:-]{1,15}\Z"
NIC_LIMITS = {"rx": 65536, "tx": 65536, "combined": 1024}
# Tuning knobs only, by allow list: a name ending in "." or "_" allows every name it begins
# (a subtree, a family); any other entry is one name. The pack's profile loader uses these
# lists too (fleet_rollout/host_script.py); docs/kernel-settings.md lists them.
SYSCTL_ALLOWED = (
    "net.core.", "net.ipv4.tcp_", "net.ipv4.udp_", "net.ipv4.ip_local_port_range",
    "net.ipv4.neigh.", "net.ipv6.neigh.", "net.netfilter.nf_conntrack_max",
    "net.nf_conntrack_max", "vm.swappiness", "vm.dirty_", "vm.nr_hugepages",
    "vm.nr_overcommit_hugepages", "vm.zone_reclaim_mode", "vm.min_free_kbytes",
    "vm.max_map_count", "vm.vfs_cache_pressure", "vm.stat_interval", "vm.numa_stat",
    "vm.watermark_scale_factor", "kernel.numa_balancing", "kernel.numa_balancing_",
    "kernel.sched_", "kernel.timer_migration", "kernel.watchdog_thresh", "fs.file-max",
    "fs.nr_open", "fs.aio-max-nr", "fs.inotify.")
CMDLINE_ALLOWED = (
    "numa_balancing", "numa", "transparent_hugepage", "hugepages", "hugepagesz",
    "default_hugepagesz", "isolcpus", "nohz", "nohz_full", "rcu_nocbs", "rcu_nocb_poll",
    "irqaffinity", "kthread_cpus", "skew_tick", "intel_idle.max_cstate",
    "processor.max_cstate", "intel_pstate", "amd_pstate", "idle", "cpuidle.off",
    "intel_iommu", "amd_iommu", "iommu", "iommu.passthrough", "iommu.strict", "pcie_aspm",
    "nosoftlockup", "nowatchdog", "nmi_watchdog", "tsc", "clocksource", "nosmt",
    "workqueue.power_efficient", "quiet", "splash", "rhgb")


def allowed(name, names):
    """`name` is one of `names`, or begins with one ending in "." or "_"."""
    return any(name == a or (a[-1:] in "._" and name.startswith(a)) for a in names)


MAX_SYSCTLS, MAX_TOKENS, MAX_INTERFACES = 64, 32, 64


class Failure(Exception):
    """A failure the command can explain; `doc`: what it did before it failed (printed with
    the error)."""

    def __init__(self, message, **doc):
        Exception.__init__(self, message)
        self.doc = doc


def path(root, rel):
    return os.path.join(root, rel.lstrip("/"))


def read(root, rel, default=None):
    try:
        with open(path(root, rel)) as handle:
            return handle.read()
    except (IOError, OSError):
        if default is not None:
            return default
        raise Failure("cannot read " + path(root, rel)) from None


def write(root, rel, text):
    target = path(root, rel)
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        os.makedirs(directory)
    tmp = target + ".fleet-tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.rename(tmp, target)


def matches(pattern, text):
    """`text` matches `pattern` from its start (compiled on first use, by re's cache)."""
    return re.match(pattern, text) is not None


def is_sim(root):
    return os.path.realpath(root) != "/"


# ---------------------------------------------------------------- health and drain
def established(root, port):
    """ESTABLISHED TCP connections whose local port is `port` (from /proc/net/tcp{,6})."""
    count = 0
    for name in ("proc/net/tcp", "proc/net/tcp6"):
        text = read(root, name, "")
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 4 or fields[3] != "01":
                continue
            try:
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
            except (IndexError, ValueError):
                continue
            if local_port == port:
                count += 1
    return count


def cmd_health(args):
    uptime = read(args.sysroot, "proc/uptime", "0 0").split()[0]
    result = {
        "boot_id": read(args.sysroot, "proc/sys/kernel/random/boot_id", "").strip(),
        "kernel": read(args.sysroot, "proc/sys/kernel/osrelease", "").strip(),
        "uptime_s": float(uptime),
        "maintenance": os.path.exists(path(args.sysroot, FLAG)),
        "established": established(args.sysroot, args.port),
        "cmdline": read(args.sysroot, "proc/cmdline", "").strip(),
    }
    if args.boot_id_not and result["boot_id"] in ("", args.boot_id_not):
        raise Failure("boot id still %s: the OS has not started again since its reset"
                      % (result["boot_id"] or "unreadable"))
    return result


# the collector's counter windows (counters/collector.py: SAMPLES_DIR, WINDOW_ID)
WINDOWS_DIR = "var/tmp/fleet-rollout"
WINDOW_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z"


def window_done(root, window):
    """True once the counter window `window` sampled here is over (its sampler wrote its last
    sample, or stopped: taken over by a later start, or its state is gone); False while its
    sampler still runs."""
    base = os.path.join(path(root, WINDOWS_DIR), window)
    try:
        with open(base + ".json") as handle:
            state = json.load(handle)
        with open(base + ".owner") as handle:
            owner = json.load(handle)
    except (OSError, ValueError):
        return True  # no window here (never started, or removed): nothing to wait for
    return not isinstance(state, dict) or bool(state.get("done")) or \
        not isinstance(owner, dict) or owner.get("token") != state.get("token")


def await_window(args):
    """--after-window: the host's own sampler of the batch's pre window takes its last sample
    before the host drains (the window measures the host in service), waiting at most
    --after-window-wait seconds. Returns the seconds waited."""
    if not args.after_window:
        return 0.0
    if not matches(WINDOW_NAME, args.after_window):
        raise Failure("--after-window %r: not a counter window's name" % (args.after_window,))
    started = time.time()
    while not window_done(args.sysroot, args.after_window) and \
            time.time() - started < args.after_window_wait:
        time.sleep(0.05)
    return round(time.time() - started, 2)


def cmd_drain(args):
    window_wait = await_window(args)
    flag = path(args.sysroot, FLAG)
    was_set = os.path.exists(flag)
    if not was_set:
        write(args.sysroot, FLAG, "drained by fleet_rollout at %d\n" % int(time.time()))
    started = time.time()
    count = established(args.sysroot, args.port)
    while count > args.threshold:
        if time.time() - started >= args.timeout:
            raise Failure("still %d established connections on port %d after %ds (threshold %d);"
                          " the host stays marked drained" % (count, args.port, args.timeout,
                                                              args.threshold),
                          drained=True, changed=not was_set, flag=flag, established=count)
        time.sleep(args.poll)
        count = established(args.sysroot, args.port)
    return {"drained": True, "changed": not was_set, "flag": flag, "established": count,
            "waited_s": round(time.time() - started, 2), "window_wait_s": window_wait}


def cmd_undrain(args):
    """The maintenance flag cleared; with --rollout, the host is done with that rollout: its
    kernel snapshot and settings files are dropped."""
    flag = path(args.sysroot, FLAG)
    existed = os.path.exists(flag)
    if existed:
        os.remove(flag)
    if args.rollout:
        forget(args.sysroot, *kernel_files(args))
    return {"drained": False, "changed": existed, "flag": flag}


# ---------------------------------------------------------------- kernel settings
def sysctl_path(key):
    if not isinstance(key, str) or not matches(SYSCTL_KEY, key):
        raise Failure("bad sysctl name %r" % (key,))
    return "proc/sys/" + key.replace(".", "/")


# ---------------------------------------------------------------- GRUB defaults
# GRUB's defaults are shell: /etc/default/grub, then /etc/default/grub.d/*.cfg, sourced in
# that order by update-grub (grub-mkconfig). Only what can be read with certainty is read: a
# comment, a blank line, or an assignment; an assignment to a command-line variable must be a
# quoted or bare value whose only expansions are whole $GRUB_CMDLINE_LINUX[_DEFAULT] words.
# Anything else in a file is refused, naming the file and line, with nothing written.
GRUB_D = "etc/default/grub.d"
CMDLINE_VARS = ("GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT")
GRUB_ASSIGN = r"^(\s*(?:export\s+)?)([A-Za-z_][A-Za-z0-9_]*)=(.*)$"
GRUB_BARE = r"^[A-Za-z0-9_.,:/+=@%-]*\Z"
GRUB_REF = r"^\$(?:\{(GRUB_CMDLINE_LINUX(?:_DEFAULT)?)\}|(GRUB_CMDLINE_LINUX(?:_DEFAULT)?))\Z"


def grub_files(root):
    """The GRUB defaults files in the order update-grub sources them (relative paths)."""
    files = [GRUB] if os.path.exists(path(root, GRUB)) else []
    directory = path(root, GRUB_D)
    if os.path.isdir(directory):
        files += [GRUB_D + "/" + n for n in sorted(os.listdir(directory)) if n.endswith(".cfg")]
    return files


def grub_value(raw, where):
    """An assignment's value: (items, quote, rest); items are ("word", w) or ("ref", VAR)."""
    if raw[:1] in ("'", '"'):
        quote = raw[0]
        end = raw.find(quote, 1)
        if end < 0:
            raise Failure("%s: a quoted value that does not end on its line" % where)
        content, rest = raw[1:end], raw[end + 1:]
        if quote == '"' and re.search(r'[\\`]|\$\(', content):
            raise Failure("%s: escapes or command substitution in the value" % where)
    else:
        quote = ""
        content, _, rest = raw.partition(" ")
        rest = " " + rest if rest else ""
        if not matches(GRUB_BARE, content):
            raise Failure("%s: an unquoted value with shell syntax in it" % where)
    if (rest.strip() and not rest.strip().startswith("#")) or rest[:1] not in ("", " ", "\t"):
        raise Failure("%s: more than one value on the line" % where)
    items = []
    for token in content.split():
        ref = re.match(GRUB_REF, token)
        if quote == '"' and ref:
            items.append(("ref", ref.group(1) or ref.group(2)))
        elif "$" in token and quote != "'":
            raise Failure("%s: %s expands something other than a whole command-line variable"
                          % (where, token))
        else:
            items.append(("word", token))
    return items, quote, rest


def grub_read(root):
    """Every GRUB defaults file parsed: [{"rel", "lines", "assigns": [{line, var, prefix,
    items, quote, rest}]}]; Failure on anything not read with certainty."""
    parsed = []
    for rel in grub_files(root):
        text = read(root, rel)
        lines = text.split("\n")
        assigns = []
        for number, line in enumerate(lines):
            where = "%s line %d" % (path(root, rel), number + 1)
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            found = re.match(GRUB_ASSIGN, line)
            if not found:
                raise Failure("%s: not an assignment (%r): refused, nothing written"
                              % (where, stripped[:80]))
            prefix, var, raw = found.groups()
            if line.rstrip().endswith("\\"):
                raise Failure("%s: a line continued on the next: refused, nothing written"
                              % where)
            if var not in CMDLINE_VARS:
                if "GRUB_CMDLINE_LINUX" in raw:
                    raise Failure("%s: %s is set from the command line variables: refused"
                                  % (where, var))
                if raw[:1] in ("'", '"') and raw.count(raw[0]) < 2:
                    raise Failure("%s: a quoted value that does not end on its line" % where)
                continue
            items, quote, rest = grub_value(raw, where)
            assigns.append({"rel": rel, "line": number, "var": var, "prefix": prefix,
                            "items": items, "quote": quote, "rest": rest})
        parsed.append({"rel": rel, "lines": lines, "assigns": assigns})
    return parsed


def grub_effective(parsed):
    """{VAR: [words]} after sourcing the files as update-grub does."""
    env = {var: [] for var in CMDLINE_VARS}
    for grub_file in parsed:
        for assign in grub_file["assigns"]:
            words = []
            for kind, value in assign["items"]:
                words.extend(env[value] if kind == "ref" else [value])
            env[assign["var"]] = words
    return env


def cmdline_words(env):
    """The words a normal boot entry gets (GRUB_CMDLINE_LINUX, then _DEFAULT)."""
    return env["GRUB_CMDLINE_LINUX"] + env["GRUB_CMDLINE_LINUX_DEFAULT"]


def word_key(word):
    return word.split("=", 1)[0]


def grub_line(assign):
    body = " ".join(v if k == "word" else "$" + v for k, v in assign["items"])
    quote = assign["quote"] or ("" if " " not in body and "$" not in body and body else '"')
    if quote == "'" and any(k == "ref" for k, _ in assign["items"]):
        quote = '"'
    return "%s%s=%s%s%s%s" % (assign["prefix"], assign["var"], quote, body, quote,
                             assign["rest"])


def grub_change(parsed, add, remove, exact=False, where=None):
    """Edit the parsed files in place: each word of `remove` (a word, or a key: every word of
    that key) dropped wherever it is written, each word of `add` written in place of its
    key's words, else put back where `where` says it was ({word: [[file, variable, position],
    ...]}), else appended to the last GRUB_CMDLINE_LINUX (`exact`: `remove` names whole words
    only). Returns what changed: {"added": [words], "replaced": {key: [old words]}, "removed":
    [words], "where": {removed word: [[file, variable, position], ...]}}."""
    done = {"added": [], "replaced": {}, "removed": [], "where": {}}
    assigns = [a for f in parsed for a in f["assigns"]]
    for word in remove:
        for assign in assigns:
            kept = []
            for position, (kind, value) in enumerate(assign["items"]):
                if kind == "word" and (value == word or (not exact and "=" not in word
                                                         and word_key(value) == word)):
                    done["removed"].append(value)
                    done["where"].setdefault(value, []).append(
                        [assign["rel"], assign["var"], position])
                    assign["changed"] = True
                else:
                    kept.append((kind, value))
            assign["items"] = kept
    for word in add:
        key, placed = word_key(word), False
        for assign in assigns:  # in place, once in each assignment that has its key
            items, here = [], False
            for kind, value in assign["items"]:
                if kind == "word" and word_key(value) == key:
                    if value != word:
                        olds = done["replaced"].setdefault(key, [])
                        olds += [value] if value not in olds else []
                        assign["changed"] = True
                    if not here:
                        items.append(("word", word))
                        here = placed = True
                    continue
                items.append((kind, value))
            assign["items"] = items
        if placed:
            if key in done["replaced"]:
                done["added"].append(word)
            continue
        targets = []
        for place in (where or {}).get(word) or []:
            found = [a for a in assigns if [a["rel"], a["var"]] == list(place[:2])]
            targets += [(a, int(place[2]) if len(place) > 2 else len(a["items"]))
                        for a in found[-1:]]
        linux = targets or [(a, len(a["items"])) for a in assigns
                            if a["var"] == "GRUB_CMDLINE_LINUX"][-1:]
        if linux:
            for assign, position in linux:
                assign["items"].insert(min(position, len(assign["items"])), ("word", word))
                assign["changed"] = True
        else:
            main = parsed[0] if parsed and parsed[0]["rel"] == GRUB else None
            if main is None:
                raise Failure("%s missing: the kernel command line cannot change"
                              % GRUB)
            main["lines"].insert(len(main["lines"]) - (main["lines"][-1:] == [""]),
                                 'GRUB_CMDLINE_LINUX=""')
            assign = {"rel": GRUB, "line": None, "var": "GRUB_CMDLINE_LINUX", "prefix": "",
                      "items": [("word", word)], "quote": '"', "rest": "", "changed": True}
            main["assigns"].append(assign)
            assigns.append(assign)
        done["added"].append(word)
    return done


def grub_texts(parsed):
    """{rel: new text} of the files an edit changed."""
    out = {}
    for grub_file in parsed:
        changed = False
        lines = list(grub_file["lines"])
        for assign in grub_file["assigns"]:
            if not assign.get("changed"):
                continue
            changed = True
            if assign["line"] is None:
                index = lines.index('GRUB_CMDLINE_LINUX=""')
            else:
                index = assign["line"]
            lines[index] = grub_line(assign)
        if changed:
            out[grub_file["rel"]] = "\n".join(lines)
    return out


def boot_tool(root):
    """The tool that writes this host's boot configuration: update-grub (Debian, Ubuntu) or
    grubby (RHEL family, BLS entries included), found where the host keeps its commands; a
    sim host without either is "sim" (the lab reads its GRUB defaults at power-on)."""
    for tool in ("update-grub", "grubby"):
        for directory in ("usr/sbin", "sbin", "usr/bin", "bin"):
            exe = path(root, directory + "/" + tool)
            if os.path.isfile(exe) and os.access(exe, os.X_OK):
                return tool, exe
    if is_sim(root):
        return "sim", ""
    raise Failure("neither update-grub (Debian, Ubuntu) nor grubby (RHEL family) on this host:"
                  " its kernel command line cannot be changed safely; refused")


def run_boot_tool(root, added, removed):
    """Write the boot configuration from the GRUB defaults just changed: update-grub, or
    grubby on every kernel's entry (the words added and removed)."""
    tool, exe = boot_tool(root)
    if tool == "sim":
        return tool
    import subprocess
    argv = [exe]
    if tool == "grubby":
        argv = [exe, "--update-kernel=ALL"]
        if added:
            argv.append("--args=" + " ".join(added))
        if removed:
            argv.append("--remove-args=" + " ".join(removed))
    env = dict(os.environ, FLEET_SYSROOT=root) if is_sim(root) else None
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        raise Failure("%s failed: %s" % (tool, proc.stdout.decode(errors="replace")[-300:]))
    return tool


def check_grub(root):
    """Precheck of a command-line change: the GRUB defaults read with certainty (returned,
    parsed), a boot tool known; Failure (nothing written) otherwise."""
    parsed = grub_read(root)
    if not os.path.exists(path(root, GRUB)):
        raise Failure("%s missing: the kernel command line cannot change" % path(root, GRUB))
    boot_tool(root)
    return parsed


def edit_cmdline(root, add, remove):
    """Change the GRUB defaults word by word (grub_change) and check that what update-grub
    will read is what was asked, every other word kept; writes the changed files. Returns
    what changed (grub_change's record), {} when nothing did."""
    parsed = grub_read(root)
    before = cmdline_words(grub_effective(parsed))
    done = grub_change(parsed, add, remove)
    after = cmdline_words(grub_effective(parsed))
    keys = set(word_key(w) for w in add)
    gone = set(remove)
    kept = [w for w in before if word_key(w) not in keys and w not in gone and
            word_key(w) not in gone]
    missing = [w for w in kept if after.count(w) < kept.count(w)]
    if missing or any(w not in after for w in add) or any(
            w in gone or word_key(w) in gone for w in after):
        raise Failure("the GRUB defaults would not boot with exactly the words asked for "
                      "(kept %s, asked %s, would boot %s): refused, nothing written"
                      % (" ".join(kept), " ".join(add), " ".join(after)))
    texts = grub_texts(parsed)
    for rel, text in sorted(texts.items()):
        write(root, rel, text)
    return done if texts else {}


def interfaces(root, wanted):
    names = sorted(n for n in os.listdir(path(root, "sys/class/net")) if n != "lo")
    if wanted in (None, "all"):
        return names
    missing = [n for n in wanted if n not in names]
    if missing:
        raise Failure("NIC(s) %s not on this host (has %s)" % (", ".join(missing),
                                                                ", ".join(names)))
    return list(wanted)


def ethtool(args):
    import subprocess
    proc = subprocess.run(["ethtool"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode().strip()


def parse_ethtool_block(text, section):
    """Values under 'Current hardware settings:' of `ethtool -g/-l` output."""
    out = {}
    part = text.split(section, 1)
    if len(part) < 2:
        return out
    for line in part[1].splitlines()[1:]:
        if ":" not in line:
            continue
        key, value = line.split(":", 1)
        value = value.strip()
        if value.isdigit():
            out[key.strip().lower()] = int(value)
    return out


def nic_get(root, iface):
    if is_sim(root):
        return json.loads(read(root, "%s/%s.json" % (SIM_NIC, iface),
                               '{"rx": 256, "tx": 256, "combined": 1}'))
    current = {}
    code, out, _ = ethtool(["-g", iface])
    if code == 0:
        ring = parse_ethtool_block(out, "Current hardware settings:")
        current.update({k: ring[k] for k in ("rx", "tx") if k in ring})
    code, out, _ = ethtool(["-l", iface])
    if code == 0:
        chan = parse_ethtool_block(out, "Current hardware settings:")
        if "combined" in chan:
            current["combined"] = chan["combined"]
    return current


def nic_set(root, iface, values):
    if is_sim(root):
        current = nic_get(root, iface)
        current.update(values)
        write(root, "%s/%s.json" % (SIM_NIC, iface), json.dumps(current))
        return
    ring = [x for k in ("rx", "tx") if k in values for x in (k, str(values[k]))]
    if ring:
        code, _, err = ethtool(["-G", iface] + ring)
        if code != 0:
            raise Failure("ethtool -G %s %s: %s" % (iface, " ".join(ring), err))
    if "combined" in values:
        code, _, err = ethtool(["-L", iface, "combined", str(values["combined"])])
        if code != 0:
            raise Failure("ethtool -L %s combined %s: %s" % (iface, values["combined"], err))


def cpulist(text):
    cpus = []
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-")
            cpus.extend(range(int(lo), int(hi) + 1))
        else:
            cpus.append(int(part))
    return cpus


def nic_irqs(root, iface):
    msi = path(root, "sys/class/net/%s/device/msi_irqs" % iface)
    if os.path.isdir(msi):
        return sorted(int(n) for n in os.listdir(msi) if n.isdigit())
    irqs = []
    for line in read(root, "proc/interrupts", "").splitlines():
        head = line.split(":", 1)
        if len(head) == 2 and head[0].strip().isdigit() and (
                iface in line or re.search(r"virtio\d+-(input|output)", line)):
            irqs.append(int(head[0]))
    return irqs


def local_cpus(root, iface):
    node = read(root, "sys/class/net/%s/device/numa_node" % iface, "-1").strip()
    if node.lstrip("-").isdigit() and int(node) >= 0:
        text = read(root, "sys/devices/system/node/node%s/cpulist" % node, "")
        if text.strip():
            return cpulist(text)
    return cpulist(read(root, "sys/devices/system/cpu/online", "0"))


def apply_irq_affinity(root, ifaces, snapshot):
    changed = []
    for iface in ifaces:
        cpus = local_cpus(root, iface)
        for index, irq in enumerate(nic_irqs(root, iface)):
            rel = "proc/irq/%d/smp_affinity_list" % irq
            old = read(root, rel, "").strip()
            want = str(cpus[index % len(cpus)])
            if snapshot is not None:
                snapshot.setdefault("irq", {}).setdefault(str(irq), old)
            if old != want:
                try:
                    write_proc(root, rel, want)
                except (IOError, OSError) as err:
                    raise Failure("IRQ %d affinity -> CPU %s: %s" % (irq, want, err)) from None
                changed.append("irq%d=%s" % (irq, want))
    return changed


def write_proc(root, rel, value):
    if is_sim(root):
        write(root, rel, value + "\n")
        return
    with open(path(root, rel), "w") as handle:
        handle.write(value)


def check_sysctl(sysctl):
    if not isinstance(sysctl, dict) or len(sysctl) > MAX_SYSCTLS:
        raise Failure("settings.sysctl: a mapping of at most %d names" % MAX_SYSCTLS)
    for key, value in sysctl.items():
        if not isinstance(key, str) or not matches(SYSCTL_KEY, key):
            raise Failure("settings.sysctl: bad sysctl name %r" % (key,))
        if not allowed(key, SYSCTL_ALLOWED):
            raise Failure("settings.sysctl: %s is not a tuning setting: refused" % key)
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise Failure("settings.sysctl.%s: a number or a short string" % key)
        if not isinstance(value, str) and not (math.isfinite(value) and abs(value) < 2 ** 64):
            raise Failure("settings.sysctl.%s: not a number a sysctl takes: %r" % (key, value))
        if isinstance(value, str) and not matches(SYSCTL_VALUE, value):
            raise Failure("settings.sysctl.%s: bad value %r (letters, digits, space and _.,:/-"
                          " only, one line)" % (key, value))


def check_cmdline(cmdline):
    if not isinstance(cmdline, dict) or set(cmdline) - {"add", "remove"}:
        raise Failure("settings.cmdline: a mapping with add and remove only")
    for group in ("add", "remove"):
        tokens = cmdline.get(group) or []
        if not isinstance(tokens, list) or len(tokens) > MAX_TOKENS:
            raise Failure("settings.cmdline.%s: a list of at most %d words" % (group, MAX_TOKENS))
        for token in tokens:
            if not isinstance(token, str) or not matches(CMDLINE_TOKEN, token):
                raise Failure("settings.cmdline.%s: bad kernel command-line word %r"
                              % (group, token))
            if not allowed(token.split("=", 1)[0], CMDLINE_ALLOWED):
                raise Failure("settings.cmdline.%s: %s is not a tuning word: refused"
                              % (group, token.split("=", 1)[0]))


def check_nic(nic):
    if not isinstance(nic, dict) or set(nic) - {"interfaces", "rx", "tx", "combined",
                                                "best_effort"}:
        raise Failure("settings.nic: interfaces, rx, tx, combined and best_effort only")
    names = nic.get("interfaces") or []
    if not isinstance(names, list) or len(names) > MAX_INTERFACES:
        raise Failure("settings.nic.interfaces: a list of at most %d names" % MAX_INTERFACES)
    for name in names:
        if not isinstance(name, str) or not matches(NIC_NAME, name) or name in (".", ".."):
            raise Failure("settings.nic.interfaces: bad interface name %r" % (name,))
    for key, limit in sorted(NIC_LIMITS.items()):
        value = nic.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 1 <= value <= limit):
            raise Failure("settings.nic.%s: an integer from 1 to %d, not %r" % (key, limit, value))
    if not isinstance(nic.get("best_effort", False), bool):
        raise Failure("settings.nic.best_effort: true or false")


def check_settings(settings):
    """The profile loader's allowlists, again: Failure (nothing changed) on the first bad field."""
    if not isinstance(settings, dict):
        raise Failure("--settings must be a JSON object")
    unknown = sorted(str(k) for k in set(settings) - {"sysctl", "cmdline", "nic", "irq_affinity"})
    if unknown:
        raise Failure("unknown kernel setting group(s): %s" % ", ".join(unknown))
    if settings.get("sysctl"):
        check_sysctl(settings["sysctl"])
    if settings.get("cmdline"):
        check_cmdline(settings["cmdline"])
    if settings.get("nic"):
        check_nic(settings["nic"])
    if settings.get("irq_affinity") not in (None, "numa-local", "unchanged"):
        raise Failure("settings.irq_affinity: numa-local or unchanged")
    return settings


def load_settings(args):
    try:
        settings = json.loads(args.settings)
    except ValueError as err:
        raise Failure("--settings is not JSON: %s" % err) from None
    return check_settings(settings)


ROLLOUT_ID = r"^[a-z0-9][a-z0-9-]{0,95}\Z"  # names.py ROLLOUT_ID_PATTERN


def kernel_files(args):
    """(snapshot, settings) files of the rollout --rollout names: each rollout keeps its own,
    so one rollout's restore never reads another's snapshot."""
    rollout = args.rollout
    if not rollout:
        return SNAPSHOT, SETTINGS
    if not matches(ROLLOUT_ID, rollout):
        raise Failure("--rollout %r: not a rollout id" % (rollout,))
    return (STATE_DIR + "/kernel-snapshot.%s.json" % rollout,
            STATE_DIR + "/kernel-settings.%s.json" % rollout)


def load_snapshot(root, rel=SNAPSHOT):
    text = read(root, rel, "")
    if not text:
        return None
    try:
        snapshot = json.loads(text)
    except ValueError:
        raise Failure("%s is not JSON: restore it by hand" % path(root, rel)) from None
    if not isinstance(snapshot, dict):
        raise Failure("%s is not a JSON object: restore it by hand" % path(root, rel))
    return snapshot


def sysctl_lines(root):
    """{key: value} of the pack's sysctl.d file (every rollout's keys, one line each)."""
    out = {}
    for line in read(root, SYSCTL_FILE, "").splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            out[key.strip()] = value.strip()
    return out


def write_sysctl_lines(root, lines):
    if not lines:
        if os.path.exists(path(root, SYSCTL_FILE)):
            os.remove(path(root, SYSCTL_FILE))
        return
    body = "# written by fleet_rollout: each key its rollout's; restored on rollback\n" + \
        "".join("%s = %s\n" % (k, v) for k, v in sorted(lines.items()))
    if read(root, SYSCTL_FILE, "") != body:
        write(root, SYSCTL_FILE, body)


def snapshot_sysctl(root, sysctl, snapshot):
    old_sysctl = snapshot.setdefault("sysctl", {})
    persisted = sysctl_lines(root)
    old_lines = snapshot.setdefault("sysctl_lines", {})
    for key in sorted(sysctl):
        rel = sysctl_path(key)
        if not os.path.exists(path(root, rel)):
            raise Failure("sysctl %s does not exist on this kernel" % key)
        old_sysctl.setdefault(key, " ".join(read(root, rel).split()))
        old_lines.setdefault(key, persisted.get(key))


def snapshot_grub(root, snapshot):
    """The precheck of a command-line change (GRUB defaults readable, a boot tool known) and
    the words a normal entry boots with now; what the rollout changes is recorded as it
    changes it (apply_cmdline)."""
    parsed = check_grub(root)
    snapshot.setdefault("cmdline_before", cmdline_words(grub_effective(parsed)))
    snapshot.setdefault("cmdline", {"added": [], "replaced": {}, "removed": []})


def snapshot_nic(root, ifaces, snapshot):
    old_nic = snapshot.setdefault("nic", {})
    for iface in ifaces:
        old_nic.setdefault(iface, nic_get(root, iface))


def snapshot_irqs(root, ifaces, snapshot):
    for iface in ifaces:
        for irq in nic_irqs(root, iface):
            old = read(root, "proc/irq/%d/smp_affinity_list" % irq, "").strip()
            snapshot.setdefault("irq", {}).setdefault(str(irq), old)


def settings_interfaces(root, settings):
    nic = settings.get("nic") or {}
    if not (nic or settings.get("irq_affinity") == "numa-local"):
        return []
    return interfaces(root, nic.get("interfaces") or "all")


def record_snapshot(root, settings, snapshot):
    """Add the current value of everything `settings` would change (values already recorded
    are kept: the first snapshot wins). Reads only."""
    if settings.get("sysctl"):
        snapshot_sysctl(root, settings["sysctl"], snapshot)
    if settings.get("cmdline"):
        snapshot_grub(root, snapshot)
    ifaces = settings_interfaces(root, settings)
    if settings.get("nic"):
        snapshot_nic(root, ifaces, snapshot)
    if settings.get("irq_affinity") == "numa-local":
        snapshot_irqs(root, ifaces, snapshot)
    return snapshot


def save_snapshot(root, snapshot, before, rel=SNAPSHOT):
    text = json.dumps(snapshot, sort_keys=True)
    if text != before:
        write(root, rel, text)


def cmd_kernel_snapshot(args):
    root = args.sysroot
    settings = load_settings(args)
    snapshot_rel, _ = kernel_files(args)
    existing = load_snapshot(root, snapshot_rel)
    first = existing is None
    snapshot = existing if existing is not None else {"taken_at": int(time.time())}
    if args.rollout:
        snapshot["rollout"] = args.rollout
    before = "" if first else json.dumps(existing, sort_keys=True)
    record_snapshot(root, settings, snapshot)
    save_snapshot(root, snapshot, before, snapshot_rel)
    return {"snapshot": snapshot, "changed": [], "first_snapshot": first}


def apply_sysctl(root, sysctl, snapshot):
    """Each key live and in the pack's sysctl.d file (the other keys there kept); the
    snapshot records the values written, which a restore undoes while they stay."""
    changed = []
    written = snapshot.setdefault("sysctl_set", {})
    for key, value in sorted(sysctl.items()):
        rel = sysctl_path(key)
        current = " ".join(read(root, rel).split())
        want = " ".join(str(value).split())
        written[key] = want
        if current != want:
            try:
                write_proc(root, rel, want)
            except (IOError, OSError) as err:
                raise Failure("sysctl %s=%s: %s" % (key, want, err)) from None
            changed.append("sysctl %s=%s" % (key, want))
    lines = sysctl_lines(root)
    lines.update(written)
    write_sysctl_lines(root, lines)
    return changed


def apply_cmdline(root, cmdline, snapshot):
    """The profile's words added and removed in the GRUB defaults, nothing else; the boot
    configuration written by the host's tool. The snapshot records each word added, replaced
    and removed: what a restore undoes, and only that."""
    add, remove = cmdline.get("add") or [], cmdline.get("remove") or []
    done = edit_cmdline(root, add, remove)
    if not done or not (done["added"] or done["removed"]):
        return []
    record = snapshot.setdefault("cmdline", {"added": [], "replaced": {}, "removed": []})
    record["added"] += [w for w in done["added"] if w not in record["added"]]
    for key, olds in done["replaced"].items():
        record["replaced"].setdefault(key, olds)
    for word in done["removed"]:
        record["removed"] += [word] if word not in record["removed"] else []
    for word, places in done["where"].items():
        record.setdefault("where", {}).setdefault(word, places)
    snapshot["grub_tool"] = run_boot_tool(root, done["added"], done["removed"])
    return ["cmdline +%s -%s" % (" ".join(done["added"]) or "nothing",
                                 " ".join(done["removed"]) or "nothing")]


def restore_cmdline(root, record):
    """Undo what the rollout's apply recorded: each word it added dropped (or its key's old
    words written back in its place) while it is still the word it wrote, each word it
    removed written back where it was while nothing else of its key is. Returns (what
    changed, what was left alone and why)."""
    parsed = grub_read(root)
    now = cmdline_words(grub_effective(parsed))
    replaced = record.get("replaced") or {}
    drop, back, left = [], [], []
    for word in record.get("added") or []:
        if word in now:
            olds = replaced.get(word_key(word)) or []
            back.extend(olds)
            if not olds:
                drop.append(word)
        elif any(word_key(w) == word_key(word) for w in now):
            left.append("cmdline %s: changed after the rollout, left alone" % word_key(word))
    staying = [w for w in now if w not in drop]
    for word in record.get("removed") or []:
        if any(word_key(w) == word_key(word) for w in staying):
            left.append("cmdline %s: set again after the rollout, left alone" % word)
        else:
            back.append(word)
    if not drop and not back:
        return [], left
    grub_change(parsed, back, drop, exact=True, where=record.get("where") or {})
    for rel, text in sorted(grub_texts(parsed).items()):
        write(root, rel, text)
    run_boot_tool(root, back, drop)
    return ["cmdline +%s -%s" % (" ".join(back) or "nothing", " ".join(drop) or "nothing")], left


def apply_nic(root, nic, ifaces, snapshot):
    changed = []
    wanted = {k: int(nic[k]) for k in ("rx", "tx", "combined") if k in nic}
    written = snapshot.setdefault("nic_set", {})
    for iface in ifaces:
        current = nic_get(root, iface)
        diff = {k: v for k, v in wanted.items() if current.get(k) != v}
        if not diff:
            continue
        try:
            nic_set(root, iface, diff)
        except Failure:
            if not nic.get("best_effort"):
                raise
            continue
        written.setdefault(iface, {}).update(diff)
        changed.append("nic %s %s" % (iface, diff))
    return changed


def cmd_kernel_apply(args):
    root = args.sysroot
    settings = load_settings(args)
    snapshot_rel, settings_rel = kernel_files(args)
    first = not os.path.exists(path(root, settings_rel))
    snapshot = load_snapshot(root, snapshot_rel)
    if snapshot is None:
        raise Failure("no kernel snapshot on this host (%s): run kernel-snapshot first; "
                      "nothing changed" % path(root, snapshot_rel))
    before = json.dumps(snapshot, sort_keys=True)
    record_snapshot(root, settings, snapshot)  # anything not yet recorded, before any change
    save_snapshot(root, snapshot, before, snapshot_rel)
    changed = []
    if settings.get("sysctl"):
        changed.extend(apply_sysctl(root, settings["sysctl"], snapshot))
    reboot_required = False
    if settings.get("cmdline"):
        words = apply_cmdline(root, settings["cmdline"], snapshot)
        reboot_required = bool(words)
        changed.extend(words)
    ifaces = settings_interfaces(root, settings)
    if settings.get("nic"):
        changed.extend(apply_nic(root, settings["nic"], ifaces, snapshot))
    if settings.get("irq_affinity") == "numa-local":
        changed.extend(apply_irq_affinity(root, ifaces, snapshot))
    write(root, settings_rel, json.dumps(settings))
    write(root, snapshot_rel, json.dumps(snapshot, sort_keys=True))
    return {"changed": changed, "reboot_required": reboot_required, "snapshot": snapshot,
            "first_apply": first}


def cmd_kernel_reapply(args):
    root = args.sysroot
    _, settings_rel = kernel_files(args)
    text = read(root, settings_rel, "")
    if not text:
        return {"changed": [], "note": "no kernel settings recorded"}
    try:
        settings = check_settings(json.loads(text))
    except ValueError:
        raise Failure("%s is not JSON" % path(root, settings_rel)) from None
    changed = []
    if settings.get("irq_affinity") == "numa-local":
        nic = settings.get("nic") or {}
        changed = apply_irq_affinity(root, interfaces(root, nic.get("interfaces") or "all"), None)
    return {"changed": changed}


def restore_sysctl(root, snapshot):
    """The keys the rollout wrote, live and in the sysctl.d file, put back while they still
    hold what it wrote. Returns (what changed, what was left alone and why)."""
    changed, left = [], []
    written = snapshot.get("sysctl_set") or {}
    lines = sysctl_lines(root)
    for key, value in sorted(written.items()):
        rel = sysctl_path(key)
        old = (snapshot.get("sysctl") or {}).get(key)
        live = " ".join(read(root, rel, "").split())
        if live == value and old is not None and old != value:
            write_proc(root, rel, old)
            changed.append("sysctl %s=%s" % (key, old))
        elif live != value:
            left.append("sysctl %s: %s since the rollout, left alone" % (key, live))
        if lines.get(key) == value:
            previous = (snapshot.get("sysctl_lines") or {}).get(key)
            if previous is None:
                lines.pop(key)
            else:
                lines[key] = previous
    write_sysctl_lines(root, lines)
    return changed, left


def restore_nic(root, snapshot):
    changed, left = [], []
    for iface, written in sorted((snapshot.get("nic_set") or {}).items()):
        old = (snapshot.get("nic") or {}).get(iface) or {}
        current = nic_get(root, iface)
        diff = {}
        for key, value in sorted(written.items()):
            if current.get(key) != value:
                left.append("nic %s %s: %s since the rollout, left alone"
                            % (iface, key, current.get(key)))
            elif key in old and old[key] != value:
                diff[key] = old[key]
        if diff:
            nic_set(root, iface, diff)
            changed.append("nic %s %s" % (iface, diff))
    return changed, left


def restore_whole(root, snapshot):
    """A snapshot without records of what was written (an older pack's): its whole files."""
    changed = []
    for key, value in sorted((snapshot.get("sysctl") or {}).items()):
        rel = sysctl_path(key)
        if " ".join(read(root, rel).split()) != value:
            write_proc(root, rel, value)
            changed.append("sysctl %s=%s" % (key, value))
    if "sysctl_file" in snapshot:
        if snapshot["sysctl_file"]:
            write(root, SYSCTL_FILE, snapshot["sysctl_file"])
        elif os.path.exists(path(root, SYSCTL_FILE)):
            os.remove(path(root, SYSCTL_FILE))
    if "grub" in snapshot and read(root, GRUB, "") != snapshot["grub"]:
        write(root, GRUB, snapshot["grub"])
        run_boot_tool(root, [], [])
        changed.append("cmdline restored")
    for iface, values in sorted((snapshot.get("nic") or {}).items()):
        current = nic_get(root, iface)
        diff = {k: v for k, v in values.items() if current.get(k) != v}
        if diff:
            nic_set(root, iface, diff)
            changed.append("nic %s %s" % (iface, diff))
    return changed


def cmd_kernel_restore(args):
    """Put back what this rollout changed (its own snapshot, or --snapshot: the one the pack
    recorded, once the host's is dropped), nothing else; a value changed since is reported
    and left alone."""
    root = args.sysroot
    snapshot_rel, settings_rel = kernel_files(args)
    snapshot = load_snapshot(root, snapshot_rel)
    if snapshot is None and args.snapshot:
        try:
            snapshot = json.loads(args.snapshot)
        except ValueError:
            raise Failure("--snapshot is not JSON") from None
    if not isinstance(snapshot, dict):
        return {"changed": [], "left_alone": [],
                "note": "nothing to restore (no kernel snapshot of this rollout on this host)"}
    changed, left = [], []
    reboot_required = False
    if "sysctl_set" in snapshot or "nic_set" in snapshot or "cmdline" in snapshot:
        done, skipped = restore_sysctl(root, snapshot)
        changed += done
        left += skipped
        if snapshot.get("cmdline"):
            words, skipped = restore_cmdline(root, snapshot["cmdline"])
            changed += words
            left += skipped
            reboot_required = bool(words)
        done, skipped = restore_nic(root, snapshot)
        changed += done
        left += skipped
    else:
        changed = restore_whole(root, snapshot)
        reboot_required = "cmdline restored" in changed
    for irq, value in sorted((snapshot.get("irq") or {}).items()):
        rel = "proc/irq/%s/smp_affinity_list" % irq
        if value and read(root, rel, "").strip() != value:
            try:
                write_proc(root, rel, value)
                changed.append("irq%s=%s" % (irq, value))
            except (IOError, OSError):
                pass  # an IRQ that is gone after a reboot has nothing to restore
    forget(root, snapshot_rel, settings_rel)
    return {"changed": changed, "reboot_required": reboot_required, "restored": snapshot,
            "left_alone": left}


def cmd_kernel_check(args):
    """What booted, against the settings: each word added is on /proc/cmdline, no word (or
    key) removed is, each sysctl holds its value live. Changes nothing; `missing` lists what
    is not in effect."""
    root = args.sysroot
    settings = load_settings(args)
    booted = read(root, "proc/cmdline", "").split()
    missing = []
    cmdline = settings.get("cmdline") or {}
    for word in cmdline.get("add") or []:
        if word not in booted:
            missing.append("cmdline %s: not on /proc/cmdline" % word)
    for word in cmdline.get("remove") or []:
        found = [w for w in booted if w == word or ("=" not in word and word_key(w) == word)]
        if found:
            missing.append("cmdline %s: still on /proc/cmdline" % found[0])
    for key, value in sorted((settings.get("sysctl") or {}).items()):
        live = " ".join(read(root, sysctl_path(key), "").split())
        if live != " ".join(str(value).split()):
            missing.append("sysctl %s: %s, not %s" % (key, live or "unreadable", value))
    return {"changed": [], "in_effect": not missing, "missing": missing}


def forget(root, *rels):
    for rel in rels:
        if os.path.exists(path(root, rel)):
            os.remove(path(root, rel))


def cmd_kernel_forget(args):
    """The host is done with this rollout: its snapshot and settings are dropped (the pack
    keeps the snapshot for a later rollback)."""
    snapshot_rel, settings_rel = kernel_files(args)
    existed = os.path.exists(path(args.sysroot, snapshot_rel))
    forget(args.sysroot, snapshot_rel, settings_rel)
    return {"changed": existed}


COMMANDS = {
    "health": cmd_health, "drain": cmd_drain, "undrain": cmd_undrain,
    "kernel-snapshot": cmd_kernel_snapshot, "kernel-apply": cmd_kernel_apply,
    "kernel-reapply": cmd_kernel_reapply,
    "kernel-restore": cmd_kernel_restore, "kernel-forget": cmd_kernel_forget,
    "kernel-check": cmd_kernel_check,
}


# the options (argparse's own import costs every run about 10 ms of CPU): name -> (type,
# default)
OPTIONS = {
    "--sysroot": (str, "/"), "--port": (int, 8080), "--threshold": (int, 0),
    "--timeout": (float, 300.0), "--poll": (float, 1.0), "--settings": (str, "{}"),
    # the kernel commands: the rollout whose snapshot and settings files they use; restore:
    # the snapshot the pack recorded, used when the host's is gone
    "--rollout": (str, ""), "--snapshot": (str, ""),
    # drain: first wait until the counter window ID sampled on this host has taken its last
    # sample (--after-window-wait seconds at most)
    "--after-window": (str, ""), "--after-window-wait": (float, 30.0),
    # health: the boot id of the OS before a reset (the host fails while it still runs that)
    "--boot-id-not": (str, ""),
}


class Usage(Exception):
    """A command line this script does not take (exit 2, as argparse's)."""


class Args:
    def __init__(self, command):
        self.command = command
        for name, (_kind, default) in OPTIONS.items():
            setattr(self, name[2:].replace("-", "_"), default)


def parse_args(argv):
    """COMMAND [--option VALUE | --option=VALUE] ...: an Args, or Usage."""
    if not argv or argv[0] not in COMMANDS:
        raise Usage("argument command: invalid choice: %r (choose from %s)" % (
            argv[0] if argv else "", ", ".join(repr(c) for c in sorted(COMMANDS))))
    args = Args(argv[0])
    rest = list(argv[1:])
    while rest:
        word = rest.pop(0)
        name, given, value = word.partition("=")
        if name not in OPTIONS:
            raise Usage("unrecognized arguments: %s" % word)
        kind = OPTIONS[name][0]
        if not given:
            if not rest:
                raise Usage("argument %s: expected one argument" % name)
            value = rest.pop(0)
        try:
            value = kind(value)
        except ValueError:
            raise Usage("argument %s: invalid %s value: %r" % (
                name, kind.__name__, value)) from None
        setattr(args, name[2:].replace("-", "_"), value)
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    try:
        args = parse_args(argv)
    except Usage as err:
        sys.stderr.write("usage: fleet_host.py COMMAND [--option VALUE ...] (--help)\n"
                         "fleet_host.py: error: %s\n" % err)
        return 2
    rc, doc = run_command(args.command, args)
    print(json.dumps(doc))
    return rc


def run_command(name, args):
    """(exit code, the JSON document the command prints): a refusal is {"ok": false, "error"}."""
    try:
        result = COMMANDS[name](args)
    except Failure as err:
        return 1, dict(err.doc, ok=False, error=str(err))
    result["ok"] = True
    return 0, result


if __name__ == "__main__":
    sys.exit(main())
