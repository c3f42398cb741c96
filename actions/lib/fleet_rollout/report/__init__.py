"""The rollout report: one self-contained HTML file (inline CSS and SVG, no script, no network).

Written at the end of a rollout and on demand for a running one. Everything comes from the
rollout state (store.py: plan, meta, halt, host.<name>, batch.<n>) and the audit trail:

* header: rollout id, profile (BIOS knobs, kernel settings), status, who and when, host counts,
  the halt reason;
* an overview of the batches;
* per batch: approval, the canary verdict (badge, numbers, explanation, a strip plot of the
  per-host drop-rate change of canary and control hosts with the weighted ratio and its
  CI), a Gantt-like timeline of every host's steps and a table of the hosts;
* the audit trail: counts and the entries.

All text is escaped; values under secret-looking keys and credentials inside URLs are masked.
Times are shown in UTC.

Modules: page (render_report, write_report) puts together header, batches (overview and batch
sections), audit_trail; those draw with timeline and verdict_plot (SVG), derive with status and
format with format and style.
"""
from __future__ import annotations

from fleet_rollout.report.audit_trail import MAX_AUDIT_ROWS
from fleet_rollout.report.format import redact, summarize_detail
from fleet_rollout.report.page import render_report, write_report
from fleet_rollout.report.status import rollout_status
from fleet_rollout.report.timeline import MAX_TIMELINE_ROWS, render_timeline

__all__ = [
    "MAX_AUDIT_ROWS",
    "MAX_TIMELINE_ROWS",
    "redact",
    "render_report",
    "render_timeline",
    "rollout_status",
    "summarize_detail",
    "write_report",
]
