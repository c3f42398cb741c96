"""What the pack's actions call: one function per action, over the library.

Actions only parse parameters and call these; everything here is plain Python (no StackStorm
import), given the pack config dict and a datastore (st2's action_service, or a Store).
"""
from __future__ import annotations

import math
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from fleet_rollout import (
    approvals,
    claims,
    connection,
    gate,
    prometheus_windows,
    questions,
    site_limits,
    timeouts,
    wavesteps,
)
from fleet_rollout.audit import ROLLOUT
from fleet_rollout.config import PackConfig, load_pack_config
from fleet_rollout.errors import ConfigError
from fleet_rollout.estimate import approval_needed, early_pre, estimate_plan, render_estimate
from fleet_rollout.hostside.playbook_steps import HostSide
from fleet_rollout.hoststeps import HostRun, RolloutContext, batch_summary
from fleet_rollout.inventory import load_fleet
from fleet_rollout.names import check_rollout_id, check_targets
from fleet_rollout.paths import PACK_DIR, PROFILES_DIR, private_dir
from fleet_rollout.plan import (
    batch_of,
    build_plan,
    controls_for_batch,
    precheck_hosts,
    render_plan,
)
from fleet_rollout.profile import load_profile, step_seconds, window_steps
from fleet_rollout.redfish.operations import check_desired
from fleet_rollout.st2api import ActionApi
from fleet_rollout.states import (
    ABORTING,
    DONE,
    END_RANK,
    FAIL,
    FAILED,
    LEFT_DRAINED,
    PENDING,
    PLANNED,
    REJECTED,
    RESTORE_FAILED,
    RESTORE_STEP,
    RESTORED,
    RESTORING,
    ROLLING_BACK,
    RUNNING,
    batch_label,
)
from fleet_rollout.statestore import state_store
from fleet_rollout.store import RolloutState, Store


def as_store(datastore: Any, config: PackConfig) -> Store:
    """Where this action keeps rollout state (statestore.py)."""
    return state_store(datastore, config)


def pack_config(raw: Any) -> PackConfig:
    return load_pack_config(raw, PACK_DIR)


def context(raw_config: Any, datastore: Any, rollout_id: str, execution_id: str = "",
            user: str = "") -> RolloutContext:
    config = pack_config(raw_config)
    store = as_store(datastore, config)
    # the plan's head only: a batch's hosts or a host's info are read when asked for (PlanView)
    plan = RolloutState(store, check_rollout_id(rollout_id)).plan_view()
    side = host_side(config, plan["inventory"], rollout_id)
    return RolloutContext(store, rollout_id, config, side, execution_id, user, plan=plan)


def host_side(config: PackConfig, inventory: str, rollout_id: str = "") -> HostSide:
    """The hosts of `inventory` as the pack config says to reach them."""
    return HostSide(config.resolve(inventory),
                    config.resolve(config.ansible_private_key or "") or None,
                    forks=config.ansible_forks,
                    known_hosts=config.resolve(config.ssh_known_hosts) or None,
                    cache_dir=config.state_dir,  # host vars cached under state_dir/hostvars
                    rollout_id=rollout_id,
                    connection=config.connection)


ROLLOUT_WORKFLOW = "fleet_rollout.rollout"


def parent_of(execution: Dict[str, Any]) -> str:
    """The id of the workflow an execution runs in ("" for a root execution)."""
    return str(((execution.get("context") or {}).get("parent") or {}).get("execution_id") or "")


def rollout_workflow_of(api: Any, own: Dict[str, Any]) -> str:
    """The fleet_rollout.rollout execution the plan action runs in ("" when run on its own)."""
    parent = parent_of(own)
    if parent and ((api.execution(parent).get("action") or {}).get("ref")) == ROLLOUT_WORKFLOW:
        return parent
    return ""


def plan_rollout(raw_config: Any, datastore: Any, profile: str, targets: str = "all",
                 rollout_id: Optional[str] = None, user: str = "",
                 caller: Optional[approvals.Identity] = None,
                 workflow: str = "") -> Dict[str, Any]:
    """Dry run: validate inputs, look at every target BMC (read-only), store the plan.

    The profile by name from the pack's profiles/, the hosts from the pack config's inventory:
    a caller passes names, never paths. `caller` (the action's authenticated identity) must be
    one of the pack config's operators."""
    config = pack_config(raw_config)
    if caller is not None:
        approvals.require_operator(caller, config, f"planning a rollout of {profile}")
        user = approvals.trusted(caller, config).name
    check_targets(targets)
    if rollout_id is not None:
        check_rollout_id(rollout_id)
    prof = load_profile(profile, profile_dir(config, profile))
    if rollout_id is None and workflow:
        # named after the workflow execution: a second run of the same plan task (StackStorm's
        # scheduler can dispatch a task twice) finds its own plan instead of making another
        rollout_id = f"{prof.name}-{workflow}"
        check_rollout_id(rollout_id)
    if needs_approval(prof.data, 0) or needs_approval(prof.data, 1):
        approvals.require_approvers(config, prof.name)
    source = config.inventory_source()
    everyone, hosts = load_fleet(source, targets, cache_hostvars=True, cache_dir=config.state_dir)
    check_endpoints(config, hosts)
    check_connections(config, source, [h.name for h in hosts])
    bios = prof.bios

    def check(host: Any) -> Dict[str, Any]:
        result = check_desired(config.endpoint(host), bios)
        extra = prof.data.get("bios_extra") or {}
        return {"compliant": result["compliant"] and not extra, "vendor": result["vendor"]}

    compliance = precheck_hosts(hosts, check)
    plan = build_plan(prof, source, targets, hosts, everyone, compliance, rollout_id, user,
                      forks=config.ansible_forks)
    check_connections(config, source, list(plan["control"]))
    prometheus_windows.check_scraped(
        config, [h for b in plan["batches"] for h in b["hosts"]] + list(plan["control"]))
    store = as_store(datastore, config)
    state = RolloutState(store, plan["rollout_id"])
    if state.plan_exists():
        if workflow and state.meta().get("workflow") == workflow:
            # this workflow's plan task run again: its stored plan, nothing written
            return planned(config, state.plan())
        raise ConfigError(f"rollout {plan['rollout_id']} exists already; pick another id")
    state.save_plan(plan)
    # workflow: the rollout workflow that planned it, whose batch workflows alone may ask,
    # record answers and change hosts (batch_info checks)
    result = planned(config, plan)
    # the estimate as the plan gave it, for the report (the rollout's schedule beside it)
    state.update_meta(status=PLANNED, planned_at=time.time(), started=time.time(),
                      planned_by=user, started_by=user, workflow=workflow,
                      profile=prof.name, batches=len(plan["batches"]),
                      estimate_table=result["batch_table"],
                      estimate_totals=result["estimate"]["totals"])
    return result


