"""The batches: the overview table and, per batch, its section (approval, canary verdict
with its plot, timeline, host table)."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from fleet_rollout.report.format import (
    badge,
    clip,
    esc,
    fmt_duration,
    fmt_p,
    fmt_ratio,
    fmt_time,
    kv_table,
    num,
    per_million,
    plural,
    px,
    scrub_text,
    svg_open,
)
from fleet_rollout.report.status import (
    approval_class,
    approval_word,
    count_hosts,
    failed_step,
    host_status,
    row_order,
    step_span,
)
from fleet_rollout.report.style import HOST_STATUS, STATUS_RANK, VERDICT_CLASS
from fleet_rollout.report.timeline import render_timeline, timeline_legend
from fleet_rollout.report.verdict_plot import render_verdict_plot
from fleet_rollout.states import batch_label


def _status_bar(names: Sequence[str], hosts: Dict[str, Dict[str, Any]], width: float = 220,
                ) -> str:
    counts: Dict[str, int] = {}
    for name in names:
        status = host_status(hosts.get(name) or {})
        counts[status] = counts.get(status, 0) + 1
    total = max(1, len(names))
    parts = [svg_open(width, 12, "host statuses")]
    x = 0.0
    for status in sorted(counts, key=lambda s: STATUS_RANK.get(s, 99)):
        w = counts[status] / total * width
        label, cls = HOST_STATUS.get(status, (status, "none"))
        parts.append(f'<rect class="m-{cls}" x="{px(x)}" y="0" width="{px(w)}" height="12">'
                     f'<title>{esc(label)}: {counts[status]}</title></rect>')
        x += w
    parts.append("</svg>")
    return "".join(parts)


def _verdict_badge(verdict: Any) -> str:
    if not isinstance(verdict, dict) or not verdict.get("verdict"):
        return '<span class="muted">not judged</span>'
    name = str(verdict["verdict"])
    return badge(name, VERDICT_CLASS.get(name, "none"))


def _approval_text(approval: Any) -> str:
    if not isinstance(approval, dict) or not approval:
        return '<span class="muted">none recorded</span>'
    response = approval.get("response")
    text = approval_word(response)
    return (f'{badge(text, approval_class(response))} by {esc(approval.get("by") or "?")}'
            f' <span class="muted">{esc(fmt_time(approval.get("at")))}</span>')


def overview_section(plan: Mapping[str, Any], hosts: Dict[str, Dict[str, Any]],
              batches: List[Dict[str, Any]]) -> str:
    head = ("<tr><th>batch</th><th class=num>hosts</th><th>sites</th><th>hosts by status</th>"
            "<th>started</th><th class=num>duration</th><th>verdict</th><th>approval</th></tr>")
    rows = []
    for info, state in zip(plan.get("batches") or [], batches):
        names = list(info.get("hosts") or [])
        spans = [step_span(hosts.get(n) or {}) for n in names]
        starts = [s for s, _e2 in spans if s is not None]
        ends = [e for _s, e in spans if e is not None]
        index = info.get("index")
        shown = "-" if index is None else batch_label(index)  # batch 1 is index 0, as in chat
        label = f'<a href="#batch-{esc(index)}">{esc(shown)}</a>' + (
            " <span class=muted>canary</span>" if info.get("canary") else "")
        rows.append(f"<tr><td>{label}</td><td class=num>{len(names)}</td>"
                    f"<td>{esc(', '.join(info.get('sites') or []))}</td>"
                    f"<td>{_status_bar(names, hosts)}</td>"
                    f"<td>{esc(fmt_time(min(starts)) if starts else '-')}</td>"
                    f"<td class=num>{esc(fmt_duration(max(ends) - min(starts)) if starts else '-')}"
                    f"</td><td>{_verdict_badge(state.get('verdict'))}</td>"
                    f"<td>{_approval_text(state.get('approval'))}</td></tr>")
    return (f'<section class="card"><h2>Batches</h2><div class="scroll"><table>{head}'
            f'{"".join(rows)}</table></div></section>')


def _status_badge(status: str) -> str:
    label, cls = HOST_STATUS.get(status, (status.replace("_", " "), "none"))
    return badge(label, cls)


def _verdict_section(verdict: Any) -> str:
    if not isinstance(verdict, dict) or not verdict.get("verdict"):
        return '<h3>Canary verdict</h3><p class="muted">Not judged (yet).</p>'
    name = str(verdict["verdict"])
    cls = VERDICT_CLASS.get(name, "none")
    test = verdict.get("test") if isinstance(verdict.get("test"), dict) else None
    out = [f'<h3>Canary verdict {badge(name, cls, big=True)} '
           f'<span class="muted small">reason: {esc(verdict.get("reason") or "-")}</span></h3>']
    if test:
        level = num(test.get("ci_level")) or 0.95
        ci = list(test.get("ci_ratio") or [None, None]) + [None, None]
        out.append(
            '<div class="tiles">'
            f'<div class="tile t-{cls}"><div class="n">{esc(fmt_ratio(test.get("ratio")))}</div>'
            '<div class="l">canary vs control drop-rate ratio (weighted)</div></div>'
            f'<div class="tile"><div class="n">{esc(fmt_ratio(ci[0]))} \u2013 '
            f'{esc(fmt_ratio(ci[1]))}</div><div class="l">{level:.0%} confidence interval'
            '</div></div>'
            f'<div class="tile"><div class="n">{esc(fmt_p(test.get("p_value")))}</div>'
            '<div class="l">one-sided permutation p</div></div>'
            f'<div class="tile"><div class="n">{esc(test.get("n_canary", "-"))} / '
            f'{esc(test.get("n_control", "-"))}</div><div class="l">canary / control hosts '
            "used</div></div></div>")
    explanation = scrub_text(str(verdict.get("explanation") or ""))
    out.append(f'<p class="explain v-{cls}">{esc(explanation)}</p>')
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
            rows.append(f"<tr><td>{group}</td><td class=num>{esc(s.get('listed', '-'))}</td>"
                        f"<td class=num>{esc(s.get('usable', '-'))}</td>"
                        f"<td class=num>{esc(per_million(s.get('median_rate_pre')))}</td>"
                        f"<td class=num>{esc(per_million(s.get('median_rate_post')))}</td></tr>")
        out.append("<table><tr><th>group</th><th class=num>listed</th><th class=num>usable</th>"
                   "<th class=num>median drops / M packets before</th><th class=num>after</th>"
                   f"</tr>{''.join(rows)}</table>")
    guards = [g for g in verdict.get("guards") or [] if isinstance(g, dict)]
    if guards:
        bad = [g for g in guards if not g.get("ok")]
        items = "".join(
            f"<tr><td>{badge('ok', 'ok') if g.get('ok') else badge('failed', 'warn')}</td>"
            f"<td class=mono>{esc(g.get('name'))}</td><td>{esc(g.get('message'))}</td></tr>"
            for g in sorted(guards, key=lambda g: bool(g.get("ok"))))
        out.append(f"<details{' open' if bad else ''}><summary>guards: {len(guards) - len(bad)}"
                   f" of {len(guards)} ok</summary><table>{items}</table></details>")
    breaches = (verdict.get("ceiling") or {}).get("breaches") or []
    if breaches:
        items = ", ".join(f"{b.get('host')} ({per_million(b.get('rate_post'))} drops / M)"
                          for b in breaches if isinstance(b, dict))
        out.append(f'<p class="err">Above the drop-rate ceiling: {esc(items)}</p>')
    excluded = [h for h in verdict.get("hosts") or [] if isinstance(h, dict)
                and not h.get("usable")]
    if excluded:
        shown = "; ".join(f"{h.get('host')} ({h.get('group')}: {h.get('reason') or '?'})"
                          for h in excluded[:20])
        more = f"; +{len(excluded) - 20} more" if len(excluded) > 20 else ""
        out.append(f'<p class="muted small">Not used by the test: {esc(shown)}{esc(more)}</p>')
    return "".join(out)


def _host_table(names: Sequence[str], hosts: Dict[str, Dict[str, Any]], open_: bool) -> str:
    rows = []
    for name in row_order(names, hosts):
        state = hosts.get(name) or {}
        start, end = step_span(state)
        failed = failed_step(state)
        problem = ""
        err = state.get("error")
        if isinstance(err, dict) and err.get("message"):
            problem = f"{err.get('step', '?')}: {err['message']}"
        if state.get("restore_error"):
            problem += ("; " if problem else "") + f"restore: {state['restore_error']}"
        failed_cell = (f'<span class="err">{esc(failed)} failed</span>' if failed else "")
        took = fmt_duration(end - start) if start is not None and end is not None else "-"
        rows.append(f"<tr><td class=mono>{esc(name)}</td><td>"
                    f"{_status_badge(host_status(state))}</td>"
                    f"<td>{esc(state.get('step') or '-')}</td><td>{failed_cell}</td>"
                    f"<td>{esc(fmt_time(start))}</td>"
                    f"<td class=num>{esc(took)}</td>"
                    f'<td class="small">{esc(clip(scrub_text(problem), 300))}</td></tr>')
    head = ("<tr><th>host</th><th>status</th><th>last ok step</th><th>failed step</th>"
            "<th>started</th><th class=num>duration</th><th>error</th></tr>")
    return (f"<details{' open' if open_ else ''}><summary>hosts of this batch ({len(names)})"
            f'</summary><div class="scroll"><table>{head}{"".join(rows)}</table></div>'
            "</details>")


def batch_section(info: Dict[str, Any], state: Dict[str, Any], hosts: Dict[str, Dict[str, Any]],
                   halt: Optional[Dict[str, Any]], now: float, live: bool) -> str:
    index = info.get("index")
    names = list(info.get("hosts") or [])
    counts = count_hosts(names, hosts)
    shown = "-" if index is None else batch_label(index)  # batch 1 is index 0, as in chat
    title = f"Batch {shown}" + (" (canary)" if info.get("canary") else "")
    summary = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in counts.items()
                        if n and k != "restore_failed")
    out = [f'<section class="card" id="batch-{esc(index)}"><h2>{esc(title)} '
           f'{_verdict_badge(state.get("verdict"))}</h2>'
           f'<p class="sub">{plural(len(names), "host")}; sites '
           f'{esc(", ".join(info.get("sites") or []))}'
           f"; {esc(summary or 'nothing yet')}</p>"]
    out.append(kv_table([("approval", _approval_text(state.get("approval"))),
                          ("judged", esc(fmt_time(state.get("judged_at"))))]))
    approval = state.get("approval") if isinstance(state.get("approval"), dict) else {}
    for extra in ("comment", "reason", "note"):
        if approval.get(extra):
            out.append(f'<p class="small">approval {extra}: '
                       f'{esc(clip(scrub_text(str(approval[extra])), 500))}</p>')
    out.append(_verdict_section(state.get("verdict")))
    out.append("<h3>Timeline</h3>")
    timeline = render_timeline(names, hosts, state, halt, now, live, title=title)
    out.append(f'<div class="scroll">{timeline}</div>')
    out.append(timeline_legend())
    problems = sum(counts[k] for k in ("failed", "left_drained"))
    out.append(_host_table(names, hosts, open_=len(names) <= 20 or problems > 0))
    out.append("</section>")
    return "".join(out)
