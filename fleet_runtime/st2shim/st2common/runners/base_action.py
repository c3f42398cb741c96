"""st2common.runners.base_action (shim): the base class of python-script actions."""
from __future__ import annotations

import abc
import logging
import sys
from typing import Any, Optional

__all__ = ["Action"]

_LEVELS = {
    "AUDIT": logging.INFO,
    "CRITICAL": logging.CRITICAL,
    "ERROR": logging.ERROR,
    "WARNING": logging.WARNING,
    "INFO": logging.INFO,
    "DEBUG": logging.DEBUG,
}


def get_logger_for_python_runner_action(action_name: str, log_level: str = "debug") -> Any:
    """A logger writing to stderr (st2 captures it into the result's stderr)."""
    logger = logging.getLogger(f"actions.python.{action_name}")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(_LEVELS.get(str(log_level).upper(), logging.DEBUG))
    return logger


class Action(metaclass=abc.ABCMeta):
    """Base action class other Python actions should inherit from."""

    description = None

    def __init__(self, config: Optional[dict] = None, action_service: Any = None) -> None:
        self.config = config or {}
        self.action_service = action_service
        wrapper = getattr(action_service, "_action_wrapper", None) if action_service else None
        log_level = getattr(wrapper, "_log_level", "debug") if wrapper else "debug"
        self.logger = get_logger_for_python_runner_action(
            action_name=self.__class__.__name__, log_level=log_level
        )

    @abc.abstractmethod
    def run(self, **kwargs: Any) -> Any:
        pass
