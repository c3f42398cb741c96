"""Judge policy files: defaults, validation with errors that name the file and the field."""
from __future__ import annotations

from pathlib import Path

import locations
import pytest

from fleet_rollout.errors import ConfigError
from fleet_rollout.judge import Policy, load_policy, policy_from_dict

FIXTURES = locations.FIXTURES / "judge"


def test_defaults() -> None:
    policy = load_policy(None)
    assert policy == Policy() == policy_from_dict(None) == policy_from_dict({})
    assert (policy.alpha, policy.ci_level, policy.min_canary_hosts) == (0.03, 0.94, 3)
    assert policy.to_dict()["metric"]["packets"] == ["netdev:rx_packets"]


def test_strict_policy_file() -> None:
    policy = load_policy(str(FIXTURES / "policy-strict.yaml"))
    assert policy.alpha == 0.01 and policy.min_control_hosts == 20
    assert policy.max_drop_rate == 0.001 and policy.min_packets == 10000  # default kept
    assert [str(t) for t in policy.metric.drops] == ["snmp:Udp.RcvbufErrors"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("alhpa: 0.05\n", r"p.yaml: \(top level\): unknown key\(s\) alhpa \(allowed: alpha, "
                          r"ci_level"),
        ("alpha: high\n", r"p.yaml: alpha: 'high' is not of type 'number'"),
        ("alpha: 0.7\n", r"p.yaml: alpha: 0.7 is greater than the maximum of 0.5"),
        ("alpha: 0\n", r"p.yaml: alpha: 0 is less than or equal to the minimum of 0"),
        ("min_canary_hosts: 2.5\n", r"min_canary_hosts: 2.5 is not of type 'integer'"),
        ("min_packets: true\n", r"p.yaml: min_packets: must be a number, got True"),
        ("max_traffic_shift: 0.5\n", r"max_traffic_shift: 0.5 is less than the minimum of 1"),
        ("- alpha\n", r"p.yaml: must be a mapping of policy keys"),
        ("metric:\n  drops: [nic:x]\n", r"p.yaml: metric.drops\[0\]: unknown counter source"),
        ("min_canary_hosts: 2\nmin_control_hosts: 3\n",
         r"can never reach alpha 0.03 \(the smallest possible p-value is 0.1\)"),
        ("alpha: [0.05\n", r"p.yaml: not valid YAML"),
    ],
)
def test_bad_policy_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_policy(str(path))


def test_missing_policy_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.yaml: cannot read policy file"):
        load_policy(str(tmp_path / "nope.yaml"))


def test_profile_section() -> None:
    profile = {"canary": {"min_canary_hosts": 4, "metric": {"drops": ["softnet:dropped"]}}}
    policy = policy_from_dict(profile["canary"], "profiles/snoop.yaml: canary")
    assert policy.min_canary_hosts == 4 and str(policy.metric.drops[0]) == "softnet:dropped"
    with pytest.raises(ConfigError, match="profiles/snoop.yaml: canary: alpha"):
        policy_from_dict({"alpha": "x"}, "profiles/snoop.yaml: canary")