def planned(config: PackConfig, plan: Dict[str, Any]) -> Dict[str, Any]:
    """The plan action's result for a stored plan."""
    estimate = estimate_plan(plan, forks=config.ansible_forks)
    return {"rollout_id": plan["rollout_id"], "batches": len(plan["batches"]),
            "targets": plan["targets"], "skipped_compliant": plan["skipped_compliant"],
            "control": plan["control"], "table": render_plan(plan, estimate),
            "route": config.chat_route,
            "channel": config.chat_channel, "estimate": estimate,
            "batch_table": render_estimate(estimate)}


def check_endpoints(config: PackConfig, hosts: List[Any]) -> None:
    """Every host's credential name resolves and its BMC is in the allowed networks, before
    anything is sent to any BMC (ConfigError naming each refused host, the first 10)."""
    refused: List[str] = []
    for host in hosts:
        try:
            config.endpoint(host)
        except ConfigError as err:
            refused.append(str(err))
    if refused:
        more = f"; and {len(refused) - 10} more" if len(refused) > 10 else ""
        raise ConfigError(f"{len(refused)} host(s) refused, nothing was changed: "
                          f"{'; '.join(refused[:10])}{more}")


def check_connections(config: PackConfig, source: str, names: List[str]) -> None:
    """No inventory variable of these hosts sets what the pack config decides (connection.py),
    read from the host-variable cache the plan stored."""
    if not names:
        return
    from fleet_rollout import hostvars

    found = hostvars.lookup(source, names, config.state_dir)
    connection.check_hosts(source, found.hosts, config.connection, names)


def profile_dir(config: PackConfig, name: str) -> str:
    """Where profile `name` lives: the pack's profiles/, else the config's profiles_dir."""
    shipped = PROFILES_DIR
    if not config.profiles_dir or not isinstance(name, str) or \
            os.path.basename(name) != name or \
            os.path.isfile(os.path.join(shipped, f"{name}.yaml")):
        return shipped  # load_profile checks the name itself
    return config.resolve(config.profiles_dir)


def approval_message(ctx: RolloutContext, batch: int, hosts: List[str],
                     previous: Optional[Dict[str, Any]],
                     reasons: Optional[List[str]] = None) -> str:
    """The batch's announcement: its hosts, and what it needs from people (an answer and why,
    or none when the judge or the profile promotes it)."""
    rollout_id = ctx.state.id
    shown = ", ".join(hosts[:10]) + (f" (+{len(hosts) - 10} more)" if len(hosts) > 10 else "")
    prev = (f" Previous batch: {previous['verdict']}." if previous else "")
    if reasons is None:
        reasons = approval_reasons(ctx, batch, len(hosts))
    if reasons:
        ask = (f" Needs an approver: {'; '.join(reasons)}. Approve with `rollout approve "
               f"{rollout_id}` or reject with `rollout reject {rollout_id}`.")
    else:
        ask = (f" {promotion(ctx, batch)['text']}: it starts now (pause with `rollout pause "
               f"{rollout_id}`, stop with `rollout abort {rollout_id}`).")
    return (f"Rollout {rollout_id} ({ctx.profile['name']}): batch {batch_label(batch)} of "
            f"{len(ctx.plan['batches'])}{' (canary)' if batch == 0 else ''}: {len(hosts)} "
            f"host(s): {shown}.{prev}{ask}")


def approval_reasons(ctx: RolloutContext, batch: int, count: int) -> List[str]:
    """Why batch `batch` (of `count` hosts) waits for a human; [] when it goes on by itself:
    the profile's rule (estimate.approval_needed), a pause, a batch before it that did not
    PASS without a human's `proceed`, hosts of the rollout still out that would take a
    site or rack over its limit with this batch, and hosts of the batch another rollout
    holds (their steps would be refused)."""
    reasons: List[str] = []
    approval = ctx.profile["approval"]
    if needs_approval(ctx.profile, batch, count):
        manual = approval.get("manual_batches")
        above = approval.get("manual_above_hosts")
        if manual is not None and batch >= int(manual) and above is not None and \
                count > int(above):
            reasons.append(f"more than {above} hosts")
        elif manual is not None:
            reasons.append(f"the first {manual} batch(es) are approved by a human")
        else:
            reasons.append("the profile has every batch approved by a human")
    paused = ctx.state.meta().get("paused")
    if isinstance(paused, dict):
        reasons.append(f"paused by {paused.get('by') or '?'}")
    if batch > 0 and promotion(ctx, batch)["by"] == "":
        reasons.append(f"batch {batch_label(batch - 1)} has no PASS verdict")
    over = capacity_excess(ctx, batch)
    if over:
        reasons.append("with hosts still out: " + "; ".join(over[:5]))
    held = claims.held_elsewhere(ctx.store, gate.batch_hosts(ctx, batch), ctx.rollout_id)
    if held:
        shown = ", ".join(f"{h} (rollout {o})" for h, o in sorted(held.items())[:5])
        more = f" and {len(held) - 5} more" if len(held) > 5 else ""
        reasons.append(f"{len(held)} host(s) held by another rollout, whose steps here are "
                       f"refused: {shown}{more}")
    return reasons


def promotion(ctx: RolloutContext, batch: int) -> Dict[str, str]:
    """Who lets a batch that needs no human go on: the profile (the first batch), the judge
    (the batch before passed) or the approver who chose `proceed` after its INCONCLUSIVE
    verdict; `by` "" when none of them did."""
    before = ctx.state.batch(batch - 1) if batch > 0 else {}
    verdict = (before.get("verdict") or {}).get("verdict")
    if verdict is None:  # the first batch (a batch runs after the one before it has ended)
        return {"by": "profile", "via": "profile", "text": "Approved by the profile"}
    if verdict == "PASS":
        return {"by": "judge", "via": "promotion", "verdict": "PASS",
                "text": f"Promoted by the judge (batch {batch_label(batch - 1)}: PASS)"}
    answers = [a for a in before.get("answers") or [] if a.get("approved")]
    if verdict == "INCONCLUSIVE" and answers and answers[-1].get("choice") == "proceed":
        who = str(answers[-1].get("by") or "")
        return {"by": who, "via": "proceed", "verdict": "INCONCLUSIVE",
                "text": f"Promoted by {who} (batch {batch_label(batch - 1)}: INCONCLUSIVE, "
                        "proceed)"}
    return {"by": "", "via": "", "text": f"batch {batch_label(batch - 1)}: {verdict or 'none'}"}


