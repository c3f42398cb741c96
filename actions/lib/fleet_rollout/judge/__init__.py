"""The canary judge: compares NIC drop rates of changed (canary) and unchanged (control) hosts.

Use::

    from fleet_rollout.judge import judge, load_judge_input, load_policy
    policy = load_policy("policy.yaml")            # or Policy() for the defaults
    verdict = judge(load_judge_input("input.json", policy.metric), policy)
    verdict.verdict, verdict.explanation, verdict.to_dict()
"""
from __future__ import annotations

from fleet_rollout.judge.core import FAIL, INCONCLUSIVE, PASS, Verdict, judge
from fleet_rollout.judge.inputs import JudgeInput, judge_input_from_dict, load_judge_input
from fleet_rollout.judge.policy import Policy, load_policy, policy_from_dict

__all__ = [
    "FAIL",
    "INCONCLUSIVE",
    "PASS",
    "JudgeInput",
    "Policy",
    "Verdict",
    "judge",
    "judge_input_from_dict",
    "load_judge_input",
    "load_policy",
    "policy_from_dict",
]
