"""What is installed: actions, runner types, action aliases (and alias matching), and who the
caller is (`/api/v1/user`)."""
from __future__ import annotations

from typing import Any, Dict, List

from fleet_runtime import aliases as alias_match
from fleet_runtime import rbac
from fleet_runtime.packs import RUNNERS
from fleet_runtime.runtime_errors import AliasError
from fleet_runtime.st2api import views
from fleet_runtime.st2api.alias_executions import MAX_COMMAND
from fleet_runtime.st2api.http import HttpError, Request, Response, Router
from fleet_runtime.st2api.service import ApiService

ST2_VERSION = "3.9.0"  # the st2 API these endpoints follow


class Catalog:
    def __init__(self, service: ApiService) -> None:
        self.svc = service
        self.registry = service.rt.registry

    def register(self, router: Router) -> None:
        router.add("GET", "/api/v1", self.root)
        router.add("GET", "/api/v1/actions", self.actions)
        router.add("GET", "/api/v1/actions/{ref}", self.action)
        router.add("GET", "/api/v1/runnertypes", self.runners)
        router.add("GET", "/api/v1/runnertypes/{name}", self.runner)
        router.add("GET", "/api/v1/actionalias", self.aliases)
        router.add("POST", "/api/v1/actionalias/match", self.match)
        router.add("GET", "/api/v1/actionalias/help", self.help)
        router.add("GET", "/api/v1/actionalias/{ref}", self.alias)
        router.add("GET", "/api/v1/rules", self.rules)
        router.add("GET", "/api/v1/rules/{ref}", self.rule)
        router.add("GET", "/api/v1/user", self.user)

    def root(self, req: Request) -> Dict[str, Any]:
        """What st2api's root answers (chat bots call it to check an API key)."""
        return {"version": ST2_VERSION, "server": "fleet-rollout embedded runtime"}

    def actions(self, req: Request) -> Response:
        self.svc.check(self.svc.rbac.may(req.user, "action_list"), req.user, "action_list")
        items = [views.action(a) for a in sorted(self.registry.actions.values(),
                                                 key=lambda a: a.ref)]
        pack = req.query.get("pack")
        if pack:
            items = [a for a in items if a["pack"] == pack]
        name = req.query.get("name")
        if name:
            items = [a for a in items if a["name"] == name]
        return _page(req, items)

    def action(self, req: Request, ref: str) -> Dict[str, Any]:
        found = self.registry.actions.get(ref)
        if found is None:
            raise HttpError(404, f'Resource with a reference or id "{ref}" not found')
        self.svc.check(self.svc.rbac.may_action(req.user, "action_view", found.ref), req.user,
                       "action_view", rbac.action_uid(found.ref))
        return views.action(found)

    def runners(self, req: Request) -> Response:
        self.svc.check(self.svc.rbac.may(req.user, "runner_type_list"), req.user,
                       "runner_type_list")
        names = sorted(RUNNERS)
        if req.query.get("name"):
            names = [n for n in names if n == req.query["name"]]
        return _page(req, [views.runner(n) for n in names])

    def runner(self, req: Request, name: str) -> Dict[str, Any]:
        if name not in RUNNERS:
            raise HttpError(404, f'Resource with a reference or id "{name}" not found')
        uid = f"runner_type:{name}"
        self.svc.check(self.svc.rbac.may_resource(req.user, "runner_type_view", [uid]),
                       req.user, "runner_type_view", uid)
        return views.runner(name)

    def aliases(self, req: Request) -> Response:
        self.svc.check(self.svc.rbac.may(req.user, "action_alias_list"), req.user,
                       "action_alias_list")
        return _page(req, _of_pack(req, [views.alias(a) for a in self.registry.aliases]))

    def alias(self, req: Request, ref: str) -> Dict[str, Any]:
        found = _by_ref(self.registry.aliases, ref)
        uid = rbac.alias_uid(found.pack, found.name)
        self.svc.check(self.svc.rbac.may_resource(req.user, "action_alias_view",
                                                  [uid, f"pack:{found.pack}"]),
                       req.user, "action_alias_view", uid)
        return views.alias(found)

    def match(self, req: Request) -> Dict[str, Any]:
        self.svc.check(self.svc.rbac.may(req.user, "action_alias_match"), req.user,
                       "action_alias_match")
        command = req.json_body().get("command")
        if not isinstance(command, str):
            raise HttpError(400, '"command" is a required property')
        if len(command) > MAX_COMMAND:
            raise HttpError(400, f'"command" is longer than {MAX_COMMAND} characters')
        try:
            found = alias_match.get_matching_alias(command, self.registry.aliases)
        except AliasError as e:
            raise HttpError(400, str(e)) from None
        return {"actionalias": views.alias(found["alias"]),
                "display": found.get("display") or found["representation"],
                "representation": found["representation"]}

    def rules(self, req: Request) -> Response:
        self.svc.check(self.svc.rbac.may(req.user, "rule_list"), req.user, "rule_list")
        return _page(req, _of_pack(req, [views.rule(r) for r in self.registry.rules]))

    def rule(self, req: Request, ref: str) -> Dict[str, Any]:
        found = _by_ref(self.registry.rules, ref)
        uid = f"rule:{found.pack}:{found.name}"
        self.svc.check(self.svc.rbac.may_resource(req.user, "rule_view",
                                                  [uid, f"pack:{found.pack}"]),
                       req.user, "rule_view", uid)
        return views.rule(found)

    def help(self, req: Request) -> Dict[str, Any]:
        """Help strings of the enabled aliases (st2's actionalias_helpstring), filtered by pack
        and by a case-insensitive substring (st2 takes a regular expression; a chat user's
        text is not compiled here)."""
        self.svc.check(self.svc.rbac.may(req.user, "action_alias_help"), req.user,
                       "action_alias_help")
        wanted = (req.query.get("filter") or "").lower()
        pack = req.query.get("pack")
        offset = req.int_param("offset", 0)
        limit = req.int_param("limit", 0)
        lines = []
        for candidate in self.registry.aliases:
            if not candidate.enabled or (pack and pack != candidate.pack):
                continue
            for format_ in candidate.formats:
                display = alias_match.normalise_format(format_)[0]
                if display and wanted in display.lower():
                    lines.append({"pack": candidate.pack, "display": display,
                                  "description": candidate.description or ""})
        page = lines[offset:offset + limit] if limit > 0 else lines[offset:]
        return {"available": len(lines), "helpstrings": page}

    def user(self, req: Request) -> Dict[str, Any]:
        return {"username": req.user, "authentication": dict(req.auth),
                "rbac": {"enabled": True, "roles": self.svc.rbac.roles_of(req.user),
                         "is_admin": self.svc.is_admin(req.user)}}


def _of_pack(req: Request, items: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    pack = req.query.get("pack")
    return [i for i in items if i["pack"] == pack] if pack else items


def _by_ref(candidates: List[Any], ref: str) -> Any:
    for candidate in candidates:
        if ref in (candidate.ref, candidate.name):
            return candidate
    raise HttpError(404, f'Resource with a reference or id "{ref}" not found')


def _page(req: Request, items: List[Dict[str, Any]]) -> Response:
    offset = req.int_param("offset", 0)
    limit = req.int_param("limit", 0)
    page = items[offset:offset + limit] if limit > 0 else items[offset:]
    return Response(200, page, {"X-Total-Count": str(len(items))})