OUT_OF_SERVICE = (FAILED, RESTORING, RESTORE_FAILED, LEFT_DRAINED)


def capacity_excess(ctx: RolloutContext, batch: int) -> List[str]:
    """Sites and racks this batch would take over their limit together with the rollout's
    hosts still out of service (failed, left drained, being restored: site_limits)."""
    hosts = gate.batch_hosts(ctx, batch)
    out = [h for h, st in ctx.state.hosts().items()
           if st.get("status") in OUT_OF_SERVICE and h not in hosts]
    if not out:
        return []
    infos = {h: ctx.plan["hosts"].get(h) or {} for h in list(hosts) + out}
    limits = site_limits.Caps(
        site={str(i.get("site")): int(i.get("site_cap") or 1) for i in infos.values()},
        rack={(str(i.get("site")), str(i.get("rack"))): int(i.get("rack_cap") or 1)
              for i in infos.values()})
    return site_limits.over_limit([infos[h] for h in hosts], [infos[h] for h in out], limits)


def check_batch_workflow(api: Any, state: RolloutState, rollout_id: str, batch: int) -> None:
    """The rollout_batch this action runs in is the rollout's own: for this rollout and batch,
    started by the rollout workflow that planned it, as the same account. A batch workflow
    anybody else starts (st2 keeps a `context` a caller passes, parent included, but gives
    the execution the caller's own user) is refused before it asks or changes anything."""
    own = api.own_execution()
    batch_id = parent_of(own)
    batch_wf = api.execution(batch_id) if batch_id else {}
    params = batch_wf.get("parameters") or {}
    recorded = str(state.meta().get("workflow") or "")
    rollout_id_of = params.get("rollout_id")
    if ((batch_wf.get("action") or {}).get("ref")) != BATCH_WORKFLOW or \
            rollout_id_of != rollout_id or str(params.get("batch")) != str(batch) or \
            not recorded or parent_of(batch_wf) != recorded or \
            (batch_wf.get("context") or {}).get("user") != \
            (api.execution(recorded).get("context") or {}).get("user"):
        raise ConfigError(f"Refused: rollout {rollout_id} batch {batch_label(batch)} runs only "
                          f"in a {BATCH_WORKFLOW} its own {ROLLOUT_WORKFLOW} workflow started "
                          f"({recorded or 'none recorded'}); nothing asked or changed")


def batch_info(raw_config: Any, datastore: Any, rollout_id: str, batch: int,
               api: Any = None) -> Dict[str, Any]:
    """The batch's facts; with `api` (the action), first checks that the batch workflow is
    the rollout's own (check_batch_workflow)."""
    ctx = context(raw_config, datastore, rollout_id)
    if api is not None:
        check_batch_workflow(api, ctx.state, rollout_id, batch)
    plan = ctx.plan
    hosts = gate.batch_hosts(ctx, batch)
    approval = ctx.profile["approval"]
    previous = ctx.state.batch(batch - 1).get("verdict") if batch > 0 else None
    reasons = approval_reasons(ctx, batch, len(hosts))
    needs = bool(reasons)
    users, roles = approvals.inquiry_acl(ctx.config)
    message = approval_message(ctx, batch, hosts, previous, reasons)
    started = time.time()
    ctx.state.update_batch(batch, lambda b: b.update(
        started_at=b.get("started_at") or started, approval_reasons=reasons))
    learned = {}
    if batch > 0:  # the reboots of the batch before pace this batch's waits (Pacer)
        observed = timeouts.observed_reboot(ctx.state.host(h)
                                            for h in gate.batch_hosts(ctx, batch - 1))
        if observed is not None:
            learned = {"expected_reboot": observed}
    ctx.state.update_meta(status=RUNNING, current_batch=batch, **learned)
    canary = ctx.profile["canary"]
    pre_steps, post_steps = window_steps(canary)
    return {"hosts": hosts, "count": len(hosts), "approval_required": needs,
            "message": message, "route": ctx.config.chat_route,
            "channel": ctx.config.chat_channel, "users": users, "roles": roles,
            "ttl": approval["ttl_minutes"], "parallel": ctx.profile["batches"]["parallel"],
            "waves": waves_of(hosts, ctx.profile["batches"]["parallel"]),
            # orquesta's task delay must be an integer (st2 fails the workflow on 10.0)
            "window": whole_seconds(canary["window_seconds"]),
            # the window in `steps` steps, each collected (gate.py); `step`: their length (the
            # workflow waits each collection's next_delay, the whole seconds until the next
            # is due, a step after the one before it started);
            # the pre window lasts canary.pre_windows windows: pre_steps steps of that length
            "pre_steps": pre_steps, "steps": post_steps,
            "step": whole_seconds(step_seconds(canary)),
            "soak": whole_seconds(canary["soak_seconds"]),
            "last": batch == len(plan["batches"]) - 1,
            # the next batch's pre window starts in this one's post window (gate.py): only when
            # no approval will hold the next batch (its pre_start would start it again)
            "early_pre": batch + 1 < len(plan["batches"]) and early_pre(
                ctx.profile, batch + 1, len(plan["batches"]),
                len(plan["batches"][batch + 1]["hosts"])),
            "controls": len(controls_for_batch(plan, batch)),
            # the batch's sites have maintenance windows: each wave waits for them too
            "maintenance": site_limits.restricted(site_limits.plan_schedules(
                ctx.profile, plan["hosts"], hosts)),
            "timeouts": timeouts.action_timeouts(ctx.profile, ctx.config.redfish_timeout,
                                                 ctx.config.ansible_forks)}


def waves_of(hosts: List[str], parallel: int) -> List[Dict[str, List[str]]]:
    """The batch's hosts in waves of at most `parallel`, in the batch's order: each
    {"hosts": [...]} (orquesta's with-items spreads an item that is a list over its
    variables)."""
    size = max(1, int(parallel))
    return [{"hosts": hosts[i:i + size]} for i in range(0, len(hosts), size)]


def whole_seconds(seconds: Any) -> int:
    """A profile's seconds (a number, maybe 10.5) as a workflow delay: whole seconds, up."""
    return int(math.ceil(float(seconds)))


def needs_approval(profile: Dict[str, Any], batch: int, hosts: int = 0) -> bool:
    return approval_needed(profile, batch, hosts)


BATCH_WORKFLOW = "fleet_rollout.rollout_batch"


