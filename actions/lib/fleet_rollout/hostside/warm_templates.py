"""Compiled Jinja for warm ansible-playbook runs: each task's templates compiled once per run.

Ansible forks a task worker per host and task, and every worker compiles the task's templates
and conditionals again (lex, parse, generate Python, compile): most of a worker's CPU, for a
dozen distinct strings (bench-host-change measures it). In a warm run
(warm_ansible) the run process compiles each task's strings once, when the strategy first
queues the task, before it forks the task's workers; the workers inherit the compiled code.

Only Jinja's product is shared: the Python code object of a source string, keyed by everything
that the code generation reads (the string, the template's name, the Ansible compile context's
backslash escaping, the environment's class and syntax settings, its finalize function, and the
filter and test plugin directories known to the run). A worker still builds its own Template
from the code, for its own environment, and renders it with its own variables; what misses the
cache is compiled as usual. Likewise the Jinja filters and tests, which every environment
looks up in Ansible's plugin loader again on each use: one wrapped function per plugin type,
name and plugin directories. Both start empty in every run (`begin_run`): nothing passes between
runs, whose plugin directories can differ.

Standard library at import; `install` imports Ansible and Jinja (inside the warm server only).
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

CONDITIONALS = ("when", "failed_when", "changed_when", "until")
# the Jinja environment settings its lexer and code generator read
SYNTAX = ("block_start_string", "block_end_string", "variable_start_string",
          "variable_end_string", "comment_start_string", "comment_end_string",
          "line_statement_prefix", "line_comment_prefix", "trim_blocks", "lstrip_blocks",
          "newline_sequence", "keep_trailing_newline", "optimized", "autoescape", "is_async")

_codes: Dict[Tuple, Any] = {}  # key -> code object (or the expression's code)
_tasks: set = set()  # the uuids of the tasks compiled in this run
_plugins: Dict[Tuple, Callable] = {}  # (plugin type, name, plugin dirs) -> Jinja filter/test
_stats = {"hits": 0, "misses": 0, "precompiled": 0, "plugins": 0}
_installed: Dict[str, Any] = {}  # what install() found in this ansible-core
_run: Dict[str, Any] = {}  # this run's environment for precompiling
_local = threading.local()  # an expression's compile in progress, on this thread


def begin_run() -> None:
    """A run starts (in its forked process): nothing compiled by another run is used."""
    _codes.clear()
    _tasks.clear()
    _plugins.clear()
    _run.clear()
    for name in _stats:
        _stats[name] = 0


def stats() -> Dict[str, int]:
    return dict(_stats)


def _plugin_dirs() -> Tuple:
    loader = _installed.get("plugin_loader")
    if loader is None:
        return ()
    return tuple(tuple(getattr(plugins, "_extra_dirs", ()) or ())
                 for plugins in (loader.filter_loader, loader.test_loader))


def _key(env: Any, kind: str, source: str, extra: Tuple) -> Optional[Tuple]:
    if getattr(env, "_debuggable_template_source", False):
        return None  # Ansible's template debugging writes each compile's source to a file
    context = _installed["compile_context"].current(optional=True)
    finalize = getattr(env, "finalize", None)
    return (kind, source, extra, getattr(context, "escape_backslashes", None), type(env),
            getattr(env, "code_generator_class", None), getattr(env, "context_class", None),
            tuple(getattr(env, name, None) for name in SYNTAX),
            tuple(sorted(getattr(env, "extensions", {}) or {})),
            getattr(finalize, "__func__", finalize), _plugin_dirs())


def _cached_compile(original: Callable) -> Callable:
    def compile(self: Any, source: Any, name: Optional[str] = None,
                filename: Optional[str] = None, raw: bool = False,
                defer_init: bool = False) -> Any:
        capture = getattr(_local, "capture", None)
        if capture is not None and not isinstance(source, str):
            code = original(self, source, name, filename, raw, defer_init)
            capture.append(code)  # an expression's template, compiled for compile_expression
            return code
        key = (_key(self, "template", source, (name, filename))
               if isinstance(source, str) and not raw and not defer_init else None)
        if key is not None:
            code = _codes.get(key)
            if code is not None:
                _stats["hits"] += 1
                return code
            _stats["misses"] += 1
        code = original(self, source, name, filename, raw, defer_init)
        if key is not None:
            _codes[key] = code
        return code
    return compile


def _cached_expression(original: Callable) -> Callable:
    def compile_expression(self: Any, source: Any, undefined_to_none: bool = True) -> Any:
        key = (_key(self, "expression", source, (bool(undefined_to_none),))
               if isinstance(source, str) else None)
        if key is None:
            return original(self, source, undefined_to_none)
        code = _codes.get(key)
        if code is not None:
            _stats["hits"] += 1
            template = self.template_class.from_code(self, code, self.make_globals(None), None)
            return _installed["expression_class"](template, undefined_to_none)
        _stats["misses"] += 1
        outer = getattr(_local, "capture", None)
        _local.capture = captured = []
        try:
            expression = original(self, source, undefined_to_none)
        finally:
            _local.capture = outer
        if len(captured) == 1:
            _codes[key] = captured[0]
        return expression
    return compile_expression


def _shared_plugins(original: Callable) -> Callable:
    """Each Jinja environment (a worker makes several) looks its filters and tests up in
    Ansible's plugin loader again, on every use: one wrapped function per plugin type, name
    and plugin directories, shared by the run's environments. What is not found, or fails to
    load, is not kept and fails as Ansible's own lookup does."""
    def __getitem__(self: Any, key: str) -> Callable:
        own = self._wrapped_funcs.get(key)
        if own is not None:
            return own
        shared = (getattr(self._plugin_loader, "type", None), key, _plugin_dirs())
        func = _plugins.get(shared)
        if func is None:
            func = original(self, key)
            _plugins[shared] = func
            _stats["plugins"] += 1
        return func
    return __getitem__


