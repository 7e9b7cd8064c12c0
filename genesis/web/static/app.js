// Genesis dashboard: fills the page shells from the JSON API and keeps them live.
// Every string from a ledger, an agent, a task or a tool is set with textContent, never as HTML;
// the one exception is the loop's timeline, an SVG the server renders and escapes.
"use strict";

(function () {
  const body = document.body;
  const page = body.dataset.page;
  let offset = 0;                      // browser clock minus server clock, in seconds

  function serverNow() { return Date.now() / 1000 - offset; }

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function dur(seconds) {
    if (seconds === null || seconds === undefined || !isFinite(seconds)) return "–";
    let s = Math.max(0, Math.round(seconds));
    if (s < 60) return s + "s";
    const m = Math.floor(s / 60); s %= 60;
    if (m < 60) return m + "m " + String(s).padStart(2, "0") + "s";
    const h = Math.floor(m / 60);
    return h + "h " + String(m % 60).padStart(2, "0") + "m";
  }

  // Times in the user's own zone, the zone said (as the reports say UTC or CET).
  function localTime(epoch) {
    if (!epoch) return "–";
    return new Date(epoch * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit",
                                                          timeZoneName: "short" });
  }

  // The reader's zone by its short name (CET, GMT+5:30), said beside the times the page writes.
  function zoneName(epoch) {
    const part = new Intl.DateTimeFormat([], { timeZoneName: "short" }).formatToParts(new Date(epoch * 1000))
      .find(function (p) { return p.type === "timeZoneName"; });
    return part ? part.value : "";
  }

  // A timeline the server drew has its ticks in the server's zone: each tick carries its epoch,
  // so its label is said again in the reader's zone, and the zone under the lanes with them.
  function localTicks(svg) {
    const seconds = Number(svg.getAttribute("data-tick-step")) < 60;
    svg.querySelectorAll("g.tick[data-at]").forEach(function (g) {
      const d = new Date(Number(g.getAttribute("data-at")) * 1000);
      const label = g.querySelector("text");
      if (!label) return;
      label.textContent = d.getHours() === 0 && d.getMinutes() === 0 && d.getSeconds() === 0
        ? d.getDate() + " " + d.toLocaleDateString([], { month: "short" })   // "29 Nov", as the server says a day
        : d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: seconds ? "2-digit" : undefined,
                                     hourCycle: "h23" });
    });
    const zone = svg.querySelector("text.zone");
    if (zone) zone.textContent = zoneName(Number(svg.getAttribute("data-start")) || Date.now() / 1000);
  }

  // As the reports say it: to the cent, or to a hundredth of a cent below ten cents.
  function money(x) {
    if (x === null || x === undefined) return "–";
    const n = Number(x);
    return "$" + (n >= 0.1 || n === 0 ? n.toFixed(2) : n.toFixed(4));
  }

  function scoreClass(n) { return n >= 80 ? "good" : n >= 50 ? "fair" : "poor"; }

  // Countdowns and ages tick every second from the epochs the snapshot gave.
  function tick() {
    const now = serverNow();
    document.querySelectorAll("[data-until]").forEach(function (node) {
      const left = Number(node.dataset.until) - now;
      node.textContent = (node.dataset.label || "") + (left > 0 ? dur(left) + " left" : "due");
    });
    document.querySelectorAll("[data-since]").forEach(function (node) {
      node.textContent = (node.dataset.label || "") + dur(now - Number(node.dataset.since)) + " ago";
    });
  }

  // --- actions (genesis/actions/): buttons only where this browser holds the write key -------

  let csrf = "";

  function loadCsrf() {
    return fetch("/api/csrf", { cache: "no-store", credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (d) { csrf = d.csrf || ""; body.dataset.act = csrf ? "yes" : "no"; })
      .catch(function () { body.dataset.act = "no"; });
  }

  function said(text, ok) {
    const node = document.getElementById("act-result");
    if (!node) return;
    node.textContent = text;
    node.dataset.ok = ok ? "yes" : "no";
  }

  function seconds(text) {
    const m = /^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$/i.exec(text || "");
    if (!m) return 0;
    return Number(m[1]) * { "": 1, s: 1, m: 60, h: 3600, d: 86400 }[m[2].toLowerCase()];
  }

  // What an action asks first (a note, a duration, a phase), then, for what cannot be undone, a confirmation.
  function act(key, a) {
    const extra = {};
    if (a.ask === "note") {
      const note = window.prompt(a.label + ": a note for the agent (written under the task)");
      if (!note) return;
      extra.note = note;
    } else if (a.ask === "duration") {
      const d = window.prompt(a.label + ": how much longer (15m, 1h)", "30m");
      if (!d) return;
      extra.seconds = seconds(d);
      if (!extra.seconds) { said("not a duration: " + d + " (write 15m or 1h)", false); return; }
    } else if (a.ask === "phase") {
      const phase = window.prompt(a.label + ": which phase's commits (Builder, Criticizer, Planner)", "Builder");
      if (!phase) return;
      extra.phase = phase;
    }
    if (a.confirm && !window.confirm(a.label + "? This cannot be undone.")) return;
    said(a.label + "…", true);
    fetch("/api/act", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Genesis-CSRF": csrf },
      body: JSON.stringify(Object.assign({ key: key, action: a.action }, extra)),
    })
      .then(function (r) { return r.json().then(function (d) { said(r.ok ? d.said : d.error, r.ok); }); })
      .catch(function () { said("the action could not be sent", false); });
  }

  function buttons(key, actions) {
    const box = el("div", "actions");
    if (!csrf || !actions) return box;
    actions.forEach(function (a) {
      const b = el("button", "act", a.label);
      b.type = "button";
      b.dataset.action = a.action;
      if (a.confirm) b.dataset.confirm = "yes";
      b.addEventListener("click", function () { act(key, a); });
      box.appendChild(b);
    });
    return box;
  }

  // An alert's action link, opened: its one button uses it.
  function actPage() {
    const button = document.getElementById("act-link");
    button.addEventListener("click", function () {
      button.disabled = true;
      fetch(window.location.pathname, { method: "POST", credentials: "omit" })
        .then(function (r) { return r.text(); })
        .then(function (text) { document.getElementById("act-said").textContent = text; })
        .catch(function () { document.getElementById("act-said").textContent = "the action could not be sent"; });
    });
    body.dataset.live = "yes";
  }

  // --- the overview --------------------------------------------------------------------------

  function row(parent, label, value, cls) {
    if (value === null || value === undefined) return null;
    const line = el("div", "tile-row " + (cls || ""));
    line.appendChild(el("span", "k", label));
    const v = el("span", "v " + (cls || ""), value);
    line.appendChild(v);
    parent.appendChild(line);
    return v;
  }

  const MERGE_SAID = { green: "green, landed", red: "red, not landed", dropped: "dropped lines, not landed" };

  function tile(t, generated) {
    const node = el("article", "tile");
    node.dataset.key = t.key;
    node.dataset.colour = t.colour;
    const head = el("div", "tile-head");
    const link = el("a", "tile-title", t.title);
    link.href = t.href;
    head.appendChild(link);
    head.appendChild(el("span", "tile-state", t.state));
    node.appendChild(head);
    row(node, "on", t.place, "tile-place");
    row(node, "phase", t.phase || "–", "tile-phase");
    row(node, "health", t.health, "tile-health");
    if (t.heartbeat_age_seconds !== null && t.heartbeat_age_seconds !== undefined) {
      const v = row(node, "heartbeat", "", "tile-beat");
      v.dataset.since = String(generated - t.heartbeat_age_seconds);
    }
    row(node, "tool", t.tool, "tile-tool");
    if (t.stuck_at_epoch) {
      // Why a tile whose retry already runs is red: its agent was killed as stuck lately.
      const v = row(node, "stuck", "", "tile-killed");
      v.dataset.since = String(t.stuck_at_epoch);
      v.dataset.label = "killed ";
    }
    if (t.wait) {
      const v = row(node, "wait", "", "tile-wait");
      if (t.wait.until_epoch) {
        v.dataset.until = String(t.wait.until_epoch);
        v.dataset.label = (t.wait.kind || "wait") + ": ";
      } else {
        v.textContent = t.wait.kind || "wait";
      }
      if (t.wait.reason) v.title = t.wait.reason;
    }
    row(node, "breaker", t.breaker, "tile-breaker breaker-" + String(t.breaker || "").toLowerCase());
    row(node, "attempts", t.attempts ? String(t.attempts) : null, "tile-attempts");
    row(node, "why", t.reason || null, "tile-reason");
    if (t.merge) {  // the last merge's evidence: its checks on the merged tree green or red, or lines lost
      const v = row(node, "merge", MERGE_SAID[t.merge.result] || t.merge.result, "tile-merge merge-" + t.merge.result);
      if (t.merge.said) v.title = t.merge.said;
    }
    node.appendChild(buttons(t.key, t.actions));
    return node;
  }

  function list(title, items, text) {
    const box = el("div", "mini");
    box.appendChild(el("h3", null, title));
    const ul = el("ul");
    items.forEach(function (item) { ul.appendChild(el("li", null, text(item))); });
    box.appendChild(ul);
    return box;
  }

  function project(p, generated) {
    const sec = el("section", "project");
    sec.dataset.key = p.key;
    const head = el("div", "project-head");
    head.appendChild(el("h2", "project-name", p.name));
    const badge = el("span", "score-badge " + scoreClass(p.score), String(p.score));
    badge.title = "health score";
    head.appendChild(badge);
    head.appendChild(el("span", "muted project-cost", money(p.cost_usd)));
    sec.appendChild(head);
    sec.appendChild(el("p", "muted path", p.shown_path || p.path));
    sec.appendChild(buttons(p.key, p.fleet_actions));
    if (p.error) sec.appendChild(el("p", "error", p.error));
    if (p.reasons && p.reasons.length) {
      const ul = el("ul", "reasons");
      p.reasons.forEach(function (r) { ul.appendChild(el("li", null, r.why)); });
      sec.appendChild(ul);
    }
    const extra = el("div", "minis");
    if (p.pauses.length) extra.appendChild(list("Pauses", p.pauses, function (x) {
      return x.kind + (x.until_epoch ? " until " + localTime(x.until_epoch) : "") + (x.reason ? ": " + x.reason : "");
    }));
    if (p.actions && p.actions.length) extra.appendChild(list("Actions", p.actions, function (x) {
      return localTime(x.at_epoch) + " " + x.action + (x.task ? " " + x.task : "") + ", from the " + x.source +
        " (" + x.credential + "): " + x.said;
    }));
    if (p.retries.length) extra.appendChild(list("Active retries", p.retries, function (x) {
      return x.title + " (attempt " + x.attempt + ")" + (x.reason ? ": " + x.reason : "");
    }));
    if (p.escalations.length) extra.appendChild(list("Escalations in progress", p.escalations, function (x) {
      return x.title + (x.reason ? ": " + x.reason : "");
    }));
    if (extra.childNodes.length) sec.appendChild(extra);
    const tiles = el("div", "tiles");
    p.tiles.forEach(function (t) { tiles.appendChild(tile(t, generated)); });
    if (!p.tiles.length) tiles.appendChild(el("p", "muted", "no loop has run here yet"));
    sec.appendChild(tiles);
    return sec;
  }

  function drawOverview(doc) {
    offset = Date.now() / 1000 - doc.generated_at_epoch;
    const m = doc.machine;
    const score = document.getElementById("machine-score");
    score.textContent = String(m.score);
    score.className = "score " + scoreClass(m.score);
    document.getElementById("loops-running").textContent = String(m.loops_running);
    document.getElementById("machine-cost").textContent = money(m.cost_usd);
    const reasons = document.getElementById("machine-reasons");
    reasons.replaceChildren();
    m.reasons.slice(0, 6).forEach(function (r) { reasons.appendChild(el("li", null, r.why)); });
    const problems = document.getElementById("problems");
    problems.hidden = !doc.problems.length;
    problems.textContent = doc.problems.join("; ");
    const box = document.getElementById("projects");
    const sections = doc.projects.map(function (p) { return project(p, doc.generated_at_epoch); });
    if (!sections.length) sections.push(el("p", "muted", "No loop or fleet runs on this machine, and no project was given."));
    box.replaceChildren.apply(box, sections);
    const alerts = document.getElementById("alerts");
    alerts.replaceChildren();
    doc.alerts.forEach(function (a) {
      const li = el("li", "alert severity-" + a.severity);
      li.appendChild(el("span", "when", localTime(a.at_epoch)));
      li.appendChild(el("span", "sev", a.severity));
      li.appendChild(el("span", "who", a.project));
      li.appendChild(el("span", "what", a.title));
      li.appendChild(el("span", "decision muted", a.decision));
      alerts.appendChild(li);
    });
    if (!doc.alerts.length) alerts.appendChild(el("li", "muted", "no alert"));
    tick();
    body.dataset.updated = String(doc.generated_at_epoch);
  }

  function live(draw) {
    const state = document.getElementById("live");
    const source = new EventSource("/api/events");
    source.addEventListener("open", function () {
      body.dataset.live = "yes";
      body.dataset.stream = "open";
      state.textContent = "live";
      state.className = "live on";
    });
    source.addEventListener("error", function () {
      body.dataset.stream = "lost";
      state.textContent = "reconnecting…";
      state.className = "live off";
    });
    source.addEventListener("state", function (event) { draw(JSON.parse(event.data)); });
    return source;
  }

  function overview() {
    fetch("/api/state", { cache: "no-store" }).then(function (r) { return r.json(); }).then(drawOverview)
      .catch(function () { /* the event stream draws it */ });
    live(drawOverview);
    setInterval(tick, 1000);
  }

  // --- a loop's page -------------------------------------------------------------------------

  let lastSvg = null;

  function drawLoop(doc) {
    offset = Date.now() / 1000 - doc.generated_at_epoch;
    document.getElementById("loop-title").textContent = doc.title;
    document.title = "Genesis: " + doc.title;
    const st = doc.status || {};
    const bits = [st.state || "unknown"];
    if (st.phase) bits.push(st.phase.name + (st.phase.health_class ? " (" + st.phase.health_class + ")" : ""));
    if (doc.run_id) bits.push("run " + doc.run_id);
    if (doc.error) bits.push(doc.error);
    document.getElementById("loop-state").textContent = bits.join(" · ");
    const acts = JSON.stringify(doc.actions || []);
    const box = document.getElementById("loop-actions");
    if (box.dataset.shown !== acts) {  // redrawn only when the offer changed: a click is never lost to a redraw
      box.dataset.shown = acts;
      box.replaceChildren(buttons(doc.key, doc.actions));
    }
    if (doc.timeline !== lastSvg) {
      lastSvg = doc.timeline;
      const box = document.getElementById("timeline");
      if (doc.timeline) {
        // Parsed as SVG (XML), never as HTML; the server escaped every string in it.
        const parsed = new DOMParser().parseFromString(doc.timeline, "image/svg+xml").documentElement;
        if (parsed && parsed.nodeName === "svg") {
          const svg = document.importNode(parsed, true);
          localTicks(svg);
          box.replaceChildren(svg);
        }
      } else {
        box.replaceChildren(el("p", "muted", "no run recorded yet"));
      }
    }
    const pre = document.getElementById("transcript");
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    const text = doc.tail.join("\n");
    if (pre.textContent !== text) {
      pre.textContent = text;
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    }
    document.getElementById("tail-file").textContent = doc.tail_file || "";
    const inc = document.getElementById("incidents");
    const open = new Set(Array.from(inc.querySelectorAll("details[open]")).map(function (d) { return d.dataset.id; }));
    inc.replaceChildren();
    doc.incidents.forEach(function (i) {
      const d = el("details", "incident");
      d.dataset.id = i.id;
      if (open.has(i.id)) d.open = true;
      d.appendChild(el("summary", null, localTime(i.at_epoch) + " " + i.kind + " · " + (i.phase || "?") +
        " iteration " + (i.iteration === null ? "?" : i.iteration) + ": " + i.reason));
      d.appendChild(el("pre", "forensics", i.forensics || "(no forensics kept)"));
      inc.appendChild(d);
    });
    if (!doc.incidents.length) inc.appendChild(el("p", "muted", "no incident in this run"));
    // Each task's evidence: the checks Genesis ran itself when a phase ticked it done.
    const ev = document.getElementById("evidence");
    ev.replaceChildren();
    (doc.evidence || []).forEach(function (r) {
      const code = r.exit_code === null ? "killed or not started" : "exit " + r.exit_code;
      const ran = r.command ? " · `" + r.command + "` " + code : "";
      const again = r.reopened ? " · reopened " + r.reopened + (r.reopened === 1 ? " time" : " times") : "";
      const d = el("details", "evidence");
      d.appendChild(el("summary", null, r.task + ": " + r.outcome + ran + " · " + localTime(r.at_epoch) + " " +
        (r.phase || "?") + " iteration " + (r.iteration === null ? "?" : r.iteration) + again));
      if (r.tail.length) d.appendChild(el("pre", "forensics", r.tail.join("\n")));
      ev.appendChild(d);
    });
    if (!(doc.evidence || []).length) ev.appendChild(el("p", "muted", "no task ticked done in this run"));
    // What the box's allow-list refused the agent (host:port and count), one line.
    document.getElementById("network").textContent = doc.network || "no connection refused in this run";
    const task = doc.task;
    document.getElementById("attempts-panel").hidden = !task;
    if (task) {
      document.getElementById("task-reason").textContent = task.state + (task.reason ? ": " + task.reason : "");
      const ol = document.getElementById("attempts");
      ol.replaceChildren();
      task.attempts.forEach(function (a) {
        const end = a.ended_epoch ? "ended " + localTime(a.ended_epoch) + ", exit " +
          (a.exit_code === null ? "?" : a.exit_code) + ", " + (a.outcome || "?") : "running";
        ol.appendChild(el("li", "attempt", a.kind + " (" + a.agent + "), started " + localTime(a.started_epoch) +
          ", " + end + (a.cost_usd !== null && a.cost_usd !== undefined ? ", " + money(a.cost_usd) : "") +
          (a.why ? ": " + a.why : "")));
      });
      // Each merge with its evidence: the checks as run on the merged tree, a red one's tail, lost hunks.
      const merges = document.getElementById("merges");
      merges.replaceChildren();
      (task.merges || []).forEach(function (m) {
        const back = m.to ? " (back to " + (m.to === "task" ? "its task" : "review") + ")" : "";
        const d = el("details", "merge merge-" + m.result);
        const what = (m.result === "dropped" ? m.lost : m.checks).join("; ");
        d.appendChild(el("summary", null, localTime(m.at_epoch) + " " + (MERGE_SAID[m.result] || m.result) + back +
          (what ? ": " + what : "")));
        if (m.tail.length) d.appendChild(el("pre", "forensics", m.tail.join("\n")));
        merges.appendChild(d);
      });
      if (!(task.merges || []).length) merges.appendChild(el("p", "muted", "no merge yet"));
    }
    body.dataset.updated = String(doc.generated_at_epoch);
  }

  function loopPage() {
    const key = body.dataset.key;
    function poll() {
      fetch("/api/loop/" + encodeURIComponent(key), { cache: "no-store" })
        .then(function (r) { return r.json(); })
        .then(function (doc) {
          if (doc.error && !doc.key) {
            document.getElementById("loop-title").textContent = "no such loop";
            return;
          }
          drawLoop(doc);
          body.dataset.live = "yes";
        })
        .catch(function () { document.getElementById("live").textContent = "reconnecting…"; })
        .finally(function () { setTimeout(poll, 1000); });
    }
    document.getElementById("live").textContent = "live (every second)";
    document.getElementById("live").className = "live on";
    poll();
  }

  // --- metrics -------------------------------------------------------------------------------

  const charts = {};

  function css(name, fallback) {
    const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    return v || fallback;
  }

  function chart(id, config) {
    config.options = Object.assign({ animation: false, responsive: true, maintainAspectRatio: false }, config.options);
    config.options.plugins = Object.assign({ title: { display: !!config.title, text: config.title } },
                                           config.options.plugins);
    if (charts[id]) {
      charts[id].data = config.data;
      charts[id].update("none");
    } else {
      charts[id] = new window.Chart(document.getElementById(id), config);
    }
  }

  const SHOWN = 15;                    // bars per chart: the keys with the most runs

  function cut(text, n) { text = String(text); return text.length > n ? text.slice(0, n - 1) + "…" : text; }

  function byChart(id, all, sideways) {
    const ok = css("--ok", "#3a9d5d"), bad = css("--bad", "#d64541");
    const rows = all.slice().sort(function (a, b) { return b.phases - a.phases; }).slice(0, SHOWN);
    const axis = { stacked: true, ticks: { callback: function (v) { return cut(this.getLabelForValue(v), 26); } } };
    const count = { stacked: true, beginAtZero: true, ticks: { precision: 0 } };
    chart(id, {
      type: "bar",
      data: {
        labels: rows.map(function (r) { return r.key; }),
        datasets: [{ label: "succeeded", data: rows.map(function (r) { return r.succeeded; }), backgroundColor: ok },
                   { label: "failed", data: rows.map(function (r) { return r.failed; }), backgroundColor: bad }],
      },
      options: { indexAxis: sideways ? "y" : "x", scales: sideways ? { y: axis, x: count } : { x: axis, y: count },
                 plugins: { tooltip: { callbacks: { footer: function (items) {
                   const r = rows[items[0].dataIndex];
                   return r && r.failure_rate !== null ? "failure rate " + Math.round(r.failure_rate * 100) + "%" : "";
                 } } } } },
    });
  }

  function drawMetrics(doc) {
    window.Chart.defaults.color = css("--muted", "#59636e");
    window.Chart.defaults.borderColor = css("--line", "#d8dee4");
    const by = doc.by || {};
    byChart("chart-by-agent", by.agent || [], false);
    byChart("chart-by-model", by.model || [], false);
    byChart("chart-by-task", by.task || [], true);
    byChart("chart-by-project", by.project || [], true);
    const t = doc.over_time || { buckets_epoch: [], restarts: [], escalations: [], failures: [] };
    chart("chart-over-time", {
      type: "line",
      data: {
        labels: (t.buckets_epoch || []).map(function (e) {
          return new Date(e * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
        }),
        datasets: [{ label: "restarts", data: t.restarts || [], borderColor: css("--warn", "#e08a1e") },
                   { label: "escalations", data: t.escalations || [], borderColor: css("--info", "#3d7fd6") },
                   { label: "failures", data: t.failures || [], borderColor: css("--bad", "#d64541") }],
      },
      options: { scales: { x: { title: { display: true, text: "time (" + zoneName(doc.generated_at_epoch) + ")" } },
                           y: { beginAtZero: true, ticks: { precision: 0 } } } },
    });
    const h = doc.retry_histogram || { labels: [], counts: [] };
    chart("chart-retries", {
      type: "bar",
      data: { labels: h.labels, datasets: [{ label: "runs", data: h.counts, backgroundColor: css("--info", "#3d7fd6") }] },
      options: { scales: { y: { beginAtZero: true, ticks: { precision: 0 } } } },
    });
    const retry = Number(doc.retry_cost_usd || 0), all = Number(doc.cost_usd || 0);
    chart("chart-retry-cost", {
      type: "bar", title: "Cost of retries: " + money(retry) + " of " + money(all),
      data: { labels: ["first attempts", "retries"],
              datasets: [{ label: "USD", data: [Math.max(0, all - retry), retry],
                           backgroundColor: [css("--ok", "#3a9d5d"), css("--warn", "#e08a1e")] }] },
      options: { indexAxis: "y", scales: { x: { beginAtZero: true } } },
    });
    const note = document.getElementById("metrics-note");
    note.textContent = "As of " + localTime(doc.generated_at_epoch) + (doc.error ? " · " + doc.error : "");
    body.dataset.updated = String(doc.generated_at_epoch);
    body.dataset.charts = "drawn";
  }

  function metricsPage() {
    function load() {
      fetch("/api/metrics", { cache: "no-store" }).then(function (r) { return r.json(); }).then(drawMetrics)
        .catch(function (e) { document.getElementById("metrics-note").textContent = "cannot load the metrics: " + e; })
        .finally(function () { setTimeout(load, 30000); });
    }
    document.getElementById("live").textContent = "every 30 s";
    body.dataset.live = "yes";
    load();
  }

  if (page === "act") actPage();
  else if (page === "overview") loadCsrf().then(overview);
  else if (page === "loop") loadCsrf().then(loopPage);
  else if (page === "metrics") metricsPage();
})();
