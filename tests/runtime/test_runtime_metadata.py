"""Pack metadata is validated the way StackStorm registers it; errors name file and field."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Dict

import pytest
import yaml
from locations import ROOT as REPO_ROOT
from runtime_support import FIXTURE_PACK, engine, make_home

from fleet_runtime import home_client
from fleet_runtime.packs import Registry, alias_format_shape
from fleet_runtime.runtime_errors import MetadataError


def minimal_pack(root: Path, files: Dict[str, object]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    base = {"ref": "tp", "name": "tp", "description": "test pack", "version": "0.1.0",
            "author": "me", "email": "me@example.com"}
    files = dict(files)
    pack_yaml = files.pop("pack.yaml", base)
    (root / "pack.yaml").write_text(yaml.safe_dump(pack_yaml))
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    return root


PY_ACTION = "from st2common.runners.base_action import Action\n\nclass A(Action):\n" \
            "    def run(self, **kw):\n        return kw\n"


def load_error(root: Path) -> MetadataError:
    with pytest.raises(MetadataError) as info:
        Registry([str(root)])
    return info.value


def test_fixture_pack_loads_with_everything() -> None:
    reg = Registry([str(FIXTURE_PACK)])
    assert "rt_test.greet" in reg.actions and "core.ask" in reg.actions
    assert "chatops.post_message" in reg.actions
    assert "rt_test.batch_done" in reg.trigger_types
    assert {r.name for r in reg.rules} >= {"inquiry_to_chat", "batch_done", "disabled"}
    assert [r.enabled for r in reg.rules if r.name == "disabled"] == [False]
    assert {p.policy_type for p in reg.policies} == {"action.concurrency", "action.retry"}


def test_default_pack_is_the_repository_root() -> None:
    assert home_client.default_pack_dir() == str(REPO_ROOT)
    assert (REPO_ROOT / "pack.yaml").is_file()


@pytest.mark.parametrize(
    "pack_yaml,field,fragment",
    [
        ({"name": "tp", "description": "d", "version": "0.1", "author": "a"}, "version",
         "does not match"),
        ({"name": "tp", "description": "d", "version": "0.1.0"}, "author",
         "is a required property"),
        ({"name": "Bad Name", "description": "d", "version": "0.1.0", "author": "a"}, "ref",
         "not a valid pack ref"),
        ({"ref": "tp", "name": "tp", "description": "d", "version": "1.0.0", "author": "a",
          "python_versions": ["4"]}, "python_versions.0", "is not one of"),
    ],
)
def test_pack_yaml_errors(tmp_path: Path, pack_yaml: dict, field: str, fragment: str) -> None:
    err = load_error(minimal_pack(tmp_path / "p", {"pack.yaml": pack_yaml}))
    assert err.field == field and fragment in str(err) and "pack.yaml" in err.path


@pytest.mark.parametrize(
    "files,path,field,fragment",
    [
        ({"actions/a.yaml": {"name": "a", "runner_type": "bash", "entry_point": "a.py"}},
         "actions/a.yaml", "runner_type", 'unknown runner type "bash"'),
        ({"actions/a.yaml": {"name": "a", "runner_type": "python-script",
                             "entry_point": "../../etc/passwd.py"}},
         "actions/a.yaml", "entry_point", "outside the pack"),
        ({"actions/a.yaml": {"name": "a", "runner_type": "python-script",
                             "entry_point": "missing.py"}},
         "actions/a.yaml", "entry_point", "does not exist"),
        ({"actions/a.yaml": {"name": "a", "runner_type": "python-script", "entry_point": "a.py"},
          "actions/a.py": "def run():\n    return 1\n"},
         "actions/a.yaml", "entry_point", "no class deriving from Action"),
        ({"actions/a.yaml": {"name": "a", "runner_type": "python-script", "entry_point": "a.py",
                             "parameters": {"x": {"type": "string", "requried": True}}},
          "actions/a.py": PY_ACTION},
         "actions/a.yaml", "parameters.x", "'requried' was unexpected"),
        ({"actions/a.yaml": {"name": "a", "runner_type": "python-script", "entry_point": "a.py",
                             "parameters": {"x": {"type": "lst"}}},
          "actions/a.py": PY_ACTION},
         "actions/a.yaml", "parameters.x.type", "is not one of"),
        ({"actions/a.yaml": {"name": "a", "runner_type": "python-script", "entry_point": "a.py",
                             "parameters": {"timeout": {"type": "string"}}},
          "actions/a.py": PY_ACTION},
         "actions/a.yaml", "parameters.timeout.type", "cannot be overridden"),
        ({"actions/a.yaml": {"name": "a", "runner_type": "python-script", "entry_point": "a.py",
                             "colour": "red"},
          "actions/a.py": PY_ACTION},
         "actions/a.yaml", None, "'colour' was unexpected"),
        ({"actions/a.yaml": {"name": "a", "pack": "other", "runner_type": "noop"}},
         "actions/a.yaml", "pack", 'field "pack" is "other"'),
        ({"actions/a.yaml": "name: a\nrunner_type: noop\ndescription: broken: yaml\n"},
         "actions/a.yaml", None, "not valid YAML"),
    ],
)
def test_action_errors(tmp_path: Path, files: dict, path: str, field: object,
                       fragment: str) -> None:
    err = load_error(minimal_pack(tmp_path / "p", files))
    assert err.path.endswith(path), err.path
    assert err.field == field, str(err)
    assert fragment in str(err)


def _wf_pack(tmp_path: Path, workflow: str) -> Path:
    return minimal_pack(tmp_path / "p", {
        "actions/wf.yaml": {"name": "wf", "runner_type": "orquesta",
                            "entry_point": "workflows/wf.yaml"},
        "actions/workflows/wf.yaml": workflow,
        "actions/a.yaml": {"name": "a", "runner_type": "python-script", "entry_point": "a.py",
                           "parameters": {"host": {"type": "string", "required": True}}},
        "actions/a.py": PY_ACTION,
    })


@pytest.mark.parametrize(
    "workflow,field,fragment",
    [
        ("version: 1.0\ntasks:\n  t:\n    action: tp.nope\n", "tasks.t.action",
         'the action "tp.nope" is not registered'),
        ("version: 1.0\ntasks:\n  t:\n    action: tp.a\n", "tasks.t.input",
         'missing required input "host"'),
        ("version: 1.0\ntasks:\n  t:\n    action: tp.a\n    input:\n      host: h\n"
         "      port: 1\n", "tasks.t.input.port", 'unexpected input "port"'),
        ("version: 1.0\ntasks:\n  t:\n    action: core.noop\n    next:\n      - do: ghost\n",
         "tasks.t.next[0].do", 'The task "ghost" is not defined'),
        ("version: 1.0\ntasks:\n  t:\n    action: core.noop\n    next:\n"
         "      - when: <% ctx(undefined_var) %>\n", "tasks.t.next[0].when",
         'Variable "undefined_var" is referenced before assignment'),
    ],
)
def test_workflow_errors(tmp_path: Path, workflow: str, field: str, fragment: str) -> None:
    err = load_error(_wf_pack(tmp_path, workflow))
    assert err.path.endswith("actions/workflows/wf.yaml")
    assert err.field == field, str(err)
    assert fragment in str(err)


def test_alias_format_collision_names_both_files(tmp_path: Path) -> None:
    root = minimal_pack(tmp_path / "p", {
        "aliases/one.yaml": {"name": "one", "action_ref": "core.noop",
                             "formats": ["roll out {{profile}} to {{batch}}"]},
        "aliases/two.yaml": {"name": "two", "action_ref": "core.noop",
                             "formats": [{"display": "roll", "representation":
                                          ["Roll out {{ p }}   to {{b=1}}"]}]},
    })
    err = load_error(root)
    assert err.path.endswith("aliases/two.yaml") and err.field == "formats[0]"
    assert "collides with" in str(err) and "aliases/one.yaml" in str(err)
    assert alias_format_shape("a {{x}} b {{ y = 3 }}") == "a {{}} b {{}}"


@pytest.mark.parametrize(
    "files,path,field,fragment",
    [
        ({"aliases/a.yaml": {"name": "a", "action_ref": "tp.missing", "formats": ["x"]}},
         "aliases/a.yaml", "action_ref", "does not exist"),
        ({"aliases/a.yaml": {"name": "a", "action_ref": "core.noop", "formats": []}},
         "aliases/a.yaml", "formats", "at least one format"),
        ({"rules/r.yaml": {"name": "r", "trigger": {"type": "core.st2.generic.inquiry"},
                           "criteria": {"trigger.route": {"type": "equalz", "pattern": "x"}},
                           "action": {"ref": "core.noop"}}},
         "rules/r.yaml", "criteria.trigger.route.type", 'unknown operator "equalz"'),
        ({"rules/r.yaml": {"name": "r", "trigger": {"type": "tp.nothing"},
                           "action": {"ref": "core.noop"}}},
         "rules/r.yaml", "trigger.type", 'unknown trigger type "tp.nothing"'),
        ({"rules/r.yaml": {"name": "r", "trigger": {"type": "core.st2.generic.inquiry"},
                           "action": {"ref": "core.nope"}}},
         "rules/r.yaml", "action.ref", 'action "core.nope" does not exist'),
        ({"rules/r.yaml": {"name": "r", "trigger": {"type": "core.st2.generic.inquiry"}}},
         "rules/r.yaml", "action", "is a required property"),
        ({"policies/p.yaml": {"name": "p", "resource_ref": "core.noop",
                              "policy_type": "action.throttle"}},
         "policies/p.yaml", "policy_type", 'unknown policy type "action.throttle"'),
        ({"policies/p.yaml": {"name": "p", "resource_ref": "core.noop",
                              "policy_type": "action.retry",
                              "parameters": {"retry_on": "failure", "max_retry_count": 9}}},
         "policies/p.yaml", "parameters.max_retry_count", "is greater than the maximum"),
        ({"policies/p.yaml": {"name": "p", "resource_ref": "core.noop",
                              "policy_type": "action.concurrency", "parameters": {}}},
         "policies/p.yaml", "parameters.threshold", "is a required property"),
        ({"policies/p.yaml": {"name": "p", "resource_ref": "tp.ghost",
                              "policy_type": "action.concurrency",
                              "parameters": {"threshold": 1}}},
         "policies/p.yaml", "resource_ref", 'action "tp.ghost" does not exist'),
        ({"config.schema.yaml": {"token": {"type": "string", "secrett": True}}},
         "config.schema.yaml", "token", "'secrett' was unexpected"),
    ],
)
def test_alias_rule_policy_config_schema_errors(tmp_path: Path, files: dict, path: str,
                                                field: str, fragment: str) -> None:
    err = load_error(minimal_pack(tmp_path / "p", files))
    assert err.path.endswith(path), err.path
    assert err.field == field, str(err)
    assert fragment in str(err)


def test_pack_config_is_validated_against_its_schema(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", config={"greeting": 5})
    with pytest.raises(MetadataError) as info:
        engine(home)
    err = info.value
    assert err.path.endswith("configs/rt_test.yaml") and err.field == "greeting"
    assert "is not of type 'string'" in str(err)


def test_pack_config_defaults_and_dynamic_values(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", config={"greeting": "{{ st2kv.system.word }}"})
    rt = engine(home)
    try:
        rt.datastore.set("word", "howdy")
        rt._configs.clear()
        config = rt.pack_config("rt_test")
        assert config["greeting"] == "howdy" and config["journal_dir"].endswith("journal")
        assert rt._config_secrets["rt_test"] == ["api_token"]
    finally:
        rt.close()


def test_missing_config_file_gets_schema_defaults(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    (home / "configs" / "rt_test.yaml").unlink()
    rt = engine(home)
    try:
        assert rt.pack_config("rt_test") == {"greeting": "hello", "journal_dir": ""}
    finally:
        rt.close()


def test_config_sections_get_their_defaults_as_st2s_config_loader_gives_them() -> None:
    """st2common's ContentPackConfigLoader: a missing object section with properties becomes
    {} with its items' defaults; additionalProperties and array items get theirs too."""
    from fleet_runtime.engine.config_defaults import with_defaults

    schema = {
        "counters": {"type": "object", "properties": {
            "source": {"type": "string", "default": "collector"},
            "prometheus": {"type": "object", "properties": {
                "url": {"type": "string"}, "host_label": {"type": "string",
                                                          "default": "instance"}}}}},
        "credentials": {"type": "object", "additionalProperties": {
            "type": "object", "properties": {"auth": {"type": "string", "default": "auto"}}}},
        "hosts": {"type": "array", "items": {"type": "object", "properties": {
            "port": {"type": "integer", "default": 22}}}},
        "name": {"type": "string"},
    }
    config = with_defaults(schema, {"credentials": {"lab": {"auth": "basic"}, "other": {}},
                                    "hosts": [{}, {"port": 2222}]})
    assert config == {
        "counters": {"source": "collector", "prometheus": {"host_label": "instance"}},
        "credentials": {"lab": {"auth": "basic"}, "other": {"auth": "auto"}},
        "hosts": [{"port": 22}, {"port": 2222}]}


def test_duplicate_pack_ref(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(FIXTURE_PACK, copy)
    with pytest.raises(MetadataError) as info:
        Registry([str(FIXTURE_PACK), str(copy)])
    assert 'pack "rt_test" is already loaded' in str(info.value)
