"""The audit trail section: counts by action and setting, and the entries (capped,
old and new values of secret settings masked)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from fleet_rollout.audit import Audit
from fleet_rollout.report.format import MASK, SECRET_KEY, badge, compact, esc, fmt_time, num, redact

MAX_AUDIT_ROWS = 500


def audit_section(audit: Audit) -> str:
    entries = sorted((e for e in audit.entries() if isinstance(e, dict)),
                     key=lambda e: num(e.get("time")) or 0.0)
    by_action: Dict[str, int] = {}
    by_setting: Dict[str, int] = {}
    for e in entries:
        action = str(e.get("action") or "-")
        by_action[action] = by_action.get(action, 0) + 1
        setting = str(e.get("setting") or "-")
        by_setting[setting] = by_setting.get(setting, 0) + 1
    hosts = {str(e.get("host")) for e in entries}
    out = ['<section class="card" id="audit"><h2>Audit trail</h2>'
           f'<p class="sub">{len(entries)} entries on {len(hosts)} hosts; datastore keys '
           f'<span class="mono">{esc(audit.prefix)}*</span></p>']
    if not entries:
        out.append('<p class="muted">No audit entries.</p></section>')
        return "".join(out)
    action_rows = "".join(f"<tr><td>{esc(a)}</td><td class=num>{n}</td></tr>"
                          for a, n in sorted(by_action.items(), key=lambda kv: -kv[1]))
    top = sorted(by_setting.items(), key=lambda kv: (-kv[1], kv[0]))
    setting_rows = "".join(f"<tr><td class=mono>{esc(s)}</td><td class=num>{n}</td></tr>"
                           for s, n in top[:20])
    if len(top) > 20:
        setting_rows += f"<tr><td colspan=2 class=muted>+{len(top) - 20} more settings</td></tr>"
    out.append('<div class="cols"><table><tr><th>action</th><th class=num>entries</th></tr>'
               f'{action_rows}</table><table><tr><th>setting</th><th class=num>entries</th>'
               f"</tr>{setting_rows}</table></div>")
    half = MAX_AUDIT_ROWS // 2
    if len(entries) > MAX_AUDIT_ROWS:
        shown: List[Optional[Dict[str, Any]]] = [*entries[:half], None, *entries[-half:]]
        note = (f"Showing the first {half} and the last {half} of {len(entries)} entries; "
                "the file above holds them all.")
    else:
        shown = list(entries)
        note = ""
    rows = []
    for e in shown:
        if e is None:
            rows.append(f"<tr><td colspan=8 class=muted>\u2026 {len(entries) - 2 * half} "
                        "entries not shown \u2026</td></tr>")
            continue
        setting = str(e.get("setting") or "")
        secret = bool(SECRET_KEY.search(setting))
        old = MASK if secret else compact(redact(e.get("old")), 80)
        new = MASK if secret else compact(redact(e.get("new")), 80)
        action = str(e.get("action") or "")
        rows.append(f"<tr><td class=nw>{esc(fmt_time(e.get('time')))}</td><td class=mono>"
                    f"{esc(e.get('host'))}</td><td class=mono>{esc(setting)}</td>"
                    f"<td class=mono>{esc(old)} \u2192 {esc(new)}</td>"
                    f"<td>{badge(action, 'rb' if action == 'restore' else 'none')}</td>"
                    f"<td>{esc(e.get('by') or '-')}</td><td>{esc(e.get('approved_by') or '-')}"
                    f"</td><td class=mono>{esc(e.get('execution') or '-')}</td></tr>")
    head = ("<tr><th>time</th><th>host</th><th>setting</th><th>old \u2192 new</th>"
            "<th>action</th><th>by</th><th>approved by</th><th>execution</th></tr>")
    if note:
        out.append(f'<p class="muted">{esc(note)}</p>')
    out.append(f'<div class="scroll"><table>{head}{"".join(rows)}</table></div></section>')
    return "".join(out)
