"""StackStorm RBAC as st2-rbac-backend defines it: who may do what through the runtime's APIs.

The definitions are st2's own YAML files, under `<home>/rbac/` as StackStorm keeps them under
/opt/stackstorm/rbac/ (st2rbac_backend/loader.py):

    rbac/roles/<any>.yaml         name, description, enabled, permission_grants:
                                  [{resource_uid: "pack:fleet_rollout", permission_types: [...]}]
    rbac/assignments/<user>.yaml  username, description, enabled, roles: [...]

The system roles need no file: `system_admin` and `admin` may do everything, `observer` may view
and list everything (st2rbac_backend/resolvers.py READ_PERMISSION_NAMES). A user with no grant
may do nothing but what needs no grant (their own user-scoped keys). Grants resolve as st2's
resolvers do: an action permission on the action or on its pack, `<type>_all` implying every
permission of its type; an execution's view, stop and re-run come from `action_view` and
`action_execute` on its action; an inquiry's view and respond from an inquiry grant or from
`action_execute` on the workflow that asked it (an inquiry grant counts only with an
`inquiry:...` resource_uid: st2-rbac-backend finds it by its resource type, which a grant
without a uid lacks).

Which users are `system_admin` without a file is the caller's to say: the runtime gives the
role to its own user and its system user, as StackStorm's installer assigns it to its admin
user and to `stanley`. The files are read again when one of them changes.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

import yaml

SYSTEM_ADMIN = "system_admin"
ADMIN = "admin"
OBSERVER = "observer"
SYSTEM_ROLES = (SYSTEM_ADMIN, ADMIN, OBSERVER)
READ_PERMISSION_NAMES = ("view", "list", "search")

# st2common/rbac/types.py: resource type -> its permission names
PERMISSIONS: Dict[str, Tuple[str, ...]] = {
    "runner_type": ("list", "view", "modify", "all"),
    "pack": ("list", "view", "create", "modify", "delete", "install", "uninstall", "register",
             "config", "search", "views_index_health", "all"),
    "sensor_type": ("list", "view", "modify", "all"),
    "action": ("list", "view", "create", "modify", "delete", "execute", "all"),
    "action_alias": ("list", "view", "create", "modify", "match", "help", "delete", "all"),
    "execution": ("list", "view", "rerun", "stop", "all", "views_filters_list"),
    "rule": ("list", "view", "create", "modify", "delete", "all"),
    "rule_enforcement": ("list", "view"),
    "key_value_pair": ("list", "view", "set", "delete", "all"),
    "webhook": ("list", "view", "create", "send", "delete", "all"),
    "timer": ("list", "view", "all"),
    "api_key": ("list", "view", "create", "modify", "delete", "all"),
    "trace": ("list", "view", "all"),
    "trigger": ("list", "view", "all"),
    "policy_type": ("list", "view", "all"),
    "policy": ("list", "view", "create", "modify", "delete", "all"),
    "stream": ("view",),
    "inquiry": ("list", "view", "respond", "all"),
}
PERMISSION_TYPES: FrozenSet[str] = frozenset(
    f"{resource}_{name}" for resource, names in PERMISSIONS.items() for name in names)


class RbacError(Exception):
    """An RBAC definition file that cannot be used (names the file and the field)."""


class AccessDenied(Exception):
    """st2's ResourceAccessDeniedError: the user lacks a permission (HTTP 403)."""

    def __init__(self, user: str, permission: str, resource_uid: Optional[str] = None) -> None:
        if resource_uid:
            text = (f'User "{user}" doesn\'t have required permission "{permission}" on'
                    f' resource "{resource_uid}"')
        else:
            text = f'User "{user}" doesn\'t have required permission "{permission}"'
        super().__init__(text)
        self.user, self.permission, self.resource_uid = user, permission, resource_uid


@dataclass(frozen=True)
class Grant:
    resource_uid: Optional[str]
    permission_types: FrozenSet[str]