def asking_workflow(api: Any, rollout_id: str, batch: int) -> Dict[str, Any]:
    """The rollout_batch execution this action runs in, checked: record_answer counts only as
    a task of the workflow of the same rollout and batch, never when run directly."""
    own = api.own_execution()
    parent_id = str(((own.get("context") or {}).get("parent") or {}).get("execution_id") or "")
    if not parent_id:
        raise ConfigError(f"record_answer runs only as a task of the {BATCH_WORKFLOW} "
                          "workflow (it has no parent here); nothing recorded")
    workflow = api.execution(parent_id)
    ref = (workflow.get("action") or {}).get("ref")
    params = workflow.get("parameters") or {}
    if ref != BATCH_WORKFLOW or params.get("rollout_id") != rollout_id or \
            str(params.get("batch")) != str(batch):
        raise ConfigError(
            f"record_answer for rollout {rollout_id} batch {batch_label(batch)} runs only in that "
            f"batch's {BATCH_WORKFLOW} workflow (its parent is {ref or '?'}); nothing recorded")
    return workflow


def inquiry_answer(asking: questions.Questions, batch: int, question: str
                   ) -> Tuple[str, Dict[str, Any], str]:
    """(inquiry id, response, who answered) of the batch's latest question of this kind: the
    question fleet_rollout.ask recorded, its response as StackStorm recorded it, and the
    requester StackStorm recorded for it (kept by await_answer)."""
    asked = asking.asked(batch, question)
    if not asked.get("workflow"):
        raise approvals.ApprovalRefused(f"batch {batch_label(batch)} asked no {question} "
                                        "question")
    inquiry = asking.inquiry(str(asked["workflow"]))
    if inquiry is None:
        raise approvals.ApprovalRefused(f"the {question} question (workflow "
                                        f"{asked['workflow']}) was never asked")
    result = inquiry.get("result") or {}
    response = result.get("response") if isinstance(result, dict) else None
    if inquiry.get("status") != "succeeded" or not isinstance(response, dict):
        raise approvals.ApprovalRefused(f"the {question} question ({inquiry.get('id')}) has "
                                        f"no answer (status {inquiry.get('status')})")
    inquiry_id = str(inquiry.get("id"))
    return inquiry_id, response, asking.author(batch, inquiry_id)


def ask(raw_config: Any, datastore: Any, rollout_id: str, batch: int, question: str,
        api: Any = None) -> Dict[str, Any]:
    """Ask the batch's question in a workflow of its own (questions.py); its text, users,
    roles and ttl from the plan, the recorded verdict, the pack config and the profile,
    never from parameters."""
    ctx = context(raw_config, datastore, rollout_id)
    if question not in questions.KINDS:
        raise ConfigError(f"question {question!r}: approval or inconclusive")
    message = question_text(ctx, batch, question)
    if api is None:
        api = ActionApi.from_env()
    asking_workflow(api, rollout_id, batch)
    users, roles = approvals.inquiry_acl(ctx.config)
    asking = questions.Questions(api, ctx.state)
    return asking.ask(batch, question, message, users, roles,
                      int(ctx.profile["approval"]["ttl_minutes"]))


def question_text(ctx: RolloutContext, batch: int, question: str) -> str:
    """What the batch's question says: the batch to approve, or the INCONCLUSIVE verdict."""
    if question == "approval":
        previous = ctx.state.batch(batch - 1).get("verdict") if batch > 0 else None
        return approval_message(ctx, batch, gate.batch_hosts(ctx, batch), previous)
    verdict = ctx.state.batch(batch).get("verdict") or {}
    if verdict.get("verdict") != "INCONCLUSIVE":
        raise ConfigError(f"batch {batch_label(batch)} of rollout {ctx.state.id} has no "
                          "INCONCLUSIVE verdict recorded: nothing to ask")
    return str(verdict.get("explanation") or "")


def unattributed_note(inquiry_id: str, why: str) -> str:
    return (f"Asked again: the answer to inquiry {inquiry_id} was not counted: {why}. "
            "Please answer once more. ")


def reask(ctx: RolloutContext, api: Any, batch: int) -> questions.Reask:
    """The callback await_answer asks a question again with, when StackStorm recorded no
    requester for its answer: the audit trail keeps the unattributed answer, the new question
    says why it is asked again (chat shows it through the inquiry rule)."""
    asking = questions.Questions(api, ctx.state)

    def again(question: str, inquiry_id: str, ttl_left: int, why: str) -> Dict[str, Any]:
        ctx.audit.record(ROLLOUT, f"batch.{batch_label(batch)}.{question}", inquiry_id,
                         f"asked again: {why}", api.execution_id, "nobody",
                         action="answer_unattributed")
        users, roles = approvals.inquiry_acl(ctx.config)
        message = unattributed_note(inquiry_id, why) + question_text(ctx, batch, question)
        return asking.ask(batch, question, message, users, roles, ttl_left,
                          again=asking.asked(batch, question), reask_of=inquiry_id)

    return again


def await_answer(raw_config: Any, datastore: Any, rollout_id: str, batch: int, question: str,
                 wait: float = questions.WAIT, api: Any = None) -> Dict[str, Any]:
    """Wait for the answer to the batch's question (questions.py)."""
    ctx = context(raw_config, datastore, rollout_id)
    if question not in questions.KINDS:
        raise ConfigError(f"question {question!r}: approval or inconclusive")
    if api is None:
        api = ActionApi.from_env()
    asking_workflow(api, rollout_id, batch)
    return questions.Questions(api, ctx.state, answer_gap=ctx.config.answer_gap).await_answer(
        batch, question, wait=wait, reask=reask(ctx, api, batch))


OUTCOMES = ("answered", "timed_out", "unasked", "halted", "auto")


