"""The rollout's schedule: where its time went, batch by batch (waiting for an approver, waiting
for the sites' maintenance windows, the work itself: counter windows, host changes, soak and
verdict) as an SVG on a UTC time axis and a table, and the plan's estimate (its batch table and
totals, as `plan` gave them)."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from fleet_rollout.report.format import clock, esc, fmt_duration, fmt_time, num, px, svg_open
from fleet_rollout.report.status import step_span
from fleet_rollout.states import batch_label

MAX_SCHEDULE_ROWS = 200  # batches drawn; the rest are counted
KINDS = (("approval", "waiting for an approver", "#e0a800"),
         ("window", "waiting for the maintenance window", "#7e57c2"),
         ("work", "work: counter windows, host changes, soak, verdict", "#2e7d32"))


def batch_spans(state: Mapping[str, Any], names: List[str],
                hosts: Mapping[str, Mapping[str, Any]]) -> List[Tuple[str, float, float]]:
    """(kind, start, end) of a batch: the approval wait (from the batch's start to a human's
    answer; none when the judge or the profile promoted it), the maintenance window wait, and
    the work until its verdict (or its hosts' last step)."""
    started = num(state.get("started_at"))
    if started is None:
        return []
    spans: List[Tuple[str, float, float]] = []
    approval = state.get("approval") if isinstance(state.get("approval"), dict) else {}
    answered = num(approval.get("at"))
    human = approval and approval.get("via") not in ("promotion", "profile", "proceed", "auto")
    cursor = started
    if human and answered is not None and answered > started:
        spans.append(("approval", started, answered))
        cursor = answered
    window = state.get("window") if isinstance(state.get("window"), dict) else {}
    since, opened = num(window.get("since")), num(window.get("opened"))
    if since is not None and opened is not None and opened > since:
        spans.append(("window", max(cursor, since), opened))
        cursor = max(cursor, opened)
    ends = [e for _s, e in (step_span(dict(hosts.get(n) or {})) for n in names)
            if e is not None]
    end = num(state.get("judged_at")) or (max(ends) if ends else None)
    if end is not None and end > cursor:
        spans.append(("work", cursor, end))
    return spans


def _svg(rows: List[Tuple[str, List[Tuple[str, float, float]]]]) -> str:
    spans = [s for _label, row in rows for s in row]
    if not spans:
        return ""
    t0, t1 = min(s[1] for s in spans), max(s[2] for s in spans)
    width, left, line = 760.0, 60.0, 14.0
    height = 24.0 + line * len(rows)
    scale = (width - left - 10.0) / max(t1 - t0, 1e-9)
    colour = {kind: c for kind, _text, c in KINDS}
    parts = [svg_open(width, height, "the rollout's batches over time"),
             f'<text x="{px(left)}" y="12" class="muted">{esc(clock(t0))}</text>',
             f'<text x="{px(width - 10)}" y="12" text-anchor="end" class="muted">'
             f"{esc(clock(t1))}</text>"]
    for i, (label, row) in enumerate(rows):
        y = 20.0 + i * line
        parts.append(f'<text x="{px(left - 6)}" y="{px(y + 10)}" text-anchor="end">'
                     f"{esc(label)}</text>")
        for kind, start, end in row:
            parts.append(f'<rect class="bar" x="{px(left + (start - t0) * scale)}" '
                         f'y="{px(y)}" width="{px(max(1.0, (end - start) * scale))}" '
                         f'height="{px(line - 3)}" fill="{colour[kind]}"><title>'
                         f"{esc(label)}: {esc(kind)} {esc(fmt_duration(end - start))}</title>"
                         "</rect>")
    return "".join(parts) + "</svg>"


def schedule_section(plan: Mapping[str, Any], meta: Mapping[str, Any],
                     batches: List[Dict[str, Any]],
                     hosts: Mapping[str, Mapping[str, Any]]) -> str:
    """The section: the schedule's SVG and table (waits apart from work), then the plan's
    estimate."""
    rows: List[Tuple[str, List[Tuple[str, float, float]]]] = []
    table = []
    totals = {kind: 0.0 for kind, _t, _c in KINDS}
    for info, state in zip(plan.get("batches") or [], batches):
        spans = batch_spans(state, list(info.get("hosts") or []), hosts)
        if not spans:
            continue
        label = f"batch {batch_label(int(info.get('index', 0)))}"
        rows.append((label, spans))
        took = {kind: sum(e - s for k, s, e in spans if k == kind) for kind in totals}
        for kind in totals:
            totals[kind] += took[kind]
        table.append(f"<tr><td>{esc(label)}</td><td>{esc(fmt_time(spans[0][1]))}</td>"
                     + "".join(f"<td class=num>{esc(fmt_duration(took[k]))}</td>"
                               for k in totals) + "</tr>")
    legend = " ".join(f'<span style="color:{c}">&#9632;</span> {esc(text)}'
                      for _k, text, c in KINDS)
    head = ("<tr><th>batch</th><th>started</th><th class=num>approval wait</th>"
            "<th class=num>window wait</th><th class=num>work</th></tr>")
    total = ("<tr><th>total</th><th></th>" + "".join(
        f"<th class=num>{esc(fmt_duration(totals[k]))}</th>" for k in totals) + "</tr>")
    drawn = _svg(rows[:MAX_SCHEDULE_ROWS])
    more = (f'<p class="muted small">{len(rows) - MAX_SCHEDULE_ROWS} more batches in the '
            "table</p>" if len(rows) > MAX_SCHEDULE_ROWS else "")
    estimate = _estimate(meta)
    body = (f'<p class="small">{legend}</p>{drawn}{more}<div class="scroll"><table>{head}'
            f'{"".join(table)}{total}</table></div>' if rows else
            '<p class="muted">No batch has started.</p>')
    return f'<section class="card"><h2>Schedule</h2>{body}{estimate}</section>'


def _estimate(meta: Mapping[str, Any]) -> str:
    text: Optional[str] = meta.get("estimate_table") if isinstance(
        meta.get("estimate_table"), str) else None
    if not text:
        return ""
    return ('<h3>The plan\'s estimate</h3><div class="scroll"><pre class="small">'
            f"{esc(text)}</pre></div>")