def resource_type_of(permission_type: str) -> str:
    """st2's PermissionType.get_resource_type."""
    if permission_type == "pack_views_index_health":
        return "pack"
    if permission_type == "execution_views_filters_list":
        return "execution"
    for resource in sorted(PERMISSIONS, key=len, reverse=True):
        if permission_type.startswith(resource + "_"):
            return resource
    raise ValueError(f"unknown permission type {permission_type!r}")


def _name_of(permission_type: str) -> str:
    return permission_type[len(resource_type_of(permission_type)) + 1:]


def _pack_of(ref: str) -> str:
    return ref.split(".", 1)[0]


def action_uid(ref: str) -> str:
    pack, _, name = ref.partition(".")
    return f"action:{pack}:{name}"


def alias_uid(pack: str, name: str) -> str:
    """st2's uid of an action alias (ActionAliasDB: action_alias:<pack>:<name>)."""
    return f"action_alias:{pack}:{name}"


class Definitions:
    """Roles (name -> grants) and assignments (user -> role names) as loaded from files."""

    def __init__(self, roles: Dict[str, List[Grant]], assignments: Dict[str, List[str]]) -> None:
        self.roles = roles
        self.assignments = assignments


def _load_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise RbacError(f"{path}: {e}") from None
    if not isinstance(data, dict):
        raise RbacError(f"{path}: must be a mapping")
    return data


def _role(path: Path) -> Tuple[str, bool, List[Grant]]:
    data = _load_yaml(path)
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise RbacError(f"{path}: name: a role needs a name")
    if name in SYSTEM_ROLES:
        raise RbacError(f"{path}: name: {name!r} is a system role and cannot be defined")
    grants: List[Grant] = []
    raw = data.get("permission_grants") or []
    if not isinstance(raw, list):
        raise RbacError(f"{path}: permission_grants: must be a list")
    for i, item in enumerate(raw):
        where = f"{path}: permission_grants[{i}]"
        if not isinstance(item, dict):
            raise RbacError(f"{where}: must be a mapping")
        uid = item.get("resource_uid")
        types = item.get("permission_types")
        if uid is not None and not isinstance(uid, str):
            raise RbacError(f"{where}.resource_uid: must be a string")
        if not isinstance(types, list) or not types or \
                not all(isinstance(t, str) for t in types):
            raise RbacError(f"{where}.permission_types: a list of permission types")
        for t in types:
            if t not in PERMISSION_TYPES:
                raise RbacError(f"{where}.permission_types: unknown permission type {t!r}")
            if uid is None:
                continue
            uid_type = uid.split(":", 1)[0]
            own = resource_type_of(t)
            # st2 allows action_* on a pack (the pack's actions) and on an action
            if own != uid_type and not (uid_type == "pack" and own in (
                    "action", "action_alias", "rule", "sensor_type", "policy")):
                raise RbacError(f"{where}: permission type {t!r} does not apply to"
                                f" resource {uid!r}")
        grants.append(Grant(uid, frozenset(types)))
    return name, data.get("enabled", True) is not False, grants


def _assignment(path: Path) -> Tuple[str, bool, List[str]]:
    data = _load_yaml(path)
    user = data.get("username")
    if not isinstance(user, str) or not user:
        raise RbacError(f"{path}: username: an assignment needs a user name")
    roles = data.get("roles") or []
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise RbacError(f"{path}: roles: a list of role names")
    return user, data.get("enabled", True) is not False, roles


