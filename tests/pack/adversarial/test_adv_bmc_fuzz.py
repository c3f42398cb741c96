"""Adversarial fuzz run: mutated BMC answers over real HTTPS from the BMC simulator.

A seeded, bounded run (CASES cases, SEED fixed, counts printed). Each case takes the
simulator's real answer at one resource the read-only path uses (service root, Systems, the
system with its power state and boot progress, the manager, Bios, its settings object, the
registries listing, the registry file entry, the attribute registry, the Dell job queue and a
job, a task monitor), mutates it (a type swap dict <-> list <-> str <-> int <-> null, a missing
key, a bogus @odata.id, an attribute value of the wrong type, a non-JSON or oversized body),
serves it, and runs one read-only operation: check_desired, take_snapshot, plan.precheck_hosts,
or for system and task answers the power/task readers.

Asserted over the whole run: no exception other than FleetRolloutError subclasses, every error
names its host, no error holds the BMC password, and the simulated BMCs served ZERO write
requests (PATCH/POST/PUT/DELETE other than session login/logout).
"""
from __future__ import annotations

import copy
import json
import random
from collections import Counter
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
from redfish_support import (
    PASSWORD,
    bmc_fleet,
    bmc_uris,
    clear_overrides,
    data_writes,
    endpoint,
    real_document,
    serve_override,
    state,
)

from fleet_lab.bmcsim.fleet import BmcFleet
from fleet_rollout.errors import FleetRolloutError
from fleet_rollout.inventory import FleetHost
from fleet_rollout.plan import precheck_hosts
from fleet_rollout.redfish import attribute_registry as rf_registry
from fleet_rollout.redfish.client import MAX_BODY_BYTES, RedfishSession, Response
from fleet_rollout.redfish.discovery import discover
from fleet_rollout.redfish.operations import check_desired, take_snapshot
from fleet_rollout.redfish.power import wait_post

SEED = 1313
CASES = 300
VENDORS = ["generic", "dell-idrac8", "hpe-ilo4", "supermicro"]
DESIRED = {"node_interleaving": "disabled"}
RESOURCES = ["root", "systems", "system", "manager", "bios", "settings", "registries",
             "registry_file", "registry_json", "jobs", "job", "task"]
TASK_PATH = "/redfish/v1/TaskService/TaskMonitors/fuzz"
BOGUS_IDS: List[Any] = ["https://evil.example/redfish/v1/Systems/1", "//evil.example/x", "",
                        "/redfish/v1/../../etc/passwd", "/redfish/v1/a b", "relative/path",
                        "/redfish/v1/x?y=1", 7, None, ["/redfish/v1"], {"@odata.id": "/x"},
                        "/" + "a" * 5000]
SWAPS: List[Any] = [{}, {"k": 1}, [], [1, "x"], "", "text", 0, -1, 3.5, True, None,
                    float("nan")]


class Outcome:
    def __init__(self) -> None:
        self.by_kind: Counter = Counter()
        self.by_resource: Counter = Counter()
        self.by_operation: Counter = Counter()
        self.problems: List[str] = []

    def record_error(self, case: str, host: str, err: BaseException) -> None:
        text = str(err)
        if not isinstance(err, FleetRolloutError):
            self.problems.append(f"{case}: {type(err).__name__} escaped: {text[:200]}")
            return
        self.by_kind[type(err).__name__] += 1
        if host not in text:
            self.problems.append(f"{case}: error does not name host {host}: {text[:200]}")
        if PASSWORD in text:
            self.problems.append(f"{case}: error holds the password")


# ------------------------------------------------------------------ mutations
def _paths(doc: Any, prefix: Tuple[Any, ...] = (), depth: int = 0) -> List[Tuple[Any, ...]]:
    """Every key/index path of a JSON document (bounded depth and fan-out)."""
    out: List[Tuple[Any, ...]] = []
    if depth > 6:
        return out
    items: List[Tuple[Any, Any]] = []
    if isinstance(doc, dict):
        items = list(doc.items())
    elif isinstance(doc, list):
        items = list(enumerate(doc))[:8]
    for key, value in items:
        out.append(prefix + (key,))
        out.extend(_paths(value, prefix + (key,), depth + 1))
    return out


