"""The report's first section: rollout id, profile and its settings, status, who and when,
the host counts and the halt reason."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from fleet_rollout.report.format import (
    badge,
    compact,
    esc,
    fmt_duration,
    fmt_time,
    kv_table,
    num,
    plural,
    redact,
    scrub_text,
)
from fleet_rollout.report.status import count_hosts
from fleet_rollout.report.style import ROLLOUT_STATUS
from fleet_rollout.states import RUNNING


def _settings_rows(prefix: str, value: Any) -> List[Tuple[str, str]]:
    """Flatten nested settings to (dotted key, escaped value) rows."""
    value = redact(value)
    if isinstance(value, dict):
        if not value:
            return []
        rows: List[Tuple[str, str]] = []
        for k, v in value.items():
            rows += _settings_rows(f"{prefix}.{k}" if prefix else str(k), v)
        return rows
    if isinstance(value, (list, tuple)):
        text = ", ".join(str(v) for v in value) if value else "(none)"
        return [(prefix, f'<span class="mono">{esc(text)}</span>')]
    return [(prefix, f'<span class="mono">{esc(value)}</span>')]


def _compliant_count(plan: Mapping[str, Any]) -> int:
    """How many hosts the plan skipped as compliant; a stored plan (PlanView) knows without
    reading their names."""
    count = getattr(plan, "compliant_count", None)
    return int(count()) if callable(count) else len(plan.get("skipped_compliant") or [])


def header_section(plan: Mapping[str, Any], meta: Dict[str, Any], halt: Optional[Dict[str, Any]],
            hosts: Dict[str, Dict[str, Any]], status: str, generated: float) -> str:
    profile = plan.get("profile") or {}
    targets = [h for b in plan.get("batches") or [] for h in b.get("hosts") or []]
    counts = count_hosts(targets, hosts)
    started = meta.get("started") or meta.get("started_at") or plan.get("created")
    finished = meta.get("finished") or meta.get("finished_at") or meta.get("ended")
    by = meta.get("started_by") or plan.get("started_by") or "-"
    cls = ROLLOUT_STATUS.get(status, "none")
    description = profile.get("description")
    dash = " \u2014 " + esc(description) if description else ""
    out = [f'<section class="card"><h1>Rollout {esc(plan.get("rollout_id"))} '
           f'{badge(status, cls, big=True)}</h1>'
           f'<p class="sub">profile <b>{esc(profile.get("name"))}</b>{dash}</p>']
    if halt:
        out.append(f'<div class="halt"><b>Halted:</b> {esc(scrub_text(str(halt.get("reason"))))}'
                   f' <span class="muted">(by {esc(halt.get("by") or "?")}, '
                   f'{esc(fmt_time(halt.get("at")))})</span></div>')
    duration = "-"
    if num(started) is not None:
        end = num(finished) if num(finished) is not None else (
            generated if status == RUNNING else None)
        if end is not None:
            duration = fmt_duration(end - float(started)) + ("" if finished else " so far")
    tiles = [("changed", counts["changed"], "ok"), ("restored", counts["restored"], "rb"),
             ("failed", counts["failed"], "bad" if counts["failed"] else ""),
             ("left drained", counts["left_drained"], "warn" if counts["left_drained"] else ""),
             ("in progress", counts["in_progress"], "info"), ("pending", counts["pending"], "")]
    out.append('<div class="tiles">')
    for label, n, tcls in tiles:
        note = ""
        if label == "failed" and counts["restore_failed"]:
            note = f' ({counts["restore_failed"]} restore failed, left drained)'
        out.append(f'<div class="tile{" t-" + tcls if tcls else ""}"><div class="n">{n}</div>'
                   f'<div class="l">{esc(label)}{esc(note)}</div></div>')
    out.append(f'<div class="tile"><div class="n">{len(targets)}</div><div class="l">target '
               f'hosts in {plural(len(plan.get("batches") or []), "batch", "batches")}</div></div>'
               "</div>")
    rows = [("status", badge(status, cls)),
            ("started", esc(fmt_time(started))),
            ("finished", esc(fmt_time(finished)) if finished else
             ('<span class="muted">not yet</span>' if status == RUNNING else "-")),
            ("duration", esc(duration)),
            ("started by", esc(by)),
            ("current batch", esc(meta.get("batch", meta.get("current_batch", "-")))),
            ("inventory", f'<span class="mono">{esc(plan.get("inventory") or "-")}</span> '
                          f'limit <span class="mono">{esc(plan.get("limit") or "-")}</span>'),
            ("control group", f'{len(plan.get("control") or [])} hosts'
                              + (f', {len(plan.get("control_reserved_for_last_batch") or [])}'
                                 " of them changed in the last batch"
                                 if plan.get("control_reserved_for_last_batch") else "")),
            ("already compliant", f'{_compliant_count(plan)} hosts skipped'),
            ("report generated", esc(fmt_time(generated)))]
    for extra in ("error", "message", "reason"):
        if meta.get(extra):
            rows.append((extra, f'<span class="err">{esc(compact(redact(meta[extra]), 400))}'
                                "</span>"))
    settings = [("BIOS", _settings_rows("", profile.get("bios") or {})),
                ("BIOS (raw attributes)", _settings_rows("", profile.get("bios_extra") or {})),
                ("kernel", _settings_rows("", profile.get("kernel") or {}))]
    out.append('<div class="cols"><div>' + kv_table(rows) + "</div>")
    for title, srows in settings:
        if srows or title != "BIOS (raw attributes)":
            body = kv_table(srows) if srows else '<p class="muted">none</p>'
            out.append(f"<div><h3>{esc(title)}</h3>{body}</div>")
    out.append("</div>")
    if status == RUNNING:
        out.append('<p class="muted small">The rollout is still running: this is a snapshot; '
                   "render the report again for fresh data.</p>")
    out.append("</section>")
    return "".join(out)
