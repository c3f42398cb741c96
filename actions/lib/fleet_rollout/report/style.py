"""How the report looks: host, rollout and verdict status to label and badge class, the
page's CSS and the step colours of the timeline legend."""
from __future__ import annotations

from fleet_rollout.states import FAIL, INCONCLUSIVE, PASS

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
STATUS_RANK = {name: i for i, name in enumerate(HOST_STATUS)}

ROLLOUT_STATUS = {
    "running": "info",
    "completed": "ok",
    "rolled back": "rb",
    "aborted": "warn",
    "halted": "warn",
    "failed": "bad",
    "planned": "none",
}
VERDICT_CLASS = {PASS: "ok", FAIL: "bad", INCONCLUSIVE: "warn"}

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
