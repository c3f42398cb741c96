"""The StackStorm API as a python action sees it.

st2 gives every action execution `ST2_ACTION_API_URL`, a token acting as the execution's user
(`ST2_ACTION_AUTH_TOKEN`) and its own id (`ST2_ACTION_EXECUTION_ID`). The pack reads who started
an execution and who answered an inquiry from there: facts StackStorm authenticated, never
values a caller typed. With an API key instead of the token, requests act as the key's user
(st2's `St2-Api-Key` header): the pack's state account (statestore.py).
"""
from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional

from fleet_rollout.errors import ConfigError

ENV_URL = "ST2_ACTION_API_URL"
ENV_TOKEN = "ST2_ACTION_AUTH_TOKEN"
ENV_EXECUTION = "ST2_ACTION_EXECUTION_ID"


class ApiRefused(ConfigError):
    """The API answered with an HTTP error (status kept for the caller)."""

    def __init__(self, message: str, status: int) -> None:
        self.status = status
        super().__init__(message)


# seconds one request may take: a busy st2api (an inquiry PUT resumes workflows and writes
# several documents before it answers) can take over a minute on a small machine
TIMEOUT = 120.0


class ActionApi:
    def __init__(self, url: str, token: str, execution_id: str = "",
                 session: Optional[Any] = None, timeout: float = TIMEOUT,
                 api_key: str = "") -> None:
        self.url = url.rstrip("/")
        self.headers = {"St2-Api-Key": api_key} if api_key else {"X-Auth-Token": token}
        self.execution_id = execution_id
        self.timeout = timeout
        if session is None:
            import requests

            session = requests.Session()
        self.http = session

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None,
                 session: Optional[Any] = None, api_key: str = "") -> ActionApi:
        """The API of this action's execution: as its user, or as `api_key`'s user."""
        env = os.environ if env is None else env
        url, token = env.get(ENV_URL), env.get(ENV_TOKEN)
        if not url or not token:
            raise ConfigError(f"no StackStorm API in this action's environment ({ENV_URL}, "
                              f"{ENV_TOKEN}): run it as a StackStorm action")
        return cls(url, token, env.get(ENV_EXECUTION, ""), session, api_key=api_key)

    def _check(self, answer: Any, what: str) -> Any:
        if answer.status_code >= 400:
            try:
                detail = str(answer.json().get("faultstring", ""))
            except ValueError:
                detail = answer.text
            raise ApiRefused(f"{what}: the StackStorm API answered {answer.status_code}: "
                             f"{detail[:300]}", answer.status_code)
        return answer.json()

    def get(self, path: str) -> Any:
        answer = self.http.get(f"{self.url}/{path.lstrip('/')}", headers=self.headers,
                               timeout=self.timeout)
        return self._check(answer, f"GET {path}")

    def put(self, path: str, body: Any) -> Any:
        answer = self.http.put(f"{self.url}/{path.lstrip('/')}", headers=self.headers,
                               json=body, timeout=self.timeout)
        return self._check(answer, f"PUT {path}")

    def delete(self, path: str) -> None:
        answer = self.http.delete(f"{self.url}/{path.lstrip('/')}", headers=self.headers,
                                  timeout=self.timeout)
        if answer.status_code >= 400:
            self._check(answer, f"DELETE {path}")

    def post(self, path: str, body: Any) -> Any:
        answer = self.http.post(f"{self.url}/{path.lstrip('/')}", headers=self.headers,
                                json=body, timeout=self.timeout)
        return self._check(answer, f"POST {path}")

    def execution(self, execution_id: str) -> Dict[str, Any]:
        return self.get(f"executions/{execution_id}")

    def own_execution(self) -> Dict[str, Any]:
        if not self.execution_id:
            raise ConfigError(f"{ENV_EXECUTION} is not set: cannot tell who runs this action")
        return self.execution(self.execution_id)
