"""Errors of the embedded runtime. Each names what it is about (file and field, id, ...)."""
from __future__ import annotations

from typing import Optional


class RuntimeErrorBase(Exception):
    """Base of every error the runtime raises on purpose (the CLI prints these, no traceback)."""


class MetadataError(RuntimeErrorBase):
    """A pack file (pack.yaml, action, alias, rule, policy, config) is invalid."""

    def __init__(self, path: str, field: Optional[str], message: str) -> None:
        self.path = path
        self.field = field
        where = f"{path}: {field}" if field else path
        super().__init__(f"{where}: {message}")


class WorkflowLoadError(MetadataError):
    """A workflow definition orquesta cannot load (YAML merge keys, duplicate keys, bad YAML).
    st2 registers such a workflow and fails every run of it with orquesta's message, which is
    kept in `orquesta_message`."""

    def __init__(self, path: str, orquesta_message: str) -> None:
        self.orquesta_message = orquesta_message
        super().__init__(path, None, orquesta_message)


class ParameterError(RuntimeErrorBase):
    """Action parameters do not match the action's parameter schema."""


class ParamRenderError(ParameterError):
    """A parameter value or default could not be rendered (st2's ParamException from
    st2common/util/param.py); `st2_message` is st2's wording, without the action ref."""

    def __init__(self, action_ref: str, st2_message: str) -> None:
        self.st2_message = st2_message
        super().__init__(f"{action_ref}: {st2_message}")


class NotFoundError(RuntimeErrorBase):
    """No execution / action / inquiry / key with that id or name."""


class InquiryError(RuntimeErrorBase):
    """An inquiry cannot be answered (timed out, already answered, unauthorized, bad response)."""


class AliasError(RuntimeErrorBase):
    """A chat command matched no alias or more than one."""


class ExecutionStateError(RuntimeErrorBase):
    """The execution is in a status that does not allow the request (e.g. cancel a finished one)."""
