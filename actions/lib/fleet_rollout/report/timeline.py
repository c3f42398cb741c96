"""The batch timeline: a Gantt-like SVG of every host's steps on a UTC time axis, with
the approval, verdict and halt markers, and its colour legend."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from fleet_rollout import states
from fleet_rollout.report.format import (
    clip,
    clock,
    esc,
    fmt_duration,
    fmt_time,
    num,
    px,
    summarize_detail,
    svg_open,
)
from fleet_rollout.report.status import (
    approval_class,
    approval_word,
    host_status,
    next_step,
    row_order,
    step_span,
    timed_steps,
)
from fleet_rollout.report.style import HOST_STATUS, STATUS_RANK, STEP_LEGEND, VERDICT_CLASS

MAX_TIMELINE_ROWS = 120  # rows drawn per batch timeline; the rest are counted ("+N more")

_TICKS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200,
          86400, 172800, 604800]


def _tick_step(span: float, max_ticks: int = 8) -> float:
    for step in _TICKS:
        if span / step <= max_ticks:
            return float(step)
    return float(_TICKS[-1])


def _time_axis(t0: float, t1: float, x0: float, width: float, y_top: float, y_bottom: float,
               ) -> str:
    span = max(t1 - t0, 1e-9)
    step = _tick_step(span)
    first = math.ceil(t0 / step) * step
    parts = []
    t = first
    while t <= t1 + 1e-9:
        x = x0 + (t - t0) / span * width
        parts.append(f'<line class="grid" x1="{px(x)}" y1="{px(y_top)}" x2="{px(x)}" '
                     f'y2="{px(y_bottom)}"/>')
        parts.append(f'<text x="{px(x)}" y="{px(y_top - 4)}" text-anchor="middle">'
                     f'{clock(t, seconds=step < 60)}</text>')
        t += step
    return "".join(parts)


def _markers(batch: Dict[str, Any], halt: Optional[Dict[str, Any]], verdict_cls: str,
             ) -> List[Tuple[float, str, str]]:
    """(time, class, label) of approval, verdict and halt for a batch timeline."""
    marks: List[Tuple[float, str, str]] = []
    approval = batch.get("approval")
    if isinstance(approval, dict) and num(approval.get("at")) is not None:
        marks.append((float(approval["at"]), approval_class(approval.get("response")),
                      f"{approval_word(approval.get('response'))} by "
                      f"{approval.get('by') or '?'}"))
    if num(batch.get("judged_at")) is not None:
        verdict = batch.get("verdict") or {}
        marks.append((float(batch["judged_at"]), verdict_cls,
                      f"verdict {verdict.get('verdict', '?')}"))
    if isinstance(halt, dict) and num(halt.get("at")) is not None:
        marks.append((float(halt["at"]), "bad", "halted"))
    return marks


def render_timeline(names: Sequence[str], hosts: Dict[str, Dict[str, Any]],
                    batch: Optional[Dict[str, Any]] = None,
                    halt: Optional[Dict[str, Any]] = None, now: Optional[float] = None,
                    live: bool = False, max_rows: int = MAX_TIMELINE_ROWS,
                    title: str = "timeline") -> str:
    """A Gantt-like SVG: one row per host, one bar per step, the host's status at row end."""
    batch = batch or {}
    ordered = row_order(names, hosts)
    shown = ordered[:max_rows]
    hidden = ordered[max_rows:]
    starts, ends = [], []
    for name in names:
        start, end = step_span(hosts.get(name) or {})
        if start is not None and end is not None:
            starts.append(start)
            ends.append(end)
    if not starts:
        return '<p class="muted">No step of this batch has run yet.</p>'
    running = [n for n in names
               if host_status(hosts.get(n) or {}) in states.IN_PROGRESS_STATES]
    t0, t1 = min(starts), max(ends)
    if live and running and now is not None and now > t1:
        t1 = now
    verdict = batch.get("verdict") if isinstance(batch.get("verdict"), dict) else {}
    vcls = VERDICT_CLASS.get(str(verdict.get("verdict")), "none")
    marks = []
    base = max(t1 - t0, 1.0)
    for when, cls, label in _markers(batch, halt, vcls):
        if t0 - 0.25 * base <= when <= t1 + 0.25 * base:  # near: widen the axis to show it
            t0, t1 = min(t0, when), max(t1, when)
            marks.append((when, cls, label))
    span = max(t1 - t0, 1.0)

    label_w, chart_w, badge_w = 190.0, 790.0, 100.0
    row_h, bar_h, top = 13.0, 9.0, 46.0 if marks else 22.0
    x0 = label_w
    height = top + row_h * len(shown) + 22 + (14 if hidden else 0)
    width = label_w + chart_w + badge_w
    scale = chart_w / span

    def x_of(t: float) -> float:
        return x0 + (t - t0) * scale

    parts = [svg_open(width, height, f"{title}: {len(names)} hosts, steps over time (UTC)")]
    for i in range(len(shown)):
        if i % 2:
            parts.append(f'<rect class="zebra" x="0" y="{px(top + i * row_h)}" '
                         f'width="{px(width)}" height="{px(row_h)}"/>')
    parts.append(_time_axis(t0, t1, x0, chart_w, top - 4, top + row_h * len(shown)))
    for i, name in enumerate(shown):
        state = hosts.get(name) or {}
        y = top + i * row_h
        yb = y + (row_h - bar_h) / 2
        label = clip(name, 30)
        parts.append(f'<text x="{px(label_w - 6)}" y="{px(y + row_h - 3)}" text-anchor="end">'
                     f'<title>{esc(name)}</title>{esc(label)}</text>')
        last_end: Optional[float] = None
        for step, rec, start, end in timed_steps(state):
            ok = rec.get("ok") is not False
            if step == "restore":
                cls = "s-restore" if ok else "rfail"
            else:
                cls = f"s-{step}" if ok else "fail"
            x = x_of(start)
            w = max(1.5, (end - start) * scale)
            tip = (f"{name} \u00b7 {step} \u00b7 {'ok' if ok else 'FAILED'} \u00b7 "
                   f"{fmt_duration(end - start)} ({clock(start)}\u2013{clock(end)})")
            detail = summarize_detail(rec.get("detail"))
            if detail:
                tip += f"\n{detail}"
            parts.append(f'<rect class="bar {cls}" x="{px(x)}" y="{px(yb)}" width="{px(w)}" '
                         f'height="{px(bar_h)}"><title>{esc(tip)}</title></rect>')
            last_end = end if last_end is None else max(last_end, end)
        status = host_status(state)
        if live and status in states.IN_PROGRESS_STATES and now is not None and \
                last_end is not None and now > last_end:
            nxt = next_step(state)
            tip = f"{name} \u00b7 {status}: {nxt or 'next step'} since {clock(last_end)}"
            parts.append(f'<rect class="bar run" x="{px(x_of(last_end))}" y="{px(yb)}" '
                         f'width="{px(max(1.5, (now - last_end) * scale))}" '
                         f'height="{px(bar_h)}"><title>{esc(tip)}</title></rect>')
        blabel, bcls = HOST_STATUS.get(status, (status.replace("_", " "), "none"))
        bx = label_w + chart_w + 8
        parts.append(f'<rect class="m-{bcls}" x="{px(bx)}" y="{px(yb - 0.5)}" width="86" '
                     f'height="{px(bar_h + 1)}" rx="4"/><text class="bt" x="{px(bx + 43)}" '
                     f'y="{px(y + row_h - 3.5)}" text-anchor="middle">{esc(blabel)}</text>')
    bottom = top + row_h * len(shown)
    lanes = [-1e9, -1e9]  # right end of the last label in each lane (y 12 and y 26)
    for when, cls, label in sorted(marks):
        x = x_of(when)
        text = clip(label, 40)
        est = 6.2 * len(text) + 6
        right_side = x + est > width
        left = x - est if right_side else x
        lane = 0 if lanes[0] < left else 1
        lanes[lane] = x if right_side else x + est
        anchor = ' text-anchor="end"' if right_side else ""
        tx = x - 3 if right_side else x + 3
        parts.append(f'<line class="mk mk-{cls}" x1="{px(x)}" y1="{px(4 + 14 * lane)}" '
                     f'x2="{px(x)}" y2="{px(bottom)}"><title>{esc(label)} at '
                     f'{esc(fmt_time(when))}</title></line>')
        parts.append(f'<text x="{px(tx)}" y="{12 + 14 * lane}"{anchor} class="m-{cls}">'
                     f'{esc(text)}</text>')
    parts.append(f'<text x="{px(label_w)}" y="{px(bottom + 14)}" class="muted">times UTC; '
                 f'{esc(fmt_time(t0))} + {esc(fmt_duration(t1 - t0))}</text>')
    if hidden:
        counts: Dict[str, int] = {}
        for name in hidden:
            status = host_status(hosts.get(name) or {})
            counts[status] = counts.get(status, 0) + 1
        what = ", ".join(f"{HOST_STATUS.get(s, (s, ''))[0]} {n}" for s, n in
                         sorted(counts.items(), key=lambda kv: STATUS_RANK.get(kv[0], 99)))
        parts.append(f'<text x="{px(label_w)}" y="{px(bottom + 28)}">+{len(hidden)} more '
                     f'hosts not drawn ({esc(what)}); every host is in the table below</text>')
    parts.append("</svg>")
    return "".join(parts)


def timeline_legend() -> str:
    items = [f'<span><i style="background:{color}"></i>{esc(step)}</span>'
             for step, color in STEP_LEGEND.items()]
    items.append('<span><i style="background:#d32f2f"></i>failed step</span>')
    items.append('<span><i style="background:#dfe7f3;border:1px dashed #1f6feb"></i>'
                 'in progress</span>')
    return '<div class="legend">' + "".join(items) + "</div>"
