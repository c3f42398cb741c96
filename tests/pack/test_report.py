"""The rollout report: content, escaping, masking, structure, size, atomic write.

Built on a real plan (plan.build_plan over a real profile), real judge verdicts (the judge run
on the fixture inputs), a MemoryStore and a real Audit on it; nothing is mocked."""
from __future__ import annotations

import html
import os
import re
from html.parser import HTMLParser
from typing import Any, Dict, List, Optional

import locations
import pytest

from fleet_rollout.audit import Audit
from fleet_rollout.inventory import FleetHost
from fleet_rollout.judge import judge, load_judge_input
from fleet_rollout.plan import build_plan
from fleet_rollout.profile import load_profile
from fleet_rollout.report import (
    MAX_AUDIT_ROWS,
    MAX_TIMELINE_ROWS,
    redact,
    render_report,
    render_timeline,
    rollout_status,
    summarize_detail,
    write_report,
)
from fleet_rollout.store import MemoryStore, RolloutState

ROOT = locations.ROOT
FIXTURES = ROOT / "tests" / "fixtures" / "judge"
T0 = 1_700_000_000.0
EVIL = "<script>alert(1)</script>"
NOW = T0 + 7200
DURATIONS = {"precheck": 3, "snapshot": 2, "drain": 20, "stage": 8, "reboot": 60, "wait": 180,
             "verify": 6, "undrain": 4}
STEP_ORDER = list(DURATIONS)


def steps(start: float, fail_at: Optional[str] = None, until: Optional[str] = None,
          error: str = "boom", restore: Optional[bool] = None) -> Dict[str, Any]:
    """Step records like hoststeps.HostRun._record writes, from `start`, one after the other."""
    out: Dict[str, Any] = {}
    t = start
    for step in STEP_ORDER:
        secs = DURATIONS[step]
        ok = step != fail_at
        out[step] = {"ok": ok, "started": t, "at": t + secs, "seconds": secs,
                     "detail": {"changed": True} if ok else {"error": error},
                     "execution": "ex-1"}
        t += secs + 1
        if not ok or step == until:
            break
    if restore is not None:
        out["restore"] = {"ok": restore, "started": t + 5, "at": t + 125, "seconds": 120,
                          "detail": {"bios": {"changed": {"SnoopMode": "EarlySnoop"}}}
                          if restore else {"error": "BMC unreachable"}}
    return out


def host_state(name: str, status: str, records: Dict[str, Any]) -> Dict[str, Any]:
    state: Dict[str, Any] = {"host": name, "status": status, "steps": records}
    ok = [s for s in STEP_ORDER if records.get(s, {}).get("ok")]
    if ok:
        state["step"] = ok[-1]
    failed = [s for s in STEP_ORDER if records.get(s, {}).get("ok") is False]
    if failed:
        state["error"] = {"step": failed[0],
                          "message": records[failed[0]]["detail"]["error"]}
    return state


def verdict(name: str, batch: int) -> Dict[str, Any]:
    result = judge(load_judge_input(str(FIXTURES / f"{name}.json")))
    result.batch = batch
    return result.to_dict()


def fleet(n: int, prefix: str = "web") -> List[FleetHost]:
    return [FleetHost(name=f"{prefix}-{i:03d}", bmc_address=f"10.0.{i // 250}.{i % 250}",
                      site=f"s{i % 2}", rack=f"{prefix}r{i}", hardware_model="m1")
            for i in range(1, n + 1)]


