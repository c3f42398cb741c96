"""Subprocess entry point of the python-script runner (st2's python_action_wrapper).

Reads one JSON document on stdin (pack, action file, config, parameters, user, datastore
paths), loads the action's Action subclass, calls run(**parameters) and prints
`<delimiter>{"result": ..., "status": ...}<delimiter>` on stdout like st2. Exceptions go to
stderr with a non-zero exit code. `st2common` is the real package when importable, else the
runtime's shim.
"""
from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
import traceback
from typing import Any, Dict, List, Optional

ACTION_OUTPUT_RESULT_DELIMITER = "%%%%%%%%%%%%%%%%%%%%"
INVALID_STATUS_EXIT_CODE = 220
SYSTEM_SCOPE = "system"


class _KeyValuePair:
    """What st2client returns from list_values(): objects with name/value attributes."""

    def __init__(self, data: Dict[str, Any]) -> None:
        self.name = data["name"]
        self.value = data["value"]
        self.secret = data.get("secret", False)
        self.scope = data.get("scope")
        self.expire_timestamp = data.get("expire_timestamp")

    def __repr__(self) -> str:
        return f"<KeyValuePair name={self.name}>"


# what one datastore listing answers when no limit is given (st2: api.max_page_size)
PAGE = 100


class _DbKeys:
    """The home's datastore read directly: a home without RBAC serves one owner."""

    def __init__(self, db_path: str, key_path: str) -> None:
        from fleet_runtime.datastore import Datastore

        self.store = Datastore(db_path, key_path)

    def list(self, prefix: str, limit: int, offset: int) -> List[Dict[str, Any]]:
        return self.store.list(prefix=prefix)[offset : offset + limit]

    def get(self, name: str, decrypt: bool) -> Optional[str]:
        return self.store.get(name, decrypt=decrypt)

    def set(self, name: str, value: str, secret: bool, ttl: Optional[int]) -> None:
        self.store.set(name, value, secret=secret, ttl=ttl)

    def delete(self, name: str) -> bool:
        return bool(self.store.delete(name))