def record_answer(raw_config: Any, datastore: Any, rollout_id: str, batch: int, question: str,
                  outcome: str, api: Any = None) -> Dict[str, Any]:
    """Record the answer to a batch's question (approval, or what to do after an INCONCLUSIVE
    verdict), read from StackStorm: the inquiry's own response and who StackStorm recorded as
    answering it (questions.py, approvals.answer_author), never from parameters. An answer
    whose author cannot be established, or is no approver, counts as a refusal; so does a run
    outside the batch's workflow."""
    ctx = context(raw_config, datastore, rollout_id)
    if question not in questions.KINDS:
        raise ConfigError(f"question {question!r}: approval or inconclusive")
    if outcome not in OUTCOMES:
        raise ConfigError(f"outcome {outcome!r}: one of {', '.join(OUTCOMES)}")
    if api is None:
        api = ActionApi.from_env()
    record: Dict[str, Any] = {"question": question, "outcome": outcome, "at": time.time(),
                              "auto": outcome == "auto", "by": "", "via": outcome}
    response: Dict[str, Any] = {}
    # run outside its batch's workflow: refused, nothing recorded (a forged answer must not
    # approve, nor halt someone else's rollout)
    asking_workflow(api, rollout_id, batch)
    try:
        if outcome == "auto":
            reasons = approval_reasons(ctx, batch, len(gate.batch_hosts(ctx, batch))) \
                if question == "approval" else ["not an approval"]
            if reasons:
                # what the batch now waits for (a pause since batch_info): resume reads it
                ctx.state.update_batch(batch, lambda b: b.update(approval_reasons=reasons))
                raise ConfigError(f"batch {batch_label(batch)} of rollout {rollout_id} needs an "
                                  f"approval by an approver ({'; '.join(reasons)}); it cannot "
                                  "be recorded as automatic")
            promoted = promotion(ctx, batch)
            record.update(approved=True, by=promoted["by"], via=promoted["via"],
                          promoted=promoted["text"])
            if promoted.get("verdict"):
                record["verdict"] = promoted["verdict"]
        elif outcome == "timed_out":
            record.update(approved=False, by="nobody (the question timed out)")
        elif outcome == "unasked":
            record.update(approved=False, by="nobody (the question could not be asked or "
                                             "read: see the ask and await_answer tasks)")
        elif outcome == "halted":
            halt = ctx.state.halted() or {}
            record.update(approved=False, by="nobody (the rollout was halted)",
                          reason=f"the rollout was halted: {halt.get('reason') or '?'}")
        else:
            inquiry_id, response, author = inquiry_answer(
                questions.Questions(api, ctx.state), batch, question)
            who = approvals.answer_author(author, response, ctx.config, inquiry_id)
            # an approval counts only when it says so; the inconclusive question has no
            # `approved` (its answer is the choice)
            approved = response.get("approved") is True if question == "approval" else True
            record.update(approved=approved, by=who.name, via=who.via, account=who.account)
    except approvals.ApprovalRefused as err:
        record.update(approved=False, reason=f"answer not counted: {err}")
    if question == "inconclusive":
        choice = response.get("choice")
        if outcome == "halted":
            choice = "halted"  # the batch ends here: nothing rolled back, nothing next
        elif not record["approved"] or choice not in questions.CHOICES:
            choice = "rollback"
        record["choice"] = choice
    record["response"] = record["approved"] if question == "approval" else record["choice"]

    def put(state: Dict[str, Any]) -> None:
        if question == "approval":
            state["approval"] = record
        else:
            state.setdefault("answers", []).append(record)

    ctx.state.update_batch(batch, put)
    what = "approval" if question == "approval" else f"inconclusive: {record['choice']}"
    if record.get("promoted"):
        what = f"promotion: {record['promoted']}"
    ctx.audit.record(ROLLOUT, f"batch.{batch_label(batch)}.{question}", None, what,
                     api.execution_id, record["by"] or "nobody", action="answer",
                     approved_by=record["by"] if record["approved"] else None)
    if question == "approval" and not record["approved"] and outcome != "halted":
        why = record.get("reason") or f"rejected by {record['by'] or 'an approver'}"
        ctx.state.halt(f"batch {batch_label(batch)} not approved: {why}", record["by"])
        ctx.state.update_meta(status=REJECTED)
    return record


def action_caller(raw_config: Any, api: Any = None, own: Optional[Dict[str, Any]] = None
                  ) -> Tuple[str, approvals.Identity]:
    """(this execution's id, who it runs for) from StackStorm's own record of it (`own`, read
    when not given): the chat user behind an alias execution when a chatops_users account
    named it, else the st2 user; never a name a caller typed."""
    if api is None:
        api = ActionApi.from_env()
    record = own if own is not None else api.own_execution()
    who = approvals.trusted(approvals.caller(record), pack_config(raw_config))
    return api.execution_id, who


def action_identity(raw_config: Any, api: Any = None) -> Tuple[str, str]:
    """action_caller with the identity's name."""
    execution_id, who = action_caller(raw_config, api)
    return execution_id, who.name


def host_step(raw_config: Any, datastore: Any, rollout_id: str, host: str, step: str,
              execution_id: str = "", user: str = "", leave_drained: Optional[bool] = None,
              caller: Optional[approvals.Identity] = None, api: Any = None,
              unfinished_only: bool = False) -> Dict[str, Any]:
    """One step of a host's change, or (step "restore") its restore: StackStorm's concurrency
    policy on `host` runs them one at a time per host; a restore also waits for the wave
    steps naming its host (`api`: the action's StackStorm API; None: none to wait for)."""
    if step == RESTORE_STEP:
        return host_restore(raw_config, datastore, rollout_id, host, execution_id, user,
                            leave_drained, caller, api, unfinished_only)
    if leave_drained is not None or unfinished_only:
        raise ConfigError(f"leave_drained and unfinished_only are parameters of step "
                          f"{RESTORE_STEP} only")
    ctx = context(raw_config, datastore, rollout_id, execution_id, user)
    approval = _approval_of(ctx, host)
    ctx.audit.approved_by = approval
    return HostRun(ctx, host).run(step)


def _approval_of(ctx: RolloutContext, host: str) -> Optional[str]:
    batch = batch_of(ctx.plan, host)
    if batch is None:
        return None
    return (ctx.state.batch(batch).get("approval") or {}).get("by")


def host_restore(raw_config: Any, datastore: Any, rollout_id: str, host: str,
                 execution_id: str = "", user: str = "",
                 leave_drained: Optional[bool] = None,
                 caller: Optional[approvals.Identity] = None, api: Any = None,
                 unfinished_only: bool = False) -> Dict[str, Any]:
    """Put a host back. Who may: the rollout's own workflows (they run as whoever started it),
    anyone once the rollout is halted or the host has failed (a restore is then the way back,
    as the rollback and the watchdog's recovery run it), else an operator."""
    ctx = context(raw_config, datastore, rollout_id, execution_id, user)
    if caller is not None:
        who = approvals.trusted(caller, ctx.config)
        status = ctx.state.host(host).get("status")
        if not ctx.state.halted() and status not in (FAILED, RESTORING, RESTORE_FAILED) and \
                who.name != ctx.state.meta().get("started_by"):
            approvals.require_operator(who, ctx.config,
                                       f"restoring {host} of rollout {rollout_id}")
    waited = (lambda: wavesteps.wait_for_waves(api, host)) if api is not None else None
    return HostRun(ctx, host).restore(leave_drained, waited, unfinished_only)


