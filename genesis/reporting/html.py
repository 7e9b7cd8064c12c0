"""The morning report as one self-contained HTML page: a timeline of the night, then the same tables as the text.

The page fetches nothing: CSS and SVG are inline and its Content-Security-Policy refuses
any outside reference, so it opens the same from a mail attachment, offline or years later.
Every string from the night is escaped: agent output and reasons are untrusted.
"""

from __future__ import annotations

import html
import re
import time

from genesis.hints import hint
from genesis.reporting.model import TROUBLE_LABELS, Night, PhaseRow
from genesis.reporting.tasks import Step, TaskRow
from genesis.reporting.text import (between, clock, ending_line, iteration_cells, kpi_rows, label, lasted, outcome,
                                    phase_name, phase_names, span, stamp, summary_line, wait_span, where)
from genesis.sandbox.refused import refused_line
from genesis.when import day, zone
from genesis.words import WAIT_LABELS, duration, ending_label, money, one_line, sanitize

__all__ = ["render_html", "render_pages", "timeline_svg", "tick_step", "CSP", "FORENSICS_LIMIT", "LEGEND"]

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
FORENSICS_LIMIT = 20_000   # characters of one incident's forensics shown; the rest is one command away

# The timeline's geometry, in SVG user units. The SVG scales to the page's width but never below
# a minimum (CSS), so its text stays readable on a phone: there the timeline scrolls in its own box.
WIDTH = 1000
LEFT = 110                 # row labels
RIGHT = 24
TOP = 44                   # breaker labels, then iteration numbers
ROW = 30
BAR = 20
AXIS = 30
MIN_BAR = 2.0              # a one-second phase stays visible
# A compressed test night lasts a minute or two: its ticks are seconds apart.
TICK_STEPS = (10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
LABEL_CHAR = 10.0          # rough width of one character of a 14px bold label, to keep labels apart and inside
MAX_TICKS = 10             # a tick label ("03:00") is ~40 units wide: ten leave room between them

CSS = """
:root { color-scheme: light dark; --ink: #1f2328; --muted: #59636e; --line: #d8dee4; --soft: #f6f8fa; --bg: #fff;
  --grid: #eef1f4; --axis: #8c959f; --incident: #c0392b; --ok-ink: #2b7a47; }
@media (prefers-color-scheme: dark) {
  :root { --ink: #e6edf3; --muted: #9da7b3; --line: #30363d; --soft: #161b22; --bg: #0d1117; --grid: #21262d;
    --axis: #6e7681; --incident: #ff6b5e; --ok-ink: #56d364; }
  .breaker-closed text { fill: #56d364 !important; } .breaker-half_open text { fill: #f0a848 !important; }
  .breaker-open text { fill: #ff7b72 !important; }
}
* { box-sizing: border-box; }
html { background: var(--bg); }
body { margin: 0 auto; max-width: 1240px; padding: 24px 28px 48px; color: var(--ink); background: var(--bg);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
h1 { font-size: 22px; margin: 0 0 4px; overflow-wrap: anywhere; }
h2 { font-size: 16px; margin: 28px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 14px; margin: 14px 0 4px; }
p { margin: 2px 0; overflow-wrap: anywhere; }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
  font-size: 12.5px; overflow-wrap: anywhere; }
.muted { color: var(--muted); }
.summary { margin-top: 6px; font-weight: 600; }
.reason { overflow-wrap: anywhere; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { text-align: left; vertical-align: top; padding: 4px 10px 4px 0; border-bottom: 1px solid var(--line); }
th { font-weight: 600; color: var(--muted); font-size: 12.5px; }
td.num, th.num { text-align: right; white-space: nowrap; }
td.text { overflow-wrap: anywhere; min-width: 12em; }
table.narrow { width: auto; min-width: min(360px, 100%); }
table.narrow th, table.narrow td { padding-right: 28px; }
tbody tr:nth-child(even) { background: var(--soft); }
.timeline-box { overflow-x: auto; max-width: 100%; }
svg.timeline { display: block; width: 100%; min-width: 860px; height: auto; font-size: 15px; }
svg.timeline text { fill: var(--ink); }
svg.timeline .label { font-weight: 600; }
svg.timeline .tick line { stroke: var(--line); }
svg.timeline .tick text, svg.timeline .iteration text, svg.timeline text.now, svg.timeline text.zone
  { fill: var(--muted); font-size: 14px; }
svg.timeline .tick.day text { fill: var(--ink); font-weight: 600; }
svg.timeline .iteration line { stroke: var(--grid); }
svg.timeline line.axis { stroke: var(--axis); }
svg.timeline .lane { fill: var(--soft); }
rect.phase { fill: var(--c); stroke: var(--bg); stroke-width: 0.6; }
rect.phase.ending-running { stroke: #3a9d5d; }
.wait { fill: var(--w); opacity: 0.16; }
svg.timeline text.wait-label { font-size: 14px; fill: var(--muted); }
path.incident { fill: var(--incident); stroke: var(--bg); stroke-width: 1; }
.breaker line { stroke-width: 1.5; stroke-dasharray: 4 3; }
.breaker text { font-size: 14px; font-weight: 600; }
.breaker-closed line { stroke: #3a9d5d; } svg.timeline .breaker-closed text { fill: #2b7a47; }
.breaker-half_open line { stroke: #e08a1e; } svg.timeline .breaker-half_open text { fill: #a9600b; }
.breaker-open line { stroke: #d64541; } svg.timeline .breaker-open text { fill: #b0302c; }
line.now { stroke: var(--ink); stroke-dasharray: 2 3; }
.ending-finished { --c: #3a9d5d; } .ending-failed, .ending-fatal { --c: #d64541; }
.ending-stuck, .ending-wedged, .ending-overtime { --c: #ef8f24; }
.ending-limit { --c: #8e6cc9; } .ending-outage { --c: #3d7fd6; } .ending-interrupted { --c: #9aa0a6; }
.ending-not_started { --c: #5f6368; } .ending-watcher_lost { --c: #a0522d; } .ending-running { --c: #9fd8b0; }
.wait-limit { --w: #8e6cc9; } .wait-outage { --w: #3d7fd6; } .wait-cooldown { --w: #6e7781; }
.wait-retry { --w: #ef8f24; } .wait-budget { --w: #b08a2e; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 16px; margin: 6px 0 0 0; padding: 0; list-style: none;
  font-size: 12.5px; color: var(--muted); }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 5px;
  vertical-align: -1px; background: var(--c); }
.swatch.ending-running { background: repeating-linear-gradient(45deg, #9fd8b0 0 3px, #e3f4e8 3px 6px); }
.swatch.wait { opacity: 1; background: color-mix(in srgb, var(--w) 30%, var(--bg)); }
.swatch.incident { background: var(--incident); clip-path: polygon(50% 0, 100% 100%, 0 100%); }
.swatch.breaker { width: 2px; background: #e08a1e; }
.out { display: inline-block; padding: 0 6px; border-radius: 9px; font-size: 12.5px; white-space: nowrap;
  background: color-mix(in srgb, var(--c) 18%, var(--bg)); border: 1px solid color-mix(in srgb, var(--c) 55%, var(--bg)); }
.out.ending-finished { background: none; border-color: transparent; color: var(--ok-ink); }
.tiles { display: grid; grid-template-columns: repeat(auto-fill, minmax(210px, 1fr)); gap: 12px; }
.tile { border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; break-inside: avoid; }
.tile .name { font-size: 12.5px; color: var(--muted); font-weight: 600; }
.tile .value { font-size: 24px; font-weight: 650; margin: 2px 0; font-variant-numeric: tabular-nums; }
.tile .why { font-size: 12.5px; color: var(--muted); }
details { border: 1px solid var(--line); border-radius: 6px; margin: 8px 0; padding: 6px 10px; }
summary { cursor: pointer; overflow-wrap: anywhere; }
pre { background: var(--soft); padding: 8px 10px; overflow-x: auto; white-space: pre-wrap; overflow-wrap: anywhere;
  margin: 8px 0 4px; max-height: 480px; overflow-y: auto; }
.evidence { border-left: 3px solid var(--c); padding: 2px 0 2px 10px; margin: 10px 0; }
ul.tasks { margin: 0; padding-left: 20px; }
section.run { border-top: 3px double var(--line); margin-top: 36px; padding-top: 8px; }
@media (max-width: 640px) {
  body { padding: 12px 12px 32px; }
  h1 { font-size: 19px; }
  .tiles { grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: 8px; }
  .tile .value { font-size: 20px; }
  th, td { padding-right: 8px; }
  table.narrow th, table.narrow td { padding-right: 12px; }
  svg.timeline { min-width: 820px; }
  /* Tables reflow: a row is a block, each cell a line led by its column's name. */
  table.reflow, table.reflow tbody, table.reflow tr { display: block; width: 100%; }
  table.reflow thead { display: none; }
  table.reflow tr { border-bottom: 1px solid var(--line); padding: 6px 0; }
  table.reflow td, table.reflow td.num { display: block; position: relative; border: 0; padding: 1px 0 1px 8em;
    text-align: left; white-space: normal; min-width: 0; min-height: 1.45em; }
  table.reflow td::before { content: attr(data-label); position: absolute; left: 0; width: 7.5em; color: var(--muted);
    font-size: 12.5px; font-weight: 600; overflow-wrap: anywhere; }
}
@media print {
  body { max-width: none; padding: 0; font-size: 11px; }
  h2 { break-after: avoid; }
  tr, .tile, details, svg.timeline { break-inside: avoid; }
  pre { max-height: none; overflow: visible; }
  .scroll, .timeline-box { overflow: visible; }
  svg.timeline { min-width: 0; }
}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _line(text: str) -> str:
    """Untrusted one-line text, escaped."""
    return _e(one_line(text))


def _css_name(text: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "", text.lower())


def _f(x: float) -> str:
    return f"{x:.1f}"


class _Scale:
    """Epoch seconds to x in the plot, clamped to it."""

    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = start, max(end, start + 60.0)

    def __call__(self, t: float) -> float:
        plot = WIDTH - LEFT - RIGHT
        return LEFT + min(1.0, max(0.0, (t - self.start) / (self.end - self.start))) * plot


def tick_step(start: float, end: float) -> int:
    """The interval between ticks: the smallest of TICK_STEPS that gives at most MAX_TICKS."""
    return next((s for s in TICK_STEPS if (end - start) / s <= MAX_TICKS), TICK_STEPS[-1])


def _ticks(start: float, end: float) -> list[float]:
    """Tick times on whole steps of the reader's clock (02:00, 02:30 ...), a day at local midnight."""
    step = tick_step(start, end)

    def aligned(t: float) -> float:
        """The first whole step at or after t, in local time (its offset may change during the night)."""
        back = (t + time.localtime(t).tm_gmtoff) % step
        return t if back == 0 else t - back + step

    ticks, t = [], aligned(start)
    while t <= end and len(ticks) <= MAX_TICKS + 2:
        ticks.append(t)
        t = max(aligned(t + step), t + min(step, 60))
    return ticks


def _span(night: Night, now: float) -> tuple[float, float]:
    """The axis: from the night's start to its end, or to `now` while it runs, or to the last thing recorded."""
    known = [night.started, *(t for p in night.phases for t in (p.started, p.ended) if t is not None),
             *(t for w in night.waits for t in (w.started, w.ended) if t is not None),
             *(i.at for i in night.incidents), *(b.at for b in night.breaker_changes)]
    if night.ended is not None:
        known.append(night.ended)
    if night.running:
        known.append(now)
    return night.started, max(known)


def _phase_title(p: PhaseRow, end: float, running: bool) -> str:
    what = "running" if p.ending == "running" else "finished" if p.ending == "finished" else label(p)
    unfinished = "" if p.ended is not None else ", so far" if running else ", no end recorded"
    lasting = f"{span(p.started, end)} ({between(p.started, end)}{unfinished})"
    retry = f" (retry {p.attempt})" if p.attempt else ""
    reason = "" if p.ending in ("finished", "running") else f": {one_line(p.reason)}"
    cost = f"; {money(p.cost_usd)}" if p.cost_usd is not None else ""
    return f"iteration {p.iteration} {p.phase}{retry}: {what}, {lasting}{cost}{reason}"


def timeline_svg(night: Night, now: float, prefix: str = "live-") -> str:
    """The night's timeline alone, for a page whose CSP allows no style attribute: its running
    bars take their stripes from the page's stylesheet (`rect.phase.ending-running`)."""
    return _timeline(night, now, prefix, inline_style=False)


def _timeline(night: Night, now: float, prefix: str = "", inline_style: bool = True) -> str:
    names = phase_names(night) or ["(no phase)"]
    start, end = _span(night, now)
    x = _Scale(start, end)

    def bar_end(p: PhaseRow) -> float:
        """A phase with no end runs to `now`; in a night that is over, it lasted as long as the night."""
        return p.ended if p.ended is not None else now if night.running else end

    bottom = TOP + len(names) * ROW
    height = bottom + AXIS
    row_of = {name: i for i, name in enumerate(names)}
    out = [f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
           f'role="img" aria-label="timeline of the night, {_e(stamp(start))} to {_e(clock(end))}" '
           f'data-start="{start:.3f}" data-end="{end:.3f}" data-tick-step="{tick_step(start, end)}">',
           f'<defs><pattern id="{prefix}running" width="6" height="6" patternUnits="userSpaceOnUse" '
           'patternTransform="rotate(45)"><rect width="6" height="6" fill="#e3f4e8"/>'
           '<rect width="3" height="6" fill="#9fd8b0"/></pattern></defs>']
    for i, name in enumerate(names):
        y = TOP + i * ROW
        out.append(f'<rect class="lane" x="{LEFT}" y="{y + 1}" width="{WIDTH - LEFT - RIGHT}" height="{ROW - 2}"/>')
        out.append(f'<text class="label" x="{LEFT - 8}" y="{y + ROW / 2 + 4}" text-anchor="end">'
                   f'{_e(one_line(name, 16))}</text>')
    step = tick_step(start, end)
    for t in _ticks(start, end):
        local = time.localtime(t)
        midnight = local.tm_hour == local.tm_min == local.tm_sec == 0
        text = day(t) if midnight else time.strftime("%H:%M:%S" if step < 60 else "%H:%M", local)
        out.append(f'<g class="tick{" day" if midnight else ""}" data-at="{t:.0f}"><line x1="{_f(x(t))}" '
                   f'x2="{_f(x(t))}" y1="{TOP - 16}" y2="{bottom + 4}"/>'
                   f'<text x="{_f(x(t))}" y="{bottom + 20}" text-anchor="middle">{text}</text></g>')
    # The zone the ticks are in, said once under the row labels.
    out.append(f'<text class="zone" x="4" y="{bottom + 20}">{_e(zone(start))}</text>')
    out.append(f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{bottom}" y2="{bottom}"/>')
    for it in night.iterations:
        left = x(it.started)
        right = x(it.ended if it.ended is not None else max([bar_end(p) for p in it.phases] or [it.started]))
        if right - left >= 4:
            name = f"iteration {it.iteration}" if right - left >= 110 else str(it.iteration)
            tag = f'<text x="{_f(left + 3)}" y="{TOP - 4}">{name}</text>' if right - left >= 24 else ""
            out.append(f'<g class="iteration"><line x1="{_f(left)}" x2="{_f(left)}" y1="{TOP - 16}" y2="{bottom}"/>'
                       f'{tag}</g>')
    for w in night.waits:
        until = w.ended if w.ended is not None else (now if night.running else end)
        left, right = x(w.started), max(x(until), x(w.started) + MIN_BAR)
        kind = WAIT_LABELS.get(w.kind, w.kind)
        title = f"{kind} {wait_span(night, w)}: {one_line(w.reason)}"
        out.append(f'<rect class="wait wait-{_css_name(w.kind)}" x="{_f(left)}" y="{TOP}" width="{_f(right - left)}" '
                   f'height="{bottom - TOP}"><title>{_e(title)}</title></rect>')
        if right - left >= 130:
            out.append(f'<text class="wait-label" x="{_f(left + 4)}" y="{bottom - 5}">{_e(kind)}</text>')
    for p in night.phases:
        left = x(p.started)
        width = max(x(bar_end(p)) - left, MIN_BAR)
        y = TOP + row_of[p.phase] * ROW + (ROW - BAR) / 2
        fill = f' style="fill: url(#{prefix}running)"' if p.ending == "running" and inline_style else ""
        out.append(f'<rect class="phase ending-{_css_name(p.ending)}"{fill} x="{_f(left)}" y="{_f(y)}" '
                   f'width="{_f(width)}" height="{BAR}" rx="2" data-phase="{_e(p.phase)}" '
                   f'data-iteration="{p.iteration}" data-attempt="{p.attempt}" data-ending="{_e(p.ending)}">'
                   f'<title>{_e(_phase_title(p, bar_end(p), night.running))}</title></rect>')
    label_ends = [-WIDTH, -WIDTH]  # the right end of the last label on each of two label lines
    for b in night.breaker_changes:
        bx = x(b.at)
        title = (f"{clock(b.at)} {where(b.iteration, None)}: breaker {b.before} → {b.after} "
                 f"({b.no_progress} iterations without progress)")
        state = one_line(b.after, 12)
        wide = len(state) * LABEL_CHAR
        inside = bx + 3 + wide <= WIDTH
        tx, anchor = (bx + 3, "start") if inside else (bx - 3, "end")
        left = tx if inside else tx - wide
        # Changes close in time would print their states over each other: the second goes a line lower.
        line = 0 if left > label_ends[0] + 4 else 1
        label_ends[line] = left + wide
        out.append(f'<g class="breaker breaker-{_css_name(b.after)}"><line x1="{_f(bx)}" x2="{_f(bx)}" '
                   f'y1="{TOP - 30}" y2="{bottom}"/><text x="{_f(tx)}" y="{TOP - 32 + 13 * line}" '
                   f'text-anchor="{anchor}">{_e(state)}</text><title>{_e(title)}</title></g>')
    for i in night.incidents:
        ix = x(i.at)
        y = TOP + row_of.get(i.phase or "", 0) * ROW + 2
        title = (f"incident {i.id}, {clock(i.at)} {where(i.iteration, i.phase)}: {ending_label(i.kind)}: "
                 f"{one_line(i.reason)}")
        out.append(f'<path class="incident" d="M{_f(ix)},{y + 9} l-6,-10 h12 z"><title>{_e(title)}</title></path>')
    if night.running:
        out.append(f'<line class="now" x1="{_f(x(now))}" x2="{_f(x(now))}" y1="{TOP - 30}" y2="{bottom}"/>'
                   f'<text class="now" x="{_f(x(now) - 3)}" y="{TOP - 20}" text-anchor="end">now {clock(now)}</text>')
    out.append("</svg>")
    return "\n".join(out)


# Every mark the timeline draws: each phase ending's colour, each wait's band, incidents and breaker changes.
LEGEND = (("ending-finished", "finished"), ("ending-failed", "failed / API error"),
          ("ending-stuck", "stuck / wedged / over time"), ("ending-limit", "usage limit"),
          ("ending-outage", "API outage"), ("ending-interrupted", "interrupted"),
          ("ending-not_started", "did not start"), ("ending-watcher_lost", "watcher lost"),
          ("ending-running", "running"),
          *((f"wait wait-{kind}", f"wait: {text}") for kind, text in WAIT_LABELS.items()),
          ("incident", "incident"), ("breaker", "breaker change"))


def _legend() -> str:
    items = "".join(f'<li><span class="swatch {cls}"></span>{_e(text)}</li>' for cls, text in LEGEND)
    return f'<ul class="legend">{items}</ul>'


def _table(headers: list[str], rows: list[list[str]], numeric: tuple[int, ...] = (), text: tuple[int, ...] = (),
           narrow: bool = False) -> str:
    """A table of cells already escaped; `numeric` columns align right, `text` columns wrap anywhere."""
    def cls(i: int) -> str:
        return ' class="num"' if i in numeric else ' class="text"' if i in text else ""

    head = "".join(f"<th{cls(i)}>{_e(h)}</th>" for i, h in enumerate(headers))
    # Each cell names its column: on a phone a row reflows into lines "column: value" (CSS).
    names = [f' data-label="{_e(h)}"' if h else "" for h in headers]
    body = "\n".join("<tr>" + "".join(f"<td{cls(i)}{names[i] if i < len(names) else ''}>{c}</td>"
                                       for i, c in enumerate(row)) + "</tr>" for row in rows)
    opening = '<table class="narrow">' if narrow else '<table class="reflow">'
    # In its own scrolling box: a wide table scrolls there on a phone, never the page.
    return f'<div class="scroll">{opening}<thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table></div>'


def _section(ident: str, title: str, body: str) -> str:
    return f'<section id="{ident}"><h2>{_e(title)}</h2>\n{body}\n</section>'


def _iterations(night: Night) -> str:
    names = phase_names(night)
    rows = []
    for it in night.iterations:
        cells = [_e(c) for c in iteration_cells(night, it, names)]
        for k, name in enumerate(names, start=1):
            runs = [p for p in it.phases if p.phase == name]
            if runs:
                cells[k] = " ".join(f'<span class="out ending-{_css_name(p.ending)}">{_e(outcome(p))}</span>'
                                    for p in runs)
        rows.append(cells)
        rows[-1].append(_e(money(it.cost_usd)) if it.cost_usd is not None else '<span class="muted">-</span>')
    headers = ["iteration", *names, "time", "progress", "breaker", "commits", "tasks", "cost"]
    last = len(headers)
    return _table(headers, rows, numeric=(0, last - 6, last - 3, last - 2, last - 1))


def _evidence(night: Night) -> str:
    """Under the table, each abnormal phase's own evidence: why it ended, its last transcript
    lines (its attempt's own, as recorded when it ended) and where its whole transcript is."""
    blocks = []
    for p in night.abnormal:
        alerts = _alerts_of(night, p)
        if not p.tail and not p.log and not alerts:
            continue
        tail = "\n".join(sanitize(line, None) for line in p.tail)
        blocks.append(
            f'<div class="evidence ending-{_css_name(p.ending)}">'
            f"<h3>iteration {p.iteration} {_e(phase_name(p))}: {_e(label(p))}</h3>"
            f'<p class="reason">{_line(p.reason)}</p>'
            + (f'<pre class="tail">{_e(tail)}</pre>' if tail else '<p class="muted">no transcript lines recorded</p>')
            + (f'<p class="muted">transcript: <code>{_line(p.log)}</code></p>' if p.log else "")
            + "".join(f'<p class="alert">alert <code>{_e(a.ticket_id)}</code> ({_e(a.severity)}, '
                      f'{_e(a.verdict)}){": " + _line(a.why) if a.why else ""}</p>' for a in alerts)
            + "</div>")
    return "\n".join(blocks)


def _alerts_of(night: Night, p: PhaseRow) -> list:
    """The tickets about this attempt of the phase: its ticket names the iteration and phase, and
    it came before the phase's next attempt; a follow-up that resolves it belongs to the retry."""
    later = [q.started for q in night.phases if (q.iteration, q.phase) == (p.iteration, p.phase)
             and q.started > p.started]
    until = min(later, default=float("inf"))
    return [a for a in night.alerts if (a.iteration, a.phase) == (p.iteration, p.phase) and not a.final
            and a.kind != "resolved" and p.started <= a.at < until]


def _step(step: Step | None) -> str:
    if step is None:
        return '<span class="muted">-</span>'
    who = " ".join(v for v in (f"iteration {step.iteration}" if step.iteration else "", step.phase or "") if v)
    return f'{_e(clock(step.at))}<br> <span class="muted">{_e(who)}</span>'


def _tasks(tasks: tuple[TaskRow, ...]) -> str:
    """Each TASKS.md item: its box now, when it was built, reviewed and verified, its time and cost."""
    boxes = {"open": "open", "review": "awaiting review", "done": "done"}
    rows = [[_line(t.text), _e(boxes.get(t.state, t.state)), _step(t.built), _step(t.reviewed), _step(t.verified),
             str(t.attempts), _e(duration(t.seconds)) if t.seconds is not None else "-",
             _e(money(t.cost_usd)) if t.cost_usd is not None else '<span class="muted">-</span>'] for t in tasks]
    return ('<p class="muted">from TASKS.md at each phase\'s commit: built <code>[ ]</code>→<code>[?]</code>, '
            'reviewed <code>[?]</code>→<code>[x]</code> or back, verified <code>[x]</code>; time and cost are '
            'those of the phases that moved it, a phase\'s cost shared among the items it moved</p>'
            + _table(["task", "now", "built", "reviewed", "verified", "builds", "time", "cost"], rows,
                     numeric=(5, 6, 7), text=(0,)))


def _task_evidence(night: Night) -> str:
    """Each task's latest evidence: the checks Genesis ran when a phase ticked it done, their result."""
    rows = []
    for r in night.evidence:
        ran = "-" if not r.command else f"exit {r.exit_code}" if r.exit_code is not None else "killed or not started"
        tail = "<br>".join(_e(sanitize(line)) for line in r.tail) if r.outcome == "failed" and r.tail else ""
        rows.append([_line(r.task), f'<span class="out evidence-{_css_name(r.outcome)}">{_e(r.said)}</span>',
                     f"<code>{_e(one_line(r.command))}</code>" if r.command else '<span class="muted">no check</span>',
                     _e(ran), _e(duration(r.seconds)) if r.seconds is not None else "-",
                     f'{_e(clock(r.at))}<br> <span class="muted">{_e(where(r.iteration, r.phase))}</span>',
                     str(r.reopened), f'<span class="tail">{tail}</span>' if tail else ""])
    return ('<p class="muted">the checks Genesis ran itself, in the agent\'s box, when a phase ticked a task done '
            '(its <code>check:</code> line, GENESIS_CHECK_CMD): a failed one reopened the task; a task with no '
            'check is done on the agent\'s word</p>'
            + _table(["task", "result", "check", "exit", "took", "when", "reopened", "output's tail"], rows,
                     numeric=(4, 6), text=(0, 2, 7)))


def _forensics(text: str, incident_id: str, project: str) -> str:
    if not text:
        return '<p class="muted">no forensics: the incident\'s file is gone</p>'
    text = "\n".join(sanitize(line, None) for line in text.split("\n"))
    cut = ""
    if len(text) > FORENSICS_LIMIT:
        cut = (f'<p class="muted cut">cut: {len(text) - FORENSICS_LIMIT:,} more characters; '
               f'<code>{_e(hint(project, "incidents", "show", incident_id))}</code> prints it all</p>')
        text = text[:FORENSICS_LIMIT]
    return f"<pre>{_e(text)}</pre>{cut}"


def _cost(night: Night) -> str:
    def reported(value: str | None) -> str:
        return _e(value) if value is not None else '<span class="muted">not reported</span>'

    tokens_in, tokens_out = night.tokens
    turns = [p.turns for p in night.phases if p.turns is not None]
    rows = [["total", reported(None if night.cost_usd is None else money(night.cost_usd))],
            ["input tokens", reported(None if tokens_in is None else f"{tokens_in:,}")],
            ["output tokens", reported(None if tokens_out is None else f"{tokens_out:,}")],
            ["turns", reported(str(sum(turns)) if turns else None)]]
    by_phase: dict[str, float] = {}
    for p in night.phases:
        if p.cost_usd is not None:
            by_phase[p.phase] = by_phase.get(p.phase, 0.0) + p.cost_usd
    rows += [[f"{_e(name)} phases", _e(money(cost))] for name, cost in by_phase.items()] if len(by_phase) > 1 else []
    return _table(["as the agents reported them", ""], rows, numeric=(1,), narrow=True)


def _head(title: str) -> list[str]:
    return ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{title}</title>", f"<style>{CSS}</style>", "</head><body>"]


def render_html(night: Night, now: float | None = None, tasks: tuple[TaskRow, ...] = ()) -> str:
    """The whole page; a running phase's bar ends at `now` (the current time when None); `tasks`:
    the run's TASKS.md items (reporting/tasks.py), shown when given."""
    now = time.time() if now is None else now
    title = f"Genesis night of {_e(stamp(night.started)[:10])} · {_line(_name(night.project))}"
    return "\n".join([*_head(title), _body(night, now, tasks), "</body></html>\n"])


def render_pages(nights: list[tuple[Night, tuple[TaskRow, ...]]], now: float | None = None) -> str:
    """Several runs on one page, oldest first: each its own section, its ids prefixed with its run id."""
    now = time.time() if now is None else now
    if len(nights) == 1:
        return render_html(nights[0][0], now, nights[0][1])
    first = nights[0][0]
    title = f"Genesis: {len(nights)} runs of {_line(_name(first.project))}"
    runs = [f'<section class="run" id="run-{_css_name(n.run_id)}">{_body(n, now, tasks, _prefix(n))}</section>'
            for n, tasks in nights]
    return "\n".join([*_head(title), *runs, "</body></html>\n"])


def _prefix(night: Night) -> str:
    return f"{_css_name(night.run_id) or 'run'}-"


def _body(night: Night, now: float, tasks: tuple[TaskRow, ...], prefix: str = "") -> str:
    """One run's part of the page; every id in it starts with `prefix`."""
    def section(ident: str, title: str, content: str) -> str:
        return _section(prefix + ident, title, content)

    parts = [
        "<header>",
        # The project's name heads the page; its full path is the heading's tooltip.
        f'<h1 title="{_line(night.project)}">Night of {_e(stamp(night.started)[:10])} · '
        f"{_line(_name(night.project))}</h1>",
        f'<p class="muted">Genesis run <code>{_e(night.run_id)}</code></p>',
        f"<p>{_e(ending_line(night))}</p>",
    ]
    if night.reason and not night.running:
        parts.append(f'<p class="reason">{_line(night.reason)}</p>')
    parts += [f'<p class="summary">{_e(summary_line(night))}</p>',
              f'<p class="muted box">{_line(night.box)}</p>' if night.box else "",
              f'<p class="muted box">{_line(refused_line(night.refused))}</p>' if night.refused else "", "</header>",
              section("timeline", "Timeline", f'<div class="timeline-box">{_timeline(night, now, prefix)}</div>'
                      + _legend())]
    if night.abnormal:
        rows = [[str(p.iteration), _e(phase_name(p)),
                 f'<span class="out ending-{_css_name(p.ending)}">{_e(label(p))}</span>', _e(lasted(p)),
                 _line(p.reason) + (f"; {p.killed} process{'es' if p.killed != 1 else ''} ended" if p.killed else "")]
                for p in night.abnormal]
        parts.append(section("abnormal", f"Abnormal phases ({len(night.abnormal)})",
                             _table(["iteration", "phase", "what", "duration", "reason"], rows,
                                    numeric=(0, 3), text=(4,)) + _evidence(night)))
    parts.append(section("iterations", f"Iterations ({len(night.iterations)})", _iterations(night)))
    done = list(night.ticks)
    if tasks:
        parts.append(section("tasks", f"Tasks ({len(tasks)})", _tasks(tasks)))
    elif done:
        items = "".join(f'<li>{_line(task)} <span class="muted">(iteration {p.iteration} {_e(p.phase)})</span></li>'
                        for p, task in done)
        parts.append(section("tasks", f"Tasks done ({len(done)})", f'<ul class="tasks">{items}</ul>'))
    if night.evidence:
        parts.append(section("evidence", f"Task evidence ({len(night.evidence)})", _task_evidence(night)))
    if night.commit_troubles:
        rows = [[_e(where(t.iteration, t.phase) or "-"),
                 _e(TROUBLE_LABELS.get(t.kind, t.kind)), _line(t.text)]
                for t in night.commit_troubles]
        parts.append(section("commit-troubles", f"Auto-commit troubles ({len(night.commit_failures)} failed)",
                              _table(["when", "what", "details"], rows, text=(2,))))
    if night.history:
        rows = [[_e(where(h.iteration, h.phase) or "-"), _e(h.kind),
                 _e("allowed, went on" if h.allowed else "stopped the loop"), _line(h.text)] for h in night.history]
        parts.append(section("history", f"History changed ({len(night.history)})",
                              f'<p class="muted">what the safety refs keep: '
                              f'<code>{_e(hint(night.project, "restore"))}</code></p>'
                              + _table(["when", "what", "loop", "details"], rows, text=(3,))))
    kept = [r for r in night.left_out if not r.commit]
    if kept:
        rows = [[_e(where(r.iteration, r.phase) or "-"), f"<code>{_line(r.path)}</code>", _line(r.reason)]
                for r in kept]
        parts.append(section("left-out", f"Left out of commits ({len(kept)})",
                              '<p class="muted">they stay in the work tree, uncommitted; commit one yourself with '
                              '<code>git add -f</code> if it is meant to be</p>'
                              + _table(["when", "file", "why"], rows, text=(2,))))
    agents = [r for r in night.left_out if r.commit]
    if agents:
        rows = [[_e(where(r.iteration, r.phase) or "-"), f"<code>{_line(r.path)}</code>",
                 f"<code>{_e(r.commit)}</code>", _line(r.reason)] for r in agents]
        parts.append(section("agent-secrets", f"Committed by the agent, looking like a secret ({len(agents)})",
                              '<p class="muted">Genesis does not rewrite the agent\'s commits: check them</p>'
                              + _table(["when", "file", "commit", "why"], rows, text=(3,))))
    if night.commits:
        rows = [[f"<code>{_e(c.sha)}</code>", _e(clock(c.at)),
                 _line(c.subject) + (" <strong>orphaned</strong>: made off the phase's branch" if c.orphaned else ""),
                 _e(where(c.iteration, c.phase))]
                for c in night.commits]
        parts.append(section("commits", f"Commits ({len(night.commits)})",
                              _table(["commit", "time", "subject", "when"], rows, text=(2,))))
    if night.phases:
        parts.append(section("cost", "Cost and tokens", _cost(night)))
    if night.waits:
        rows = [[_e(WAIT_LABELS.get(w.kind, w.kind)), _e(wait_span(night, w)), _e(where(w.iteration, w.phase)),
                 _line(w.reason)] for w in night.waits]
        parts.append(section("waits", f"Waits ({len(night.waits)})",
                              _table(["wait", "when", "during", "reason"], rows, text=(3,))))
    if night.incidents:
        blocks = [f'<details class="incident-record" id="{prefix}incident-{_css_name(i.id)}"><summary><code>{_e(i.id)}</code> · '
                  f'{_e(clock(i.at))} · {_e(where(i.iteration, i.phase))} · '
                  f'<strong>{_e(ending_label(i.kind))}</strong>: {_line(i.reason)}</summary>'
                  f'<p class="muted">in full: <code>{_e(hint(night.project, "incidents", "show", i.id))}</code></p>'
                  f'{_forensics(i.forensics, i.id, night.project)}</details>' for i in night.incidents]
        parts.append(section("incidents", f"Incidents ({len(night.incidents)})", "\n".join(blocks)))
    if night.breaker_changes:
        rows = [[_e(clock(b.at)), _e(where(b.iteration, None) or "-"), _e(f"{b.before} → {b.after}"),
                 str(b.no_progress)] for b in night.breaker_changes]
        parts.append(section("breaker", "Breaker changes",
                              _table(["time", "after", "change", "iterations without progress"], rows,
                                     numeric=(3,), narrow=True)))
    if night.alerts:
        rows = [[f"<code>{_e(a.ticket_id)}</code>", _e(clock(a.at)), _e(a.severity), _e(a.verdict), _line(a.cause),
                 _line(a.why) or "-", _e(", ".join(a.delivered) or "-")] for a in night.alerts]
        parts.append(section("alerts", f"Alerts ({len(night.alerts)})",
                              _table(["ticket", "time", "severity", "verdict", "cause", "why", "sent to"], rows,
                                     text=(4, 5))))
    tiles = "".join(f'<div class="tile"><div class="name">{_e(name)}</div><div class="value">{_e(value)}</div>'
                    f'<div class="why">{_e(why)}</div></div>' for name, value, why in kpi_rows(night.kpis))
    parts.append(section("kpis", "Health KPIs", f'<div class="tiles">{tiles}</div>'))
    return "\n".join(parts)


def _name(project: str) -> str:
    """A project's folder name ("" stays "")."""
    return project.rstrip("/").rsplit("/", 1)[-1] if project else project
