// sysbox ui: renders the graph snapshots of the events stream (a relative URL: the page also
// works under the control plane's /ui/w/WORKSPACE/) with cytoscape and mirrors every element into
// the DOM list (#elements li[data-address][data-observation]) for scripts and tests.
"use strict";
(function () {
  const colors = { present: "#2e7d32", absent: "#757575", drifted: "#ef6c00", degraded: "#c62828", unknown: "#6a1b9a" };
  const shapes = { node: "round-rectangle", network: "ellipse", firewall: "diamond", router: "hexagon", other: "tag" };
  const cy = cytoscape({
    container: document.getElementById("cy"),
    wheelSensitivity: 0.3,
    style: [
      { selector: "node", style: {
        "label": "data(label)", "font-size": 10, "text-valign": "bottom", "text-margin-y": 3,
        "shape": (n) => shapes[n.data("kind")] || "tag",
        "background-color": (n) => colors[n.data("observation")] || colors.unknown,
        "width": 34, "height": 34, "border-width": 2, "border-color": "#fff" } },
      { selector: "node[kind = 'network']", style: { "width": 54, "height": 26 } },
      { selector: "node[kind = 'firewall'], node[kind = 'router']", style: { "width": 20, "height": 20, "font-size": 8 } },
      { selector: "node[diff = 'config-only']", style: { "border-style": "dashed", "border-color": "#000", "border-width": 2 } },
      { selector: "node[diff = 'state-only']", style: { "border-style": "dotted", "border-color": "#000", "border-width": 3 } },
      { selector: "node[diff = 'drifted']", style: { "border-color": "#000", "border-width": 3 } },
      { selector: ":parent", style: { "background-opacity": 0.06, "background-color": "#1565c0", "label": "data(label)",
        "text-valign": "top", "border-color": "#90a4ae", "border-width": 1 } },
      { selector: "node:selected", style: { "overlay-color": "#1e88e5", "overlay-opacity": 0.25 } },
      { selector: "edge", style: { "width": 2, "line-color": "#90a4ae", "curve-style": "bezier",
        "label": "data(label)", "font-size": 8, "text-rotation": "autorotate", "text-background-color": "#fff",
        "text-background-opacity": 0.8 } },
      { selector: "edge[kind = 'dependency']", style: { "line-style": "dashed", "width": 1, "target-arrow-shape": "triangle",
        "target-arrow-color": "#b0bec5", "line-color": "#b0bec5" } },
    ],
  });
  window.sysboxCy = cy; // for scripts and the page test
  let graph = { elements: [], edges: [] };
  let selected = null;
  let shape = "";

  function toCy(g) {
    const out = [];
    const modules = new Set(g.elements.map((e) => e.module).filter(Boolean));
    for (const m of [...modules].sort()) out.push({ group: "nodes", data: { id: "group:" + m, label: m, kind: "module" } });
    for (const e of g.elements) {
      const d = { id: e.address, label: e.address, kind: e.kind, observation: e.observation, diff: e.diff || "" };
      if (e.module) d.parent = "group:" + e.module;
      out.push({ group: "nodes", data: d });
    }
    for (const x of g.edges) out.push({ group: "edges", data: { id: x.id, source: x.source, target: x.target, kind: x.kind, label: x.label || "" } });
    return out;
  }

  function render(g) {
    graph = g;
    const els = toCy(g);
    const next = els.map((e) => e.data.id).sort().join("\n");
    if (next !== shape) {
      // The set of elements changed: rebuild and lay out again. Breadth-first over sorted
      // ids is deterministic, so a reload shows the same picture.
      shape = next;
      cy.elements().remove();
      cy.add(els);
      const roots = cy.nodes("[kind = 'network']");
      cy.layout({ name: "breadthfirst", directed: false, roots: roots.length ? roots : undefined, spacingFactor: 1.1,
        avoidOverlap: true, animate: false }).run();
      cy.fit(undefined, 30);
    } else {
      for (const e of els) cy.getElementById(e.data.id).data(e.data);
    }
    renderList(g);
    renderDetails();
  }

  function renderList(g) {
    const ul = document.getElementById("elements");
    ul.replaceChildren();
    for (const e of g.elements) {
      const li = document.createElement("li");
      li.dataset.address = e.address;
      li.dataset.observation = e.observation;
      li.dataset.kind = e.kind;
      li.dataset.generation = String(e.generation || 0);
      if (e.diff) li.dataset.diff = e.diff;
      li.className = e.observation + (e.address === selected ? " selected" : "");
      li.textContent = e.address + " — " + e.observation + (e.diff ? " (" + e.diff + ")" : "") + (e.driver ? " · " + e.driver : "");
      li.addEventListener("click", () => select(e.address));
      ul.appendChild(li);
    }
  }

  function row(t, k, v) {
    if (v === undefined || v === null || v === "") return;
    const tr = t.insertRow();
    tr.insertCell().textContent = k;
    tr.insertCell().textContent = String(v);
  }

  function renderDetails() {
    const box = document.getElementById("details");
    const e = graph.elements.find((x) => x.address === selected);
    if (!e) {
      box.replaceChildren();
      const p = document.createElement("p");
      p.className = graph.error ? "error" : "hint";
      p.textContent = graph.error ? graph.error : "Click an element for its details.";
      box.appendChild(p);
      return;
    }
    box.replaceChildren();
    box.dataset.address = e.address;
    const h = document.createElement("h3");
    h.textContent = e.address;
    box.appendChild(h);
    const t = document.createElement("table");
    row(t, "kind", e.kind + " (" + e.type + ")");
    row(t, "driver", e.driver);
    row(t, "observation", e.observation + (e.reason ? " (" + e.reason + ")" : ""));
    row(t, "observed at", e.observed_at);
    row(t, "difference", e.diff);
    row(t, "external id", e.external_id);
    row(t, "generation", e.generation);
    row(t, "on node", e.node);
    if (e.private) row(t, "private", e.private.driver + " envelope v" + e.private.version + ", " + e.private.bytes + " bytes (opaque)");
    box.appendChild(t);
    for (const x of graph.edges.filter((x) => x.kind === "attachment" && (x.source === e.address || x.target === e.address))) {
      row(t, "attachment", (x.source === e.address ? x.target : x.source) + " " + x.label);
    }
    if (e.kind === "node") {
      for (const cmd of ["sysbox exec " + e.address + " -- sh", "sysbox reset " + e.address]) {
        const p = document.createElement("p");
        const c = document.createElement("code");
        c.textContent = cmd;
        const b = document.createElement("button");
        b.textContent = "copy";
        b.addEventListener("click", () => navigator.clipboard && navigator.clipboard.writeText(cmd));
        p.append(c, " ", b);
        box.appendChild(p);
      }
    }
    if (e.attributes) {
      const pre = document.createElement("pre");
      pre.textContent = JSON.stringify(e.attributes, null, 2);
      box.appendChild(pre);
    }
  }

  function select(addr) {
    selected = addr;
    cy.elements().unselect();
    cy.getElementById(addr).select();
    renderList(graph);
    renderDetails();
  }
  cy.on("tap", "node", (ev) => { if (ev.target.data("kind") !== "module") select(ev.target.id()); });

  const status = document.getElementById("status");
  // The run panel: the latest run's status, progress lines and checkpoint records (each
  // li[data-checkpoint][data-record][data-address][data-action][data-step][data-at]).
  function renderRun(run) {
    const box = document.getElementById("run");
    const result = document.getElementById("run-result");
    const pre = document.getElementById("run-lines");
    const cps = document.getElementById("run-checkpoints");
    if (!run) {
      box.dataset.run = "";
      box.dataset.status = "none";
      document.getElementById("run-head").textContent = "";
      result.textContent = "No run in progress.";
      pre.hidden = true;
      cps.hidden = true;
      return;
    }
    box.dataset.run = run.id;
    box.dataset.status = run.status;
    document.getElementById("run-head").textContent = (run.op || "") + " " + run.id + " · " + run.status;
    result.textContent = run.result || "";
    pre.hidden = !run.lines || run.lines.length === 0;
    pre.textContent = (run.lines || []).join("\n");
    pre.scrollTop = pre.scrollHeight;
    const list = run.checkpoints || [];
    cps.hidden = list.length === 0;
    const ol = document.getElementById("checkpoints");
    ol.replaceChildren();
    for (const c of list) {
      const li = document.createElement("li");
      li.dataset.checkpoint = String(c.seq);
      li.dataset.record = c.record;
      li.dataset.at = c.at;
      if (c.run) li.dataset.executorRun = c.run;
      if (c.address) li.dataset.address = c.address;
      if (c.action) li.dataset.action = c.action;
      if (c.step) li.dataset.step = c.step;
      li.className = "cp-" + c.record + (c.step === "failed" ? " cp-failed" : "");
      const at = document.createElement("time");
      at.dateTime = c.at;
      at.textContent = String(c.at).replace(/^.*T/, "").replace(/Z$/, "").slice(0, 12);
      let what;
      if (c.record === "run") what = "run " + (c.run || "") + " began";
      else if (c.record === "end") what = "run ended";
      else what = c.address + " · " + c.action + " → " + c.step;
      li.append(at, " #" + c.seq + " " + what);
      ol.appendChild(li);
    }
    ol.scrollTop = ol.scrollHeight;
  }

  const es = new EventSource("events");
  es.addEventListener("graph", (ev) => {
    const g = JSON.parse(ev.data);
    status.dataset.eventId = ev.lastEventId;
    status.dataset.serial = String(g.serial);
    if (g.title) {
      document.getElementById("title").textContent = g.title;
      document.title = g.title + " · sysbox ui";
    }
    status.textContent = "event " + ev.lastEventId + (g.serial ? " · state serial " + g.serial : "") + " · " + g.elements.length + " elements" +
      (g.error ? " · error: " + g.error : "");
    render(g);
    renderRun(g.run);
  });
  es.onerror = () => { status.textContent = "disconnected, retrying…"; };
})();