def load(directory: Path) -> Definitions:
    """Every role and assignment file under `directory` (roles/, assignments/)."""
    roles: Dict[str, List[Grant]] = {}
    assignments: Dict[str, List[str]] = {}
    for path in sorted((directory / "roles").glob("*.yaml")):
        name, enabled, grants = _role(path)
        if name in roles:
            raise RbacError(f"{path}: name: role {name!r} is defined twice")
        if enabled:
            roles[name] = grants
    for path in sorted((directory / "assignments").glob("*.yaml")):
        user, enabled, names = _assignment(path)
        if not enabled:
            continue
        for role in names:
            if role not in roles and role not in SYSTEM_ROLES:
                raise RbacError(f"{path}: roles: no role {role!r} is defined (roles/*.yaml)")
        assignments.setdefault(user, [])
        assignments[user] += [r for r in names if r not in assignments[user]]
    return Definitions(roles, assignments)


def write_assignment(directory: Path, user: str, roles: Iterable[str]) -> Path:
    """Write `assignments/<user>.yaml` (st2's format), replacing the user's roles."""
    target = directory / "assignments"
    target.mkdir(parents=True, exist_ok=True)
    path = target / f"{user}.yaml"
    path.write_text(yaml.safe_dump({"username": user, "description": "",
                                    "enabled": True, "roles": list(roles)},
                                   sort_keys=False))
    return path


