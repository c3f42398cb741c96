"""Host variables resolved once per inventory, so an Ansible run costs the same for 10 hosts or
20,000: each run gets an inventory of only its hosts, their variables already resolved.

Resolution uses ansible-core's own InventoryManager and VariableManager (every inventory form:
YAML, INI, directories, group_vars/host_vars, dynamic scripts and plugins), the way
`ansible-inventory --list` shows host variables: group and host variables merged by Ansible's
precedence, internal and magic variables left out. Inventory-adjacent vars are included,
playbook-adjacent ones (playbooks/group_vars) are not: ansible-playbook still loads those itself.

Templates: a value Ansible would render (a template written in the inventory, e.g.
`ansible_host: "{{ inventory_hostname }}.dc1"`) is rendered here, once, with the host's variables
from the whole inventory (inventory_hostname, groups, group_names); a value Ansible would not
render (`!unsafe`, untrusted data) is kept as it is. The run's inventory only holds data: any
string still carrying a Jinja marker is written as `!unsafe`, so Ansible never renders it. A
template that cannot be rendered here (undefined variable, a variable known only at run time)
or a value that is not plain data (vault-encrypted) is kept as an error of that host and
variable: a run on that host is refused, naming both.

Cache: one SQLite file per inventory path (a row per host, a row per group), rebuilt when the
fingerprint of the inventory's files (path, size, mtime, ctime, inode of the source and of every
file under it or under its group_vars/host_vars) changes; dynamic sources (executable scripts,
inventory plugin configs) are also re-read after FLEET_ROLLOUT_INVENTORY_TTL seconds (default
900) or when a requested host is missing. A step reads only its hosts' rows.
The cache also keeps what inventory.load_fleet returns (every host's FleetHost fields, a table
`fleet`, and each group's members, a table `members`): a plan on an unchanged inventory reads
those instead of parsing it (fleet_hosts); an inventory with a host load_fleet refuses stores
none (the parse then reports it).
Where: FLEET_ROLLOUT_CACHE_DIR, else $XDG_CACHE_HOME/fleet_rollout, else ~/.cache/fleet_rollout
(0700; the rows may hold connection secrets such as ansible_become_password; files 0600).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sqlite3
import stat
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from fleet_rollout.errors import ConfigError
from fleet_rollout.paths import private_dir

SCHEMA = 4  # caches of another schema are built again
JINJA_MARKERS = ("{{", "{%", "{#")
GROUP_SAMPLE = 10
DEFAULT_TTL = 900.0
MISSING_RETRY_AGE = 30.0  # a dynamic source is re-read for a missing host once it is this old
PRUNE_AGE = 14 * 86400.0  # cache files of inventories not used for two weeks are removed
VARS_DIRS = ("group_vars", "host_vars")
# magic or internal: never inventory data (ansible-inventory leaves these out too: ansible-core's
# constants.INTERNAL_STATIC_VARS where it has them, else the list of its CLI, which these hold)
EXTRA_INTERNAL = ("omit", "ansible_check_mode", "ansible_run_tags", "ansible_skip_tags",
                  "ansible_search_path", "ansible_diff_mode", "ansible_config_file",
                  "ansible_forks", "ansible_inventory_sources", "ansible_limit",
                  "ansible_playbook_python", "ansible_verbosity", "ansible_version",
                  "inventory_dir", "inventory_file", "inventory_hostname",
                  "inventory_hostname_short", "groups", "group_names", "playbook_dir")


def default_cache_dir() -> str:
    explicit = os.environ.get("FLEET_ROLLOUT_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fleet_rollout")


def _ttl() -> float:
    try:
        return max(0.0, float(os.environ.get("FLEET_ROLLOUT_INVENTORY_TTL", DEFAULT_TTL)))
    except ValueError:
        return DEFAULT_TTL


# ---------------------------------------------------------------- fingerprint

def _source_files(source: str) -> List[str]:
    """Every file whose change can change a host's variables, sorted."""
    source = os.path.abspath(source)
    roots = [source] if os.path.isdir(source) else \
        [source] + [os.path.join(os.path.dirname(source), d) for d in VARS_DIRS]
    out: List[str] = []
    for root in roots:
        if os.path.isdir(root):
            out.append(root)
            for base, dirs, files in os.walk(root):
                dirs.sort()
                out.extend(os.path.join(base, d) for d in dirs)  # a removed file changes its dir
                out.extend(os.path.join(base, f) for f in sorted(files))
        elif os.path.exists(root):
            out.append(root)
    return sorted(out)


