// ILB dashboard: polls /ui/api/ and renders it. Plain JavaScript, no build.
"use strict";
// The units and states the tables use, as their titles explain them.
const UNIT_HELP = "token-cost units per second: prompt tokens × the model's prompt_token_cost + output tokens × its output_token_cost (1 and 4 by default), the unit of demand and capacity";
const SATURATION_HELP = "saturated: every serving replica of the cluster has a queue or a full KV cache, so ILB steers and sheds away from it; N saturated: that many of its replicas are; none: no replica is";
(function () {
  const params = new URLSearchParams(location.search);
  const refreshSec = Math.max(0.5, parseFloat(params.get("refresh")) || 3);
  const api = new URL("api/", location.href).pathname; // works wherever /ui/ is mounted
  const $ = (id) => document.getElementById(id);
  let clusterInfo = {}; // cluster → {region, engine}
  let timer = null;
  const last = []; // the JSON each part was last drawn from
  let computedAt = null; // of the weights in force

  // ---- helpers -------------------------------------------------------------
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("data-") || k === "id" || k === "title" || k === "href" || k === "colspan" || k === "style") e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const k of kids.flat(Infinity)) {
      if (k === null || k === undefined || k === false) continue;
      e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    }
    return e;
  }
  const pct = (f, d = 1) => (f === null || f === undefined) ? "–" : (100 * f).toFixed(d) + "%";
  const num = (v, d = 0) => (v === null || v === undefined) ? "–" : Number(v).toLocaleString(undefined, { maximumFractionDigits: d, minimumFractionDigits: d });
  const time = (s) => { const d = new Date(s); return isNaN(d) || d.getFullYear() < 2000 ? "–" : d.toLocaleTimeString([], { hour12: false }); };
  const ago = (s) => {
    const sec = (Date.now() - new Date(s).getTime()) / 1000;
    if (!isFinite(sec)) return "";
    if (sec < 90) return Math.max(0, Math.round(sec)) + "s ago";
    if (sec < 5400) return Math.round(sec / 60) + "m ago";
    return Math.round(sec / 3600) + "h ago";
  };
  async function get(path) {
    // A hung request must not stop the polling for good.
    const r = await fetch(api + path, { cache: "no-store", signal: AbortSignal.timeout(10000) });
    const body = await r.json().catch(() => null);
    if (!r.ok) throw new Error((body && body.error && body.error.message) || (path + ": HTTP " + r.status));
    return body;
  }
  function bar(f, hot) {
    const w = Math.max(0, Math.min(1, f || 0));
    return el("span", { class: "bar" + (hot ? " hot" : "") }, el("i", { style: "width:" + (100 * w).toFixed(1) + "%" }));
  }

  // ---- heatmap ---------------------------------------------------------------
  function heatStyle(share) {
    if (share <= 0) return "";
    const p = Math.round(12 + 88 * share); // a visible tint even for small shares
    const fg = share >= 0.45 ? "color:var(--heat-fg);" : "";
    return "background:color-mix(in srgb, var(--heat) " + p + "%, var(--cell));" + fg;
  }
  // shortReason is the first words of an exclusion reason ("residency: ...").
  function shortReason(r) {
    const head = r.split(/[:(]/)[0].trim();
    return head.length > 22 ? head.slice(0, 20) + "…" : head;
  }
  function shedText(s) {
    const parts = [];
    for (const p of ["critical", "standard", "sheddable"]) if (s && s[p] > 0) parts.push(p + " " + pct(s[p]));
    return parts.length ? "shed " + parts.join(", ") : "no shedding";
  }
  // inForce is the weights version the header shows (the weights
  // endpoint's); the versions list marks the same one "in force", so the
  // two never disagree between polls of their endpoints.
  let inForce = "";
  function renderWeights(h) {
    inForce = h.version;
    $("version").textContent = h.version;
    $("policy").textContent = h.policy;
    computedAt = h.computed;
    const st = $("status");
    st.hidden = !h.status;
    st.textContent = h.status || "";
    const root = $("heatmaps");
    root.dataset.version = h.version;
    root.replaceChildren();
    if (!h.models || !h.models.length) { root.append(el("p", { class: "empty", text: "no models" })); return; }
    for (const m of h.models) {
      for (const c of m.clusters) clusterInfo[c.name] = c;
      const head = el("tr", {}, el("th"), m.clusters.map((c) =>
        el("th", { title: c.name + " (" + (c.engine || "?") + ", " + (c.region || "?") + ")" }, c.name,
          el("small", {}, [c.engine, c.region].filter(Boolean).join(" · ")),
          el("small", {}, c.utilization != null ? "plan " + pct(c.utilization, 0) : ""))),
        el("th", {}, "shedding"));
      const rows = m.rows.map((r) => el("tr", { class: r.no_capacity ? "nocap" : "", "data-source": r.source },
        el("th", { class: "src", title: r.summary || "" }, r.source,
          el("small", { title: UNIT_HELP }, [r.region, r.demand > 0 ? "demand " + num(r.demand) + " token-cost/s" : ""].filter(Boolean).join(" · "))),
        r.cells.map((c) => {
          const cls = "cell" + (c.excluded ? " excluded" : c.share === 0 ? " zero" : "");
          return el("td", {
            class: cls, style: heatStyle(c.share),
            title: r.source + " → " + c.cluster + ": weight " + c.weight + " of 10000" + (c.excluded ? "\nexcluded: " + c.excluded : ""),
            "data-source": r.source, "data-model": m.model, "data-cluster": c.cluster,
            "data-share": c.share.toFixed(4), "data-weight": String(c.weight),
          }, c.excluded && c.share === 0 ? el("span", {}, "✕ " + shortReason(c.excluded)) : pct(c.share));
        }),
        el("td", { class: "shed" + (Object.values(r.shed || {}).some((v) => v > 0) ? " on" : "") },
          r.no_capacity ? "no capacity: 503" : shedText(r.shed))));
      root.append(el("div", { class: "scroll" }, el("table", { class: "heat", id: "heat-" + m.model, "data-model": m.model },
        el("caption", {}, m.model), el("thead", {}, head), el("tbody", {}, rows))));
    }
  }

  // ---- clusters ----------------------------------------------------------------
  function renderClusters(cn) {
    $("signals-at").textContent = cn.at && new Date(cn.at).getFullYear() > 2000 ? "signals " + ago(cn.at) : "no signals monitor";
    const rows = cn.clusters.map((c) => {
      const info = clusterInfo[c.name] || {};
      const states = [];
      if (!c.known) states.push(el("span", { class: "badge" }, "unknown"));
      if (c.ready) states.push(el("span", { class: "badge ok" }, c.ready + " ready"));
      if (c.warming) states.push(el("span", { class: "badge warn" }, c.warming + " warming"));
      if (c.stale) states.push(el("span", { class: "badge warn" }, c.stale + " stale"));
      if (c.starting) states.push(el("span", { class: "badge" }, c.starting + " starting"));
      if (c.draining) states.push(el("span", { class: "badge warn" }, c.draining + " draining"));
      if (c.unhealthy) states.push(el("span", { class: "badge bad" }, c.unhealthy + " unhealthy"));
      return el("tr", { "data-cluster": c.name },
        el("td", {}, el("b", {}, c.name)), el("td", {}, [info.engine, info.region].filter(Boolean).join(" · ")),
        el("td", {}, states),
        el("td", {}, c.saturated ? el("span", { class: "badge bad" }, "saturated") :
          c.saturated_replicas ? el("span", { class: "badge warn" }, c.saturated_replicas + " saturated") : "none"),
        el("td", { class: "num" }, num(c.waiting)), el("td", { class: "num" }, num(c.running)),
        el("td", {}, c.kv_usage == null ? "–" : [bar(c.kv_usage, c.kv_usage > 0.9), pct(c.kv_usage, 0)]),
        el("td", { class: "num" }, num(c.tokens_per_second)),
        el("td", { class: "num" }, c.capacity == null ? "–" : num(c.capacity)),
        el("td", {}, c.utilization == null ? "–" : [bar(c.utilization, c.utilization > 1), pct(c.utilization, 0)]));
    });
    const t = el("table", { class: "grid" },
      el("thead", {}, el("tr", {}, ["cluster", "engine · region", "replicas"].map((h) => el("th", {}, h)),
        el("th", { title: SATURATION_HELP }, "saturation"),
        ["queue", "running"].map((h) => el("th", { class: "num" }, h)), el("th", {}, "KV cache"),
        el("th", { class: "num" }, "tokens/s"), el("th", { class: "num", title: UNIT_HELP }, "capacity (token-cost/s)"),
        el("th", {}, "planned util"))),
      el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: "10", class: "empty" }, "no clusters"))));
    $("clusters").replaceChildren(el("div", { class: "scroll" }, t));
  }

  // ---- charts --------------------------------------------------------------------
  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }
  // chart draws series [{name, points: [[ms, value|null]]}] with y from 0 to
  // max(yMin, the largest value); fmt formats the y labels.
  function chart(host, series, yMin, fmt, t0, t1) {
    const W = Math.max(240, host.clientWidth || 320), H = 140, L = 40, R = 8, T = 8, B = 18;
    let yMax = yMin;
    for (const s of series) for (const [, v] of s.points) if (v != null && v > yMax) yMax = v;
    const x = (t) => L + (W - L - R) * (t1 > t0 ? (t - t0) / (t1 - t0) : 1);
    const y = (v) => T + (H - T - B) * (1 - v / (yMax || 1));
    const g = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img" });
    for (const f of [0, 0.5, 1]) {
      g.append(svg("line", { class: "axis", x1: L, x2: W - R, y1: y(f * yMax), y2: y(f * yMax) }));
      const lab = svg("text", { x: L - 4, y: y(f * yMax) + 3, "text-anchor": "end" });
      lab.textContent = fmt(f * yMax);
      g.append(lab);
    }
    const span = Math.round((t1 - t0) / 60000);
    for (const [t, txt, a] of [[t0, span > 0 ? "−" + span + "m" : "", "start"], [t1, "now", "end"]]) {
      const lab = svg("text", { x: x(t), y: H - 4, "text-anchor": a });
      lab.textContent = txt;
      g.append(lab);
    }
    const legend = el("div", { class: "legend" });
    series.forEach((s, i) => {
      const color = "var(--series-" + ((i % 6) + 1) + ")";
      let d = "", pen = false;
      for (const [t, v] of s.points) {
        if (v == null) { pen = false; continue; }
        d += (pen ? "L" : "M") + x(t).toFixed(1) + " " + y(v).toFixed(1);
        pen = true;
      }
      if (d) g.append(svg("path", { class: "series", d: d, stroke: color }));
      legend.append(el("span", {}, el("i", { style: "background:" + color }), s.name));
    });
    host.replaceChildren(g, legend);
  }
  function renderHistory(h) {
    const ss = h.samples || [];
    const now = Date.now();
    const t0 = ss.length ? new Date(ss[0].at).getTime() : now - 60000;
    const t1 = ss.length ? new Date(ss[ss.length - 1].at).getTime() : now;
    const names = ss.length ? ss[ss.length - 1].clusters.map((c) => c.name) : [];
    const per = (field) => names.map((n) => ({
      name: n,
      points: ss.map((s) => { const c = s.clusters.find((x) => x.name === n); return [new Date(s.at).getTime(), c ? c[field] : null]; }),
    }));
    const p0 = (v) => (100 * v).toFixed(0) + "%";
    chart($("chart-util"), per("utilization"), 1, p0, t0, t1);
    chart($("chart-kv"), per("kv_usage"), 1, p0, t0, t1);
    chart($("chart-queue"), per("waiting"), 4, (v) => v.toFixed(0), t0, t1);
    const rps = (s, i) => i > 0 ? s.shed.requests / Math.max(0.001, (new Date(s.at) - new Date(ss[i - 1].at)) / 1000) : null;
    chart($("chart-shed"), [
      { name: "shed (observed)", points: ss.map((s, i) => [new Date(s.at).getTime(), i > 0 ? s.shed.rate : null]) },
      { name: "planned, sheddable (max cell)", points: ss.map((s) => [new Date(s.at).getTime(), s.shed.planned.sheddable]) },
      { name: "planned, standard (max cell)", points: ss.map((s) => [new Date(s.at).getTime(), s.shed.planned.standard]) },
    ], 0.1, p0, t0, t1);
    const last = ss.length > 1 ? rps(ss[ss.length - 1], ss.length - 1) : null;
    $("chart-shed").title = last == null ? "" : "last interval: " + last.toFixed(1) + " decisions/s";
  }

  // ---- decisions ------------------------------------------------------------------
  let selected = "";
  function renderDecisions(recs) {
    const tb = $("decisions").tBodies[0];
    if (!recs.length) { tb.replaceChildren(el("tr", {}, el("td", { colspan: "11", class: "empty" }, "no decisions yet"))); return; }
    tb.replaceChildren(...recs.map((r) => {
      const refused = !r.chosen;
      const cls = ["click", r.mismatch ? "mismatch" : "", refused ? "refused" : "", r.request_id === selected ? "selected" : ""].join(" ");
      return el("tr", { class: cls, "data-request-id": r.request_id },
        el("td", {}, time(r.start)),
        el("td", {}, el("a", { class: "mono", href: "#decision/" + encodeURIComponent(r.request_id) }, r.request_id)),
        el("td", {}, r.source), el("td", {}, r.model || r.requested_model || "–"), el("td", {}, r.priority),
        el("td", {}, r.chosen || "–"),
        el("td", {}, r.served_cluster ? (r.mismatch ? "⚠ " : "") + r.served_cluster : (r.complete ? "–" : "…")),
        el("td", { class: "status" }, r.status || "…"), el("td", {}, r.reason),
        el("td", { class: "num" }, r.decision_us + " µs"), el("td", { class: "num" }, r.total_ms ? r.total_ms.toFixed(1) + " ms" : "–"));
    }));
  }
  $("decisions").tBodies[0].addEventListener("click", (ev) => {
    const tr = ev.target.closest("tr[data-request-id]");
    if (!tr || ev.target.closest("a")) return;
    location.hash = "#decision/" + encodeURIComponent(tr.dataset.requestId);
  });

  // ---- explanation (what `ilb explain` prints) -----------------------------------
  function kv(pairs) {
    return el("dl", { class: "kv" }, pairs.filter(Boolean).map(([k, v, id]) => [el("dt", {}, k), el("dd", { id: id }, v)]));
  }
  function renderExplanation(r) {
    $("explain-id").textContent = r.request_id;
    const how = { body: "read from the body", header: "from x-ilb-model, body not read", default: "the request names none: the source's default model" }[r.model_from] || "";
    const out = [];
    out.push(kv([
      ["request", r.method + " " + r.path + " at " + new Date(r.start).toISOString()],
      ["source", r.source + " (priority " + r.priority + ")"],
      r.model && ["model", r.model + (r.requested_model && r.requested_model !== r.model ? " (asked for “" + r.requested_model + "”)" : "") + (how ? ", " + how : "") +
        "; stream " + r.stream + ", max_tokens " + (r.max_tokens || 0) + ", ~" + (r.prompt_tokens_estimate || 0) + " prompt tokens"],
      r.session_hash && ["session", "key from " + r.session_from + ", hash " + r.session_hash + ": the draw is the hash, so the session sticks to one cluster"],
      ["weights", r.weights_version || "–"],
      r.trace_id && ["trace", r.trace_id],
    ]));
    if (r.candidates && r.candidates.length) {
      let begin = 0;
      const rows = r.candidates.map((c) => {
        let interval = "–", note = c.excluded ? "excluded: " + c.excluded : "", slot = false;
        if (c.weight > 0) {
          const end = begin + c.weight;
          interval = "[" + begin + ", " + end + ")";
          if (r.chosen === c.cluster && r.slot >= begin && r.slot < end) { note = "← slot " + r.slot + " falls here"; slot = true; }
          begin = end;
        }
        if (c.saturated) note = (note ? note + "; " : "") + "saturated";
        if (r.chosen === c.cluster && !slot) note = (note ? note + "; " : "") + "chosen";
        return el("tr", { class: slot || r.chosen === c.cluster ? "slot" : "" },
          el("td", {}, c.cluster), el("td", { class: "num" }, c.weight), el("td", { class: "num" }, pct(c.share)),
          el("td", { class: "mono" }, interval), el("td", {}, note));
      });
      out.push(el("h3", {}, "candidates"), el("table", { class: "grid", id: "explain-candidates" },
        el("thead", {}, el("tr", {}, el("th", {}, "cluster"), el("th", { class: "num" }, "weight"), el("th", { class: "num" }, "share"), el("th", {}, "interval"), el("th", {}, "note"))),
        el("tbody", {}, rows)));
    }
    out.push(el("h3", {}, "outcome"));
    const pairs = [];
    if (r.chosen) {
      pairs.push(["draw", r.draw + " (" + (r.draw_from || "random") + ") → slot " + r.slot + " of " + r.total_weight]);
      pairs.push(["chosen", el("b", {}, r.chosen), "explain-chosen"]);
      pairs.push(["reason", r.reason + (r.redrawn ? " (first draw passed over: " + r.redrawn + ")" : "")]);
    } else {
      pairs.push(["answered", r.status + " by ILB itself (reason " + r.reason + ")", "explain-answered"]);
    }
    if (!r.complete) pairs.push(["served", "no response yet (in flight, or the client went away)"]);
    else if (r.served_cluster) pairs.push(["served", r.served_cluster + " at " + (r.upstream_host || "–") + ", weights " + (r.served_version || "–") + ", status " + r.status, "explain-served"]);
    else if (r.chosen) pairs.push(["served", "status " + r.status + ", no served-cluster report (a local reply from Envoy)"]);
    pairs.push(["timing", "decision " + r.decision_us + " µs, request to response headers " + (r.total_ms || 0).toFixed(1) + " ms"]);
    out.push(kv(pairs));
    if (r.mismatch) {
      out.push(el("div", { class: "callout", id: "explain-warning" }, r.served_cluster
        ? "⚠ Envoy served " + r.served_cluster + ", not " + r.chosen + ": it routed with weights " + (r.served_version || "–") + " while ILB decided on " + r.weights_version
        : "⚠ ILB chose " + r.chosen + ", but the response names no served cluster: a route without ILB's headers matched, or Envoy answered locally"));
    }
    $("explain-body").replaceChildren(...out);
  }
  async function route() {
    const m = location.hash.match(/^#decision\/(.+)$/);
    const panel = $("explain-panel");
    let id = "";
    try { id = m ? decodeURIComponent(m[1]) : ""; } catch (e) { id = ""; } // a malformed hash selects nothing
    selected = id;
    for (const tr of $("decisions").querySelectorAll("tr[data-request-id]")) tr.classList.toggle("selected", tr.dataset.requestId === selected);
    if (!m) { panel.hidden = true; return; }
    panel.hidden = false;
    $("explain-id").textContent = selected;
    $("explain-body").replaceChildren(el("p", { class: "empty" }, "loading…"));
    try {
      renderExplanation(await get("decisions/" + encodeURIComponent(selected)));
    } catch (e) {
      $("explain-body").replaceChildren(el("div", { class: "callout bad" }, e.message));
    }
    panel.scrollIntoView({ block: "nearest" });
  }
  window.addEventListener("hashchange", route);
  document.addEventListener("keydown", (ev) => { if (ev.key === "Escape" && location.hash) $("explain-close").click(); });
  $("explain-close").addEventListener("click", (ev) => { ev.preventDefault(); history.pushState("", "", location.pathname + location.search); route(); });

  // ---- versions ---------------------------------------------------------------------
  function renderVersions(vs) {
    const ol = $("versions");
    if (!vs.length) { ol.replaceChildren(el("li", { class: "empty" }, "none yet")); return; }
    const open = new Set([...ol.querySelectorAll("details[open]")].map((d) => d.dataset.version));
    ol.replaceChildren(...vs.map((v) => {
      const changes = v.cells.flatMap((c) => (c.changes || []).map((x) => c.source + "/" + c.model + ": " + x));
      const cells = v.cells.map((c) => el("tr", {},
        el("td", {}, c.source), el("td", {}, c.model),
        el("td", {}, c.targets.length ? c.targets.map((t) => t.cluster + " " + pct(t.weight / 10000)).join(", ") : el("span", { class: "bad" }, "no capacity")),
        el("td", {}, shedText(c.shed))));
      return el("li", { "data-version": v.version },
        el("details", { "data-version": v.version, open: open.has(v.version) },
          el("summary", {}, el("code", {}, v.version), el("span", {}, time(v.seen)), el("span", { class: "hint" }, v.policy),
            v.version === inForce ? el("span", { class: "badge ok" }, "in force") : null,
            v.status ? el("span", { class: "warn" }, v.status) : null,
            el("span", { class: "hint" }, changes.length ? changes.length + " change" + (changes.length > 1 ? "s" : "") : "")),
          changes.length ? el("div", { class: "changes" }, changes.slice(0, 12).map((x) => el("div", {}, x)), changes.length > 12 ? "…" : null) : null,
          el("table", { class: "grid" }, el("tbody", {}, cells))));
    }));
  }

  // ---- polling ------------------------------------------------------------------------
  function setConn(ok, msg) {
    $("conn-dot").className = "dot " + (ok ? "ok" : "bad");
    $("conn").textContent = msg;
  }
  async function poll() {
    clearTimeout(timer);
    const parts = [
      ["weights", renderWeights], ["clusters", renderClusters], ["history?points=240", renderHistory],
      ["decisions?limit=50", renderDecisions], ["versions?limit=50", renderVersions],
    ];
    const res = await Promise.allSettled(parts.map(([p]) => get(p)));
    const errs = [];
    res.forEach((r, i) => {
      if (r.status === "fulfilled") {
        // Redraw only what changed: a row under the pointer stays put.
        // The versions list marks the version the header shows: drawn
        // again when that changes.
        const key = JSON.stringify(r.value) + (parts[i][1] === renderVersions ? inForce : "");
        if (last[i] === key) return;
        try { parts[i][1](r.value); last[i] = key; } catch (e) { errs.push(parts[i][0] + ": " + e.message); }
      } else errs.push(r.reason.message);
    });
    if (computedAt) $("computed").textContent = time(computedAt) + " (" + ago(computedAt) + ")";
    if (errs.length) setConn(false, errs[0]);
    else setConn(true, "updated " + new Date().toLocaleTimeString([], { hour12: false }));
    document.body.dataset.loaded = "1";
    timer = setTimeout(poll, refreshSec * 1000);
  }
  $("refresh").textContent = refreshSec + " s";
  poll().then(route);
})();
