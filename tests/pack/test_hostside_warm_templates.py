"""The warm runs' compiled-template cache (fleet_rollout.hostside.warm_templates): a run
compiles each task's templates and conditionals once, before its workers fork, and they render
exactly what they render without it. Each check runs in a process of its own: install()
changes Ansible's classes for the whole process."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "warm_templates_script.py"


def _run(*args: str, code: str = "") -> dict:
    argv = [sys.executable, "-c", code] if code else [sys.executable, str(SCRIPT), *args]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_precompiled_tasks_render_what_their_workers_render_without_a_compile() -> None:
    cached = _run("cached")
    plain = _run("plain")
    # every task of the pack's playbooks, rendered (arguments and conditionals) as without
    assert cached["rendered"] == plain["rendered"]
    assert len(cached["rendered"]) == 8
    # each task's templates were compiled when it was first queued, and only then
    assert all(count >= 1 for count in cached["precompiled"].values()), cached["precompiled"]
    assert cached["again"] == 0
    compiled = cached["after_precompile"]["misses"]
    assert compiled >= 10
    # rendering them compiled nothing more: every template and conditional came from the cache
    assert cached["after_render"]["misses"] == compiled
    assert cached["after_render"]["hits"] - cached["after_precompile"]["hits"] >= 16
    # a new run starts empty: nothing compiled in another run (other plugins) is used
    assert cached["next_run"]["hits"] == 0 and cached["next_run"]["misses"] >= 1


CHECKS = r'''
import json
from types import SimpleNamespace
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar
from ansible._internal._datatag._tags import TrustedAsTemplate
from ansible._internal._templating._jinja_bits import AnsibleEnvironment, _TemplateCompileContext
from fleet_rollout.hostside import warm_templates

def strings(code):
    found = []
    for const in code.co_consts:
        found += strings(const) if hasattr(const, "co_consts") else (
            [const] if isinstance(const, str) else [])
    return found


init_plugin_loader()
CACHED = __import__("sys").argv[1] == "cached"
if CACHED:
    assert warm_templates.install()
    warm_templates.begin_run()
seen = {}
# the same source, compiled with and without Ansible's backslash escaping, is two programs
env = AnsibleEnvironment()
source = "{{ 'a\\1b' }}"
for escape in (True, False, True):
    with _TemplateCompileContext(escape_backslashes=escape):
        code = env.compile(source)  # what the template runs: its constants show the escaping
        seen.setdefault("escaped", []).append(strings(code))
seen["escape_stats"] = warm_templates.stats()
# a template that does not compile is not kept: its worker fails as it would without
task = SimpleNamespace(_uuid="t-1", name="broken", when=["x == 1", "y ==", True],
                       args={"msg": "{{ x | no_such_filter_here }}", "n": ["{{ y ~ }}"]})
seen["precompiled"] = warm_templates.precompile(task) if CACHED else None
templar = Templar(variables={"x": 1})
for name, text in (("filter", "{{ x | no_such_filter_here }}"), ("syntax", "{{ y ~ }}")):
    try:
        templar.template(TrustedAsTemplate().tag(text))
        seen[name] = "rendered"
    except Exception as err:
        seen[name] = type(err).__name__
# filters: one wrapped function per name for all of a run's environments; none for a name
# that no plugin has
first, second = AnsibleEnvironment(), AnsibleEnvironment()
quote = first.filters["quote"]
seen["shared_filter"] = second.filters["quote"] is quote
seen["filter_works"] = quote("a b")
seen["unknown_filter"] = [("no_such_filter_here" in env.filters) for env in (first, second)]
if CACHED:
    warm_templates.begin_run()
seen["next_run_shares"] = AnsibleEnvironment().filters["quote"] is quote
print(json.dumps(seen))
'''


def test_what_compiles_differently_is_kept_apart_and_errors_stay_the_workers() -> None:
    cached = _run(code=CHECKS.replace("__import__(\"sys\").argv[1]", "'cached'"))
    plain = _run(code=CHECKS.replace("__import__(\"sys\").argv[1]", "'plain'"))
    assert cached["escaped"] == plain["escaped"]
    assert cached["escaped"][0] != cached["escaped"][1]  # escaping changes the program
    assert cached["escaped"][0] == cached["escaped"][2]
    # two compiles (one per escaping), the third from the cache
    assert {k: cached["escape_stats"][k] for k in ("hits", "misses", "precompiled")} == \
        {"hits": 1, "misses": 2, "precompiled": 0}
    # of the broken task, only its one valid conditional ("x == 1") compiled
    assert cached["precompiled"] == 1
    for name in ("filter", "syntax"):
        assert cached[name] == plain[name] != "rendered", (name, cached[name])
    # filters: shared by a run's environments (each looked them up again before), not by runs
    assert cached["shared_filter"] is True and plain["shared_filter"] is False
    assert cached["filter_works"] == plain["filter_works"] == "'a b'"
    assert cached["unknown_filter"] == plain["unknown_filter"] == [False, False]
    assert cached["next_run_shares"] is False