@pytest.fixture
def rollout(tmp_path):
    profile = load_profile("home-snoop")
    targets = fleet(7) + [FleetHost(name=EVIL, bmc_address="10.9.9.9", site="s1", rack="zz",
                                    hardware_model="m1")]
    controls = fleet(4, "ctl")
    plan = build_plan(profile, "inventories/lab.yaml", "web*", targets, targets + controls,
                      {h.name: {"compliant": False} for h in targets},
                      rollout_id="home-snoop-20240501-1200-abcd", started_by="alice")
    state = RolloutState(MemoryStore(), plan["rollout_id"])
    state.save_plan(plan)
    batches = [b["hosts"] for b in plan["batches"]]
    assert len(batches) == 4 and len(batches[1]) == 2 and EVIL in batches[2] + batches[3]
    # batch 0: the canary, done, PASS, approved
    (canary,) = batches[0]
    state.save_host(canary, host_state(canary, "done", steps(T0)))
    state.save_batch(0, {"approval": {"response": "approved", "by": "bob", "at": T0 + 900},
                         "verdict": verdict("pass", 0), "judged_at": T0 + 600})
    # batch 1: one host done, one failed at verify and restored; FAIL; rejected
    done, bad = batches[1]
    start = T0 + 1000
    state.save_host(done, host_state(done, "done", steps(start)))
    state.save_host(bad, host_state(bad, "restored", steps(
        start + 2, fail_at="verify", error="probe verification failed: remote/local <1.1>",
        restore=True)))
    state.save_batch(1, {"approval": {"response": "rejected", "by": "carol", "at": T0 + 1900},
                         "verdict": verdict("fail", 1), "judged_at": T0 + 1800})
    # batch 2/3: not started except the <script> host, whose restore failed too
    state.save_host(EVIL, host_state(EVIL, "restore_failed", steps(
        T0 + 3000, fail_at="reboot", error="reset refused <b>bold</b>", restore=False)))
    state.update_meta(status="rolled_back", started=T0 - 5, finished=T0 + 3400,
                      started_by="alice", batch=2)
    state.halt("canary FAIL in batch 1 <b>regression</b>", by="judge")
    audit = Audit(state.store, plan["rollout_id"])
    audit.record(canary, "bios.SnoopMode", "EarlySnoop", "HomeSnoop", "ex-1", "alice",
                 approved_by="bob")
    audit.record(canary, "service", "in service", "drained", "ex-1", "alice")
    audit.record(bad, "bios.SnoopMode", "HomeSnoop", "EarlySnoop", "ex-2", "alice",
                 action="restore")
    audit.record(EVIL, "kernel", "(snapshot)", "<img src=x onerror=alert(2)>", "ex-3", "alice")
    return state, audit, plan


