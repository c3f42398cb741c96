"""The entry points: the whole report as one HTML document (render_report) and its atomic
write to a file (write_report)."""
from __future__ import annotations

import os
import tempfile
import time
from typing import Optional

from fleet_rollout.audit import Audit
from fleet_rollout.report.audit_trail import audit_section
from fleet_rollout.report.batches import batch_section, overview_section
from fleet_rollout.report.format import esc, fmt_time
from fleet_rollout.report.header import header_section
from fleet_rollout.report.schedule import schedule_section
from fleet_rollout.report.status import rollout_status
from fleet_rollout.report.style import CSS
from fleet_rollout.states import RUNNING
from fleet_rollout.store import RolloutState


def render_report(state: RolloutState, audit: Audit, now: Optional[float] = None) -> str:
    """The report of one rollout as a self-contained HTML document."""
    generated = time.time() if now is None else now
    plan = state.plan_view()  # what the report shows: batches' hosts, not host infos
    meta = state.meta()
    halt = state.halted()
    hosts = state.hosts()
    status = rollout_status(meta, hosts, halt)
    live = status == RUNNING
    batch_infos = list(plan.get("batches") or [])
    batches = []
    for i, info in enumerate(batch_infos):
        index = info.get("index", i)
        batches.append(state.batch(int(index)) if isinstance(index, int) else {})
    title = f"Rollout {plan.get('rollout_id') or state.id} \u2014 {status}"
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>",
             header_section(plan, meta, halt, hosts, status, generated),
             overview_section(plan, hosts, batches),
             schedule_section(plan, meta, batches, hosts)]
    for info, batch in zip(batch_infos, batches):
        parts.append(batch_section(info, batch, hosts, halt, generated, live))
    parts.append(audit_section(audit))
    parts.append(f'<p class="muted small">fleet_rollout report, generated '
                 f"{esc(fmt_time(generated))}. All times UTC.</p></main></body></html>")
    return "\n".join(parts)


def write_report(state: RolloutState, audit: Audit, path: str,
                 now: Optional[float] = None) -> str:
    """Render and write the report atomically (temp file + rename); returns the path."""
    text = render_report(state, audit, now=now)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".report-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)  # the audit trail's peer: private like it
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    return path
