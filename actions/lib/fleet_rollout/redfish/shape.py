"""Typed reads of BMC answers: every field the Redfish code uses is checked before it is used.

A BMC may answer anything: `Actions` as a list, `Links` as a string, a link without
`@odata.id`, a number where a name belongs. `Resource` wraps one decoded JSON object and hands out
its fields by type; a field of the wrong type raises RedfishError naming the host, the resource
URI, the field path and what was expected, never a KeyError or AttributeError. Values are not
echoed (only their JSON type), so nothing the BMC says ends up in an error unchecked.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from fleet_rollout.errors import RedfishError

MAX_URI_LENGTH = 1024
# an absolute path on the BMC itself: no scheme, no host, no query, no fragment, no whitespace
_URI_PATH = re.compile(r"^/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*$")
SCALARS = (str, int, float, bool, type(None))


def json_type(value: Any) -> str:
    """The JSON name of a value's type (what the BMC sent), never the value itself."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def check_uri(value: Any, host: Optional[str], where: str) -> str:
    """A BMC-given URI usable as a request path, or RedfishError naming where it was found."""
    if not isinstance(value, str):
        raise RedfishError(f"{where} is {json_type(value)}, expected a URI string", host)
    if len(value) > MAX_URI_LENGTH or not _URI_PATH.match(value):
        raise RedfishError(f"{where} is not an absolute path on this BMC (expected e.g. "
                           "/redfish/v1/Systems/1; no scheme, host, query or spaces)", host)
    segments = value.split("/")
    if any(s in (".", "..") for s in segments) or "//" in value:
        raise RedfishError(f"{where} contains an empty, '.' or '..' path segment", host)
    return value