def wave_step(raw_config: Any, datastore: Any, rollout_id: str, hosts: List[str], step: str,
              execution_id: str = "", user: str = "") -> Dict[str, Any]:
    """One host-side step (drain, kernel, probe, undrain) of a wave's hosts: one Ansible run per
    playbook over those ready for it, each host's outcome recorded on its own (wavesteps.py).
    The hosts are of one batch of the rollout (checked before anything runs)."""
    ctx = context(raw_config, datastore, rollout_id, execution_id, user)
    names = list(dict.fromkeys(hosts))
    if not names:
        raise ConfigError(f"rollout {rollout_id}: a wave step names no host")
    batches = {batch_of(ctx.plan, name) for name in names}
    if len(batches) != 1 or None in batches:
        raise ConfigError(f"rollout {rollout_id}: a wave's hosts are of one batch of the "
                          f"rollout; {', '.join(names[:20])} are not")
    ctx.audit.approved_by = _approval_of(ctx, names[0])
    return wavesteps.WaveRun(ctx, names).run(step)


def collect_counters(raw_config: Any, datastore: Any, rollout_id: str, batch: int,
                     label: str) -> Dict[str, Any]:
    return gate.collect(context(raw_config, datastore, rollout_id), batch, label)


def judge_batch(raw_config: Any, datastore: Any, rollout_id: str, batch: int) -> Dict[str, Any]:
    ctx = context(raw_config, datastore, rollout_id)
    summary = batch_summary(ctx, gate.batch_hosts(ctx, batch))
    budget = ctx.profile["failure_budget"]
    failed = [h for h in summary["not_done"]]
    result: Dict[str, Any] = {"batch": batch, "failed_hosts": failed, "summary": summary}
    total_failed = sum(1 for st in ctx.state.hosts().values()
                       if st.get("status") not in (DONE, PENDING, RUNNING))
    if len(failed) > budget["per_batch"] or (budget["total"] and total_failed > budget["total"]):
        reason = (f"{len(failed)} host(s) failed in batch {batch_label(batch)} (budget "
                  f"{budget['per_batch']} per batch, {budget['total']} total): "
                  f"{', '.join(failed[:10])}")
        ctx.state.halt(reason)
        verdict = {"verdict": FAIL, "reason": "failure_budget", "explanation":
                   f"FAIL (batch {batch_label(batch)}): {reason}. Rolling back."}
        ctx.state.update_batch(batch, lambda b: b.update(verdict=verdict))
        result.update(verdict=FAIL, reason="failure_budget",
                      explanation=verdict["explanation"])
        return result
    result.update(gate.canary_verdict(ctx, batch))
    if result["verdict"] == FAIL:
        ctx.state.halt(f"canary regression in batch {batch_label(batch)}")
    return result


def changed_hosts(raw_config: Any, datastore: Any, rollout_id: str,
                  hosts: Optional[List[str]] = None) -> Dict[str, Any]:
    """Hosts to roll back: every host this rollout touched (or the given ones), and the action
    timeouts to restore them with."""
    ctx = context(raw_config, datastore, rollout_id)
    if not ctx.state.halted():
        raise ConfigError(f"rollout {rollout_id} is not halted: fleet_rollout.rollback halts "
                          "it (as an operator) before it looks for the hosts to restore")
    states = ctx.state.hosts()
    # every host with a recorded step or a non-pending status (its claim is released by its
    # restore, even when only the precheck ran)
    touched = sorted(h for h, st in states.items()
                     if any((st.get("steps") or {}).values())
                     or st.get("status") not in (None, PENDING, DONE, RESTORED))
    chosen = touched if not hosts else [h for h in hosts if h in states]
    unknown = sorted(set(hosts or []) - set(states))
    if unknown:
        raise ConfigError(f"rollout {rollout_id}: host(s) {', '.join(unknown[:20])} were never "
                          "touched by it")
    ctx.state.update_meta(status=ROLLING_BACK)
    return {"hosts": chosen, "count": len(chosen),
            "timeouts": timeouts.action_timeouts(ctx.profile, ctx.config.redfish_timeout)}


CAUSES = ("operator", "automatic", "canary_regression")


def _halt_reason(cause: str, batch: int, verdict: Dict[str, Any], user: str) -> str:
    """Why a rollout halts, from what it recorded (never a text a caller typed)."""
    if cause == "operator":
        return f"halted by {user or 'an operator'}"
    explanation = str(verdict.get("explanation") or "")
    where = f"batch {batch_label(batch)}" if batch >= 0 else "a batch"
    if cause == "canary_regression":
        return f"canary regression in {where}" + (f": {explanation}" if explanation else "")
    return f"automatic rollback after {where}" + (f": {explanation}" if explanation else
                                                   " (the batch failed)")


def _may_halt(ctx: RolloutContext, cause: str, caller: approvals.Identity, force: bool
              ) -> str:
    """The name to record for a halt `caller` may make; NotAnOperator otherwise."""
    meta = ctx.state.meta()
    who = approvals.trusted(caller, ctx.config)
    ended = meta.get("status") in END_RANK
    rollout = ctx.rollout_id
    if cause == "operator" or (ended and cause != "canary_regression"):
        approvals.require_operator(who, ctx.config, f"halting or rolling back rollout {rollout}")
    elif cause == "automatic" and who.name != meta.get("started_by"):
        approvals.require_operator(who, ctx.config, f"an automatic rollback of rollout {rollout}"
                                   f" (it runs as {meta.get('started_by') or 'its starter'})")
    if ended and cause != "canary_regression" and not force:
        raise ConfigError(f"Refused: rollout {rollout} has ended ({meta.get('status')}); "
                          "rolling it back restores hosts it finished with and needs "
                          "force=true (hosts a later rollout changed are left as they are)")
    return who.name


