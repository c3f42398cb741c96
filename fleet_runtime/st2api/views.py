"""Runtime records as st2's API models (st2common/models/api): what the st2 CLI and chat bots
read. Secret parameters are masked (`********`) as st2 does unless `show_secrets` (admins)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from fleet_runtime import masking, render
from fleet_runtime import params as params_util
from fleet_runtime.packs import RUNNERS, Action, Alias, Registry, Rule


def action(a: Action) -> Dict[str, Any]:
    return {
        "id": a.ref, "uid": f"action:{a.pack}:{a.name}", "ref": a.ref, "pack": a.pack,
        "name": a.name, "description": a.description, "enabled": a.enabled,
        "entry_point": a.entry_point or "", "runner_type": a.runner_type,
        "parameters": a.parameters, "output_schema": a.output_schema or {},
        "notify": a.notify or {}, "tags": [], "metadata_file": a.metadata_file,
    }


def runner(name: str) -> Dict[str, Any]:
    spec = RUNNERS[name]
    return {"id": name, "uid": f"runner_type:{name}", "name": name, "enabled": True,
            "description": "", "runner_module": name, "output_key": spec.get("output_key"),
            "runner_parameters": spec.get("runner_parameters") or {}}


def alias(a: Alias) -> Dict[str, Any]:
    return {
        "id": a.ref, "uid": f"action_alias:{a.pack}:{a.name}", "ref": a.ref, "pack": a.pack,
        "name": a.name, "description": a.description or "", "enabled": a.enabled,
        "action_ref": a.action_ref, "formats": a.formats, "ack": a.ack, "result": a.result,
        "extra": a.extra, "immutable_parameters": a.immutable_parameters,
        "metadata_file": a.metadata_file,
    }


def rule(r: Rule) -> Dict[str, Any]:
    return {
        "id": r.ref, "uid": f"rule:{r.pack}:{r.name}", "ref": r.ref, "pack": r.pack,
        "name": r.name, "description": r.description, "enabled": r.enabled,
        "trigger": {"type": r.trigger_type, "parameters": r.trigger_parameters,
                    "ref": r.trigger_type},
        "criteria": r.criteria,
        "action": {"ref": r.action_ref, "parameters": r.action_parameters},
        "metadata_file": r.metadata_file,
    }


def execution(registry: Registry, record: Dict[str, Any], children: Optional[List[str]] = None,
              show_secrets: bool = False) -> Dict[str, Any]:
    """ActionExecutionAPI."""
    act = registry.actions.get(record["action"])
    parameters = record.get("parameters") or {}
    if not show_secrets:
        parameters = params_util.mask_secrets(act, parameters)
    action_view = action(act) if act else {"ref": record["action"],
                                           "runner_type": record["runner"]}
    start = record.get("start_ts") or record.get("created_ts")
    end = record.get("end_ts")
    view: Dict[str, Any] = {
        "id": record["id"],
        "action": action_view,
        "runner": runner(record["runner"]) if record["runner"] in RUNNERS
        else {"name": record["runner"]},
        "liveaction": {"id": record["id"], "action": record["action"],
                       "status": record["status"], "parameters": parameters,
                       "context": record.get("context") or {},
                       "runner_info": record.get("runner_info") or {}},
        "status": record["status"],
        "start_timestamp": render.ts(start),
        "parameters": parameters,
        "context": record.get("context") or {},
        "result": record.get("result") if record.get("result") is not None else {},
        "log": [_log_entry(e) for e in record.get("log") or []],
        "web_url": "",
    }
    if end is not None:
        view["end_timestamp"] = render.ts(end)
        view["elapsed_seconds"] = round(max(0.0, end - (start or end)), 3)
    if record.get("parent_id"):
        view["parent"] = record["parent_id"]
    if children is not None:
        view["children"] = children
    if record.get("due_ts"):
        view["delay"] = int(max(0, record["due_ts"] - record["created_ts"]) * 1000)
    # config and datastore secrets: masked even for administrators (show_secrets shows the
    # secret parameters only, like st2)
    return dict(masking.masker_of(registry).mask(view))


def _log_entry(entry: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(entry)
    if isinstance(out.get("timestamp"), (int, float)):
        out["timestamp"] = render.ts(out["timestamp"])
    return out


def select(view: Dict[str, Any], include: Optional[str], exclude: Optional[str]
           ) -> Dict[str, Any]:
    """st2's include_attributes / exclude_attributes (top-level fields; `id` always kept)."""
    if include:
        wanted = {f.split(".")[0] for f in include.split(",") if f}
        wanted.add("id")
        return {k: v for k, v in view.items() if k in wanted}
    if exclude:
        unwanted = {f for f in exclude.split(",") if f}
        return {k: v for k, v in view.items() if k not in unwanted}
    return view


def inquiry(record: Dict[str, Any]) -> Dict[str, Any]:
    """InquiryResponseAPI: what st2 shows of a pending inquiry."""
    result = record.get("result") or {}
    return {"id": record["id"], "route": result.get("route", ""), "ttl": result.get("ttl"),
            "users": result.get("users") or [], "roles": result.get("roles") or [],
            "schema": result.get("schema") or {}}
