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
"""
from __future__ import annotations

import html
import math
import os
import re
import tempfile
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from fleet_rollout.audit import Audit
from fleet_rollout.store import RolloutState

STEPS = ["precheck", "snapshot", "drain", "stage", "reboot", "wait", "verify", "undrain"]
TIMELINE_STEPS = STEPS + ["restore"]
MAX_TIMELINE_ROWS = 120  # rows drawn per batch timeline; the rest are counted ("+N more")
MAX_AUDIT_ROWS = 500
MAX_DETAIL_CHARS = 180

# host status -> (label, badge class); order = how interesting a host is (problems first)
HOST_STATUS = {
    "failed": ("failed", "bad"),
    "restore_failed": ("restore failed", "bad"),
    "left_drained": ("left drained", "warn"),
    "restoring": ("restoring", "rb"),
    "restored": ("restored", "rb"),
    "running": ("running", "info"),
    "done": ("done", "ok"),
    "pending": ("pending", "none"),
}
_STATUS_RANK = {name: i for i, name in enumerate(HOST_STATUS)}

ROLLOUT_STATUS = {
    "running": "info",
    "completed": "ok",
    "rolled back": "rb",
    "aborted": "warn",
    "halted": "warn",
    "failed": "bad",
    "planned": "none",
}
VERDICT_CLASS = {"PASS": "ok", "FAIL": "bad", "INCONCLUSIVE": "warn"}

_SECRET_KEY = re.compile(
    r"pass(word|wd|phrase)?$|passwd|secret|token|api_?key|authorization|cookie|private_?key|"
    r"credentials?$", re.IGNORECASE)
_URL_CREDS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/\s@:]+:[^/\s@]*@")
MASK = "***"

CSS = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
margin:0;color:#1d2330;background:#f3f4f7}
main{max-width:1180px;margin:0 auto;padding:18px}
section.card{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:14px 18px;
margin:14px 0}
h1{font-size:22px;margin:0 0 2px}h2{font-size:18px;margin:0 0 10px}
h3{font-size:15px;margin:16px 0 6px}
.sub{color:#5b6472;margin:0 0 10px}
.badge{display:inline-block;padding:1px 9px;border-radius:10px;font-weight:600;font-size:12px;
color:#fff;background:#6b7280;vertical-align:middle;white-space:nowrap}
.big{font-size:15px;padding:3px 12px}
.b-ok{background:#1a7f37}.b-bad{background:#c62828}.b-warn{background:#b7791f}
.b-info{background:#1f6feb}.b-rb{background:#7b4fb0}.b-none{background:#6b7280}
.tiles{display:flex;flex-wrap:wrap;gap:10px;margin:10px 0}
.tile{flex:1 1 120px;border:1px solid #dde1e7;border-radius:6px;padding:6px 10px;
border-top:4px solid #6b7280}
.tile .n{font-size:24px;font-weight:700}.tile .l{font-size:12px;color:#5b6472}
.t-ok{border-top-color:#1a7f37}.t-bad{border-top-color:#c62828}.t-warn{border-top-color:#b7791f}
.t-info{border-top-color:#1f6feb}.t-rb{border-top-color:#7b4fb0}
table{border-collapse:collapse;font-size:13px;margin:4px 0}
th,td{padding:3px 8px;border-bottom:1px solid #eceef1;text-align:left;vertical-align:top}
th{background:#f0f2f5;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.kv th{background:none;color:#5b6472;font-weight:500;white-space:nowrap}
.muted{color:#5b6472}.small{font-size:12px}
.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
.halt{border-left:4px solid #c62828;background:#fdecea;padding:8px 12px;margin:10px 0}
.explain{border-left:4px solid #c9ced6;padding:6px 12px;background:#f8f9fb;margin:8px 0}
.explain.v-ok{border-left-color:#1a7f37}.explain.v-bad{border-left-color:#c62828}
.explain.v-warn{border-left-color:#b7791f}
.scroll{overflow-x:auto}
.cols{display:flex;flex-wrap:wrap;gap:24px;align-items:flex-start}
.nw{white-space:nowrap}
.err{color:#b3261e}
details summary{cursor:pointer;color:#1f4fa8;margin:6px 0}
.legend span{display:inline-block;margin-right:12px;font-size:12px}
.legend i{display:inline-block;width:14px;height:9px;margin-right:4px;vertical-align:middle;
border-radius:2px}
svg{max-width:100%;height:auto}
svg text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
font-size:11px;fill:#1d2330}
svg .ax{stroke:#c9ced6;stroke-width:1}svg .grid{stroke:#eceef1;stroke-width:1}
svg .zebra{fill:#f7f8fa}svg .muted{fill:#5b6472}
svg .bar:hover{stroke:#111;stroke-width:1}
svg .s-precheck{fill:#b5e0c0}svg .s-snapshot{fill:#93d2a7}svg .s-drain{fill:#6cbf86}
svg .s-stage{fill:#3f9f65}svg .s-reboot{fill:#2a7a4d}svg .s-wait{fill:#7cc6b6}
svg .s-verify{fill:#3f9e93}svg .s-undrain{fill:#a4d17f}
svg .s-restore{fill:#8e63c7}svg .fail{fill:#d32f2f}
svg .rfail{fill:#d32f2f;stroke:#5b2d91;stroke-width:1.5}
svg .run{fill:#dfe7f3;stroke:#1f6feb;stroke-width:1;stroke-dasharray:3 2}
svg .m-ok{fill:#1a7f37}svg .m-bad{fill:#c62828}svg .m-warn{fill:#b7791f}
svg .m-info{fill:#1f6feb}svg .m-rb{fill:#7b4fb0}svg .m-none{fill:#6b7280}
svg .mk-ok{stroke:#1a7f37}svg .mk-bad{stroke:#c62828}svg .mk-warn{stroke:#b7791f}
svg .mk-info{stroke:#1f6feb}svg .mk-rb{stroke:#7b4fb0}svg .mk-none{stroke:#6b7280}
svg .mk{stroke-width:1.2;stroke-dasharray:4 3}
svg .bt{fill:#fff;font-size:10px;font-weight:600}
svg .canary{fill:#e07b00;fill-opacity:.8}svg .control{fill:#4f73a8;fill-opacity:.7}
svg .breach{stroke:#c62828;stroke-width:2}
svg .med{stroke:#1d2330;stroke-width:2}
svg .one{stroke:#8a919c;stroke-width:1}
svg .thr{stroke:#c62828;stroke-width:1;stroke-dasharray:5 3}
svg .ci{stroke:#1d2330;stroke-width:2}
svg .hl{fill:#1d2330}
"""

