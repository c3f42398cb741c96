"""`/api/v1/executions`: list, get, children, output, result, run, re-run, pause/resume, cancel
(st2api controllers/v1/actionexecutions.py)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from fleet_runtime import rbac
from fleet_runtime.st2api import views
from fleet_runtime.st2api.http import HttpError, Request, Response, Router
from fleet_runtime.st2api.service import ID_PATTERN, ApiService
from fleet_runtime.statuses import CANCELABLE, CANCELED, COMPLETED, CONTROL_OF

DEFAULT_LIMIT = 50
MAX_LIMIT = 100


class Executions:
    def __init__(self, service: ApiService) -> None:
        self.svc = service
        self.rt = service.rt

    def register(self, router: Router) -> None:
        base = "/api/v1/executions"
        router.add("GET", base, self.list)
        router.add("POST", base, self.create)
        router.add("GET", base + "/{ex_id}", self.get)
        router.add("PUT", base + "/{ex_id}", self.update)
        router.add("DELETE", base + "/{ex_id}", self.cancel)
        router.add("GET", base + "/{ex_id}/children", self.children)
        router.add("GET", base + "/{ex_id}/output", self.output)
        router.add("GET", base + "/{ex_id}/result", self.result)
        router.add("GET", base + "/{ex_id}/attribute/{attribute}", self.attribute)
        router.add("POST", base + "/{ex_id}/re_run", self.rerun)

    # ------------------------------------------------------------------ reads
    def _record(self, ex_id: str) -> Dict[str, Any]:
        if not ID_PATTERN.match(ex_id):
            raise HttpError(404, f'Resource with a reference or id "{ex_id}" not found')
        full = self.rt.store.resolve_execution_id(ex_id)
        record = self.rt.store.get_execution(full) if full else None
        if record is None:
            raise HttpError(404, f'Resource with a reference or id "{ex_id}" not found')
        return record

    def _may_view(self, req: Request, record: Dict[str, Any]) -> None:
        self.svc.check(self.svc.rbac.may_execution(req.user, "execution_view", record["action"]),
                       req.user, "execution_view", f"execution:{record['id']}")

    def _may_stop(self, req: Request, record: Dict[str, Any]) -> None:
        self.svc.check(self.svc.rbac.may_execution(req.user, "execution_stop", record["action"]),
                       req.user, "execution_stop", f"execution:{record['id']}")

    def _viewable(self, req: Request, ex_id: str) -> Dict[str, Any]:
        record = self._record(ex_id)
        self._may_view(req, record)
        return record

    def _child_ids(self, ex_id: str) -> List[str]:
        return [r["id"] for r in self.rt.store.find_executions("parent_id=?", (ex_id,))]

    def _view(self, req: Request, record: Dict[str, Any], with_children: bool = True
              ) -> Dict[str, Any]:
        children = self._child_ids(record["id"]) if with_children else None
        view = views.execution(self.rt.registry, record, children,
                               show_secrets=self._show_secrets(req))
        return view

    def _show_secrets(self, req: Request) -> bool:
        """st2: `show_secrets` counts for administrators only; others get the masked view."""
        return req.flag("show_secrets") and self.svc.is_admin(req.user)

    def list(self, req: Request) -> Response:
        self.svc.check(self.svc.rbac.may(req.user, "execution_list"), req.user, "execution_list")
        where, args = ["1=1"], []  # type: List[str], List[Any]
        for field, column in (("action", "action"), ("status", "status")):
            if req.query.get(field):
                where.append(f"{column}=?")
                args.append(req.query[field])
        parent = req.query.get("parent")
        if parent == "null":
            where.append("parent_id IS NULL")
        elif parent:
            where.append("parent_id=?")
            args.append(parent)
        limit = req.int_param("limit", DEFAULT_LIMIT)
        offset = req.int_param("offset", 0)
        if limit < 1 or limit > MAX_LIMIT:
            if not (limit == -1 and self.svc.is_admin(req.user)):
                raise HttpError(400, f'Limit "{limit}" specified, maximum value is'
                                     f' "{MAX_LIMIT}"')
        user = req.query.get("user")
        if user:
            where.append("json_extract(context, '$.user')=?")
            args.append(user)
        if offset < 0:
            raise HttpError(400, "offset must be >= 0")
        clause = " AND ".join(where)
        total = self.rt.store.conn.execute(f"SELECT COUNT(*) FROM executions WHERE {clause}",
                                           args).fetchone()[0]
        order = "created_ts, rowid" if req.flag("sort_asc") else "created_ts DESC, rowid DESC"
        page_sql = f" LIMIT {-1 if limit == -1 else int(limit)} OFFSET {int(offset)}"
        page = self.rt.store.find_executions(clause, args, order=order + page_sql)
        include, exclude = req.query.get("include_attributes"), req.query.get(
            "exclude_attributes")
        wants_children = not include or "children" in include.split(",")
        body = [views.select(self._view(req, r, wants_children), include, exclude)
                for r in page]
        return Response(200, body, {"X-Total-Count": str(total), "X-Limit": str(limit)})

    def get(self, req: Request, ex_id: str) -> Dict[str, Any]:
        view = self._view(req, self._viewable(req, ex_id))
        return views.select(view, req.query.get("include_attributes"),
                            req.query.get("exclude_attributes"))

    def children(self, req: Request, ex_id: str) -> List[Dict[str, Any]]:
        """Descendants, depth first (st2: `depth=-1` for all levels)."""
        record = self._viewable(req, ex_id)
        depth = req.int_param("depth", 1)
        out: List[Dict[str, Any]] = []

        def walk(parent_id: str, level: int) -> None:
            for child in self.rt.store.find_executions("parent_id=?", (parent_id,)):
                out.append(self._view(req, child))
                if depth < 0 or level < depth:
                    walk(child["id"], level + 1)

        walk(record["id"], 1)
        return out

    def result(self, req: Request, ex_id: str) -> Dict[str, Any]:
        view = self._view(req, self._viewable(req, ex_id), with_children=False)
        return {"id": view["id"], "result": view["result"]}

    def attribute(self, req: Request, ex_id: str, attribute: str) -> Any:
        view = self._view(req, self._viewable(req, ex_id))
        if attribute not in view:
            raise HttpError(400, f'Invalid attribute "{attribute}" specified.')
        return view[attribute]

    def output(self, req: Request, ex_id: str) -> Response:
        """stdout/stderr of the execution (st2 streams them as they come; here: the final)."""
        record = self._viewable(req, ex_id)
        result = record.get("result")
        wanted = req.query.get("output_type")
        lines: List[str] = []
        if isinstance(result, dict):
            for key in ("stdout", "stderr"):
                if wanted and wanted != key:
                    continue
                value = result.get(key)
                if isinstance(value, str) and value:
                    lines.append(value if value.endswith("\n") else value + "\n")
        return Response(200, text=self.rt.masker.mask("".join(lines)))

    # ------------------------------------------------------------------ changes
    def create(self, req: Request) -> Response:
        body = req.json_body()
        ref = body.get("action")
        if not isinstance(ref, str) or not ref:
            raise HttpError(400, '"action" is a required property')
        parameters = body.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise HttpError(400, '"parameters" must be an object')
        user = self._as_user(req, body.get("user"))
        context = {"user": user}
        return self._run(req, ref, parameters, context)

    def rerun(self, req: Request, ex_id: str) -> Response:
        body = req.body if isinstance(req.body, dict) else {}
        if body.get("tasks") or body.get("reset"):
            raise HttpError(400, "re-running tasks of a workflow is not supported by the"
                                 " embedded runtime; re-run the whole execution")
        overrides = body.get("parameters") or {}
        if not isinstance(overrides, dict):
            raise HttpError(400, "The parameters needs to be a dictionary.")
        existing = self._viewable(req, ex_id)
        parameters: Dict[str, Any] = {}
        if not req.flag("no_merge"):
            parameters.update(existing.get("parameters") or {})
        parameters.update(overrides)
        user = self._as_user(req, body.get("user"))
        context = {"user": user, "re-run": {"ref": existing["id"]}}
        return self._run(req, existing["action"], parameters, context)

    def _as_user(self, req: Request, wanted: Optional[str]) -> str:
        """st2: only an administrator may run as another user."""
        if wanted and wanted != req.user:
            if not self.svc.is_admin(req.user):
                raise HttpError(403, f'Administrator access required for user "{req.user}"'
                                     ' to run as another user')
            return wanted
        assert req.user is not None
        return req.user

    def _run(self, req: Request, ref: str, parameters: Dict[str, Any],
             context: Dict[str, Any]) -> Response:
        if ref not in self.rt.registry.actions:
            raise HttpError(404, f'Action "{ref}" cannot be found.')
        self.svc.check(self.svc.rbac.may_action(req.user, "action_execute", ref), req.user,
                       "action_execute", rbac.action_uid(ref))
        response = self.svc.call("run", {"action": ref, "parameters": parameters,
                                         "context": context})
        record = self._record(response["id"])
        return Response(201, self._view(req, record))

    def update(self, req: Request, ex_id: str) -> Dict[str, Any]:
        body = req.json_body()
        record = self._record(ex_id)
        self._may_stop(req, record)
        status = body.get("status")
        if record["status"] in COMPLETED:
            raise HttpError(400, "Execution is already in completed state.")
        op = CONTROL_OF.get(str(status))
        if op is None:
            raise HttpError(400, f'Failed updating execution. Status "{status}" cannot be'
                                 " requested (pausing, resuming, canceling)")
        answer = self.svc.call(op, {"id": record["id"], "requester": req.user})
        return self._answered(req, record, answer)

    def cancel(self, req: Request, ex_id: str) -> Any:
        record = self._record(ex_id)
        self._may_stop(req, record)
        if record["status"] == CANCELED:
            return self._view(req, record)
        if record["status"] not in CANCELABLE:
            return {"faultstring": f"Action cannot be canceled. State = {record['status']}."}
        answer = self.svc.call("cancel", {"id": record["id"], "requester": req.user})
        return self._answered(req, record, answer)

    def _answered(self, req: Request, before: Dict[str, Any], answer: Any) -> Dict[str, Any]:
        """The execution after a pause, resume or cancel request, as st2 answers it: st2's
        request_pause (resume, cancel) writes pausing (resuming, canceling) before the API
        answers. The engine applies the request in its own loop, so the record read here may
        not show it yet (on a loaded machine, `running` after `st2 execution pause`): then the
        status is the one the engine answered the request with."""
        record = self._record(before["id"])
        if record["status"] == before["status"] and isinstance(answer, dict) and \
                answer.get("status"):
            record = dict(record, status=answer["status"])
        return self._view(req, record)