def _parent(doc: Any, path: Tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        doc = doc[key]
    return doc


def _set(doc: Any, path: Tuple[Any, ...], value: Any) -> None:
    _parent(doc, path)[path[-1]] = value


def _delete(doc: Any, path: Tuple[Any, ...]) -> None:
    parent = _parent(doc, path)
    if isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent.pop(path[-1])


def _swap(rng: random.Random, value: Any) -> Any:
    """A value of another JSON type (dict <-> list <-> str <-> int <-> null ...)."""
    choices = [s for s in SWAPS if type(s) is not type(value)]
    if isinstance(value, dict):
        choices.append(list(value.values()))
    if isinstance(value, list):
        choices.append({str(i): v for i, v in enumerate(value)})
    return copy.deepcopy(rng.choice(choices))


def mutate(rng: random.Random, doc: Any) -> Tuple[str, Dict[str, Any]]:
    """(mutation name, serve_override keyword arguments) for one mutated answer."""
    roll = rng.random()
    if roll < 0.04:
        return "body_type", {"body": rng.choice([[doc], "text", 12, None, True])}
    if roll < 0.06:
        return "not_json", {"raw": rng.choice(["<html>", "{\"a\": ", "\x00\xff", "[" * 50000])}
    if roll < 0.075:
        return "huge", {"body": doc, "pad_bytes": MAX_BODY_BYTES + 1}
    doc = copy.deepcopy(doc)
    paths = _paths(doc)
    ids = [p for p in paths if p[-1] == "@odata.id"]
    attrs = [p for p in paths if len(p) == 2 and p[0] == "Attributes"]
    if ids and roll < 0.30:
        _set(doc, rng.choice(ids), copy.deepcopy(rng.choice(BOGUS_IDS)))
        return "bogus_odata_id", {"body": doc}
    if attrs and roll < 0.40:
        _set(doc, rng.choice(attrs), copy.deepcopy(rng.choice([[1], {"v": 1}, ["Enabled"]])))
        return "attribute_type", {"body": doc}
    if not paths:
        return "body_type", {"body": rng.choice([[doc], "text", None])}
    path = rng.choice(paths)
    if roll < 0.55:
        _delete(doc, path)
        return "missing_key", {"body": doc}
    _set(doc, path, _swap(rng, _parent(doc, path)[path[-1]]))
    return "type_swap", {"body": doc}


# ------------------------------------------------------------------ the simulated fleet
@pytest.fixture(scope="module")
def lab() -> Iterator[BmcFleet]:
    with bmc_fleet(VENDORS) as fleet:
        yield fleet


def _resource_path(lab: BmcFleet, index: int, name: str) -> Optional[str]:
    uris = bmc_uris(lab, index)
    if name == "task":
        return TASK_PATH
    if name in ("jobs", "job"):
        if not lab.bmcs[index].spec.commit.startswith("job"):
            return None
        if name == "job":
            return uris["jobs"] + "/JID_FUZZ"
    return uris.get(name)


def _original(lab: BmcFleet, index: int, name: str, path: str) -> Any:
    if name == "task":
        return {"@odata.id": "/redfish/v1/TaskService/Tasks/fuzz", "Id": "fuzz",
                "Name": "Task", "TaskState": "Completed", "TaskStatus": "OK",
                "Messages": [{"MessageId": "Base.1.8.Success"}]}
    if name == "job":
        return {"@odata.id": path, "Id": "JID_FUZZ", "Name": "Configure: BIOS",
                "JobType": "BIOSConfiguration", "JobState": "Scheduled",
                "TargetSettingsURI": bmc_uris(lab, index)["settings"], "Message": "New"}
    return real_document(lab, index, path)


def _with_job(lab: BmcFleet, index: int, name: str, job_doc: Any) -> None:
    """A job answer is only read when the job queue lists it: list it."""
    if name != "job":
        return
    jobs_path = bmc_uris(lab, index)["jobs"]
    listing = real_document(lab, index, jobs_path)
    listing["Members"] = list(listing.get("Members") or []) + [
        {"@odata.id": jobs_path + "/JID_FUZZ"}]
    serve_override(lab, index, jobs_path, listing)


def _operations(lab: BmcFleet, index: int, resource: str) -> List[str]:
    ops = ["check_desired", "take_snapshot", "precheck"]
    if resource == "system":
        ops.append("wait_post")
    if resource == "task":
        return ["wait_task"]
    return ops


def _run(lab: BmcFleet, index: int, operation: str, ctx_cache: Dict[int, Any]) -> None:
    ep = endpoint(lab, index, get_retries=0, timeout=10.0)
    if operation == "check_desired":
        check_desired(ep, DESIRED, sleep=lambda s: None)
    elif operation == "take_snapshot":
        take_snapshot(ep, sleep=lambda s: None)
    elif operation == "precheck":
        host = FleetHost(lab.bmcs[index].name, lab.url(index))
        result = precheck_hosts([host], lambda h: check_desired(ep, DESIRED,
                                                                sleep=lambda s: None))
        entry = result[host.name]
        if "error" in entry:
            raise _PrecheckEntry(entry["error"])
    elif operation == "wait_post":
        with RedfishSession(ep, sleep=lambda s: None) as session:
            wait_post(session, ctx_cache[index], timeout=0.0, poll=0.0, sleep=lambda s: None)
    elif operation == "wait_task":
        with RedfishSession(ep, sleep=lambda s: None) as session:
            session.wait_task(Response(202, {"location": TASK_PATH}, None, ""), timeout=5.0)


class _PrecheckEntry(FleetRolloutError):
    """A precheck error entry, re-raised so the run checks it like any error."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.internal = text.startswith("internal error")


def _contexts(lab: BmcFleet) -> Dict[int, Any]:
    out = {}
    for index in range(len(lab.bmcs)):
        with RedfishSession(endpoint(lab, index), sleep=lambda s: None) as session:
            out[index] = discover(session)
    return out


def test_fuzz_bmc_answers(lab: BmcFleet) -> None:
    rng = random.Random(SEED)
    outcome = Outcome()
    ctx_cache = _contexts(lab)
    originals: Dict[Tuple[int, str], Any] = {}
    ran = 0
    while ran < CASES:
        index = rng.randrange(len(lab.bmcs))
        resource = rng.choice(RESOURCES)
        path = _resource_path(lab, index, resource)
        if path is None:
            continue
        if (index, resource) not in originals:
            originals[(index, resource)] = _original(lab, index, resource, path)
        kind, spec = mutate(rng, originals[(index, resource)])
        operation = rng.choice(_operations(lab, index, resource))
        case = f"case {ran} ({lab.bmcs[index].spec.key} {resource} {kind} {operation})"
        rf_registry._CACHE.clear()
        _with_job(lab, index, resource, spec.get("body"))
        serve_override(lab, index, path, **spec)
        try:
            _run(lab, index, operation, ctx_cache)
            outcome.by_kind["ok"] += 1
        except _PrecheckEntry as err:
            if err.internal:
                outcome.problems.append(f"{case}: precheck safety net caught {err}")
            # precheck entries are keyed by host; the entry text itself names it too
            outcome.record_error(case, lab.bmcs[index].name, err)
        except Exception as err:  # the point of the run: nothing but FleetRolloutError
            outcome.record_error(case, lab.bmcs[index].name, err)
        finally:
            clear_overrides(lab, index)
        outcome.by_resource[f"{resource}:{kind}"] += 1
        outcome.by_operation[operation] += 1
        ran += 1
    writes = {lab.bmcs[i].name: data_writes(state(lab, i)) for i in range(len(lab.bmcs))}
    print(f"\nBMC fuzz: seed {SEED}, {ran} cases; outcomes {dict(outcome.by_kind)}; "
          f"operations {dict(outcome.by_operation)}; writes {writes}; "
          f"problems {len(outcome.problems)}")
    print("cases by resource:mutation " + json.dumps(dict(sorted(outcome.by_resource.items()))))
    assert ran == CASES
    assert not outcome.problems, "\n".join(outcome.problems[:20])
    assert all(count == 0 for count in writes.values()), writes
    # the run exercised both sides: errors refused cleanly, and harmless mutations went through
    assert outcome.by_kind["ok"] > 0 and sum(outcome.by_kind.values()) - outcome.by_kind["ok"] > 0
