"""`/api/v1/inquiries`: pending inquiries and answers (st2api controllers/v1/inquiries.py).

An answer is checked by the engine as st2 checks it: the requester (the authenticated user,
never a name in the body) against the inquiry's `users` and `roles`, the response against its
schema; the requester is recorded as `resumed_by` on the workflow that asked."""
from __future__ import annotations

from typing import Any, Dict, List

from fleet_runtime.st2api import views
from fleet_runtime.st2api.http import HttpError, Request, Response, Router
from fleet_runtime.st2api.service import ID_PATTERN, ApiService


class Inquiries:
    def __init__(self, service: ApiService) -> None:
        self.svc = service
        self.rt = service.rt

    def register(self, router: Router) -> None:
        router.add("GET", "/api/v1/inquiries", self.list)
        router.add("GET", "/api/v1/inquiries/{inquiry_id}", self.get)
        router.add("PUT", "/api/v1/inquiries/{inquiry_id}", self.respond)

    def _pending(self) -> List[Dict[str, Any]]:
        return self.rt.store.find_executions("runner='inquirer' AND status='pending'")

    def _record(self, inquiry_id: str) -> Dict[str, Any]:
        if not ID_PATTERN.match(inquiry_id):
            raise HttpError(404, f'Resource with a reference or id "{inquiry_id}" not found')
        full = self.rt.store.resolve_execution_id(inquiry_id)
        record = self.rt.store.get_execution(full) if full else None
        if record is None or record["runner"] != "inquirer":
            raise HttpError(404, f'Resource with a reference or id "{inquiry_id}" not found')
        return record

    def _workflow_ref(self, record: Dict[str, Any]) -> Any:
        parent = record.get("parent_id")
        found = self.rt.store.get_execution(parent) if parent else None
        return found["action"] if found else None

    def _may(self, req: Request, permission: str, record: Dict[str, Any]) -> None:
        self.svc.check(self.svc.rbac.may_inquiry(req.user, permission,
                                                 self._workflow_ref(record)),
                       req.user, permission, f"inquiry:{record['id']}")

    def list(self, req: Request) -> Response:
        self.svc.check(self.svc.rbac.may(req.user, "inquiry_list"), req.user, "inquiry_list")
        rows = self._pending()
        limit = req.int_param("limit", 0)
        page = rows[:limit] if limit > 0 else rows
        return Response(200, [views.inquiry(r) for r in page], {"X-Total-Count": str(len(rows))})

    def get(self, req: Request, inquiry_id: str) -> Dict[str, Any]:
        record = self._record(inquiry_id)
        self._may(req, "inquiry_view", record)
        if record["status"] != "pending":
            raise HttpError(400, f'Inquiry "{record["id"]}" is {record["status"]}.')
        return views.inquiry(record)

    def respond(self, req: Request, inquiry_id: str) -> Dict[str, Any]:
        body = req.json_body()
        response = body.get("response")
        if not isinstance(response, dict):
            raise HttpError(400, '"response" must be an object')
        record = self._record(inquiry_id)
        self._may(req, "inquiry_respond", record)
        result = self.svc.call("respond", {"id": record["id"], "response": response,
                                           "requester": req.user})
        return {"id": result["id"], "response": result["response"]}