def install() -> bool:
    """Put the cache into Jinja's compile of Ansible's environment and the precompile into the
    strategy's queueing of a task. False (nothing changed) where this ansible-core differs."""
    if _installed:
        return True
    try:
        from ansible._internal._templating._jinja_bits import (
            AnsibleEnvironment,
            _TemplateCompileContext,
        )
        from ansible._internal._templating._jinja_plugins import JinjaPluginIntercept
        from ansible.plugins import loader as plugin_loader
        from ansible.plugins.strategy import StrategyBase
        from jinja2.environment import TemplateExpression
    except ImportError:
        return False
    _installed.update(compile_context=_TemplateCompileContext, plugin_loader=plugin_loader,
                      expression_class=TemplateExpression, environment=AnsibleEnvironment)
    AnsibleEnvironment.compile = _cached_compile(AnsibleEnvironment.compile)
    AnsibleEnvironment.compile_expression = _cached_expression(
        AnsibleEnvironment.compile_expression)
    queue = StrategyBase._queue_task

    def _queue_task(self: Any, host: Any, task: Any, task_vars: Any, play_context: Any) -> Any:
        try:
            precompile(task)
        except Exception:  # the workers compile what this did not
            pass
        return queue(self, host, task, task_vars, play_context)

    StrategyBase._queue_task = _queue_task
    JinjaPluginIntercept.__getitem__ = _shared_plugins(JinjaPluginIntercept.__getitem__)
    # Ansible caches its Jinja lexer per syntax settings in the class; made here, before the
    # forks, every worker has the default one instead of making its own
    _ = AnsibleEnvironment().lexer
    return True


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def precompile(task: Any) -> int:
    """Compile a task's argument templates and conditionals once in this run, as its workers
    compile them: templates with backslash escaping, bare conditionals as expressions
    without. Returns how many strings it compiled (0 for a task seen before)."""
    if not _installed or getattr(task, "_uuid", None) in _tasks:
        return 0
    _tasks.add(getattr(task, "_uuid", None))
    from ansible._internal._templating._jinja_bits import is_possibly_template

    env = _environment()
    context = _installed["compile_context"]
    done = 0
    with context(escape_backslashes=True):
        for text in _strings([getattr(task, "args", None) or {}, getattr(task, "name", None)]):
            if is_possibly_template(text) and not text.startswith("#jinja2:"):
                done += _try(lambda text=text: env.from_string(text))
    with context(escape_backslashes=False):
        for attribute in CONDITIONALS:
            for text in _strings(getattr(task, attribute, None) or []):
                if not is_possibly_template(text):
                    done += _try(lambda text=text: env.compile_expression(text, False))
    _stats["precompiled"] += done
    return done


def _environment() -> Any:
    env = _run.get("env")
    if env is None:  # made in the run: its filters and tests are the run's plugins
        _run["env"] = env = _installed["environment"]()
    return env


def _try(compile_one: Callable[[], Any]) -> int:
    try:
        compile_one()
    except Exception:  # a template that does not compile fails in its worker
        return 0
    return 1
