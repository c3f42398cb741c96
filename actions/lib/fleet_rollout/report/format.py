"""Small helpers every part of the report shares: escaping, number, time and duration
formatting, masking of secrets (redact) and the bits of HTML and SVG (badge, key-value
table, SVG header) the sections are built from."""
from __future__ import annotations

import html
import math
import re
import time
from typing import Any, Optional, Sequence, Tuple

MAX_DETAIL_CHARS = 180

SECRET_KEY = re.compile(
    r"pass(word|wd|phrase)?$|passwd|secret|token|api_?key|authorization|cookie|private_?key|"
    r"credentials?$", re.IGNORECASE)
_URL_CREDS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/\s@:]+:[^/\s@]*@")
MASK = "***"


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def num(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def scrub_text(text: str) -> str:
    return _URL_CREDS.sub(lambda m: m.group(1) + MASK + "@", text)


def redact(value: Any) -> Any:
    """A copy with values under secret-looking keys masked and URL credentials removed."""
    if isinstance(value, dict):
        return {k: (MASK if SECRET_KEY.search(str(k)) and v not in (None, "") else redact(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return scrub_text(value)
    return value


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:max(1, limit - 1)] + "\u2026"


def compact(value: Any, limit: int = 60) -> str:
    """A short one-line text for any JSON value."""
    if isinstance(value, dict):
        inner = ", ".join(f"{k}: {compact(v, 30)}" for k, v in value.items())
        return clip("{" + inner + "}", limit)
    if isinstance(value, (list, tuple)):
        return clip("[" + ", ".join(compact(v, 30) for v in value) + "]", limit)
    if isinstance(value, float):
        return f"{value:.4g}"
    if value is None:
        return "-"
    return clip(str(value), limit)


def summarize_detail(detail: Any, limit: int = MAX_DETAIL_CHARS) -> str:
    """A step's detail as one short line (errors first), secrets masked."""
    detail = redact(detail)
    if isinstance(detail, dict):
        if detail.get("error"):
            return clip(f"error: {detail['error']}", limit)
        parts = [f"{k}={compact(v, 50)}" for k, v in detail.items()]
        return clip("; ".join(parts), limit)
    if detail in (None, ""):
        return ""
    return clip(compact(detail, limit), limit)


def fmt_time(ts: Any, seconds: bool = True) -> str:
    value = num(ts)
    if value is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M",
                         time.gmtime(value)) + "Z"


def clock(ts: float, seconds: bool = True) -> str:
    return time.strftime("%H:%M:%S" if seconds else "%H:%M", time.gmtime(ts))


def fmt_duration(seconds: Any) -> str:
    value = num(seconds)
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


def fmt_ratio(value: Any) -> str:
    value = num(value)
    if value is None:
        return "unbounded"
    return f"{value:.2f}\u00d7" if value < 100 else f"{value:.0f}\u00d7"


def fmt_p(value: Any) -> str:
    value = num(value)
    if value is None:
        return "n/a"
    return f"{value:.2g}" if value >= 0.001 else f"{value:.1e}"


def per_million(rate: Any) -> str:
    value = num(rate)
    if value is None:
        return "n/a"
    value *= 1e6
    return "0" if value == 0 else (f"{value:,.0f}" if value >= 100 else f"{value:.3g}")


def plural(n: int, word: str, plural: str = "") -> str:
    return f"{n} {word}" if n == 1 else f"{n} {plural or word + 's'}"


def badge(text: str, cls: str, big: bool = False) -> str:
    return f'<span class="badge b-{cls}{" big" if big else ""}">{esc(text)}</span>'


def kv_table(rows: Sequence[Tuple[str, str]]) -> str:
    body = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


def px(value: float) -> str:
    """A coordinate for SVG (short)."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


def svg_open(width: float, height: float, label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{px(width)}" '
            f'height="{px(height)}" viewBox="0 0 {px(width)} {px(height)}" role="img" '
            f'aria-label="{esc(label)}"><title>{esc(label)}</title>')
