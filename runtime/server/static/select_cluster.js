// The history list of the Ray History Server: pages through /clusters (filters failed,
// owner and dates on the server; text, namespace and "live only" on the loaded rows),
// sorts the loaded rows by any column, links each to its /sessions/... URL and enters
// one through /enter_cluster/... before opening the Ray Dashboard.
// All text goes through textContent (never innerHTML): names come from storage.
"use strict";

(function () {
  // Relative to where the page is served, so a path prefix in front of the server works.
  const base = window.location.pathname.replace(/select_cluster\/?$/, "");
  const $ = (id) => document.getElementById(id);
  const PAGE = 100;
  const LIST = "clusters";
  const TEXT_COLUMNS = new Set(["cluster", "namespace", "owner"]);
  let clusters = [];
  let nextCursor = null;
  let loading = 0; // the latest load: answers of older ones (filters changed since) are dropped
  let order = { key: null, dir: 1 };

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "text") node.textContent = value;
      else if (key === "class") node.className = value;
      else node.setAttribute(key, value);
    }
    for (const child of children || []) node.appendChild(child);
    return node;
  }

  function setStatus(text, isError) {
    const status = $("status");
    status.textContent = text;
    status.classList.toggle("error", Boolean(isError));
    status.hidden = !text;
  }

  // ------------------------------------------------------------ values
  function startMs(cluster) {
    const summary = cluster.summary;
    if (summary && Number.isFinite(summary.start)) return summary.start;
    const seconds = Number(cluster.createTimeStamp);
    return Number.isFinite(seconds) && seconds > 0 ? seconds * 1000 : null;
  }

  function formatMs(ms) {
    return Number.isFinite(ms) ? new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "") : "";
  }

  function formatDuration(seconds) {
    if (!Number.isFinite(seconds)) return "";
    if (seconds < 60) return `${seconds.toFixed(1)}s`;
    const whole = Math.floor(seconds);
    const hours = Math.floor(whole / 3600);
    const minutes = Math.floor((whole % 3600) / 60);
    const secs = String(whole % 60).padStart(2, "0");
    return hours ? `${hours}h${String(minutes).padStart(2, "0")}m${secs}s` : `${minutes}m${secs}s`;
  }

  function jobCounts(summary) {
    const jobs = (summary && summary.jobs) || {};
    const total = Object.values(jobs).reduce((a, b) => a + b, 0);
    return { failed: jobs.FAILED || 0, total };
  }

  function sortValue(cluster, key) {
    const summary = cluster.summary || {};
    switch (key) {
      case "cluster": return `${cluster.name} ${cluster.sessionName}`;
      case "namespace": return cluster.namespace;
      case "owner": return cluster.ownerName ? `${cluster.ownerKind}/${cluster.ownerName}` : null;
      case "start": return startMs(cluster);
      case "end": return Number.isFinite(summary.end) ? summary.end : null;
      case "duration": return Number.isFinite(summary.durationSeconds) ? summary.durationSeconds : null;
      case "jobs": {
        if (!cluster.summary) return null;
        const { failed, total } = jobCounts(summary);
        return failed * 1e6 + total; // failed jobs first, then how many
      }
      case "failedTasks": return Number.isFinite(summary.failedTasks) ? summary.failedTasks : null;
      case "nodes": return Number.isFinite(summary.nodes) ? summary.nodes : null;
      default: return null;
    }
  }

  function sorted(rows) {
    if (!order.key) return rows; // the server's order: live first, then newest first
    const keyed = rows.map((row, i) => [sortValue(row, order.key), i, row]);
    keyed.sort((a, b) => {
      if (a[0] === null || b[0] === null) return a[0] === b[0] ? a[1] - b[1] : a[0] === null ? 1 : -1; // unknown last
      const cmp = typeof a[0] === "string" ? a[0].localeCompare(b[0]) : a[0] - b[0];
      return cmp * order.dir || a[1] - b[1];
    });
    return keyed.map((k) => k[2]);
  }

  // ------------------------------------------------------------ rendering
  function matches(cluster) {
    const text = $("f-text").value.trim().toLowerCase();
    const namespace = $("f-namespace").value;
    if ($("f-live").checked && cluster.sessionName !== "live") return false;
    if (namespace && cluster.namespace !== namespace) return false;
    if (text) {
      const haystack = [cluster.name, cluster.namespace, cluster.sessionName, cluster.ownerName, cluster.ownerKind]
        .filter(Boolean).join(" ").toLowerCase();
      if (!text.split(/\s+/).every((word) => haystack.includes(word))) return false;
    }
    return true;
  }

  function shareUrl(cluster) {
    return cluster.url ? new URL(base + cluster.url.replace(/^\//, ""), window.location.href).href : null;
  }

  function jobsCell(cluster) {
    if (cluster.sessionName === "live") return [el("span", { class: "muted", text: "running" })];
    if (!cluster.summary) {
      const indexing = cluster.indexing;
      const text = indexing ? `indexing: ${indexing.phase}` : "not indexed yet";
      return [el("span", { class: "muted", text, title: "open it once (or index ahead) to see its outcome" })];
    }
    const chips = Object.entries(cluster.summary.jobs || {}).map(([status, count]) =>
      el("span", { class: `chip status-${status || "UNKNOWN"}`, text: `${count} ${status || "status unknown"}` }));
    return chips.length ? chips : [el("span", { class: "muted", text: "no jobs" })];
  }

  function cell(text, className) {
    return el("td", className ? { text, class: className } : { text });
  }

  function row(cluster) {
    const live = cluster.sessionName === "live";
    const summary = cluster.summary || {};
    const link = shareUrl(cluster);
    const name = link
      ? el("a", { class: "session-link", href: link, text: cluster.name, title: "open this session's Dashboard" })
      : document.createTextNode(cluster.name);
    const owner = cluster.ownerKind
      ? [el("span", { class: "badge owner", text: cluster.ownerKind }), document.createTextNode(cluster.ownerName || "")]
      : [document.createTextNode("-")];
    const session = live
      ? el("span", { class: "badge live", text: "Live" })
      : el("span", { class: "session", text: cluster.sessionName });
    const open = el("button", { class: "open", type: "button", text: live ? "Open live" : "Open" });
    open.addEventListener("click", () => enter(cluster, open));
    const actions = [open];
    if (link) {
      const copy = el("button", { class: "copy", type: "button", text: "Copy link", title: link });
      copy.addEventListener("click", () => copyLink(link, copy));
      actions.push(copy);
    }
    const failedTasks = Number.isFinite(summary.failedTasks) ? String(summary.failedTasks) : "";
    const tr = el("tr", {}, [
      el("td", { class: "name" }, [name, el("br"), session]),
      cell(cluster.namespace),
      el("td", {}, owner),
      cell(formatMs(startMs(cluster)), "time"),
      cell(formatMs(summary.end), "time"),
      cell(formatDuration(summary.durationSeconds), "num"),
      el("td", { class: "jobs" }, jobsCell(cluster)),
      cell(failedTasks, summary.failedTasks > 0 ? "num failed" : "num"),
      cell(Number.isFinite(summary.nodes) ? String(summary.nodes) : "", "num"),
      el("td", { class: "actions" }, actions),
    ]);
    if (summary.failed) tr.classList.add("has-failed");
    return tr;
  }

  function render() {
    const shown = sorted(clusters.filter(matches));
    $("rows").replaceChildren(...shown.map(row));
    $("clusters").hidden = shown.length === 0;
    for (const th of document.querySelectorAll("th[data-sort]")) {
      const key = th.getAttribute("data-sort");
      if (key === order.key) th.setAttribute("aria-sort", order.dir > 0 ? "ascending" : "descending");
      else th.removeAttribute("aria-sort");
    }
    $("more").hidden = !nextCursor;
    const more = nextCursor ? "; more on the server (Load more)" : "";
    if (!clusters.length) setStatus(nextCursor ? "No cluster on this page matches." : "No clusters found for these filters (or nothing stored yet).");
    else if (!shown.length) setStatus(`No loaded cluster matches the filters${more}.`);
    else setStatus(`${shown.length} of ${clusters.length} cluster sessions${more}`);
  }

  function fillNamespaces() {
    const select = $("f-namespace");
    const current = select.value;
    const names = [...new Set(clusters.map((c) => c.namespace))].sort();
    select.replaceChildren(el("option", { value: "", text: "all" }), ...names.map((n) => el("option", { value: n, text: n })));
    if (names.includes(current)) select.value = current;
  }

  // ------------------------------------------------------------ loading
  function listUrl(cursor) {
    const params = new URLSearchParams({ limit: String(PAGE) });
    if ($("f-failed").checked) params.set("failed", "true");
    const owner = $("f-owner").value.trim();
    if (owner) params.set("owner", owner);
    if ($("f-from").value) params.set("since", $("f-from").value);
    if ($("f-to").value) params.set("until", $("f-to").value);
    if (cursor) params.set("cursor", cursor);
    return `${base}${LIST}?${params}`;
  }

  async function load(append) {
    const mine = ++loading;
    const cursor = append ? nextCursor : null;
    setStatus(append ? "Loading more..." : "Loading clusters...");
    $("more").disabled = true;
    try {
      const response = await fetch(listUrl(cursor), { credentials: "same-origin", cache: "no-store" });
      if (mine !== loading) return;
      if (!response.ok) throw new Error(`${response.status} ${await errorText(response)}`);
      const notices = [];
      if (response.headers.get("X-Live-Discovery") === "unavailable") notices.push("Live clusters could not be listed; only stored sessions are shown.");
      if (response.headers.get("X-Stored-Sessions") === "unavailable") notices.push("Object storage could not be listed; only live clusters are shown.");
      $("notice").textContent = notices.join(" ");
      $("notice").hidden = notices.length === 0;
      const body = await response.json();
      if (mine !== loading) return;
      const page = Array.isArray(body) ? body : [];
      clusters = append ? clusters.concat(page) : page;
      nextCursor = response.headers.get("X-Next-Cursor");
      fillNamespaces();
      render();
    } catch (err) {
      if (mine !== loading) return;
      if (!append) { clusters = []; nextCursor = null; render(); }
      setStatus(`Could not load clusters: ${err.message}`, true);
    } finally {
      if (mine === loading) $("more").disabled = false;
    }
  }

  async function errorText(response) {
    try {
      const body = await response.json();
      return (body && (body.msg || (typeof body === "string" ? body : ""))) || response.statusText;
    } catch (_) {
      return response.statusText;
    }
  }

  // ------------------------------------------------------------ actions
  async function copyLink(link, button) {
    let copied = false;
    try {
      if (navigator.clipboard && window.isSecureContext) {
        await navigator.clipboard.writeText(link);
        copied = true;
      }
    } catch (_) {
      copied = false;
    }
    if (!copied) {
      // Plain http (no Clipboard API): the old way, through a selected off-screen field.
      const field = el("textarea", { class: "offscreen", readonly: "" });
      field.value = link;
      document.body.appendChild(field);
      field.select();
      try { copied = document.execCommand("copy"); } catch (_) { copied = false; }
      field.remove();
    }
    if (copied) {
      button.textContent = "Copied";
      setTimeout(() => { button.textContent = "Copy link"; }, 1500);
    } else {
      setStatus(`Copy this link: ${link}`);
    }
  }

  // "reading events 42 %" from a 503 answered while the session's index is built, else null.
  async function buildProgress(response) {
    let body;
    try {
      body = await response.clone().json();
    } catch (_) {
      return null;
    }
    if (!body || typeof body.phase !== "string") return null;
    const { done, total } = body;
    if (Number.isInteger(done) && Number.isInteger(total) && total > 0) {
      return `${body.phase} ${Math.min(100, Math.floor((done * 100) / total))} %`;
    }
    return body.phase;
  }

  async function enter(cluster, button) {
    const parts = [cluster.namespace, "raycluster", cluster.name, cluster.sessionName].map(encodeURIComponent);
    const buttons = document.querySelectorAll("button.open");
    buttons.forEach((b) => { b.disabled = true; });
    button.textContent = "Opening...";
    setStatus(`Opening ${cluster.namespace}/${cluster.name} (${cluster.sessionName}); a session seen for the first time is indexed now, which can take a while.`);
    try {
      let response;
      for (;;) {
        response = await fetch(base + "enter_cluster/" + parts.join("/"), { credentials: "same-origin", cache: "no-store" });
        const progress = response.status === 503 ? await buildProgress(response) : null;
        if (!progress) break;
        // Being indexed: show how far the build is and ask again when the server says.
        setStatus(`Indexing ${cluster.namespace}/${cluster.name} (${cluster.sessionName}): ${progress}`);
        const wait = Number(response.headers.get("Retry-After")) || 2;
        await new Promise((resolve) => setTimeout(resolve, wait * 1000));
      }
      if (!response.ok) throw new Error(`${response.status} ${await errorText(response)}`);
      const body = await response.json();
      if (body.result !== "success") throw new Error(body.msg || "unexpected answer");
      window.location.assign(base + "#/overview");
    } catch (err) {
      render(); // fresh, enabled buttons
      setStatus(`Could not open ${cluster.namespace}/${cluster.name}: ${err.message}`, true);
    }
  }

  function sortBy(key) {
    order = order.key === key ? { key, dir: -order.dir } : { key, dir: TEXT_COLUMNS.has(key) ? 1 : -1 };
    render();
  }

  document.addEventListener("DOMContentLoaded", () => {
    // On the loaded rows, at once:
    for (const id of ["f-text", "f-namespace", "f-live"]) $(id).addEventListener("input", render);
    $("f-live").addEventListener("change", render);
    // Server-side filters: the first page again.
    for (const id of ["f-failed", "f-from", "f-to"]) $(id).addEventListener("change", () => load(false));
    let ownerTimer = null;
    $("f-owner").addEventListener("input", () => {
      clearTimeout(ownerTimer);
      ownerTimer = setTimeout(() => load(false), 300);
    });
    $("filters").addEventListener("submit", (event) => event.preventDefault());
    $("refresh").addEventListener("click", () => load(false));
    $("more").addEventListener("click", () => load(true));
    for (const th of document.querySelectorAll("th[data-sort]")) {
      th.querySelector("button").addEventListener("click", () => sortBy(th.getAttribute("data-sort")));
    }
    load(false);
  });
})();
