"""`/api/v1/aliasexecution`: a chat command run through its action alias
(st2api controllers/v1/aliasexecution.py).

The authenticated account (a chat bot's, or the st2 CLI user's) runs the action; `user` in the
body is the chat user it speaks for and becomes `api_user` in the execution's context, exactly
as st2 records it. The pack decides whom to trust for what (chat answers only through the
accounts in its `chatops_users`)."""
from __future__ import annotations

from typing import Any, Dict, List

from fleet_runtime import alias_execution, rbac
from fleet_runtime.runtime_errors import RuntimeErrorBase
from fleet_runtime.st2api import views
from fleet_runtime.st2api.http import HttpError, Request, Response, Router
from fleet_runtime.st2api.service import ApiService, http_error

MAX_COMMAND = 4096  # a chat line; alias matching is regular expressions over it


class AliasExecutions:
    def __init__(self, service: ApiService) -> None:
        self.svc = service
        self.rt = service.rt

    def register(self, router: Router) -> None:
        router.add("POST", "/api/v1/aliasexecution", self.execute)
        router.add("POST", "/api/v1/aliasexecution/match_and_execute", self.match_and_execute)

    def execute(self, req: Request) -> Response:
        body = req.json_body()
        name = body.get("name")
        if not name:
            raise HttpError(400, 'Alias execution "name" is required')
        results = self._run(req, body, alias_name=str(name))
        return Response(201, results[0])

    def match_and_execute(self, req: Request) -> Response:
        body = req.json_body()
        return Response(201, {"results": self._run(req, body)})

    def _run(self, req: Request, body: Dict[str, Any], alias_name: Any = None
             ) -> List[Dict[str, Any]]:
        command = body.get("command")
        if not isinstance(command, str) or not command.strip():
            raise HttpError(400, '"command" is a required property')
        if len(command) > MAX_COMMAND:
            raise HttpError(400, f'"command" is longer than {MAX_COMMAND} characters')
        chat_user = body.get("user") or None
        channel = body.get("source_channel") or None
        route = body.get("notification_route") or body.get("notification_channel") or None
        for field, value in (("user", chat_user), ("source_channel", channel),
                             ("notification_route", route)):
            if value is not None and not isinstance(value, str):
                raise HttpError(400, f'"{field}" must be a string')
        assert req.user is not None
        try:
            planned = alias_execution.plan(
                self.rt.registry, command, chat_user, req.user, channel, route,
                alias_name=alias_name, format_str=body.get("format"))
        except RuntimeErrorBase as e:
            raise http_error(e) from None
        for run in planned.runs:  # st2: the account that posts runs the alias's action
            self.svc.check(self.svc.rbac.may_action(req.user, "action_execute", run.action.ref),
                           req.user, "action_execute", rbac.action_uid(run.action.ref))
        results = []
        for run in planned.runs:
            response = self.svc.call("run", {"action": run.action.ref,
                                             "parameters": run.parameters,
                                             "context": run.context, "notify": run.notify})
            record = self.rt.store.get_execution(response["id"])
            execution = views.execution(self.rt.registry, record, [])
            result: Dict[str, Any] = {"execution": execution,
                                      "actionalias": views.alias(planned.alias)}
            message = self.rt.masker.mask(alias_execution.ack_message(planned.alias, result))
            if message is not None:
                result["message"] = message
            results.append(result)
        return results