def abort(raw_config: Any, datastore: Any, rollout_id: str, cause: str = "operator",
          batch: int = -1, user: str = "", caller: Optional[approvals.Identity] = None,
          force: bool = False) -> Dict[str, Any]:
    """Halt a rollout (the first task of every rollback). Who may: an operator (cause
    operator); the rollout's own workflow, which runs as whoever started it (automatic);
    anyone, when the batch's FAIL verdict is recorded (canary_regression, the rule's). A
    rollout that has ended is halted (its rollback run again) only by an operator with
    `force`. A halted rollout stays as it was halted (by whom, why)."""
    if cause not in CAUSES:
        raise ConfigError(f"cause {cause!r}: one of {', '.join(CAUSES)}")
    ctx = context(raw_config, datastore, rollout_id)
    batch = int(batch)
    verdict = (ctx.state.batch(batch).get("verdict") or {}) if batch >= 0 else {}
    # the canary_regression trigger can be injected: trust only the recorded verdict
    if cause == "canary_regression" and verdict.get("verdict") != FAIL:
        raise ConfigError(f"rollout {rollout_id}: no FAIL verdict recorded for batch "
                          f"{batch_label(batch)}; a canary_regression halt is refused")
    halted = ctx.state.halted()
    ended = ctx.state.meta().get("status") in END_RANK
    # a rollout halted and still on its way back: a halt again changes nothing, so a rollback
    # run again (its retries, the watchdog's recovery) goes on to its restores; once it has
    # ended, running its rollback again is a new choice, checked as any other
    if caller is not None and (halted is None or ended):
        user = _may_halt(ctx, cause, caller, bool(force))
    if halted is not None:
        return {"rollout_id": rollout_id, "halted": True, "reason": halted.get("reason"),
                "by": halted.get("by"), "already": True}
    reason = _halt_reason(cause, batch, verdict, user)
    ctx.state.halt(reason, user)
    ctx.state.update_meta(status=ABORTING, aborted_by=user)
    return {"rollout_id": rollout_id, "halted": True, "reason": reason}


def finish(raw_config: Any, datastore: Any, rollout_id: str, status: str) -> Dict[str, Any]:
    ctx = context(raw_config, datastore, rollout_id)
    # A FAIL is rolled back by the rollout itself and by the canary-regression rule (a backstop):
    # the end state is changed under the rollout's lock, and only the call that changed it
    # announces it, so chat hears it once; a worse end state (failed) is never overwritten.
    ended = ctx.state.end(status, finished=time.time())
    meta, announce = ended["meta"], ended["changed"]
    states = ctx.state.hosts()
    counts: Dict[str, int] = {}
    for st in states.values():
        counts[st.get("status", PENDING)] = counts.get(st.get("status", PENDING), 0) + 1
    report_path = _write_report(ctx)
    audit = ctx.audit.summary()
    damaged = (f" ({audit['unreadable_entries']} unreadable audit entries skipped)"
               if audit["unreadable_entries"] else "")
    later = sorted(f"{host} (by {st['restore']['changed_later_by']})"
                   for host, st in states.items()
                   if isinstance(st.get("restore"), dict)
                   and st["restore"].get("changed_later_by"))
    kept = (f" Not restored, a later rollout changed them: {', '.join(later[:20])}"
            + (f" and {len(later) - 20} more" if len(later) > 20 else "") + "."
            if later else "")
    message = (f"Rollout {rollout_id} ({ctx.profile['name']}) {meta.get('status')}: "
               + (", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
                  or "no host touched")
               + f"; {audit['entries']} audited change(s){damaged}.{kept}"
               + f" Report: `st2 run fleet_rollout.report rollout_id={rollout_id}`.")
    return {"rollout_id": rollout_id, "status": meta.get("status"), "hosts": counts,
            "changed_later": later, "audit": audit, "report": report_path, "message": message,
            "route": ctx.config.chat_route, "channel": ctx.config.chat_channel,
            "announce": announce}


def _write_report(ctx: RolloutContext) -> str:
    """The report rendered from the datastore, written to this action runner's state_dir (a
    local copy: fleet_rollout.report renders it again on any runner)."""
    from fleet_rollout.report import write_report  # here: only what shows a report renders one

    directory = private_dir(os.path.join(ctx.config.resolve(ctx.config.state_dir), "reports"))
    return write_report(ctx.state, ctx.audit, os.path.join(directory,
                                                           f"{ctx.rollout_id}.html"))


def report(raw_config: Any, datastore: Any, rollout_id: str) -> Dict[str, Any]:
    """The rollout's HTML report, rendered from what the datastore holds (wherever this runs):
    the document itself, and where this action runner keeps its copy."""
    ctx = context(raw_config, datastore, rollout_id)
    path = _write_report(ctx)
    with open(path, encoding="utf-8") as handle:
        html = handle.read()
    return {"rollout_id": rollout_id, "html": html, "bytes": len(html.encode("utf-8")),
            "path": path, "audit": ctx.audit.summary()}


def status(raw_config: Any, datastore: Any, rollout_id: str) -> Dict[str, Any]:
    ctx = context(raw_config, datastore, rollout_id)
    meta = ctx.state.meta()
    states = ctx.state.hosts()
    batches = []
    where: Dict[str, int] = {}  # host -> batch, from the batches read here (no host infos)
    for batch in ctx.plan["batches"]:
        info = ctx.state.batch(batch["index"])
        hosts = {h: states.get(h, {}) for h in batch["hosts"]}
        for h in batch["hosts"]:
            where.setdefault(h, batch["index"])
        batches.append({
            "index": batch["index"], "hosts": len(batch["hosts"]),
            "done": sum(1 for s in hosts.values() if s.get("status") == DONE),
            "failed": sorted(h for h, s in hosts.items() if s.get("status") in (
                FAILED, RESTORE_FAILED, LEFT_DRAINED)),
            "restored": sorted(h for h, s in hosts.items() if s.get("status") == RESTORED),
            "approval": info.get("approval"),
            "answers": [{"choice": a.get("choice"), "by": a.get("by"), "at": a.get("at")}
                        for a in info.get("answers") or []],
            "verdict": (info.get("verdict") or {}).get("verdict")})
    host_rows = [{"host": h, "batch": where.get(h),
                  "status": st.get("status"), "step": st.get("step"),
                  "error": (st.get("error") or {}).get("message")}
                 for h, st in sorted(states.items())]
    return {"rollout_id": rollout_id, "profile": ctx.profile["name"],
            "status": meta.get("status"), "halt": ctx.state.halted(),
            "current_batch": meta.get("current_batch"), "batches": batches,
            "hosts": host_rows, "table": render_status(batches, host_rows)}


def render_status(batches: List[Dict[str, Any]], hosts: List[Dict[str, Any]]) -> str:
    lines = [f"{'BATCH':<6}{'HOSTS':>6}{'DONE':>6}  {'APPROVED BY':<14}{'VERDICT':<14}FAILED"]
    for b in batches:
        approval = b["approval"] or {}
        who = approval.get("by") or ("-" if not approval else "?")
        if approval and not approval.get("approved"):
            who = f"REJECTED:{who}"
        verdict = b["verdict"] or "-"
        if b["answers"]:  # what an approver chose after an INCONCLUSIVE verdict, and who
            verdict += "".join(f" {a['choice']}:{a['by'] or '?'}" for a in b["answers"][-2:])
        lines.append(f"{batch_label(b['index']):<6}{b['hosts']:>6}{b['done']:>6}  {who:<14}"
                     f"{verdict:<14}{', '.join(b['failed']) or '-'}")
    lines.append("")
    lines.append(f"{'HOST':<16}{'BATCH':>6}  {'STATUS':<15}{'STEP':<10}ERROR")
    for h in hosts:
        batch = "-" if h["batch"] is None else batch_label(h["batch"])
        lines.append(f"{h['host']:<16}{batch!s:>6}  {h['status'] or '-':<15}"
                     f"{h['step'] or '-':<10}{(h['error'] or '')[:80]}")
    return "\n".join(lines)