class Rbac:
    """Permission checks for one runtime home."""

    def __init__(self, directory: Path, system_admins: Iterable[str] = (),
                 admins: Iterable[str] = ()) -> None:
        self.directory = Path(directory)
        self.system_admins: Set[str] = set(system_admins)
        self.admins: Set[str] = set(admins)
        self._lock = threading.Lock()
        self._stamp: Optional[Tuple] = None
        self._defs = Definitions({}, {})
        self.definitions()  # a broken file is an error at start

    def _files_stamp(self) -> Tuple:
        stamp = []
        for sub in ("roles", "assignments"):
            folder = self.directory / sub
            try:
                for path in sorted(folder.glob("*.yaml")):
                    st = path.stat()
                    stamp.append((str(path), st.st_mtime_ns, st.st_size))
            except OSError:
                continue
        return tuple(stamp)

    def definitions(self) -> Definitions:
        with self._lock:
            stamp = self._files_stamp()
            if stamp != self._stamp:
                self._defs = load(self.directory)
                self._stamp = stamp
            return self._defs

    @property
    def defined(self) -> bool:
        """Whether the home has RBAC definitions (an rbac/ directory)."""
        return self.directory.is_dir()

    # ------------------------------------------------------------------ who has what
    def roles_of(self, user: Optional[str]) -> List[str]:
        if not user:
            return []
        found = list(self.definitions().assignments.get(user, []))
        if user in self.system_admins and SYSTEM_ADMIN not in found:
            found.append(SYSTEM_ADMIN)
        if user in self.admins and ADMIN not in found:
            found.append(ADMIN)
        return found

    def is_admin(self, user: Optional[str]) -> bool:
        roles = self.roles_of(user)
        return SYSTEM_ADMIN in roles or ADMIN in roles

    def _by_system_role(self, user: Optional[str], permission_type: str) -> bool:
        roles = self.roles_of(user)
        if SYSTEM_ADMIN in roles or ADMIN in roles:
            return True
        return OBSERVER in roles and _name_of(permission_type) in READ_PERMISSION_NAMES

    def _grants(self, user: Optional[str]) -> List[Grant]:
        defs = self.definitions()
        return [g for role in self.roles_of(user) for g in defs.roles.get(role, [])]

    def _granted(self, user: Optional[str], permission_types: Iterable[str],
                 resource_uids: Optional[Iterable[str]] = None,
                 resource_type: Optional[str] = None) -> bool:
        wanted = set(permission_types)
        uids = set(resource_uids) if resource_uids is not None else None
        for grant in self._grants(user):
            if not wanted & grant.permission_types:
                continue
            if uids is not None and grant.resource_uid not in uids:
                continue
            if resource_type and uids is None and (
                    grant.resource_uid is None
                    or grant.resource_uid.split(":", 1)[0] != resource_type):
                # st2-rbac-backend looks such grants up by resource type, which a grant
                # without a resource_uid does not have
                continue
            return True
        return False

    # ------------------------------------------------------------------ checks
    def may(self, user: Optional[str], permission_type: str) -> bool:
        """A permission that is not about one resource (the `*_list` ones, stream_view)."""
        if self._by_system_role(user, permission_type):
            return True
        return self._granted(user, [permission_type])

    def may_action(self, user: Optional[str], permission_type: str, ref: str) -> bool:
        """action_view / action_execute / ... on the action `ref` (grants on it or its pack)."""
        if self._by_system_role(user, permission_type):
            return True
        if _name_of(permission_type) == "view":
            types = ["action_all", "action_create", "action_modify", "action_delete",
                     "action_execute", permission_type]
        else:
            types = ["action_all", permission_type]
        return self._granted(user, types, [action_uid(ref), f"pack:{_pack_of(ref)}"])

    def may_execution(self, user: Optional[str], permission_type: str, action_ref: str
                      ) -> bool:
        """execution_view / _stop / _rerun on an execution of `action_ref`."""
        if self._by_system_role(user, permission_type):
            return True
        name = _name_of(permission_type)
        implied = {"view": "action_view", "stop": "action_execute", "rerun": "action_execute",
                   "all": "action_all"}.get(name, permission_type)
        types = ["action_all", implied]
        if implied == "action_view":  # st2: execute (and the others) imply view
            types += ["action_execute", "action_create", "action_modify", "action_delete"]
        return self._granted(user, types, [action_uid(action_ref), f"pack:{_pack_of(action_ref)}"])

    def may_inquiry(self, user: Optional[str], permission_type: str,
                    workflow_ref: Optional[str]) -> bool:
        """inquiry_view / inquiry_respond: an inquiry grant, or action_execute on the workflow
        that asked it (its pack or itself)."""
        if self._by_system_role(user, permission_type):
            return True
        if self._granted(user, ["inquiry_view", "inquiry_respond", "inquiry_all"]
                         if permission_type == "inquiry_view" else
                         [permission_type, "inquiry_all"], resource_type="inquiry"):
            return True
        if workflow_ref:
            return self._granted(user, ["action_all", "action_execute"],
                                 [action_uid(workflow_ref), f"pack:{_pack_of(workflow_ref)}"])
        return False

    def may_resource(self, user: Optional[str], permission_type: str,
                     resource_uids: Iterable[str]) -> bool:
        """A permission on one resource (a rule, a system-scoped key, an API key): a system
        role, or a grant on one of `resource_uids` (the resource, its pack) of that
        permission or its type's `_all`; a view is implied by every other permission of the
        type (st2rbac_backend/resolvers.py)."""
        if self._by_system_role(user, permission_type):
            return True
        resource = resource_type_of(permission_type)
        types = [f"{resource}_all", permission_type]
        if _name_of(permission_type) == "view":
            types += [f"{resource}_{name}" for name in PERMISSIONS[resource]]
        return self._granted(user, types, list(resource_uids))

    # ------------------------------------------------------------------ assertions
    def require(self, user: Optional[str], permission_type: str) -> None:
        if not self.may(user, permission_type):
            raise AccessDenied(str(user), permission_type)

    def require_action(self, user: Optional[str], permission_type: str, ref: str) -> None:
        if not self.may_action(user, permission_type, ref):
            raise AccessDenied(str(user), permission_type, action_uid(ref))

    def require_execution(self, user: Optional[str], permission_type: str, ex_id: str,
                          action_ref: str) -> None:
        if not self.may_execution(user, permission_type, action_ref):
            raise AccessDenied(str(user), permission_type, f"execution:{ex_id}")

    def require_inquiry(self, user: Optional[str], permission_type: str, inquiry_id: str,
                        workflow_ref: Optional[str]) -> None:
        if not self.may_inquiry(user, permission_type, workflow_ref):
            raise AccessDenied(str(user), permission_type, f"inquiry:{inquiry_id}")