class _ApiKeys:
    """The datastore through the engine's local API with the execution's token, as st2's
    ActionDatastoreService goes through st2api: the execution's user's RBAC grants apply."""

    def __init__(self) -> None:
        self.url = os.environ["ST2_ACTION_API_URL"].rstrip("/")
        self.token = os.environ["ST2_ACTION_AUTH_TOKEN"]

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        import urllib.error
        import urllib.request

        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}/{path}", data=data, method=method,
            headers={"X-Auth-Token": self.token, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as answer:
                text = answer.read()
        except urllib.error.HTTPError as err:  # st2client: the status and st2api's faultstring
            try:
                fault = json.loads(err.read() or b"{}").get("faultstring", "")
            except ValueError:
                fault = ""
            raise RuntimeError(f"{err.code} {err.reason}: {method} /{path.split('?')[0]}:"
                               f" {fault}") from None
        return json.loads(text) if text else None

    @staticmethod
    def _key(name: str, **query: Any) -> str:
        from urllib.parse import quote, urlencode

        return f"keys/{quote(name, safe='')}?{urlencode(dict(query, scope='system'))}"

    def list(self, prefix: str, limit: int, offset: int) -> List[Dict[str, Any]]:
        from urllib.parse import urlencode

        query = urlencode({"prefix": prefix, "scope": "system", "limit": limit,
                           "offset": offset})
        return list(self._call("GET", f"keys?{query}") or [])

    def get(self, name: str, decrypt: bool) -> Optional[str]:
        return (self._call("GET", self._key(name, decrypt=str(decrypt).lower())) or {}).get(
            "value")

    def set(self, name: str, value: str, secret: bool, ttl: Optional[int]) -> None:
        self._call("PUT", self._key(name), {"name": name, "value": value, "scope": "system",
                                            "secret": secret, "ttl": ttl})

    def delete(self, name: str) -> bool:
        self._call("DELETE", self._key(name))
        return True


class ActionService:
    """st2's ActionService: datastore access for the action (local keys are pack.Class:key),
    with st2's ActionDatastoreService's answers: get_value and delete_value answer None and
    False on any error, list_values and set_value raise; a listing is one page."""

    def __init__(self, wrapper: PythonActionWrapper) -> None:
        self._action_wrapper = wrapper
        self._store: Any = None

    @property
    def datastore_service(self) -> Any:
        if self._store is None:
            wrapper = self._action_wrapper
            self._store = _ApiKeys() if wrapper.datastore_api else _DbKeys(
                wrapper.db_path, wrapper.key_path)
        return self._store

    def _name(self, name: str, local: bool) -> str:
        if local:
            return f"{self._action_wrapper._pack}.{self._action_wrapper._class_name}:{name}"
        return name

    @staticmethod
    def _check_scope(scope: str) -> None:
        if scope != SYSTEM_SCOPE:
            raise ValueError(f"Scope {scope} is unsupported.")

    def get_user_info(self) -> Dict[str, Any]:
        return {"username": self._action_wrapper._user, "authentication": {"method": "local"}}

    def list_values(
        self,
        local: bool = True,
        prefix: Optional[str] = None,
        limit: Optional[int] = None,
        offset: Optional[int] = 0,
    ) -> List[_KeyValuePair]:
        key_prefix = self._name(prefix or "", local) if local else (prefix or "")
        items = self.datastore_service.list(key_prefix, limit or PAGE, offset or 0)
        return [_KeyValuePair(d) for d in items]

    def get_value(
        self, name: str, local: bool = True, scope: str = SYSTEM_SCOPE, decrypt: bool = False
    ) -> Optional[str]:
        self._check_scope(scope)
        try:
            return self.datastore_service.get(self._name(name, local), decrypt)
        except Exception:
            return None

    def set_value(
        self,
        name: str,
        value: Any,
        ttl: Optional[int] = None,
        local: bool = True,
        scope: str = SYSTEM_SCOPE,
        encrypt: bool = False,
    ) -> bool:
        self._check_scope(scope)
        self.datastore_service.set(self._name(name, local), str(value), encrypt, ttl)
        return True

    def delete_value(self, name: str, local: bool = True, scope: str = SYSTEM_SCOPE) -> bool:
        self._check_scope(scope)
        try:
            return bool(self.datastore_service.delete(self._name(name, local)))
        except Exception:
            return False


class PythonActionWrapper:
    def __init__(self, spec: Dict[str, Any]) -> None:
        self._pack = spec["pack"]
        self._file_path = spec["file_path"]
        self._config = spec.get("config") or {}
        self._parameters = spec.get("parameters") or {}
        self._user = spec.get("user")
        self._log_level = spec.get("log_level") or "DEBUG"
        self._class_name: Optional[str] = None
        self.db_path = spec["db_path"]
        self.key_path = spec["key_path"]
        # the datastore through the local API as the execution's user (a home with RBAC)
        self.datastore_api = bool(spec.get("datastore_api"))

    def _action_class(self, base: type) -> type:
        module_name = action_module_name(self._file_path)
        module_spec = importlib.util.spec_from_file_location(module_name, self._file_path)
        if module_spec is None or module_spec.loader is None:
            raise ImportError(f'Cannot load action module "{self._file_path}"')
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        module_spec.loader.exec_module(module)
        classes = [
            cls
            for _, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, base) and cls is not base and not inspect.isabstract(cls)
        ]
        local = [cls for cls in classes if cls.__module__ == module.__name__]
        chosen = local or classes
        if not chosen:
            raise Exception(
                f'File "{self._file_path}" has no action class or the file doesn\'t exist.'
            )
        return chosen[0]

    def run(self) -> None:
        from st2common.runners.base_action import Action

        action_cls = self._action_class(Action)
        self._class_name = action_cls.__name__
        action = action_cls(config=self._config, action_service=ActionService(self))
        output = action.run(**self._parameters)
        if isinstance(output, tuple) and len(output) == 2:
            status, result = output
        else:
            status, result = None, output
        if status is not None and not isinstance(status, bool):
            sys.stderr.write(
                "Status returned from the action run() method must either be True or False,"
                f" got: {status}\n"
            )
            sys.exit(INVALID_STATUS_EXIT_CODE)
        payload = {"result": result, "status": status}
        try:
            text = json.dumps(payload)
        except (TypeError, ValueError):
            payload["result"] = str(result)
            text = json.dumps(payload)
        delimiter = ACTION_OUTPUT_RESULT_DELIMITER
        sys.stdout.write(delimiter + text + "\n" + delimiter)
        sys.stdout.flush()


def action_module_name(file_path: str) -> str:
    """The name st2's loader gives an action's entry module."""
    return "st2_action_" + os.path.splitext(os.path.basename(file_path))[0]


def _shim_path() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "st2shim")


def setup_paths(spec: Dict[str, Any]) -> None:
    for path in reversed(spec.get("sys_path") or []):
        if path not in sys.path:
            sys.path.insert(0, path)
    shim = _shim_path()
    loaded = sys.modules.get("st2common")
    if loaded is not None:
        # a warm worker: the zygote imported st2common already (the shim or the real one)
        module_file = str(getattr(loaded, "__file__", "") or "")
        if module_file.startswith(os.path.join(shim, "")) and shim not in sys.path:
            sys.path.insert(0, shim)
        return
    try:
        import st2common.runners.base_action  # noqa: F401
    except ImportError:
        sys.path.insert(0, shim)
        for name in [m for m in sys.modules if m == "st2common" or m.startswith("st2common.")]:
            del sys.modules[name]


_setup_paths = setup_paths


def child_main(spec: Dict[str, Any]) -> int:
    """Run the execution `spec` describes in this process; the exit code (an action's
    sys.exit and the invalid-status exit propagate as SystemExit). Used by the cold path
    (`main`, a new interpreter) and by warm workers (a child forked by fleet_runtime.zygote,
    whose spec also carries the execution's `env` and `cwd`)."""
    env = spec.get("env")
    if isinstance(env, dict):
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in env.items()})
    cwd = spec.get("cwd")
    if cwd:
        os.chdir(str(cwd))
    setup_paths(spec)
    try:
        PythonActionWrapper(spec).run()
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def main() -> int:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except Exception:
        pass
    spec = json.loads(sys.stdin.readline())
    return child_main(spec)


if __name__ == "__main__":
    sys.exit(main())
