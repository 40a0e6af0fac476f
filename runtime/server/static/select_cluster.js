// Cluster picker of the Ray History Server: lists /clusters, filters them, and
// enters one through /enter_cluster/... before opening the Ray Dashboard.
// All text goes through textContent (never innerHTML): names come from storage.
"use strict";

(function () {
  // Relative to where the page is served, so a path prefix in front of the server works.
  const base = window.location.pathname.replace(/select_cluster\/?$/, "");
  const $ = (id) => document.getElementById(id);
  let clusters = [];

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

  function createdDay(cluster) {
    const seconds = Number(cluster.createTimeStamp);
    return Number.isFinite(seconds) && seconds > 0 ? new Date(seconds * 1000) : null;
  }

  function formatTime(cluster) {
    const when = createdDay(cluster);
    return when ? when.toISOString().replace("T", " ").replace(/\.\d+Z$/, "") : String(cluster.createTime || "");
  }

  function matches(cluster) {
    const text = $("f-text").value.trim().toLowerCase();
    const namespace = $("f-namespace").value;
    const from = $("f-from").value;
    const to = $("f-to").value;
    if ($("f-live").checked && cluster.sessionName !== "live") return false;
    if (namespace && cluster.namespace !== namespace) return false;
    if (text) {
      const haystack = [cluster.name, cluster.namespace, cluster.sessionName, cluster.ownerName, cluster.ownerKind]
        .filter(Boolean).join(" ").toLowerCase();
      if (!text.split(/\s+/).every((word) => haystack.includes(word))) return false;
    }
    const when = createdDay(cluster);
    if ((from || to) && !when) return false;
    const day = when ? when.toISOString().slice(0, 10) : "";
    if (from && day < from) return false;
    if (to && day > to) return false;
    return true;
  }

  function render() {
    const rows = $("rows");
    rows.replaceChildren();
    const shown = clusters.filter(matches);
    for (const cluster of shown) {
      const live = cluster.sessionName === "live";
      const owner = cluster.ownerKind
        ? [el("span", { class: "badge owner", text: cluster.ownerKind }), document.createTextNode(cluster.ownerName || "")]
        : [document.createTextNode("-")];
      const session = live ? [el("span", { class: "badge live", text: "Live" })] : [document.createTextNode(cluster.sessionName)];
      const button = el("button", { class: "open", type: "button", text: live ? "Open live" : "Open" });
      button.addEventListener("click", () => enter(cluster, button));
      rows.appendChild(el("tr", {}, [
        el("td", { text: cluster.name }),
        el("td", { text: cluster.namespace }),
        el("td", {}, owner),
        el("td", { class: "session" }, session),
        el("td", { text: formatTime(cluster) }),
        el("td", {}, [button]),
      ]));
    }
    $("clusters").hidden = shown.length === 0;
    if (!clusters.length) setStatus("No clusters found: nothing is running and no session has been stored yet.");
    else if (!shown.length) setStatus("No cluster matches the filters.");
    else setStatus(`${shown.length} of ${clusters.length} cluster sessions`);
  }

  function fillNamespaces() {
    const select = $("f-namespace");
    const current = select.value;
    const names = [...new Set(clusters.map((c) => c.namespace))].sort();
    select.replaceChildren(el("option", { value: "", text: "all" }), ...names.map((n) => el("option", { value: n, text: n })));
    if (names.includes(current)) select.value = current;
  }

  async function load() {
    setStatus("Loading clusters...");
    try {
      const response = await fetch(base + "clusters", { credentials: "same-origin", cache: "no-store" });
      if (!response.ok) throw new Error(`${response.status} ${await errorText(response)}`);
      const notices = [];
      if (response.headers.get("X-Live-Discovery") === "unavailable") notices.push("Live clusters could not be listed; only stored sessions are shown.");
      if (response.headers.get("X-Stored-Sessions") === "unavailable") notices.push("Object storage could not be listed; only live clusters are shown.");
      $("notice").textContent = notices.join(" ");
      $("notice").hidden = notices.length === 0;
      const body = await response.json();
      clusters = Array.isArray(body) ? body : [];
      fillNamespaces();
      render();
    } catch (err) {
      setStatus(`Could not load clusters: ${err.message}`, true);
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
      render();  // fresh, enabled buttons
      setStatus(`Could not open ${cluster.namespace}/${cluster.name}: ${err.message}`, true);
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    for (const id of ["f-text", "f-namespace", "f-from", "f-to", "f-live"]) $(id).addEventListener("input", render);
    $("f-live").addEventListener("change", render);
    $("filters").addEventListener("submit", (event) => event.preventDefault());
    $("refresh").addEventListener("click", load);
    load();
  });
})();
