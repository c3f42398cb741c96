"""Config and datastore secrets masked in everything the runtime outputs or stores.

The values of pack config fields marked `secret: true` in a pack's config.schema.yaml and the
values of datastore keys stored encrypted are replaced by `********` wherever they appear (also
inside longer strings): execution results (stdout, stderr, result, errors), the execution
record the API, the stream and the CLI show, chat posts and announcements, error messages and
the runtime's log records.

A secret shorter than MIN_SECRET_LENGTH characters is not masked: masking "1" or "ab" would
garble every output that contains those characters and hide nothing worth hiding.
"""
from __future__ import annotations

import copy
import logging
import threading
import weakref
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

MASK = "********"
MIN_SECRET_LENGTH = 4


def values_at_paths(config: Dict[str, Any], paths: Iterable[str]) -> List[str]:
    """The values of `config` at dotted paths (`a.b`, `a.*.c` for any key of `a`)."""
    found: List[str] = []
    for path in paths:
        _collect(config, path.split("."), found)
    return found


def _collect(value: Any, parts: List[str], found: List[str]) -> None:
    if not parts:
        _leaf_values(value, found)
        return
    if not isinstance(value, dict):
        return
    head, rest = parts[0], parts[1:]
    if head == "*":
        for child in value.values():
            _collect(child, rest, found)
    elif head in value:
        _collect(value[head], rest, found)


def _leaf_values(value: Any, found: List[str]) -> None:
    if isinstance(value, dict):
        for child in value.values():
            _leaf_values(child, found)
    elif isinstance(value, (list, tuple)):
        for child in value:
            _leaf_values(child, found)
    elif value is not None and not isinstance(value, bool):
        found.append(str(value))


def maskable(values: Iterable[str]) -> Tuple[str, ...]:
    """The distinct values long enough to mask, longest first (a secret that contains another
    is replaced whole)."""
    unique = {v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET_LENGTH}
    return tuple(sorted(unique, key=lambda v: (-len(v), v)))


def mask_text(text: str, secrets: Tuple[str, ...]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def mask_value(value: Any, secrets: Tuple[str, ...]) -> Any:
    """`value` with every secret replaced (dicts, lists and strings at any depth)."""
    if not secrets:
        return value
    if isinstance(value, str):
        return mask_text(value, secrets)
    if isinstance(value, dict):
        return {mask_value(k, secrets): mask_value(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(mask_value(v, secrets) for v in value)
    return value


class SecretMasker:
    """The secrets of one runtime: its packs' secret config values and its encrypted keys."""

    def __init__(self, config_values: Callable[[], Iterable[str]],
                 datastore_values: Optional[Callable[[], Iterable[str]]] = None) -> None:
        self._config_values = config_values
        self._datastore_values = datastore_values

    def secrets(self) -> Tuple[str, ...]:
        values = list(self._config_values())
        if self._datastore_values is not None:
            try:
                values.extend(self._datastore_values())
            except Exception:  # an unreadable key must not stop an output
                logging.getLogger(__name__).warning("cannot read the datastore secrets")
        return maskable(values)

    def mask(self, value: Any) -> Any:
        return mask_value(value, self.secrets())

    def masked_error(self, error: BaseException) -> BaseException:
        """The same error with its message masked (the error itself when nothing is secret)."""
        secrets = self.secrets()
        text = str(error)
        if mask_text(text, secrets) == text and not _st2_message_leaks(error, secrets):
            return error
        masked = copy.copy(error)
        masked.args = (mask_text(text, secrets),)
        if hasattr(error, "st2_message"):
            masked.st2_message = mask_text(str(error.st2_message), secrets)  # type: ignore
        return masked


def _st2_message_leaks(error: BaseException, secrets: Tuple[str, ...]) -> bool:
    message = getattr(error, "st2_message", None)
    return isinstance(message, str) and mask_text(message, secrets) != message


NO_SECRETS = SecretMasker(lambda: ())


def masker_of(owner: Any) -> SecretMasker:
    """The masker a registry or runtime carries (NO_SECRETS when it has none)."""
    found = getattr(owner, "secret_masker", None)
    return found if isinstance(found, SecretMasker) else NO_SECRETS


# ------------------------------------------------------------------------- log records
class _MaskingFilter(logging.Filter):
    """Masks the secrets of every live runtime in the records of the runtime's loggers."""

    def __init__(self) -> None:
        super().__init__()
        self._maskers: weakref.WeakSet[SecretMasker] = weakref.WeakSet()
        self._lock = threading.Lock()

    def add(self, masker: SecretMasker) -> None:
        with self._lock:
            self._maskers.add(masker)

    def filter(self, record: logging.LogRecord) -> bool:
        with self._lock:
            maskers = list(self._maskers)
        secrets = maskable(s for m in maskers for s in m.secrets())
        if not secrets:
            return True
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.msg, record.args = mask_text(message, secrets), ()
        if record.exc_text:
            record.exc_text = mask_text(record.exc_text, secrets)
            record.exc_info = None
        return True


_FILTER = _MaskingFilter()
LOGGERS = ("fleet_runtime", "fleet_runtime.engine", "fleet_runtime.st2api.http",
           "fleet_runtime.st2api.auth", "fleet_runtime.st2api.stream", "fleet_runtime.masking")


def mask_logs(masker: SecretMasker) -> None:
    """Mask `masker`'s secrets in the records the runtime's loggers emit."""
    _FILTER.add(masker)
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def config_secret_values(configs: Dict[str, Dict[str, Any]],
                         paths: Dict[str, List[str]]) -> List[str]:
    """Every secret value of the loaded pack configs. An object marked secret is shown masked
    whole; where fields inside it are marked secret too, those fields are its secret values
    (a credential's password, not its user name)."""
    found: List[str] = []
    for pack, config in configs.items():
        found.extend(values_at_paths(config, innermost(paths.get(pack) or [])))
    return found


def innermost(paths: List[str]) -> List[str]:
    """The paths no other path of `paths` lies under."""
    return [p for p in paths if not any(q.startswith(p + ".") for q in paths)]