def _is_dynamic(path: str) -> bool:
    """An executable script, or a small inventory plugin config (`plugin: ...`)."""
    try:
        info = os.stat(path)
    except OSError:
        return False
    if not stat.S_ISREG(info.st_mode):
        return False
    if info.st_mode & 0o111:
        return True
    if info.st_size > 65536 or not path.endswith((".yml", ".yaml", ".json")):
        return False
    try:
        with open(path, "rb") as handle:
            head = handle.read(65536)
    except OSError:
        return False
    return any(line.strip().startswith(b"plugin:") for line in head.splitlines()
               if not line.startswith((b" ", b"\t")))


def fingerprint(source: str) -> Tuple[str, bool]:
    """(digest of the inventory's files' identities, whether the source is dynamic)."""
    from ansible import __version__ as ansible_version

    digest = hashlib.sha256(f"{SCHEMA}\0{ansible_version}\0{os.path.abspath(source)}".encode())
    dynamic = False
    for path in _source_files(source):
        try:
            info = os.stat(path)
        except OSError:
            continue
        digest.update(f"\0{path}\0{info.st_size}\0{info.st_mtime_ns}\0{info.st_ctime_ns}\0"
                      f"{info.st_ino}\0{info.st_mode}".encode())
        dynamic = dynamic or (path.startswith(os.path.abspath(source)) and _is_dynamic(path))
    return digest.hexdigest(), dynamic


# ---------------------------------------------------------------- resolution