def watchdog(raw_config: Any, datastore: Any, api: Any = None) -> Dict[str, Any]:
    """Find the host actions whose action runner died and move their hosts on (watchdog.py);
    each found is told in chat."""
    from fleet_rollout.watchdog import Watchdog

    config = pack_config(raw_config)
    if api is None:
        api = ActionApi.from_env()
    execution_id, user = action_identity(raw_config, api)
    handled = Watchdog(api, as_store(datastore, config),
                       config.watchdog_grace).check(by=user, execution_id=execution_id)
    for record in handled:
        api.post("executions", {"action": "chatops.post_message", "parameters": {
            "route": config.chat_route, "channel": config.chat_channel,
            "message": record["message"]}})
    return {"stale": handled}


def settle_stale(raw_config: Any, datastore: Any, rollout_id: str, stale: str, parent: str,
                 succeeded: bool, api: Any = None) -> Dict[str, Any]:
    """The last step of fleet_rollout.recover_host (watchdog.settle), as a task of the
    recovery the watchdog recorded; the chat target with it."""
    from fleet_rollout.watchdog import settle

    config = pack_config(raw_config)
    if api is None:
        api = ActionApi.from_env()
    own = api.own_execution()
    recovery = str(((own.get("context") or {}).get("parent") or {}).get("execution_id") or "")
    state = RolloutState(as_store(datastore, config), check_rollout_id(rollout_id))
    out = settle(api, state, stale, parent, recovery, bool(succeeded),
                 by=approvals.trusted(approvals.caller(own), config).name)
    out.update({"route": config.chat_route, "channel": config.chat_channel})
    return out


def _may_pause(ctx: RolloutContext, caller: approvals.Identity, what: str) -> str:
    """The name of `caller` when an operator or an approver; refused otherwise, and for a
    rollout that has ended or is halted."""
    who = approvals.trusted(caller, ctx.config)
    try:
        approvals.require_operator(who, ctx.config, what)
    except approvals.NotAnOperator:
        try:
            approvals.check_may_answer(who, ctx.config)
        except approvals.ApprovalRefused:
            raise approvals.NotAnOperator(f"Refused: {who.name or 'an unknown caller'} is "
                                          f"neither an operator nor an approver; {what} is "
                                          "refused") from None
    meta = ctx.state.meta()
    if meta.get("status") in END_RANK or ctx.state.halted():
        raise ConfigError(f"Refused: rollout {ctx.rollout_id} has ended or is halted "
                          f"({meta.get('status')}); there is nothing to {what.split()[0]}")
    return who.name


def pause(raw_config: Any, datastore: Any, rollout_id: str, caller: approvals.Identity,
          execution_id: str = "") -> Dict[str, Any]:
    """Pause a rollout between batches: the batch running goes on to its verdict; the next
    one waits for an approver (its question says why) until the rollout is resumed. Who may:
    an operator or an approver (the authenticated caller)."""
    ctx = context(raw_config, datastore, rollout_id)
    who = _may_pause(ctx, caller, "pausing the rollout")
    paused = ctx.state.meta().get("paused")
    if isinstance(paused, dict):
        return {"rollout_id": rollout_id, "paused": True, "by": paused.get("by"),
                "already": True, "message": f"Rollout {rollout_id} is paused already (by "
                                            f"{paused.get('by')})."}
    ctx.state.update_meta(paused={"by": who, "at": time.time()})
    ctx.audit.record(ROLLOUT, "paused", False, True, execution_id, who, action="pause")
    return {"rollout_id": rollout_id, "paused": True, "by": who,
            "message": f"Rollout {rollout_id} paused by {who}: a batch under way goes on to its "
                       f"verdict; no batch starts until `rollout resume {rollout_id}`."}


def resume(raw_config: Any, datastore: Any, rollout_id: str, caller: approvals.Identity,
           api: Any = None, execution_id: str = "") -> Dict[str, Any]:
    """Resume a paused rollout. A batch that waits for an approver only because of the pause
    is approved by the caller (fleet_rollout.respond's checks: an approver); one that needs an
    approval for another reason still waits for it."""
    from fleet_rollout import inquiries

    ctx = context(raw_config, datastore, rollout_id)
    who = _may_pause(ctx, caller, "resuming the rollout")
    meta = ctx.state.meta()
    paused = meta.get("paused")
    if not isinstance(paused, dict):
        return {"rollout_id": rollout_id, "paused": False,
                "message": f"Rollout {rollout_id} is not paused."}
    ctx.state.update_meta(paused=None)
    ctx.audit.record(ROLLOUT, "paused", True, False, execution_id, who, action="resume")
    out: Dict[str, Any] = {"rollout_id": rollout_id, "paused": False, "by": who,
                           "message": f"Rollout {rollout_id} resumed by {who}."}
    current = meta.get("current_batch")
    if not isinstance(current, int):
        return out
    state = ctx.state.batch(current)
    waiting = state.get("approval") is None and bool(state.get("approval_reasons"))
    others = [r for r in state.get("approval_reasons") or [] if not r.startswith("paused by")]
    if not waiting:
        return out
    if others:
        out["message"] += (f" Batch {batch_label(current)} still needs an approval "
                           f"({'; '.join(others)}): `rollout approve {rollout_id}`.")
        return out
    if api is None:
        api = ActionApi.from_env()
    answered = inquiries.respond(ctx.config, rollout_id, "approve", api, ctx.store)
    out.update(answered=answered)
    out["message"] += f" Batch {batch_label(current)} approved: {answered['message']}."
    return out


def maintenance_window(raw_config: Any, datastore: Any, rollout_id: str, batch: int = -1,
                       hosts: Optional[List[str]] = None) -> Dict[str, Any]:
    """Whether a batch (`batch`) or a wave (`hosts`) may start now (windows.py)."""
    from fleet_rollout import windows

    ctx = context(raw_config, datastore, rollout_id)
    if hosts:
        return windows.wave_window(ctx, list(hosts))
    return windows.batch_window(ctx, int(batch))
