"""The dashboard's HTML shells: structure only. Every value is filled in by static/app.js with
textContent from the JSON API, so no string of an agent, a task or a ledger is ever parsed as
HTML; no inline script or style (the CSP refuses both)."""

from __future__ import annotations

from html import escape

from genesis.actions.links import Link
from genesis.actions.offered import LABELS

__all__ = ["overview", "loop", "metrics", "act", "act_refused", "CHARTS"]

CHARTS = (("chart-by-agent", "Succeeded and failed, by agent CLI"), ("chart-by-model", "By model"),
          ("chart-by-task", "By task (the 15 with the most runs)"), ("chart-by-project", "By project"),
          ("chart-over-time", "Restarts, escalations and failures over time"),
          ("chart-retries", "Retries needed (histogram)"), ("chart-retry-cost", "Cost of retries"))


def _page(title: str, page: str, body: str, scripts: tuple[str, ...] = ("/static/app.js",), data: str = "") -> str:
    tags = "".join(f'<script src="{s}" defer></script>' for s in scripts)
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="color-scheme" content="light dark">'
            f'<title>{escape(title)}</title><link rel="stylesheet" href="/static/app.css">{tags}</head>'
            f'<body data-page="{page}" data-live="no"{data}>'
            f'<header class="bar"><a class="brand" href="/">Genesis</a><nav><a href="/">Overview</a>'
            f'<a href="/metrics">Metrics</a></nav><span id="act-result" class="act-result" role="status"></span>'
            f'<span id="live" class="live">connecting…</span></header>'
            f'<main>{body}</main></body></html>\n')


def overview() -> str:
    body = ('<section class="summary"><div class="score-box"><div class="label">Machine health</div>'
            '<div id="machine-score" class="score">–</div></div>'
            '<div class="facts"><div><span class="label">Loops running</span> <span id="loops-running">–</span></div>'
            '<div><span class="label">Cost so far</span> <span id="machine-cost">–</span></div>'
            '<ul id="machine-reasons" class="reasons"></ul></div></section>'
            '<p id="problems" class="problems" hidden></p>'
            '<div id="projects"><p class="muted" id="empty">Looking for loops…</p></div>'
            '<section class="panel"><h2>Recent alerts</h2><ul id="alerts" class="alerts"></ul></section>')
    return _page("Genesis: every loop", "overview", body)


def loop(key: str) -> str:
    body = ('<h1 id="loop-title">…</h1><p id="loop-state" class="muted"></p>'
            '<div id="loop-actions" class="actions"></div>'
            '<section class="panel"><h2>Timeline</h2><div id="timeline" class="timeline-box"></div></section>'
            '<section class="panel"><h2>Transcript <span id="tail-file" class="muted small"></span></h2>'
            '<pre id="transcript" class="transcript"></pre></section>'
            '<section class="panel"><h2>Incidents</h2><div id="incidents"></div></section>'
            '<section class="panel"><h2>Task evidence</h2><div id="evidence"></div></section>'
            '<section class="panel"><h2>Network refused</h2><p id="network" class="muted"></p></section>'
            '<section class="panel" id="attempts-panel" hidden><h2>Attempts</h2>'
            '<p id="task-reason" class="reason"></p><ol id="attempts" class="attempts"></ol>'
            '<h3>Merges</h3><div id="merges"></div></section>')
    return _page("Genesis: a loop", "loop", body, data=f' data-key="{escape(key)}"')


def metrics() -> str:
    charts = "".join(f'<figure class="chart"><figcaption>{escape(title)}</figcaption>'
                     f'<div class="canvas-box"><canvas id="{ident}"></canvas></div></figure>'
                     for ident, title in CHARTS)
    body = (f'<h1>Metrics</h1><p id="metrics-note" class="muted"></p><div class="charts">{charts}</div>')
    return _page("Genesis: metrics", "metrics", body, scripts=("/static/vendor/chart.umd.min.js", "/static/app.js"))


def act(link: Link) -> str:
    """An alert's action link, opened: what it would do, and the one button that does it (a look
    never acts: a link preview or a prefetch spends nothing)."""
    what = LABELS.get(link.action, link.action)
    on = f"the task {link.task} of " if link.task else ""
    body = (f'<h1>{escape(what)}</h1><p>{escape(on)}the project {escape(link.project)} (run {escape(link.run_id)})</p>'
            f'<p><button id="act-link" class="act" type="button">{escape(what)}</button></p>'
            f'<p id="act-said" class="reason" role="status"></p>')
    return _page(f"Genesis: {what}", "act", body)


def act_refused(why: str) -> str:
    return _page("Genesis: action refused", "act-refused", f'<h1>Nothing done</h1><p id="act-said">{escape(why)}</p>')
