// The capture page: capture subscriptions (install, remove), the live tail, search
// and request/reply traces, over /api/captures and the capture views /api/capture/.
"use strict";

const CapturePage = (() => {
  const poller = new Poller(refreshSubscriptions, 3000);
  let tail = null;   // the live tail's AbortController while it runs
  const TAIL_ROWS = 200;

  function time(seconds) {
    return seconds ? new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 23)
      : "-";
  }

  function body(m) {
    if (m.body_text === null || m.body_text === undefined) return `(${m.body_size} bytes, not text)`;
    const text = m.body_text.length > 120 ? m.body_text.slice(0, 120) + "…" : m.body_text;
    return m.truncated ? `${text} [truncated]` : text;
  }

  // A topic's row says what capture cannot tell (which subscriptions got it).
  function addressCell(m) {
    const td = cell(m.address);
    if (m.note) td.append(el("div", {class: "muted note", text: m.note}));
    return td;
  }

  function unavailable(e) {
    const box = document.getElementById("cap-unavailable");
    box.textContent = e.status === 404
      ? `Capture is not available on this broker: ${e.message}` : e.message;
    box.hidden = false;
  }

  // -- subscriptions --

  function subscriptionRow(s) {
    return el("tr", {"data-name": s.name},
      cell(s.name), cell(s.address), cell(s.filter), cell(s.copied),
      cell(`${s.dropped_rate} over the rate, ${s.dropped_ring} out of the ring`),
      cell(`${s.depth} of ${s.ring_size} in the ring`),
      el("td", {}, dangerButton("Remove", `capture ${s.name}`, () => act(
        `removed the capture ${s.name} of ${s.address}`, `/api/captures/${Api.seg(s.name)}`,
        {method: "DELETE"}, () => poller.now()))));
  }

  async function refreshSubscriptions(current) {
    let list;
    try {
      list = await Api.call("/api/captures");
    } catch (e) {
      if (e.status === 404) { unavailable(e); poller.stop(); return; }
      throw e;
    }
    if (!current()) return;
    document.getElementById("cap-unavailable").hidden = true;
    const rows = Array.isArray(list) ? list : (list.captures || []);
    fillTable(document.getElementById("cap-table"), rows.map(subscriptionRow),
              "no capture subscriptions");
  }

  // -- the live tail --

  function tailLine(line) {
    const table = document.getElementById("tail-table");
    const rows = table.tBodies[0];
    if (line.type === "heartbeat") return;
    if (rows.querySelector(".muted")) rows.replaceChildren();
    let row;
    if (line.type === "dropped") {
      row = el("tr", {class: "gap"}, el("td", {colspan: 6,
        text: `${line.count} messages not shown here (${line.reason || "missed"})`}));
    } else {
      row = el("tr", {"data-id": line.id}, cell(time(line.captured_at)), addressCell(line),
        cell(line.message_id), cell(line.correlation_id), cell(line.reply_to),
        cell(body(line)));
    }
    rows.prepend(row);
    while (rows.rows.length > TAIL_ROWS) rows.deleteRow(rows.rows.length - 1);
  }

  async function startTail() {
    stopTail();
    const controller = tail = new AbortController();
    const address = document.getElementById("tail-address").value.trim();
    const query = address ? `?${new URLSearchParams({address})}` : "";
    const state = document.getElementById("tail-state");
    fillTable(document.getElementById("tail-table"), [], "waiting for messages");
    document.getElementById("tail-start").disabled = true;
    document.getElementById("tail-stop").disabled = false;
    while (tail === controller) {
      try {
        state.textContent = "live";
        await Api.stream(`/api/capture/tail${query}`, tailLine, controller);
      } catch (e) {
        if (controller.signal.aborted) break;
        state.textContent = `tail interrupted (${e.message})`;
        if (e.status >= 400 && e.status < 500) { stopTail(); break; }
        await new Promise((r) => setTimeout(r, 2000));
      }
    }
  }

  function stopTail() {
    if (tail) tail.abort();
    tail = null;
    document.getElementById("tail-start").disabled = false;
    document.getElementById("tail-stop").disabled = true;
    document.getElementById("tail-state").textContent = "stopped";
  }

  // -- search and traces --

  function searchQuery(form) {
    const query = new URLSearchParams();
    for (const name of ["address", "correlation_id", "property"]) {
      const value = form[name].value.trim();
      if (value) query.set(name, value);
    }
    if (form.since && form.since.value) {
      query.set("from", String(new Date(form.since.value).getTime() / 1000));
    }
    return query;
  }

  function verifyCell(m) {
    const v = m.verify || {};
    if (!v.offered) {
      return el("td", {}, el("button", {type: "button", disabled: "",
        title: v.reason || "not offered", text: "Verify on broker"}),
        el("span", {class: "muted", text: ` ${v.reason || ""}`}));
    }
    const out = el("span", {class: "muted"});
    const button = actionButton("Verify on broker", async () => {
      try {
        const answer = await Api.call(`/api/capture/messages/${m.id}/verify`);
        out.textContent = answer.found_in.length
          ? ` still on the broker, in ${answer.found_in.join(", ")}`
          : ` not on the broker any more${answer.note ? ` (${answer.note})` : ""}`;
      } catch (e) { out.textContent = ` ${e.message}`; }
    });
    return el("td", {}, button, out);
  }

  // The newest matches first; "Older" asks for the next page (before=the last id).
  async function search(event, before = null) {
    if (event) event.preventDefault();
    const form = document.getElementById("cap-search");
    const query = searchQuery(form);
    if (before !== null) query.set("before", String(before));
    const table = document.getElementById("search-table");
    const older = document.getElementById("search-older");
    try {
      const found = await Api.call(`/api/capture/messages?${query}`);
      const rows = found.messages.map((m) =>
        el("tr", {}, cell(time(m.captured_at)), addressCell(m), cell(m.message_id),
           cell(m.correlation_id), cell(body(m)), verifyCell(m)));
      if (before === null) fillTable(table, rows, "no captured messages match");
      else table.tBodies[0].append(...rows);
      older.hidden = found.next === null || found.next === undefined;
      older.onclick = () => search(null, found.next);
    } catch (e) { notify(`search failed: ${e.message}`); }
  }

  async function traces(event) {
    event.preventDefault();
    const address = event.target.address.value.trim();
    const query = address ? `?${new URLSearchParams({address})}` : "";
    try {
      const found = await Api.call(`/api/capture/traces${query}`);
      fillTable(document.getElementById("trace-table"), found.pairs.map((p) =>
        el("tr", {class: `trace ${p.reply ? "answered" : "unanswered"}`},
           cell(time(p.request.captured_at)), cell(p.request.address),
           cell(p.request.correlation_id || p.request.message_id),
           cell(p.request.reply_to),
           cell(p.reply ? `${p.reply.address} at ${time(p.reply.captured_at)}` : p.status),
           cell(p.latency === null ? "-" : `${(p.latency * 1000).toFixed(1)} ms`))),
        "no requests (messages with a reply-to) captured");
    } catch (e) { notify(`tracing failed: ${e.message}`); }
  }

  function setup() {
    document.getElementById("cap-install").addEventListener("submit", (event) => {
      event.preventDefault();
      const form = event.target;
      const name = form.name.value.trim();
      const address = form.address.value.trim();
      const body = {address};
      if (form.filter.value.trim()) body.filter = form.filter.value.trim();
      act(`installed the capture ${name} of ${address}`, `/api/captures/${Api.seg(name)}`,
          {method: "PUT", body}, () => { form.reset(); poller.now(); });
    });
    document.getElementById("tail-start").addEventListener("click", startTail);
    document.getElementById("tail-stop").addEventListener("click", stopTail);
    document.getElementById("cap-search").addEventListener("submit", search);
    document.getElementById("cap-traces").addEventListener("submit", traces);
  }

  return {setup, start: () => poller.start(),
          stop: () => { poller.stop(); stopTail(); }};
})();