class Checker(HTMLParser):
    """Well-formedness: every non-void element closed in order; counts tags."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
            "source", "track", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: List[str] = []
        self.errors: List[str] = []
        self.counts: Dict[str, int] = {}
        self.text: List[str] = []
        self.classes: List[str] = []
        self.titles: List[str] = []
        self._title = False

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.counts[tag] = self.counts.get(tag, 0) + 1
        self.classes.extend((dict(attrs).get("class") or "").split())
        if tag == "title":
            self._title = True
            self.titles.append("")
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: Any) -> None:
        self.counts[tag] = self.counts.get(tag, 0) + 1
        self.classes.extend((dict(attrs).get("class") or "").split())

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._title = False
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._title:
            self.titles[-1] += data


def parse(text: str) -> Checker:
    checker = Checker()
    checker.feed(text)
    checker.close()
    assert checker.errors == []
    assert checker.stack == []
    return checker


def test_every_host_batch_verdict_and_explanation(rollout):
    state, audit, plan = rollout
    doc = render_report(state, audit, now=NOW)
    for name in plan["hosts"]:
        if name in {h for b in plan["batches"] for h in b["hosts"]}:
            assert html.escape(name) in doc
    for batch in plan["batches"]:
        assert f'id="batch-{batch["index"]}"' in doc
    for index in (0, 1):
        v = state.batch(index)["verdict"]
        assert html.escape(v["explanation"]) in doc
    assert 'class="badge b-ok big">PASS' in doc
    assert 'class="badge b-bad big">FAIL' in doc
    assert "Not judged" in doc  # batch 2 and 3 have no verdict
    assert "approved</span> by bob" in doc
    assert "rejected</span> by carol" in doc


def test_header_profile_status_counts_halt(rollout):
    state, audit, plan = rollout
    checker = parse(render_report(state, audit, now=NOW))
    text = " ".join(" ".join(checker.text).split())
    assert plan["rollout_id"] in text
    assert "home-snoop" in text and "Early Snoop -> Home Snoop" in text
    assert "rolled back" in text  # meta status rolled_back, normalised
    for knob in ("snoop_mode", "home", "node_interleaving", "disabled",
                 "sysctl.net.core.rmem_max", "16777216"):
        assert knob in text
    assert "started by alice" in text
    assert "2023-11-14 22:13:15Z" in text  # started = T0 - 5
    assert "Halted: canary FAIL in batch 1 <b>regression</b>" in text  # as text, escaped
    # 2 done, 1 restored, 1 failed (restore failed), 4 pending
    tiles = re.findall(r'<div class="n">(\d+)</div><div class="l">([^<]*)</div>',
                       render_report(state, audit, now=NOW))
    counts = {label.split(" (")[0]: int(n) for n, label in tiles}
    assert counts["changed"] == 2
    assert counts["restored"] == 1
    assert counts["failed"] == 1
    assert counts["pending"] == 4
    assert counts["in progress"] == 0


def test_failed_step_marked_failed_and_restore_distinct(rollout):
    state, audit, plan = rollout
    doc = render_report(state, audit, now=NOW)
    bad = plan["batches"][1]["hosts"][1]
    checker = parse(doc)
    fail_titles = [t for t in checker.titles if "FAILED" in t]
    assert any(t.startswith(f"{bad} \u00b7 verify \u00b7 FAILED") and
               "probe verification failed: remote/local <1.1>" in t for t in fail_titles)
    assert any(t.startswith(f"{EVIL} \u00b7 reboot \u00b7 FAILED") for t in fail_titles)
    assert re.search(r'<rect class="bar fail"[^>]*><title>' + re.escape(bad) +
                     r" \u00b7 verify", doc)
    assert re.search(r'<rect class="bar s-restore"[^>]*><title>' + re.escape(bad) +
                     r" \u00b7 restore \u00b7 ok", doc)
    assert re.search(r'<rect class="bar rfail"[^>]*><title>' + re.escape(html.escape(EVIL)) +
                     r" \u00b7 restore \u00b7 FAILED", doc)
    assert '<span class="err">verify failed</span>' in doc
    assert '<span class="err">reboot failed</span>' in doc
    # steps after the failure were never run: no bar for them
    assert not re.search(re.escape(bad) + r" \u00b7 undrain", doc)


def test_escaping_of_names_details_and_audit(rollout):
    state, audit, _plan = rollout
    doc = render_report(state, audit, now=NOW)
    assert "<script" not in doc.lower()
    assert "<b>bold" not in doc and "<b>regression" not in doc and "<img" not in doc
    assert html.escape(EVIL) in doc
    assert "reset refused &lt;b&gt;bold&lt;/b&gt;" in doc
    assert "&lt;img src=x onerror=alert(2)&gt;" in doc


def test_structure_self_contained_with_svg(rollout):
    state, audit, plan = rollout
    doc = render_report(state, audit, now=NOW)
    assert doc.startswith("<!DOCTYPE html>")
    checker = parse(doc)
    assert checker.counts["html"] == 1 and checker.counts["style"] == 1
    # timelines for the 3 batches that ran, verdict plots for the 2 judged, status bars
    assert checker.counts["svg"] >= 3 + 2 + len(plan["batches"])
    assert checker.counts["rect"] > 20 and checker.counts["circle"] == 80  # 40 + 40 hosts
    assert "canary" in checker.classes and "control" in checker.classes
    for forbidden in ("<script", "<link", "src=", "@import", "url("):
        assert forbidden not in doc.replace("&lt;img src=x", "")
    assert set(re.findall(r"https?://[^\s\"'<]+", doc)) == {"http://www.w3.org/2000/svg"}


def test_verdict_plot_numbers(rollout):
    state, audit, _plan = rollout
    doc = render_report(state, audit, now=NOW)
    passed, failed = state.batch(0)["verdict"], state.batch(1)["verdict"]
    for v in (passed, failed):
        ratio = v["test"]["ratio"]
        low, high = v["test"]["ci_ratio"]
        assert f"{ratio:.2f}\u00d7" in doc
        assert f"{low:.2f}\u00d7 \u2013 {high:.2f}\u00d7" in doc
        host = next(h for h in v["hosts"] if h["group"] == "canary")
        assert f"{host['host']} (canary): drop rate x" in doc
    assert "2.25\u00d7" in doc and "0.97\u00d7" in doc
    assert "guards: 7 of 7 ok" in doc


def test_inconclusive_and_minimal_verdicts(rollout):
    state, audit, _plan = rollout
    inconclusive = verdict("inconclusive", 2)
    state.save_batch(2, {"verdict": inconclusive, "judged_at": T0 + 3500})
    state.save_batch(3, {"verdict": {"verdict": "INCONCLUSIVE", "reason": "no_hosts",
                                     "explanation": "0 changed host(s) and 2 control host(s)"}})
    doc = render_report(state, audit, now=NOW)
    parse(doc)
    assert doc.count('class="badge b-warn big">INCONCLUSIVE') == 2
    assert html.escape(inconclusive["explanation"]) in doc
    assert "Not used by the test: web-002" in doc
    assert "0 changed host(s) and 2 control host(s)" in doc


def test_audit_summary_and_cap(rollout, tmp_path):
    state, audit, _plan = rollout
    doc = render_report(state, audit, now=NOW)
    assert "4 entries on 3 hosts" in doc
    assert "<tr><td>change</td><td class=num>3</td></tr>" in doc
    assert "<tr><td>restore</td><td class=num>1</td></tr>" in doc
    assert "approved by" in doc and ">bob<" in doc
    big = Audit(MemoryStore(), state.id)
    for i in range(MAX_AUDIT_ROWS + 100):
        big.record(f"h{i:04d}", "bios.SnoopMode", "EarlySnoop", "HomeSnoop", "ex", "alice")
    doc = render_report(state, big, now=NOW)
    parse(doc)
    assert f"of {MAX_AUDIT_ROWS + 100} entries" in doc
    assert "100 entries not shown" in doc
    assert ">h0000<" in doc and f">h{MAX_AUDIT_ROWS + 99:04d}<" in doc
    assert ">h0300<" not in doc


def test_secrets_never_printed(rollout):
    state, audit, plan = rollout
    name = plan["batches"][0]["hosts"][0]
    host = state.host(name)
    host["steps"]["precheck"]["detail"] = {"password": "hunter2",
                                           "url": "https://root:calvin@10.0.0.1/redfish/v1",
                                           "auth": {"token": "tok-123"}}
    state.save_host(name, host)
    audit.record(name, "bios.AdminPassword", "old-pass-1", "new-pass-2", "ex", "alice")
    state.update_meta(error="login to https://admin:s3cret@bmc failed")
    doc = render_report(state, audit, now=NOW)
    for secret in ("hunter2", "calvin", "tok-123", "old-pass-1", "new-pass-2", "s3cret"):
        assert secret not in doc
    assert "https://***@10.0.0.1/redfish/v1" in doc
    assert redact({"Password": "x", "n": [{"api_key": "k"}]}) == {"Password": "***",
                                                                 "n": [{"api_key": "***"}]}
    assert summarize_detail({"error": "x" * 500}).endswith("\u2026")


def test_running_rollout_shows_progress(rollout):
    state, audit, plan = rollout
    name = plan["batches"][3]["hosts"][0]
    state.save_host(name, host_state(name, "running", steps(T0 + 4000, until="reboot")))
    state.update_meta(status="running", finished=None)
    doc = render_report(state, audit, now=T0 + 4300)
    parse(doc)
    assert 'class="badge b-info big">running' in doc
    assert "not yet" in doc and "so far" in doc
    assert re.search(r'<rect class="bar run"[^>]*><title>' + re.escape(name) +
                     r" \u00b7 running: wait since", doc)


def test_big_batch_stays_compact(tmp_path):
    names = [f"edge-{i:03d}.example.net" for i in range(200)]
    plan = {"rollout_id": "big", "profile": {"name": "home-snoop", "bios": {"snoop_mode": "home"}},
            "batches": [{"index": 0, "hosts": names, "sites": ["s0"], "canary": True}],
            "control": [], "hosts": {}, "skipped_compliant": [], "targets": 200}
    state = RolloutState(MemoryStore(), "big")
    state.save_plan(plan)
    for i, name in enumerate(names):
        if i % 50 == 7:
            records = steps(T0 + i, fail_at="wait", error="OS not back within 900s " * 20,
                            restore=True)
            state.save_host(name, host_state(name, "restored", records))
        else:
            state.save_host(name, host_state(name, "done", steps(T0 + i)))
    state.save_batch(0, {"verdict": verdict("pass", 0), "judged_at": T0 + 900,
                         "approval": {"response": "approved", "by": "bob", "at": T0 + 950}})
    state.update_meta(status="completed", started=T0, finished=T0 + 1000)
    doc = render_report(state, Audit(MemoryStore(), "big"), now=NOW)
    checker = parse(doc)
    assert len(doc) < 1_500_000
    for name in names:
        assert name in doc  # every host in the table, even when its row is not drawn
    assert f"+{200 - MAX_TIMELINE_ROWS} more hosts not drawn (done {200 - MAX_TIMELINE_ROWS})" \
        in doc
    # the restored hosts are drawn first, each with its failed wait
    assert sum(1 for t in checker.titles if " \u00b7 wait \u00b7 FAILED" in t) == 4


def test_status_words_and_boolean_approval(rollout):
    assert rollout_status({"status": "rolled_back"}, {}) == "rolled back"
    assert rollout_status({"status": "ABORTED"}, {}) == "aborted"
    assert rollout_status({}, {}) == "planned"
    assert rollout_status({}, {"h": {}}) == "running"
    assert rollout_status({}, {"h": {}}, {"reason": "over budget"}) == "halted"
    state, audit, _plan = rollout
    state.save_batch(2, {"approval": {"response": False, "by": "eve", "at": T0 + 2999}})
    state.save_batch(3, {"approval": {"response": True, "by": "dan", "at": T0 + 2998}})
    doc = render_report(state, audit, now=NOW)
    assert 'class="badge b-bad">rejected</span> by eve' in doc
    assert 'class="badge b-ok">approved</span> by dan' in doc


def test_timeline_rows_capped_and_empty_batch():
    hosts = {f"h{i}": host_state(f"h{i}", "done", steps(T0 + i)) for i in range(10)}
    svg = render_timeline(list(hosts), hosts, max_rows=4)
    assert "+6 more hosts not drawn (done 6)" in svg
    assert svg.count("<svg") == 1
    assert "No step of this batch has run yet" in render_timeline(["a", "b"], {})


def test_write_report_atomic(rollout, tmp_path):
    state, audit, _plan = rollout
    target = tmp_path / "out" / "report.html"
    path = write_report(state, audit, str(target), now=NOW)
    assert path == str(target)
    assert target.read_text(encoding="utf-8") == render_report(state, audit, now=NOW)
    state.update_meta(status="completed")
    write_report(state, audit, str(target), now=NOW)  # replaces the old one
    assert 'class="badge b-ok big">completed' in target.read_text(encoding="utf-8")
    assert sorted(os.listdir(target.parent)) == ["report.html"]  # no temp file left behind
