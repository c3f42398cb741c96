"""Readable output for the CLI: st2-like execution views, tables and task trees."""
from __future__ import annotations

import datetime
import json
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

import yaml

from fleet_runtime import masking

if TYPE_CHECKING:  # the views that need them get them from their caller: `key get` imports
    # neither the pack registry nor orquesta (0.4-0.5 CPU-s of imports a process)
    from fleet_runtime.database import Store
    from fleet_runtime.packs import Registry


def ts(value: Optional[float]) -> str:
    if value is None:
        return ""
    return datetime.datetime.fromtimestamp(value, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ"
    )[:-4] + "Z"


def elapsed(record: Dict[str, Any]) -> Optional[float]:
    start = record.get("start_ts") or record.get("created_ts")
    if start is None:
        return None
    import time

    end = record.get("end_ts") or time.time()
    return max(0.0, end - start)


def status_text(record: Dict[str, Any]) -> str:
    el = elapsed(record)
    if el is None:
        return record["status"]
    return f"{record['status']} ({el:.1f}s elapsed)"


def masked(registry: Registry, record: Dict[str, Any]) -> Dict[str, Any]:
    from fleet_runtime import params as params_util

    action = registry.actions.get(record["action"])
    parameters = params_util.mask_secrets(action, record.get("parameters") or {})
    return dict(masking.masker_of(registry).mask(parameters))


def masked_result(registry: Registry, record: Dict[str, Any]) -> Any:
    """The result with config and datastore secrets masked."""
    return masking.masker_of(registry).mask(record.get("result"))


def public(registry: Registry, record: Dict[str, Any]) -> Dict[str, Any]:
    """An execution as shown to users (secrets masked), st2-like field names."""
    return {
        "id": record["id"],
        "action": {"ref": record["action"], "runner_type": record["runner"]},
        "runner": {"name": record["runner"]},
        "status": record["status"],
        "parameters": masked(registry, record),
        "context": masking.masker_of(registry).mask(record.get("context") or {}),
        "result": masked_result(registry, record),
        "start_timestamp": ts(record.get("start_ts") or record.get("created_ts")),
        "end_timestamp": ts(record.get("end_ts")),
        "elapsed_seconds": round(elapsed(record) or 0.0, 3),
        "parent": record.get("parent_id"),
        "task": record.get("task_id"),
        "task_route": record.get("task_route"),
        "item_id": record.get("item_id"),
        "log": record.get("log") or [],
        # st2 keeps which action runner ran it in the LiveAction (`runner_info`: hostname,
        # pid), shown under `liveaction` by the API
        "liveaction": {"runner_info": record.get("runner_info") or {}},
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (tracebacks, stdout) as literal blocks."""


def _str_representer(dumper: yaml.SafeDumper, data: str) -> Any:
    if "\n" in data:
        clean = "\n".join(line.rstrip() for line in data.splitlines())
        return dumper.represent_scalar("tag:yaml.org,2002:str", clean, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _str_representer)


def dump_yaml(value: Any, indent: int = 2) -> str:
    text = yaml.dump(
        json.loads(json.dumps(value, default=str)), Dumper=_Dumper, default_flow_style=False,
        sort_keys=False, allow_unicode=True, width=100,
    ).rstrip("\n")
    pad = " " * indent
    return "\n".join(pad + line for line in text.splitlines())


def table(headers: Sequence[str], rows: List[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    sep = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [sep]
    for n, row in enumerate(cells):
        out.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
        if n == 0:
            out.append(sep)
    out.append(sep)
    return "\n".join(out)


def execution_tree(store: Store, root_id: str) -> List[Dict[str, Any]]:
    """Children of an execution, recursively, in creation order."""
    children = store.find_executions("parent_id=?", (root_id,))
    out = []
    for child in children:
        node = dict(child)
        if child["runner"] == "orquesta":
            node["children"] = execution_tree(store, child["id"])
        out.append(node)
    return out


def tree_rows(nodes: List[Dict[str, Any]], depth: int = 0) -> List[List[Any]]:
    rows = []
    for node in nodes:
        name = node.get("task_id") or node["action"]
        if node.get("item_id") is not None:
            name = f"{name}[{node['item_id']}]"
        el = elapsed(node)
        rows.append([
            "  " * depth + ("+ " if depth else "") + name,
            node["status"],
            node["action"],
            ts(node.get("start_ts")),
            f"{el:.2f}s" if el is not None and node.get("start_ts") else "",
            node["id"],
        ])
        rows.extend(tree_rows(node.get("children") or [], depth + 1))
    return rows


def execution_text(
    registry: Registry, store: Store, record: Dict[str, Any], with_tree: bool = True
) -> str:
    lines = [
        f"id: {record['id']}",
        f"action.ref: {record['action']}",
        "parameters:" + (" {}" if not record.get("parameters") else ""),
    ]
    if record.get("parameters"):
        lines.append(dump_yaml(masked(registry, record)))
    lines.append(f"status: {status_text(record)}")
    lines.append(f"start_timestamp: {ts(record.get('start_ts') or record.get('created_ts'))}")
    lines.append(f"end_timestamp: {ts(record.get('end_ts'))}")
    if record.get("parent_id"):
        lines.append(f"parent: {record['parent_id']}")
    if record.get("runner_info"):
        lines.append("runner_info:")
        lines.append(dump_yaml(record["runner_info"]))
    lines.append("result:" + (" null" if record.get("result") is None else ""))
    if record.get("result") is not None:
        lines.append(dump_yaml(masked_result(registry, record)))
    if with_tree and record["runner"] == "orquesta":
        nodes = execution_tree(store, record["id"])
        if nodes:
            lines.append(table(["task", "status", "action", "start", "elapsed", "execution"],
                               tree_rows(nodes)))
    return "\n".join(lines)


def tree_json(registry: Registry, store: Store, record: Dict[str, Any]) -> Dict[str, Any]:
    out = public(registry, record)

    def walk(nodes: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        result = []
        for node in nodes:
            item = public(registry, node)
            if node.get("children") is not None:
                item["children"] = walk(node["children"])
            result.append(item)
        return result

    if record["runner"] == "orquesta":
        out["children"] = walk(execution_tree(store, record["id"]))
    return out