STEP_LEGEND = {
    "precheck": "#b5e0c0", "snapshot": "#93d2a7", "drain": "#6cbf86", "stage": "#3f9f65",
    "reboot": "#2a7a4d", "wait": "#7cc6b6", "verify": "#3f9e93", "undrain": "#a4d17f",
    "restore": "#8e63c7",
}


# ---------------------------------------------------------------------------- small helpers
def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _num(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _scrub_text(text: str) -> str:
    return _URL_CREDS.sub(lambda m: m.group(1) + MASK + "@", text)


def redact(value: Any) -> Any:
    """A copy with values under secret-looking keys masked and URL credentials removed."""
    if isinstance(value, dict):
        return {k: (MASK if _SECRET_KEY.search(str(k)) and v not in (None, "") else redact(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return _scrub_text(value)
    return value


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:max(1, limit - 1)] + "\u2026"


def _compact(value: Any, limit: int = 60) -> str:
    """A short one-line text for any JSON value."""
    if isinstance(value, dict):
        inner = ", ".join(f"{k}: {_compact(v, 30)}" for k, v in value.items())
        return _clip("{" + inner + "}", limit)
    if isinstance(value, (list, tuple)):
        return _clip("[" + ", ".join(_compact(v, 30) for v in value) + "]", limit)
    if isinstance(value, float):
        return f"{value:.4g}"
    if value is None:
        return "-"
    return _clip(str(value), limit)


def summarize_detail(detail: Any, limit: int = MAX_DETAIL_CHARS) -> str:
    """A step's detail as one short line (errors first), secrets masked."""
    detail = redact(detail)
    if isinstance(detail, dict):
        if detail.get("error"):
            return _clip(f"error: {detail['error']}", limit)
        parts = [f"{k}={_compact(v, 50)}" for k, v in detail.items()]
        return _clip("; ".join(parts), limit)
    if detail in (None, ""):
        return ""
    return _clip(_compact(detail, limit), limit)


def fmt_time(ts: Any, seconds: bool = True) -> str:
    value = _num(ts)
    if value is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M",
                         time.gmtime(value)) + "Z"


def _clock(ts: float, seconds: bool = True) -> str:
    return time.strftime("%H:%M:%S" if seconds else "%H:%M", time.gmtime(ts))


def fmt_duration(seconds: Any) -> str:
    value = _num(seconds)
    if value is None:
        return "-"
    if value < 60:
        return f"{value:.1f}s" if value < 10 else f"{value:.0f}s"
    minutes, secs = divmod(int(round(value)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def _ratio(value: Any) -> str:
    value = _num(value)
    if value is None:
        return "unbounded"
    return f"{value:.2f}\u00d7" if value < 100 else f"{value:.0f}\u00d7"


def _p(value: Any) -> str:
    value = _num(value)
    if value is None:
        return "n/a"
    return f"{value:.2g}" if value >= 0.001 else f"{value:.1e}"


def _per_million(rate: Any) -> str:
    value = _num(rate)
    if value is None:
        return "n/a"
    value *= 1e6
    return "0" if value == 0 else (f"{value:,.0f}" if value >= 100 else f"{value:.3g}")


def _plural(n: int, word: str, plural: str = "") -> str:
    return f"{n} {word}" if n == 1 else f"{n} {plural or word + 's'}"


def _badge(text: str, cls: str, big: bool = False) -> str:
    return f'<span class="badge b-{cls}{" big" if big else ""}">{_e(text)}</span>'


def _f(value: float) -> str:
    """A coordinate for SVG (short)."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _svg_open(width: float, height: float, label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_f(width)}" '
            f'height="{_f(height)}" viewBox="0 0 {_f(width)} {_f(height)}" role="img" '
            f'aria-label="{_e(label)}"><title>{_e(label)}</title>')


def rollout_status(meta: Dict[str, Any], hosts: Dict[str, Dict[str, Any]],
                   halt: Optional[Dict[str, Any]] = None) -> str:
    """meta.status normalised (running, completed, rolled back, aborted, failed, ...)."""
    status = str(meta.get("status") or "").strip().lower().replace("_", " ").replace("-", " ")
    if status in ("rolledback", "rollback", "rolled back"):
        return "rolled back"
    if status in ("complete", "done", "succeeded", "success"):
        return "completed"
    if status:
        return status
    if halt:
        return "halted"
    return "running" if hosts else "planned"


def host_status(state: Dict[str, Any]) -> str:
    return str(state.get("status") or "pending")


def _status_badge(status: str) -> str:
    label, cls = HOST_STATUS.get(status, (status.replace("_", " "), "none"))
    return _badge(label, cls)


def count_hosts(names: Iterable[str], hosts: Dict[str, Dict[str, Any]]) -> Dict[str, int]:
    """Counts for the header: changed, restored, failed, left drained, in progress, pending."""
    out = {"changed": 0, "restored": 0, "failed": 0, "restore_failed": 0, "left_drained": 0,
           "in_progress": 0, "pending": 0}
    for name in names:
        status = host_status(hosts.get(name) or {})
        if status == "done":
            out["changed"] += 1
        elif status == "restored":
            out["restored"] += 1
        elif status == "failed":
            out["failed"] += 1
        elif status == "restore_failed":
            out["failed"] += 1
            out["restore_failed"] += 1
        elif status == "left_drained":
            out["left_drained"] += 1
        elif status in ("running", "restoring"):
            out["in_progress"] += 1
        else:
            out["pending"] += 1
    return out


def _steps(state: Dict[str, Any]) -> List[Tuple[str, Dict[str, Any], float, float]]:
    """(step, record, start, end) for each timed step record of a host, in time order."""
    out = []
    records = state.get("steps") or {}
    if not isinstance(records, dict):
        return out
    for step, rec in records.items():
        if not isinstance(rec, dict):
            continue
        end = _num(rec.get("at"))
        start = _num(rec.get("started"))
        secs = _num(rec.get("seconds"))
        if end is None and start is not None and secs is not None:
            end = start + secs
        if start is None and end is not None:
            start = end - (secs or 0.0)
        if start is None or end is None:
            continue
        out.append((str(step), rec, start, max(start, end)))
    order = {s: i for i, s in enumerate(TIMELINE_STEPS)}
    out.sort(key=lambda item: (item[2], order.get(item[0], 99)))
    return out


def _failed_step(state: Dict[str, Any]) -> Optional[str]:
    err = state.get("error")
    if isinstance(err, dict) and err.get("step"):
        return str(err["step"])
    for step, rec, _start, _end in _steps(state):
        if rec.get("ok") is False and step != "restore":
            return step
    return None


def _span(state: Dict[str, Any]) -> Tuple[Optional[float], Optional[float]]:
    steps = _steps(state)
    if not steps:
        return None, None
    return min(s[2] for s in steps), max(s[3] for s in steps)


# ---------------------------------------------------------------------------- time axis
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
        parts.append(f'<line class="grid" x1="{_f(x)}" y1="{_f(y_top)}" x2="{_f(x)}" '
                     f'y2="{_f(y_bottom)}"/>')
        parts.append(f'<text x="{_f(x)}" y="{_f(y_top - 4)}" text-anchor="middle">'
                     f'{_clock(t, seconds=step < 60)}</text>')
        t += step
    return "".join(parts)


# ---------------------------------------------------------------------------- timeline
def _row_order(names: Sequence[str], hosts: Dict[str, Dict[str, Any]]) -> List[str]:
    plan_pos = {n: i for i, n in enumerate(names)}

    def sort_key(name: str) -> Tuple[int, float, int]:
        state = hosts.get(name) or {}
        start, _end = _span(state)
        rank = _STATUS_RANK.get(host_status(state), len(_STATUS_RANK))
        return rank, start if start is not None else float("inf"), plan_pos[name]

    return sorted(names, key=sort_key)


def _markers(batch: Dict[str, Any], halt: Optional[Dict[str, Any]], verdict_cls: str,
             ) -> List[Tuple[float, str, str]]:
    """(time, class, label) of approval, verdict and halt for a batch timeline."""
    marks: List[Tuple[float, str, str]] = []
    approval = batch.get("approval")
    if isinstance(approval, dict) and _num(approval.get("at")) is not None:
        marks.append((float(approval["at"]), _approval_class(approval.get("response")),
                      f"{_approval_word(approval.get('response'))} by "
                      f"{approval.get('by') or '?'}"))
    if _num(batch.get("judged_at")) is not None:
        verdict = batch.get("verdict") or {}
        marks.append((float(batch["judged_at"]), verdict_cls,
                      f"verdict {verdict.get('verdict', '?')}"))
    if isinstance(halt, dict) and _num(halt.get("at")) is not None:
        marks.append((float(halt["at"]), "bad", "halted"))
    return marks


def render_timeline(names: Sequence[str], hosts: Dict[str, Dict[str, Any]],
                    batch: Optional[Dict[str, Any]] = None,
                    halt: Optional[Dict[str, Any]] = None, now: Optional[float] = None,
                    live: bool = False, max_rows: int = MAX_TIMELINE_ROWS,
                    title: str = "timeline") -> str:
    """A Gantt-like SVG: one row per host, one bar per step, the host's status at row end."""
    batch = batch or {}
    ordered = _row_order(names, hosts)
    shown = ordered[:max_rows]
    hidden = ordered[max_rows:]
    starts, ends = [], []
    for name in names:
        start, end = _span(hosts.get(name) or {})
        if start is not None and end is not None:
            starts.append(start)
            ends.append(end)
    if not starts:
        return '<p class="muted">No step of this batch has run yet.</p>'
    running = [n for n in names if host_status(hosts.get(n) or {}) in ("running", "restoring")]
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

    parts = [_svg_open(width, height, f"{title}: {len(names)} hosts, steps over time (UTC)")]
    for i in range(len(shown)):
        if i % 2:
            parts.append(f'<rect class="zebra" x="0" y="{_f(top + i * row_h)}" '
                         f'width="{_f(width)}" height="{_f(row_h)}"/>')
    parts.append(_time_axis(t0, t1, x0, chart_w, top - 4, top + row_h * len(shown)))
    for i, name in enumerate(shown):
        state = hosts.get(name) or {}
        y = top + i * row_h
        yb = y + (row_h - bar_h) / 2
        label = _clip(name, 30)
        parts.append(f'<text x="{_f(label_w - 6)}" y="{_f(y + row_h - 3)}" text-anchor="end">'
                     f'<title>{_e(name)}</title>{_e(label)}</text>')
        last_end: Optional[float] = None
        for step, rec, start, end in _steps(state):
            ok = rec.get("ok") is not False
            if step == "restore":
                cls = "s-restore" if ok else "rfail"
            else:
                cls = f"s-{step}" if ok else "fail"
            x = x_of(start)
            w = max(1.5, (end - start) * scale)
            tip = (f"{name} \u00b7 {step} \u00b7 {'ok' if ok else 'FAILED'} \u00b7 "
                   f"{fmt_duration(end - start)} ({_clock(start)}\u2013{_clock(end)})")
            detail = summarize_detail(rec.get("detail"))
            if detail:
                tip += f"\n{detail}"
            parts.append(f'<rect class="bar {cls}" x="{_f(x)}" y="{_f(yb)}" width="{_f(w)}" '
                         f'height="{_f(bar_h)}"><title>{_e(tip)}</title></rect>')
            last_end = end if last_end is None else max(last_end, end)
        status = host_status(state)
        if live and status in ("running", "restoring") and now is not None and \
                last_end is not None and now > last_end:
            nxt = _next_step(state)
            tip = f"{name} \u00b7 {status}: {nxt or 'next step'} since {_clock(last_end)}"
            parts.append(f'<rect class="bar run" x="{_f(x_of(last_end))}" y="{_f(yb)}" '
                         f'width="{_f(max(1.5, (now - last_end) * scale))}" '
                         f'height="{_f(bar_h)}"><title>{_e(tip)}</title></rect>')
        blabel, bcls = HOST_STATUS.get(status, (status.replace("_", " "), "none"))
        bx = label_w + chart_w + 8
        parts.append(f'<rect class="m-{bcls}" x="{_f(bx)}" y="{_f(yb - 0.5)}" width="86" '
                     f'height="{_f(bar_h + 1)}" rx="4"/><text class="bt" x="{_f(bx + 43)}" '
                     f'y="{_f(y + row_h - 3.5)}" text-anchor="middle">{_e(blabel)}</text>')
    bottom = top + row_h * len(shown)
    lanes = [-1e9, -1e9]  # right end of the last label in each lane (y 12 and y 26)
    for when, cls, label in sorted(marks):
        x = x_of(when)
        text = _clip(label, 40)
        est = 6.2 * len(text) + 6
        right_side = x + est > width
        left = x - est if right_side else x
        lane = 0 if lanes[0] < left else 1
        lanes[lane] = x if right_side else x + est
        anchor = ' text-anchor="end"' if right_side else ""
        tx = x - 3 if right_side else x + 3
        parts.append(f'<line class="mk mk-{cls}" x1="{_f(x)}" y1="{_f(4 + 14 * lane)}" '
                     f'x2="{_f(x)}" y2="{_f(bottom)}"><title>{_e(label)} at '
                     f'{_e(fmt_time(when))}</title></line>')
        parts.append(f'<text x="{_f(tx)}" y="{12 + 14 * lane}"{anchor} class="m-{cls}">'
                     f'{_e(text)}</text>')
    parts.append(f'<text x="{_f(label_w)}" y="{_f(bottom + 14)}" class="muted">times UTC; '
                 f'{_e(fmt_time(t0))} + {_e(fmt_duration(t1 - t0))}</text>')
    if hidden:
        counts: Dict[str, int] = {}
        for name in hidden:
            status = host_status(hosts.get(name) or {})
            counts[status] = counts.get(status, 0) + 1
        what = ", ".join(f"{HOST_STATUS.get(s, (s, ''))[0]} {n}" for s, n in
                         sorted(counts.items(), key=lambda kv: _STATUS_RANK.get(kv[0], 99)))
        parts.append(f'<text x="{_f(label_w)}" y="{_f(bottom + 28)}">+{len(hidden)} more '
                     f'hosts not drawn ({_e(what)}); every host is in the table below</text>')
    parts.append("</svg>")
    return "".join(parts)


def _next_step(state: Dict[str, Any]) -> Optional[str]:
    if host_status(state) == "restoring":
        return "restore"
    step = state.get("step")
    if step in STEPS and STEPS.index(step) + 1 < len(STEPS):
        return STEPS[STEPS.index(step) + 1]
    return None if step else STEPS[0]


def _legend() -> str:
    items = [f'<span><i style="background:{color}"></i>{_e(step)}</span>'
             for step, color in STEP_LEGEND.items()]
    items.append('<span><i style="background:#d32f2f"></i>failed step</span>')
    items.append('<span><i style="background:#dfe7f3;border:1px dashed #1f6feb"></i>'
                 'in progress</span>')
    return '<div class="legend">' + "".join(items) + "</div>"


# ---------------------------------------------------------------------------- verdict plot
def _log_ticks(lo: float, hi: float) -> List[float]:
    """Tick positions (log10 of a ratio) on a 1-2-5 grid between lo and hi."""
    ticks = []
    mantissas = (1, 1.5, 2, 3, 5, 7) if hi - lo < 1.2 else (1, 2, 5)
    for exp in range(int(math.floor(lo)) - 1, int(math.ceil(hi)) + 1):
        for m in mantissas:
            v = exp + math.log10(m)
            if lo - 1e-9 <= v <= hi + 1e-9:
                ticks.append(v)
    if len(ticks) > 11:
        ticks = [t for t in ticks if abs(t - round(t)) < 1e-9]
    return ticks


def _ratio_label(log10v: float) -> str:
    v = 10 ** log10v
    if v >= 1:
        return f"{v:.3g}\u00d7" if v < 10 else f"{v:.0f}\u00d7"
    return f"{v:.2g}\u00d7"


def render_verdict_plot(verdict: Dict[str, Any]) -> str:
    """Strip plot of the per-host drop-rate change exp(e) (post/pre), canary vs control, on a
    log axis, with the group medians, the weighted ratio (canary / control) and its CI."""
    hosts = [h for h in verdict.get("hosts") or [] if isinstance(h, dict)]
    points = [(h, float(h["e"])) for h in hosts if _num(h.get("e")) is not None]
    test = verdict.get("test") if isinstance(verdict.get("test"), dict) else None
    if not points and not test:
        return ""
    ln10 = math.log(10)
    values = [e / ln10 for _h, e in points] + [0.0]
    ratio = _num(test.get("ratio")) if test else None
    ci = list(test.get("ci_ratio") or [None, None]) if test else [None, None]
    ci = (ci + [None, None])[:2]
    ci_logs = [math.log10(v) if _num(v) and v > 0 else None for v in ci]
    if ratio and ratio > 0:
        values.append(math.log10(ratio))
    values += [v for v in ci_logs if v is not None]
    policy = verdict.get("policy") if isinstance(verdict.get("policy"), dict) else {}
    threshold = _num(policy.get("min_regression_ratio"))
    if threshold and threshold > 0:
        values.append(math.log10(threshold))
    lo = max(-3.0, min(values) - 0.08)
    hi = min(3.0, max(values) + 0.08)
    if hi - lo < 0.5:
        mid = (hi + lo) / 2
        lo, hi = mid - 0.25, mid + 0.25

    label_w, plot_w, right = 150.0, 700.0, 20.0
    band = 46.0
    top = 22.0
    rows = ["canary", "control", "hl"]
    height = top + band * len(rows) + 28
    width = label_w + plot_w + right

    def x_of(v: float) -> float:
        v = min(max(v, lo), hi)
        return label_w + (v - lo) / (hi - lo) * plot_w

    parts = [_svg_open(width, height, "per-host drop-rate change, canary vs control")]
    bottom = top + band * len(rows)
    for v in _log_ticks(lo, hi):
        x = x_of(v)
        parts.append(f'<line class="grid" x1="{_f(x)}" y1="{_f(top)}" x2="{_f(x)}" '
                     f'y2="{_f(bottom)}"/><text x="{_f(x)}" y="{_f(bottom + 14)}" '
                     f'text-anchor="middle">{_e(_ratio_label(v))}</text>')
    parts.append(f'<text x="{_f(label_w + plot_w / 2)}" y="{_f(bottom + 27)}" '
                 'text-anchor="middle" class="muted">drop rate after / before, per host '
                 '(log scale); bottom row: canary relative to control</text>')
    for i in range(1, len(rows)):
        y = top + band * i
        parts.append(f'<line class="ax" x1="{_f(label_w)}" y1="{_f(y)}" '
                     f'x2="{_f(label_w + plot_w)}" y2="{_f(y)}"/>')
    x1 = x_of(0.0)
    parts.append(f'<line class="one" x1="{_f(x1)}" y1="{_f(top - 4)}" x2="{_f(x1)}" '
                 f'y2="{_f(bottom)}"/><text x="{_f(x1)}" y="{_f(top - 8)}" '
                 'text-anchor="middle" class="muted">no change</text>')
    if threshold and threshold > 0 and lo <= math.log10(threshold) <= hi:
        xt = x_of(math.log10(threshold))
        yh = top + band * 2
        parts.append(f'<line class="thr" x1="{_f(xt)}" y1="{_f(yh)}" x2="{_f(xt)}" '
                     f'y2="{_f(bottom)}"><title>policy: a significant rise of at least '
                     f'{_e(_ratio(threshold))} fails the batch</title></line>')
    breaches = {b.get("host") for b in (verdict.get("ceiling") or {}).get("breaches") or []
                if isinstance(b, dict)}
    for row, group in enumerate(("canary", "control")):
        yc = top + band * row + band / 2
        members = [(h, e) for h, e in points if h.get("group") == group]
        listed = sum(1 for h in hosts if h.get("group") == group)
        parts.append(f'<text x="{_f(label_w - 8)}" y="{_f(yc - 2)}" text-anchor="end" '
                     f'font-weight="600">{group}</text><text x="{_f(label_w - 8)}" '
                     f'y="{_f(yc + 11)}" text-anchor="end" class="muted">{len(members)} of '
                     f'{listed} hosts used</text>')
        for j, (h, e) in enumerate(members):
            jitter = ((j * 37) % 13 - 6) / 6.0 * (band / 2 - 8)
            extra = ' breach' if h.get("host") in breaches else ''
            tip = (f"{h.get('host')} ({group}): drop rate x{math.exp(e):.3g} "
                   f"(e = {e:+.3f}); drops per million packets {_per_million(h.get('rate_pre'))}"
                   f" \u2192 {_per_million(h.get('rate_post'))}")
            if extra:
                tip += "; above the drop-rate ceiling"
            parts.append(f'<circle class="{group}{extra}" cx="{_f(x_of(e / ln10))}" '
                         f'cy="{_f(yc + jitter)}" r="3.5"><title>{_e(tip)}</title></circle>')
        if members:
            es = sorted(e for _h, e in members)
            n = len(es)
            med = es[n // 2] if n % 2 else (es[n // 2 - 1] + es[n // 2]) / 2
            xm = x_of(med / ln10)
            parts.append(f'<line class="med" x1="{_f(xm)}" y1="{_f(yc - band / 2 + 4)}" '
                         f'x2="{_f(xm)}" y2="{_f(yc + band / 2 - 4)}"><title>{group} median: '
                         f'{_e(_ratio(math.exp(med)))}</title></line>')
    yc = top + band * 2 + band / 2
    parts.append(f'<text x="{_f(label_w - 8)}" y="{_f(yc - 2)}" text-anchor="end" '
                 'font-weight="600">canary \u00f7 control</text>'
                 f'<text x="{_f(label_w - 8)}" y="{_f(yc + 11)}" text-anchor="end" '
                 'class="muted">weighted ratio, CI</text>')
    if ratio and ratio > 0:
        level = _num(test.get("ci_level")) if test else None
        xl = x_of(ci_logs[0]) if ci_logs[0] is not None else label_w
        xh = x_of(ci_logs[1]) if ci_logs[1] is not None else label_w + plot_w
        cap = 6
        tip = (f"canary / control ratio {_ratio(ratio)}, "
               f"{(level or 0.95):.0%} CI {_ratio(ci[0])} to {_ratio(ci[1])}, "
               f"p = {_p(test.get('p_value') if test else None)}")
        parts.append(f'<g><title>{_e(tip)}</title>'
                     f'<line class="ci" x1="{_f(xl)}" y1="{_f(yc)}" x2="{_f(xh)}" '
                     f'y2="{_f(yc)}"/>'
                     f'<line class="ci" x1="{_f(xl)}" y1="{_f(yc - cap)}" x2="{_f(xl)}" '
                     f'y2="{_f(yc + cap)}"/>'
                     f'<line class="ci" x1="{_f(xh)}" y1="{_f(yc - cap)}" x2="{_f(xh)}" '
                     f'y2="{_f(yc + cap)}"/>'
                     f'<rect class="hl" x="{_f(x_of(math.log10(ratio)) - 5)}" '
                     f'y="{_f(yc - 5)}" width="10" height="10" '
                     f'transform="rotate(45 {_f(x_of(math.log10(ratio)))} {_f(yc)})"/></g>')
        parts.append(f'<text x="{_f(min(x_of(math.log10(ratio)), label_w + plot_w - 60))}" '
                     f'y="{_f(yc - 10)}" text-anchor="middle">{_e(_ratio(ratio))}</text>')
    else:
        parts.append(f'<text x="{_f(label_w + 6)}" y="{_f(yc + 4)}" class="muted">no '
                     'comparison (no usable canary or control host)</text>')
    parts.append("</svg>")
    return "".join(parts)


# ---------------------------------------------------------------------------- sections
def _kv_table(rows: Sequence[Tuple[str, str]]) -> str:
    body = "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


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
        return [(prefix, f'<span class="mono">{_e(text)}</span>')]
    return [(prefix, f'<span class="mono">{_e(value)}</span>')]


def _approval_word(response: Any) -> str:
    if response is True:
        return "approved"
    if response is False:
        return "rejected"
    return str(response) if response not in (None, "") else "pending"


def _approval_class(response: Any) -> str:
    if response is True:
        return "ok"
    if response is False:
        return "bad"
    text = str(response or "").lower()
    if any(w in text for w in ("reject", "deny", "denied", "abort", "stop", "roll")) or \
            text in ("no", "false"):
        return "bad"
    if any(w in text for w in ("approv", "accept", "continue", "proceed")) or \
            text in ("yes", "true", "ok"):
        return "ok"
    return "none"


def _compliant_count(plan: Mapping[str, Any]) -> int:
    """How many hosts the plan skipped as compliant; a stored plan (PlanView) knows without
    reading their names."""
    count = getattr(plan, "compliant_count", None)
    return int(count()) if callable(count) else len(plan.get("skipped_compliant") or [])


def _header(plan: Mapping[str, Any], meta: Dict[str, Any], halt: Optional[Dict[str, Any]],
            hosts: Dict[str, Dict[str, Any]], status: str, generated: float) -> str:
    profile = plan.get("profile") or {}
    targets = [h for b in plan.get("batches") or [] for h in b.get("hosts") or []]
    counts = count_hosts(targets, hosts)
    started = meta.get("started") or meta.get("started_at") or plan.get("created")
    finished = meta.get("finished") or meta.get("finished_at") or meta.get("ended")
    by = meta.get("started_by") or plan.get("started_by") or "-"
    cls = ROLLOUT_STATUS.get(status, "none")
    description = profile.get("description")
    dash = " \u2014 " + _e(description) if description else ""
    out = [f'<section class="card"><h1>Rollout {_e(plan.get("rollout_id"))} '
           f'{_badge(status, cls, big=True)}</h1>'
           f'<p class="sub">profile <b>{_e(profile.get("name"))}</b>{dash}</p>']
    if halt:
        out.append(f'<div class="halt"><b>Halted:</b> {_e(_scrub_text(str(halt.get("reason"))))}'
                   f' <span class="muted">(by {_e(halt.get("by") or "?")}, '
                   f'{_e(fmt_time(halt.get("at")))})</span></div>')
    duration = "-"
    if _num(started) is not None:
        end = _num(finished) if _num(finished) is not None else (
            generated if status == "running" else None)
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
                   f'<div class="l">{_e(label)}{_e(note)}</div></div>')
    out.append(f'<div class="tile"><div class="n">{len(targets)}</div><div class="l">target '
               f'hosts in {_plural(len(plan.get("batches") or []), "batch", "batches")}</div></div>'
               "</div>")
    rows = [("status", _badge(status, cls)),
            ("started", _e(fmt_time(started))),
            ("finished", _e(fmt_time(finished)) if finished else
             ('<span class="muted">not yet</span>' if status == "running" else "-")),
            ("duration", _e(duration)),
            ("started by", _e(by)),
            ("current batch", _e(meta.get("batch", meta.get("current_batch", "-")))),
            ("inventory", f'<span class="mono">{_e(plan.get("inventory") or "-")}</span> '
                          f'limit <span class="mono">{_e(plan.get("limit") or "-")}</span>'),
            ("control group", f'{len(plan.get("control") or [])} hosts'
                              + (f', {len(plan.get("control_reserved_for_last_batch") or [])}'
                                 " of them changed in the last batch"
                                 if plan.get("control_reserved_for_last_batch") else "")),
            ("already compliant", f'{_compliant_count(plan)} hosts skipped'),
            ("report generated", _e(fmt_time(generated)))]
    for extra in ("error", "message", "reason"):
        if meta.get(extra):
            rows.append((extra, f'<span class="err">{_e(_compact(redact(meta[extra]), 400))}'
                                "</span>"))
    settings = [("BIOS", _settings_rows("", profile.get("bios") or {})),
                ("BIOS (raw attributes)", _settings_rows("", profile.get("bios_extra") or {})),
                ("kernel", _settings_rows("", profile.get("kernel") or {}))]
    out.append('<div class="cols"><div>' + _kv_table(rows) + "</div>")
    for title, srows in settings:
        if srows or title != "BIOS (raw attributes)":
            body = _kv_table(srows) if srows else '<p class="muted">none</p>'
            out.append(f"<div><h3>{_e(title)}</h3>{body}</div>")
    out.append("</div>")
    if status == "running":
        out.append('<p class="muted small">The rollout is still running: this is a snapshot; '
                   "render the report again for fresh data.</p>")
    out.append("</section>")
    return "".join(out)


def _status_bar(names: Sequence[str], hosts: Dict[str, Dict[str, Any]], width: float = 220,
                ) -> str:
    counts: Dict[str, int] = {}
    for name in names:
        status = host_status(hosts.get(name) or {})
        counts[status] = counts.get(status, 0) + 1
    total = max(1, len(names))
    parts = [_svg_open(width, 12, "host statuses")]
    x = 0.0
    for status in sorted(counts, key=lambda s: _STATUS_RANK.get(s, 99)):
        w = counts[status] / total * width
        label, cls = HOST_STATUS.get(status, (status, "none"))
        parts.append(f'<rect class="m-{cls}" x="{_f(x)}" y="0" width="{_f(w)}" height="12">'
                     f'<title>{_e(label)}: {counts[status]}</title></rect>')
        x += w
    parts.append("</svg>")
    return "".join(parts)


def _verdict_badge(verdict: Any) -> str:
    if not isinstance(verdict, dict) or not verdict.get("verdict"):
        return '<span class="muted">not judged</span>'
    name = str(verdict["verdict"])
    return _badge(name, VERDICT_CLASS.get(name, "none"))


def _approval_text(approval: Any) -> str:
    if not isinstance(approval, dict) or not approval:
        return '<span class="muted">none recorded</span>'
    response = approval.get("response")
    text = _approval_word(response)
    return (f'{_badge(text, _approval_class(response))} by {_e(approval.get("by") or "?")}'
            f' <span class="muted">{_e(fmt_time(approval.get("at")))}</span>')


def _overview(plan: Mapping[str, Any], hosts: Dict[str, Dict[str, Any]],
              batches: List[Dict[str, Any]]) -> str:
    head = ("<tr><th>batch</th><th class=num>hosts</th><th>sites</th><th>hosts by status</th>"
            "<th>started</th><th class=num>duration</th><th>verdict</th><th>approval</th></tr>")
    rows = []
    for info, state in zip(plan.get("batches") or [], batches):
        names = list(info.get("hosts") or [])
        spans = [_span(hosts.get(n) or {}) for n in names]
        starts = [s for s, _e2 in spans if s is not None]
        ends = [e for _s, e in spans if e is not None]
        index = info.get("index")
        label = f'<a href="#batch-{_e(index)}">{_e(index)}</a>' + (
            " <span class=muted>canary</span>" if info.get("canary") else "")
        rows.append(f"<tr><td>{label}</td><td class=num>{len(names)}</td>"
                    f"<td>{_e(', '.join(info.get('sites') or []))}</td>"
                    f"<td>{_status_bar(names, hosts)}</td>"
                    f"<td>{_e(fmt_time(min(starts)) if starts else '-')}</td>"
                    f"<td class=num>{_e(fmt_duration(max(ends) - min(starts)) if starts else '-')}"
                    f"</td><td>{_verdict_badge(state.get('verdict'))}</td>"
                    f"<td>{_approval_text(state.get('approval'))}</td></tr>")
    return (f'<section class="card"><h2>Batches</h2><div class="scroll"><table>{head}'
            f'{"".join(rows)}</table></div></section>')


def _verdict_section(verdict: Any) -> str:
    if not isinstance(verdict, dict) or not verdict.get("verdict"):
        return '<h3>Canary verdict</h3><p class="muted">Not judged (yet).</p>'
    name = str(verdict["verdict"])
    cls = VERDICT_CLASS.get(name, "none")
    test = verdict.get("test") if isinstance(verdict.get("test"), dict) else None
    out = [f'<h3>Canary verdict {_badge(name, cls, big=True)} '
           f'<span class="muted small">reason: {_e(verdict.get("reason") or "-")}</span></h3>']
    if test:
        level = _num(test.get("ci_level")) or 0.95
        ci = list(test.get("ci_ratio") or [None, None]) + [None, None]
        out.append(
            '<div class="tiles">'
            f'<div class="tile t-{cls}"><div class="n">{_e(_ratio(test.get("ratio")))}</div>'
            '<div class="l">canary vs control drop-rate ratio (weighted)</div></div>'
            f'<div class="tile"><div class="n">{_e(_ratio(ci[0]))} \u2013 {_e(_ratio(ci[1]))}'
            f'</div><div class="l">{level:.0%} confidence interval</div></div>'
            f'<div class="tile"><div class="n">{_e(_p(test.get("p_value")))}</div>'
            '<div class="l">one-sided permutation p</div></div>'
            f'<div class="tile"><div class="n">{_e(test.get("n_canary", "-"))} / '
            f'{_e(test.get("n_control", "-"))}</div><div class="l">canary / control hosts '
            "used</div></div></div>")
    explanation = _scrub_text(str(verdict.get("explanation") or ""))
    out.append(f'<p class="explain v-{cls}">{_e(explanation)}</p>')
    plot = render_verdict_plot(verdict)
    if plot:
        out.append(f'<div class="scroll">{plot}</div>')
        out.append('<div class="legend"><span><i style="background:#e07b00"></i>canary host'
                   '</span><span><i style="background:#4f73a8"></i>control host</span>'
                   '<span><i style="background:#1d2330;height:2px"></i>group median / '
                   'weighted ratio with CI</span><span><i style="background:none;'
                   'border-top:2px dashed #c62828;height:0"></i>fail threshold</span></div>')
    summary = verdict.get("summary") if isinstance(verdict.get("summary"), dict) else {}
    if summary:
        rows = []
        for group in ("canary", "control"):
            s = summary.get(group) or {}
            rows.append(f"<tr><td>{group}</td><td class=num>{_e(s.get('listed', '-'))}</td>"
                        f"<td class=num>{_e(s.get('usable', '-'))}</td>"
                        f"<td class=num>{_e(_per_million(s.get('median_rate_pre')))}</td>"
                        f"<td class=num>{_e(_per_million(s.get('median_rate_post')))}</td></tr>")
        out.append("<table><tr><th>group</th><th class=num>listed</th><th class=num>usable</th>"
                   "<th class=num>median drops / M packets before</th><th class=num>after</th>"
                   f"</tr>{''.join(rows)}</table>")
    guards = [g for g in verdict.get("guards") or [] if isinstance(g, dict)]
    if guards:
        bad = [g for g in guards if not g.get("ok")]
        items = "".join(
            f"<tr><td>{_badge('ok', 'ok') if g.get('ok') else _badge('failed', 'warn')}</td>"
            f"<td class=mono>{_e(g.get('name'))}</td><td>{_e(g.get('message'))}</td></tr>"
            for g in sorted(guards, key=lambda g: bool(g.get("ok"))))
        out.append(f"<details{' open' if bad else ''}><summary>guards: {len(guards) - len(bad)}"
                   f" of {len(guards)} ok</summary><table>{items}</table></details>")
    breaches = (verdict.get("ceiling") or {}).get("breaches") or []
    if breaches:
        items = ", ".join(f"{b.get('host')} ({_per_million(b.get('rate_post'))} drops / M)"
                          for b in breaches if isinstance(b, dict))
        out.append(f'<p class="err">Above the drop-rate ceiling: {_e(items)}</p>')
    excluded = [h for h in verdict.get("hosts") or [] if isinstance(h, dict)
                and not h.get("usable")]
    if excluded:
        shown = "; ".join(f"{h.get('host')} ({h.get('group')}: {h.get('reason') or '?'})"
                          for h in excluded[:20])
        more = f"; +{len(excluded) - 20} more" if len(excluded) > 20 else ""
        out.append(f'<p class="muted small">Not used by the test: {_e(shown)}{_e(more)}</p>')
    return "".join(out)


def _host_table(names: Sequence[str], hosts: Dict[str, Dict[str, Any]], open_: bool) -> str:
    rows = []
    for name in _row_order(names, hosts):
        state = hosts.get(name) or {}
        start, end = _span(state)
        failed = _failed_step(state)
        problem = ""
        err = state.get("error")
        if isinstance(err, dict) and err.get("message"):
            problem = f"{err.get('step', '?')}: {err['message']}"
        if state.get("restore_error"):
            problem += ("; " if problem else "") + f"restore: {state['restore_error']}"
        failed_cell = (f'<span class="err">{_e(failed)} failed</span>' if failed else "")
        took = fmt_duration(end - start) if start is not None and end is not None else "-"
        rows.append(f"<tr><td class=mono>{_e(name)}</td><td>"
                    f"{_status_badge(host_status(state))}</td>"
                    f"<td>{_e(state.get('step') or '-')}</td><td>{failed_cell}</td>"
                    f"<td>{_e(fmt_time(start))}</td>"
                    f"<td class=num>{_e(took)}</td>"
                    f'<td class="small">{_e(_clip(_scrub_text(problem), 300))}</td></tr>')
    head = ("<tr><th>host</th><th>status</th><th>last ok step</th><th>failed step</th>"
            "<th>started</th><th class=num>duration</th><th>error</th></tr>")
    return (f"<details{' open' if open_ else ''}><summary>hosts of this batch ({len(names)})"
            f'</summary><div class="scroll"><table>{head}{"".join(rows)}</table></div>'
            "</details>")


def _batch_section(info: Dict[str, Any], state: Dict[str, Any], hosts: Dict[str, Dict[str, Any]],
                   halt: Optional[Dict[str, Any]], now: float, live: bool) -> str:
    index = info.get("index")
    names = list(info.get("hosts") or [])
    counts = count_hosts(names, hosts)
    title = f"Batch {index}" + (" (canary)" if info.get("canary") else "")
    summary = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in counts.items()
                        if n and k != "restore_failed")
    out = [f'<section class="card" id="batch-{_e(index)}"><h2>{_e(title)} '
           f'{_verdict_badge(state.get("verdict"))}</h2>'
           f'<p class="sub">{_plural(len(names), "host")}; sites '
           f'{_e(", ".join(info.get("sites") or []))}'
           f"; {_e(summary or 'nothing yet')}</p>"]
    out.append(_kv_table([("approval", _approval_text(state.get("approval"))),
                          ("judged", _e(fmt_time(state.get("judged_at"))))]))
    approval = state.get("approval") if isinstance(state.get("approval"), dict) else {}
    for extra in ("comment", "reason", "note"):
        if approval.get(extra):
            out.append(f'<p class="small">approval {extra}: '
                       f'{_e(_clip(_scrub_text(str(approval[extra])), 500))}</p>')
    out.append(_verdict_section(state.get("verdict")))
    out.append("<h3>Timeline</h3>")
    timeline = render_timeline(names, hosts, state, halt, now, live, title=title)
    out.append(f'<div class="scroll">{timeline}</div>')
    out.append(_legend())
    problems = sum(counts[k] for k in ("failed", "left_drained"))
    out.append(_host_table(names, hosts, open_=len(names) <= 20 or problems > 0))
    out.append("</section>")
    return "".join(out)


def _audit_section(audit: Audit) -> str:
    entries = sorted((e for e in audit.entries() if isinstance(e, dict)),
                     key=lambda e: _num(e.get("time")) or 0.0)
    by_action: Dict[str, int] = {}
    by_setting: Dict[str, int] = {}
    for e in entries:
        action = str(e.get("action") or "-")
        by_action[action] = by_action.get(action, 0) + 1
        setting = str(e.get("setting") or "-")
        by_setting[setting] = by_setting.get(setting, 0) + 1
    hosts = {str(e.get("host")) for e in entries}
    out = ['<section class="card" id="audit"><h2>Audit trail</h2>'
           f'<p class="sub">{len(entries)} entries on {len(hosts)} hosts; file '
           f'<span class="mono">{_e(audit.path)}</span></p>']
    if not entries:
        out.append('<p class="muted">No audit entries.</p></section>')
        return "".join(out)
    action_rows = "".join(f"<tr><td>{_e(a)}</td><td class=num>{n}</td></tr>"
                          for a, n in sorted(by_action.items(), key=lambda kv: -kv[1]))
    top = sorted(by_setting.items(), key=lambda kv: (-kv[1], kv[0]))
    setting_rows = "".join(f"<tr><td class=mono>{_e(s)}</td><td class=num>{n}</td></tr>"
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
        secret = bool(_SECRET_KEY.search(setting))
        old = MASK if secret else _compact(redact(e.get("old")), 80)
        new = MASK if secret else _compact(redact(e.get("new")), 80)
        action = str(e.get("action") or "")
        rows.append(f"<tr><td class=nw>{_e(fmt_time(e.get('time')))}</td><td class=mono>"
                    f"{_e(e.get('host'))}</td><td class=mono>{_e(setting)}</td>"
                    f"<td class=mono>{_e(old)} \u2192 {_e(new)}</td>"
                    f"<td>{_badge(action, 'rb' if action == 'restore' else 'none')}</td>"
                    f"<td>{_e(e.get('by') or '-')}</td><td>{_e(e.get('approved_by') or '-')}"
                    f"</td><td class=mono>{_e(e.get('execution') or '-')}</td></tr>")
    head = ("<tr><th>time</th><th>host</th><th>setting</th><th>old \u2192 new</th>"
            "<th>action</th><th>by</th><th>approved by</th><th>execution</th></tr>")
    if note:
        out.append(f'<p class="muted">{_e(note)}</p>')
    out.append(f'<div class="scroll"><table>{head}{"".join(rows)}</table></div></section>')
    return "".join(out)


# ---------------------------------------------------------------------------- entry points
def render_report(state: RolloutState, audit: Audit, now: Optional[float] = None) -> str:
    """The report of one rollout as a self-contained HTML document."""
    generated = time.time() if now is None else now
    plan = state.plan_view()  # what the report shows: batches' hosts, not host infos
    meta = state.meta()
    halt = state.halted()
    hosts = state.hosts()
    status = rollout_status(meta, hosts, halt)
    live = status == "running"
    batch_infos = list(plan.get("batches") or [])
    batches = []
    for i, info in enumerate(batch_infos):
        index = info.get("index", i)
        batches.append(state.batch(int(index)) if isinstance(index, int) else {})
    title = f"Rollout {plan.get('rollout_id') or state.id} \u2014 {status}"
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{_e(title)}</title><style>{CSS}</style></head><body><main>",
             _header(plan, meta, halt, hosts, status, generated),
             _overview(plan, hosts, batches)]
    for info, batch in zip(batch_infos, batches):
        parts.append(_batch_section(info, batch, hosts, halt, generated, live))
    parts.append(_audit_section(audit))
    parts.append(f'<p class="muted small">fleet_rollout report, generated '
                 f"{_e(fmt_time(generated))}. All times UTC.</p></main></body></html>")
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