class Resource:
    """One JSON object a BMC answered at `uri` (or a nested object of it, at `prefix`)."""

    def __init__(self, body: Any, host: Optional[str], uri: str, prefix: str = "") -> None:
        if not isinstance(body, dict):
            what = f"{prefix.rstrip('.')} " if prefix else ""
            raise RedfishError(f"BMC answer {uri}: {what}is {json_type(body)}, expected an "
                               "object", host)
        self.body = body
        self.host = host
        self.uri = uri
        self.prefix = prefix

    # ------------------------------------------------------------------ helpers
    def where(self, field: str) -> str:
        return f"BMC answer {self.uri}: field {self.prefix}{field}"

    def fail(self, field: str, value: Any, expected: str) -> RedfishError:
        return RedfishError(f"{self.where(field)} is {json_type(value)}, expected {expected}",
                            self.host)

    def missing(self, field: str, expected: str) -> RedfishError:
        return RedfishError(f"{self.where(field)} is missing (expected {expected})", self.host)

    def raw(self, field: str) -> Any:
        return self.body.get(field)

    def has(self, field: str) -> bool:
        return self.body.get(field) is not None

    # ------------------------------------------------------------------ typed fields
    def obj(self, field: str, required: bool = False) -> Resource:
        """A nested object; an empty one when absent or null (unless required)."""
        value = self.body.get(field)
        if value is None:
            if required:
                raise self.missing(field, "an object")
            value = {}
        if not isinstance(value, dict):
            raise self.fail(field, value, "an object")
        return Resource(value, self.host, self.uri, f"{self.prefix}{field}.")

    def array(self, field: str, required: bool = False) -> List[Any]:
        """A JSON array; empty when absent or null (unless required)."""
        value = self.body.get(field)
        if value is None:
            if required:
                raise self.missing(field, "an array")
            return []
        if not isinstance(value, list):
            raise self.fail(field, value, "an array")
        return value

    def objects(self, field: str) -> List[Resource]:
        """An array whose every item is an object."""
        out = []
        for index, item in enumerate(self.array(field)):
            if not isinstance(item, dict):
                raise self.fail(f"{field}[{index}]", item, "an object")
            out.append(Resource(item, self.host, self.uri, f"{self.prefix}{field}[{index}]."))
        return out

    def text(self, field: str, required: bool = False) -> Optional[str]:
        """A string (None when absent or null, unless required)."""
        value = self.body.get(field)
        if value is None:
            if required:
                raise self.missing(field, "a string")
            return None
        if not isinstance(value, str):
            raise self.fail(field, value, "a string")
        return value

    def texts(self, field: str) -> List[str]:
        """An array of strings (empty when absent or null)."""
        values = self.array(field)
        for index, item in enumerate(values):
            if not isinstance(item, str):
                raise self.fail(f"{field}[{index}]", item, "a string")
        return list(values)

    def flag(self, field: str, default: bool) -> bool:
        """A JSON boolean (the default when absent or null)."""
        value = self.body.get(field)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(field, value, "true or false")
        return value

    def integer(self, field: str) -> Optional[int]:
        """A whole number (None when absent or null)."""
        value = self.body.get(field)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                isinstance(value, float) and not value.is_integer()):
            raise self.fail(field, value, "an integer")
        return int(value)

    def scalar(self, field: str) -> Any:
        """A string, number, boolean or null."""
        value = self.body.get(field)
        if not isinstance(value, SCALARS):
            raise self.fail(field, value, "a string, number, boolean or null")
        return value

    def link(self, field: str, required: bool = False) -> Optional[str]:
        """The @odata.id of a link object ({"@odata.id": "/redfish/v1/..."})."""
        value = self.body.get(field)
        if value is None:
            if required:
                raise self.missing(field, "a link {\"@odata.id\": ...}")
            return None
        if not isinstance(value, dict):
            raise self.fail(field, value, "a link object {\"@odata.id\": ...}")
        uri = value.get("@odata.id")
        if uri is None:
            if required:
                raise self.missing(f"{field}.@odata.id", "a URI string")
            return None
        return check_uri(uri, self.host, self.where(f"{field}.@odata.id"))

    def uri_text(self, field: str, required: bool = False) -> Optional[str]:
        """A string field that holds a URI on this BMC (e.g. Actions' `target`)."""
        value = self.text(field, required)
        if value is None or value == "":
            if required:
                raise self.missing(field, "a URI string")
            return None
        return check_uri(value, self.host, self.where(field))

    def links(self, field: str) -> List[str]:
        """The @odata.id of every item of an array of links."""
        out = []
        for index, item in enumerate(self.array(field)):
            name = f"{field}[{index}]"
            if not isinstance(item, dict):
                raise self.fail(name, item, "a link object {\"@odata.id\": ...}")
            uri = item.get("@odata.id")
            if uri is None:
                raise self.missing(f"{name}.@odata.id", "a URI string")
            out.append(check_uri(uri, self.host, self.where(f"{name}.@odata.id")))
        return out

    def members(self) -> List[str]:
        """The member URIs of a collection."""
        return self.links("Members")

    def scalars(self, field: str) -> Dict[str, Any]:
        """A nested object whose values are all scalars (BIOS Attributes)."""
        return self.obj(field).scalars_here()

    def scalars_here(self) -> Dict[str, Any]:
        """This object, checked to hold only scalar values."""
        for key, value in self.body.items():
            if not isinstance(value, SCALARS):
                raise self.fail(str(key), value, "a string, number, boolean or null")
        return dict(self.body)


def resource(body: Any, host: Optional[str], uri: str) -> Resource:
    return Resource(body, host, uri)


def fetch(session: Any, uri: str, ok: Tuple[int, ...] = (200,)) -> Resource:
    """GET `uri` through a RedfishSession and return its JSON object as a typed Resource."""
    return Resource(session.get(uri, ok=ok).body, session.host, uri)


def obj(body: Any, field: str, host: Optional[str], uri: str) -> Dict[str, Any]:
    """`body[field]` as an object (empty when absent); RedfishError otherwise."""
    return Resource(body, host, uri).obj(field).body


def link(body: Any, field: str, host: Optional[str], uri: str) -> Optional[str]:
    """`body[field]["@odata.id"]` as a checked URI (None when absent); RedfishError otherwise."""
    return Resource(body, host, uri).link(field)


def members(body: Any, host: Optional[str], uri: str) -> List[str]:
    """The member URIs of a collection; RedfishError on any malformed member."""
    return Resource(body, host, uri).members()


def text(body: Any, field: str, host: Optional[str], uri: str) -> Optional[str]:
    """`body[field]` as a string (None when absent); RedfishError otherwise."""
    return Resource(body, host, uri).text(field)