def _has_marker(value: Any) -> bool:
    if isinstance(value, str):
        return any(marker in value for marker in JINJA_MARKERS)
    if isinstance(value, dict):
        return any(_has_marker(k) or _has_marker(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_marker(v) for v in value)
    return False


def _not_data(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not plain data (vault-encrypted?)")


def _plain(value: Any) -> Any:
    """Plain JSON types (Ansible's tagged str/int subclasses become str/int)."""
    return json.loads(json.dumps(value, default=_not_data))


def _magic_names() -> frozenset:
    from ansible import constants as C

    return frozenset(getattr(C, "INTERNAL_STATIC_VARS", ())) | frozenset(EXTRA_INTERNAL) | \
        frozenset(("ansible_facts", "ansible_local"))


@dataclass
class HostEntry:
    name: str
    vars: Dict[str, Any] = field(default_factory=dict)
    groups: List[str] = field(default_factory=list)
    errors: Dict[str, str] = field(default_factory=dict)


def resolve_host(variable_manager: Any, loader: Any, host: Any,
                 internal: Optional[frozenset] = None) -> HostEntry:
    """One host's variables as plain data (templates Ansible would render, rendered)."""
    internal = internal if internal is not None else _magic_names()
    raw = variable_manager.get_vars(host=host, include_hostvars=False, stage="all")
    entry = HostEntry(host.name, groups=sorted(g.name for g in host.get_groups()
                                               if g.name not in ("all", "ungrouped")))
    templar = None
    for key in sorted(raw):
        if key in internal:
            continue
        value = raw[key]
        try:
            if _has_marker(key):
                raise ValueError("a Jinja marker in a variable name")
            if _has_marker(value):
                if templar is None:
                    from ansible.template import Templar

                    templar = Templar(loader=loader, variables=raw)
                value = templar.template(value)
            entry.vars[str(key)] = _plain(value)
        except Exception as exc:  # any Ansible error: an error of this var of this host
            text = (str(exc).strip().splitlines() or [""])[0][:300]
            entry.errors[str(key)] = f"{type(exc).__name__}: {text}" if text else \
                type(exc).__name__
    return entry


def load_manager(source: str) -> Tuple[Any, Any]:
    """(InventoryManager, DataLoader) for `source`."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    if not os.path.exists(source):
        raise ConfigError(f"inventory {source}: no such file or directory")
    loader = DataLoader()
    return InventoryManager(loader=loader, sources=[os.path.abspath(source)]), loader


def _forget_vars_files() -> None:
    """host_group_vars keeps the group_vars/host_vars files it found for the process's life:
    a rebuild in the same process must look again (a file may have been added or removed)."""
    try:
        from ansible.plugins.vars import host_group_vars
    except ImportError:
        return
    for name in ("FOUND", "NAK"):
        found = getattr(host_group_vars, name, None)
        if hasattr(found, "clear"):
            found.clear()


def resolve_all(manager: Any, loader: Any) -> Tuple[List[HostEntry], Dict[str, List[str]]]:
    """Every host's entry, and every group's (recursive) member names."""
    from ansible.vars.manager import VariableManager

    _forget_vars_files()
    with tempfile.TemporaryDirectory(prefix="fleet-hostvars-") as empty:
        old_basedir = loader.get_basedir()
        loader.set_basedir(empty)  # no playbook-adjacent (cwd) group_vars/host_vars
        try:
            variable_manager = VariableManager(loader=loader, inventory=manager)
            internal = _magic_names()
            entries = [resolve_host(variable_manager, loader, host, internal)
                       for host in manager.get_hosts(pattern="all")]
        finally:
            loader.set_basedir(old_basedir)
    groups = {name: sorted(h.name for h in group.get_hosts())
              for name, group in manager.groups.items()}
    return entries, groups


# ---------------------------------------------------------------- cache

def _cache_file(source: str, cache_dir: Optional[str]) -> str:
    directory = private_dir(os.path.join(cache_dir or default_cache_dir(), "hostvars"))
    key = hashlib.sha256(os.path.abspath(source).encode()).hexdigest()[:32]
    return os.path.join(directory, f"{key}.sqlite")


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _meta(path: str) -> Optional[Dict[str, str]]:
    if not os.path.exists(path):
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            return dict(db.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.Error:
        return None


def _fresh(meta: Optional[Dict[str, str]], digest: str) -> bool:
    if not meta or meta.get("fingerprint") != digest or meta.get("schema") != str(SCHEMA):
        return False
    if meta.get("dynamic") == "1":
        return time.time() - float(meta.get("created", "0")) < _ttl()
    return True


def _write(path: str, source: str, digest: str, dynamic: bool, entries: List[HostEntry],
           groups: Dict[str, List[str]],
           fleet: Optional[Dict[str, Dict[str, Any]]] = None) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".hostvars-", suffix=".tmp", dir=os.path.dirname(path))
    os.close(fd)
    try:
        with contextlib.closing(sqlite3.connect(tmp)) as db:
            db.execute("PRAGMA journal_mode=OFF")
            db.execute("PRAGMA synchronous=OFF")
            db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
            db.execute("CREATE TABLE hosts (name TEXT PRIMARY KEY, doc TEXT)")
            db.execute("CREATE TABLE groups (name TEXT PRIMARY KEY, count INTEGER, sample TEXT)")
            db.executemany("INSERT INTO meta VALUES (?, ?)", [
                ("schema", str(SCHEMA)), ("fingerprint", digest), ("source", source),
                ("dynamic", "1" if dynamic else "0"), ("created", repr(time.time())),
                ("hosts", str(len(entries)))])
            db.executemany("INSERT INTO hosts VALUES (?, ?)", (
                (e.name, json.dumps({"vars": e.vars, "groups": e.groups, "errors": e.errors},
                                    sort_keys=True)) for e in entries))
            db.executemany("INSERT INTO groups VALUES (?, ?, ?)", (
                (name, len(members), json.dumps(members[:GROUP_SAMPLE]))
                for name, members in groups.items()))
            db.execute("CREATE TABLE fleet (name TEXT PRIMARY KEY, doc TEXT)")
            db.execute("CREATE TABLE members (name TEXT PRIMARY KEY, hosts TEXT)")
            if fleet is not None:
                db.executemany("INSERT INTO fleet VALUES (?, ?)", (
                    (name, json.dumps(doc, sort_keys=True)) for name, doc in fleet.items()))
                db.executemany("INSERT INTO members VALUES (?, ?)", (
                    (name, json.dumps(members)) for name, members in groups.items()
                    if name != "all"))  # all: every host (the fleet table)
            db.execute("INSERT INTO meta VALUES ('fleet', ?)", ("1" if fleet else "0",))
            db.commit()
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)  # readers see the old file or the new one, never half of one
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _prune(directory: str, keep: str) -> None:
    cutoff = time.time() - PRUNE_AGE
    for name in os.listdir(directory):
        full = os.path.join(directory, name)
        if full in (keep, keep + ".lock") or not name.endswith((".sqlite", ".lock", ".tmp")):
            continue
        try:
            if os.stat(full).st_mtime < cutoff:
                os.unlink(full)
        except OSError:
            pass


def _fleet_docs(source: str, manager: Any,
                fleet: Optional[List[Any]]) -> Optional[Dict[str, Dict[str, Any]]]:
    """The FleetHost fields of every host as load_fleet finds them (`fleet`: its result, when
    it has it), None when load_fleet would refuse this inventory."""
    if fleet is None:
        from fleet_rollout.inventory import fleet_of_manager

        try:
            fleet = fleet_of_manager(source, manager)
        except ConfigError:
            return None
    return {h.name: h.to_dict() for h in fleet}


def build(source: str, cache_dir: Optional[str] = None, manager: Any = None,
          loader: Any = None, digest: Optional[Tuple[str, bool]] = None,
          fleet: Optional[List[Any]] = None) -> str:
    """Resolve every host of `source` and store the cache; its path. `manager`/`loader`: an
    InventoryManager already loaded from `source` (plan time), else it is loaded here.
    `digest`: the fingerprint taken before the inventory was read; `fleet`: load_fleet's
    hosts of that manager (else they are found here)."""
    path = _cache_file(source, cache_dir)
    digest = digest or fingerprint(source)
    if manager is None:
        manager, loader = load_manager(source)
    docs = _fleet_docs(source, manager, fleet)  # before resolving: from the inventory alone
    entries, groups = resolve_all(manager, loader)
    _write(path, os.path.abspath(source), digest[0], digest[1], entries, groups, docs)
    _prune(os.path.dirname(path), path)
    return path


def ensure(source: str, cache_dir: Optional[str] = None, manager: Any = None,
           loader: Any = None, force: bool = False,
           digest: Optional[Tuple[str, bool]] = None,
           fleet: Optional[List[Any]] = None) -> str:
    """The cache file of `source`, rebuilt first if the inventory changed (one at a time).
    `manager`/`loader`: an InventoryManager already loaded from `source`; `digest`: the
    fingerprint taken before it was loaded."""
    path = _cache_file(source, cache_dir)
    digest = digest or fingerprint(source)
    if not force and _fresh(_meta(path), digest[0]):
        return path
    with _locked(path):
        meta = _meta(path)
        if not force and _fresh(meta, digest[0]):
            return path  # another process built it while this one waited
        if force and meta and meta.get("fingerprint") == digest[0] and \
                time.time() - float(meta.get("created", "0")) < MISSING_RETRY_AGE:
            return path
        return build(source, cache_dir, manager, loader, digest, fleet)


def warm(source: str, manager: Any, loader: Any, cache_dir: Optional[str] = None,
         digest: Optional[Tuple[str, bool]] = None,
         fleet: Optional[List[Any]] = None) -> Optional[str]:
    """Plan time: store the cache from an inventory already loaded (fingerprint taken before
    loading; `fleet`: load_fleet's hosts of it). Best effort: a cache that cannot be written is
    built again by the first run."""
    try:
        return ensure(source, cache_dir, manager, loader, digest=digest, fleet=fleet)
    except (OSError, sqlite3.Error):
        return None


class FleetCache:
    """load_fleet's answers from a fresh cache: every host's FleetHost fields, group members."""

    def __init__(self, path: str, digest: str) -> None:
        self.path = path
        self.digest = digest

    def read(self, groups: Iterable[str]) -> Optional[Tuple[Dict[str, Dict[str, Any]],
                                                            Dict[str, List[str]]]]:
        """(host name -> FleetHost fields, group name -> member host names (recursive, as
        Ansible's group.get_hosts()) of the given names that are groups other than `all`),
        from one connection to one version of the file; None if it is no longer this
        fingerprint's (rebuilt meanwhile)."""
        names = sorted(set(groups))
        members: Dict[str, List[str]] = {}
        with contextlib.closing(sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)) as db:
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            if meta.get("fingerprint") != self.digest or meta.get("fleet") != "1":
                return None
            hosts = {name: json.loads(doc)
                     for name, doc in db.execute("SELECT name, doc FROM fleet")}
            for start in range(0, len(names), 500):
                chunk = names[start:start + 500]
                marks = ",".join("?" * len(chunk))
                for name, listed in db.execute(
                        f"SELECT name, hosts FROM members WHERE name IN ({marks})", chunk):
                    members[name] = json.loads(listed)
        return hosts, members


def fleet_cache(source: str, cache_dir: Optional[str] = None,
                digest: Optional[Tuple[str, bool]] = None) -> Optional[FleetCache]:
    """The cache of `source` if it is fresh (same fingerprint; a dynamic source younger than
    the TTL) and holds load_fleet's answers; None otherwise (the caller parses)."""
    try:
        path = _cache_file(source, cache_dir)
        digest = digest or fingerprint(source)
        meta = _meta(path)
        if not _fresh(meta, digest[0]) or (meta or {}).get("fleet") != "1":
            return None
        return FleetCache(path, digest[0])
    except (OSError, sqlite3.Error):
        return None


@dataclass
class Lookup:
    hosts: Dict[str, HostEntry]
    groups: Dict[str, Tuple[int, List[str]]]  # requested names that are groups: count, sample
    missing: List[str]


def _read(path: str, names: List[str]) -> Lookup:
    hosts: Dict[str, HostEntry] = {}
    groups: Dict[str, Tuple[int, List[str]]] = {}
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        for start in range(0, len(names), 500):
            chunk = names[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for name, doc in db.execute(f"SELECT name, doc FROM hosts WHERE name IN ({marks})",
                                        chunk):
                data = json.loads(doc)
                hosts[name] = HostEntry(name, data["vars"], data["groups"], data["errors"])
            for name, count, sample in db.execute(
                    f"SELECT name, count, sample FROM groups WHERE name IN ({marks})", chunk):
                groups[name] = (int(count), json.loads(sample))
    missing = [n for n in names if n not in hosts and n not in groups]
    return Lookup(hosts, groups, missing)


def lookup(source: str, names: Iterable[str], cache_dir: Optional[str] = None) -> Lookup:
    """The entries of `names` (plain host names) from the cache of `source`."""
    names = sorted(set(names))
    path = ensure(source, cache_dir)
    found = _read(path, names)
    meta = _meta(path) or {}
    if found.missing and meta.get("dynamic") == "1":
        path = ensure(source, cache_dir, force=True)  # a host added since: read the source again
        found = _read(path, names)
    return found


# ---------------------------------------------------------------- the run's inventory

class _Unsafe(str):
    pass


def _unsafe_strings(value: Any) -> Any:
    if isinstance(value, str):
        return _Unsafe(value) if _has_marker(value) else value
    if isinstance(value, dict):
        return {k: _unsafe_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unsafe_strings(v) for v in value]
    return value


def run_inventory_text(entries: Iterable[HostEntry]) -> str:
    """YAML inventory of exactly `entries`: their variables as data (`!unsafe` wherever a
    string carries a Jinja marker), their groups (group_names stays what it was), no others."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(_Unsafe, lambda dumper, data: dumper.represent_scalar(
        "!unsafe", str(data), style="'"))
    hosts: Dict[str, Any] = {}
    children: Dict[str, Any] = {}
    for entry in sorted(entries, key=lambda e: e.name):
        hosts[entry.name] = _unsafe_strings(entry.vars)
        for group in entry.groups:
            children.setdefault(group, {"hosts": {}})["hosts"][entry.name] = None
    doc: Dict[str, Any] = {"all": {"hosts": hosts}}
    if children:
        doc["all"]["children"] = children
    return yaml.dump(doc, Dumper=Dumper, default_flow_style=False, sort_keys=True,
                     allow_unicode=True, width=1 << 20)


def write_run_inventory(path: str, entries: Iterable[HostEntry]) -> str:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(run_inventory_text(entries))
    return path
