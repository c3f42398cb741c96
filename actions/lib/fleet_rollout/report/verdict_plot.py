"""The verdict plot: a strip plot (SVG) of the per-host drop-rate change of canary and
control hosts on a log axis, with the group medians and the weighted ratio with its CI."""
from __future__ import annotations

import math
from typing import Any, Dict, List

from fleet_rollout.report.format import esc, fmt_p, fmt_ratio, num, per_million, px, svg_open


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
    points = [(h, float(h["e"])) for h in hosts if num(h.get("e")) is not None]
    test = verdict.get("test") if isinstance(verdict.get("test"), dict) else None
    if not points and not test:
        return ""
    ln10 = math.log(10)
    values = [e / ln10 for _h, e in points] + [0.0]
    ratio = num(test.get("ratio")) if test else None
    ci = list(test.get("ci_ratio") or [None, None]) if test else [None, None]
    ci = (ci + [None, None])[:2]
    ci_logs = [math.log10(v) if num(v) and v > 0 else None for v in ci]
    if ratio and ratio > 0:
        values.append(math.log10(ratio))
    values += [v for v in ci_logs if v is not None]
    policy = verdict.get("policy") if isinstance(verdict.get("policy"), dict) else {}
    threshold = num(policy.get("min_regression_ratio"))
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

    parts = [svg_open(width, height, "per-host drop-rate change, canary vs control")]
    bottom = top + band * len(rows)
    for v in _log_ticks(lo, hi):
        x = x_of(v)
        parts.append(f'<line class="grid" x1="{px(x)}" y1="{px(top)}" x2="{px(x)}" '
                     f'y2="{px(bottom)}"/><text x="{px(x)}" y="{px(bottom + 14)}" '
                     f'text-anchor="middle">{esc(_ratio_label(v))}</text>')
    parts.append(f'<text x="{px(label_w + plot_w / 2)}" y="{px(bottom + 27)}" '
                 'text-anchor="middle" class="muted">drop rate after / before, per host '
                 '(log scale); bottom row: canary relative to control</text>')
    for i in range(1, len(rows)):
        y = top + band * i
        parts.append(f'<line class="ax" x1="{px(label_w)}" y1="{px(y)}" '
                     f'x2="{px(label_w + plot_w)}" y2="{px(y)}"/>')
    x1 = x_of(0.0)
    parts.append(f'<line class="one" x1="{px(x1)}" y1="{px(top - 4)}" x2="{px(x1)}" '
                 f'y2="{px(bottom)}"/><text x="{px(x1)}" y="{px(top - 8)}" '
                 'text-anchor="middle" class="muted">no change</text>')
    if threshold and threshold > 0 and lo <= math.log10(threshold) <= hi:
        xt = x_of(math.log10(threshold))
        yh = top + band * 2
        parts.append(f'<line class="thr" x1="{px(xt)}" y1="{px(yh)}" x2="{px(xt)}" '
                     f'y2="{px(bottom)}"><title>policy: a significant rise of at least '
                     f'{esc(fmt_ratio(threshold))} fails the batch</title></line>')
    breaches = {b.get("host") for b in (verdict.get("ceiling") or {}).get("breaches") or []
                if isinstance(b, dict)}
    for row, group in enumerate(("canary", "control")):
        yc = top + band * row + band / 2
        members = [(h, e) for h, e in points if h.get("group") == group]
        listed = sum(1 for h in hosts if h.get("group") == group)
        parts.append(f'<text x="{px(label_w - 8)}" y="{px(yc - 2)}" text-anchor="end" '
                     f'font-weight="600">{group}</text><text x="{px(label_w - 8)}" '
                     f'y="{px(yc + 11)}" text-anchor="end" class="muted">{len(members)} of '
                     f'{listed} hosts used</text>')
        for j, (h, e) in enumerate(members):
            jitter = ((j * 37) % 13 - 6) / 6.0 * (band / 2 - 8)
            extra = ' breach' if h.get("host") in breaches else ''
            tip = (f"{h.get('host')} ({group}): drop rate x{math.exp(e):.3g} "
                   f"(e = {e:+.3f}); drops per million packets {per_million(h.get('rate_pre'))}"
                   f" \u2192 {per_million(h.get('rate_post'))}")
            if extra:
                tip += "; above the drop-rate ceiling"
            parts.append(f'<circle class="{group}{extra}" cx="{px(x_of(e / ln10))}" '
                         f'cy="{px(yc + jitter)}" r="3.5"><title>{esc(tip)}</title></circle>')
        if members:
            es = sorted(e for _h, e in members)
            n = len(es)
            med = es[n // 2] if n % 2 else (es[n // 2 - 1] + es[n // 2]) / 2
            xm = x_of(med / ln10)
            parts.append(f'<line class="med" x1="{px(xm)}" y1="{px(yc - band / 2 + 4)}" '
                         f'x2="{px(xm)}" y2="{px(yc + band / 2 - 4)}"><title>{group} median: '
                         f'{esc(fmt_ratio(math.exp(med)))}</title></line>')
    yc = top + band * 2 + band / 2
    parts.append(f'<text x="{px(label_w - 8)}" y="{px(yc - 2)}" text-anchor="end" '
                 'font-weight="600">canary \u00f7 control</text>'
                 f'<text x="{px(label_w - 8)}" y="{px(yc + 11)}" text-anchor="end" '
                 'class="muted">weighted ratio, CI</text>')
    if ratio and ratio > 0:
        level = num(test.get("ci_level")) if test else None
        xl = x_of(ci_logs[0]) if ci_logs[0] is not None else label_w
        xh = x_of(ci_logs[1]) if ci_logs[1] is not None else label_w + plot_w
        cap = 6
        tip = (f"canary / control ratio {fmt_ratio(ratio)}, "
               f"{(level or 0.95):.0%} CI {fmt_ratio(ci[0])} to {fmt_ratio(ci[1])}, "
               f"p = {fmt_p(test.get('p_value') if test else None)}")
        parts.append(f'<g><title>{esc(tip)}</title>'
                     f'<line class="ci" x1="{px(xl)}" y1="{px(yc)}" x2="{px(xh)}" '
                     f'y2="{px(yc)}"/>'
                     f'<line class="ci" x1="{px(xl)}" y1="{px(yc - cap)}" x2="{px(xl)}" '
                     f'y2="{px(yc + cap)}"/>'
                     f'<line class="ci" x1="{px(xh)}" y1="{px(yc - cap)}" x2="{px(xh)}" '
                     f'y2="{px(yc + cap)}"/>'
                     f'<rect class="hl" x="{px(x_of(math.log10(ratio)) - 5)}" '
                     f'y="{px(yc - 5)}" width="10" height="10" '
                     f'transform="rotate(45 {px(x_of(math.log10(ratio)))} {px(yc)})"/></g>')
        parts.append(f'<text x="{px(min(x_of(math.log10(ratio)), label_w + plot_w - 60))}" '
                     f'y="{px(yc - 10)}" text-anchor="middle">{esc(fmt_ratio(ratio))}</text>')
    else:
        parts.append(f'<text x="{px(label_w + 6)}" y="{px(yc + 4)}" class="muted">no '
                     'comparison (no usable canary or control host)</text>')
    parts.append("</svg>")
    return "".join(parts)
