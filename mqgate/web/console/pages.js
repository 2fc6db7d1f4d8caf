// The console's pages: overview, destinations, connections and clients, durable
// subscriptions. Each page is {start(), stop()}: started when shown, stopped when
// left, so only the page in view reads from the broker. Every text from the broker is
// set with textContent, never parsed as HTML.
"use strict";

// -- helpers shared by the pages ------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "text") node.textContent = value;
    else if (name === "onclick") node.addEventListener("click", value);
    else if (value !== null && value !== undefined) node.setAttribute(name, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function cell(value) {
  return el("td", {text: value === null || value === undefined ? "-" : value});
}

function fillTable(table, rows, empty) {
  const body = table.tBodies[0];
  const cols = table.tHead.rows[0].cells.length;
  body.replaceChildren(...(rows.length ? rows
    : [el("tr", {}, el("td", {colspan: cols, class: "muted", text: empty}))]));
}

function notify(text, isError = true) {
  const box = document.getElementById("notice");
  box.textContent = text;
  box.className = isError ? "error" : "ok";
  box.hidden = false;
  clearTimeout(notify.timer);
  notify.timer = setTimeout(() => { box.hidden = true; }, isError ? 10000 : 4000);
}

// A button for something that cannot be undone: the first click asks, the second
// (within ten seconds) does it. The pages redraw their tables every few seconds, so
// which buttons are asking is kept here, by what they act on (key), not in the button.
const armed = new Map();   // key -> when the question lapses (ms)
const ARMED_FOR = 10000;

function dangerButton(label, key, run) {
  const asking = () => (armed.get(key) || 0) > Date.now();
  const button = el("button", {type: "button", class: "danger"});
  const show = () => { button.textContent = asking() ? `Really ${label.toLowerCase()}?` : label; };
  show();
  button.addEventListener("click", async () => {
    if (!asking()) {
      armed.set(key, Date.now() + ARMED_FOR);
      show();
      setTimeout(show, ARMED_FOR + 50);
      return;
    }
    armed.delete(key);
    show();
    await run();
  });
  return button;
}

function actionButton(label, run) {
  return el("button", {type: "button", text: label, onclick: run});
}

// Run an API call for an operator's action; say what happened either way.
// done: what the notice says after (e.g. "purged queue q1").
const PRESENT = {created: "create", purged: "purge", paused: "pause", resumed: "resume",
                 destroyed: "destroy", disconnected: "disconnect", installed: "install",
                 removed: "remove"};

async function act(done, path, options, after) {
  try {
    await Api.call(path, options);
    notify(done, false);
  } catch (e) {
    const [verb, ...rest] = done.split(" ");
    notify(`Could not ${PRESENT[verb] || verb} ${rest.join(" ")}: ${e.message}`);
  }
  if (after) after();
}

function rate(value) {
  return value === null || value === undefined ? "-" : value.toFixed(1);
}

function seconds(value) {
  if (value === null || value === undefined) return "-";
  if (value < 120) return `${Math.round(value)} s`;
  if (value < 7200) return `${Math.round(value / 60)} min`;
  return `${(value / 3600).toFixed(1)} h`;
}

// Calls refresh() now and every `interval` ms until stop(); a refresh that fails
// says why once, not once a poll. now() (after an action, a new filter) starts over:
// a refresh still on its way from before is then dropped when it lands (refresh gets
// current() to ask), and its loop ends, so there is only ever one loop.
class Poller {
  constructor(refresh, interval) {
    this.refresh = refresh;
    this.interval = interval;
    this.timer = null;
    this.generation = 0;
    this.running = false;
  }
  start() {
    this.stop();
    this.running = true;
    const generation = ++this.generation;
    const current = () => this.running && generation === this.generation;
    const tick = async () => {
      try {
        await this.refresh(current);
        this.failed = false;
      } catch (e) {
        if (current() && !this.failed) notify(e.message);
        this.failed = true;
      }
      if (current()) this.timer = setTimeout(tick, this.interval);
    };
    tick();
  }
  stop() {
    clearTimeout(this.timer);
    this.timer = null;
    this.running = false;
    this.generation++;
  }
  now() {
    if (this.running) this.start();
  }
}

// -- overview ---------------------------------------------------------------------------

const OverviewPage = (() => {
  let controller = null;
  let rates = null, held = null;

  function figure(label, value, extra = "") {
    return el("div", {class: `figure ${extra}`},
              el("span", {class: "label", text: label}),
              el("span", {class: "value", text: value}));
  }

  function show(reading) {
    const b = reading.broker;
    const load = reading.load_factor;
    const memory = b.memory_state || "-";
    document.getElementById("figures").replaceChildren(
      figure("Messages held", formatNumber(b.messages)),
      figure("In flight (unacked)", formatNumber(b.messages_unacked)),
      figure("Destinations", `${b.queues} queues, ${b.topics} topics`),
      figure("Connections", formatNumber(b.connections)),
      figure("Producers / consumers", `${b.producers} / ${b.consumers}`),
      figure("Memory state", b.memory_percent === undefined ? memory
        : `${memory} (${b.memory_percent.toFixed(0)} %)`, `memory-${memory.toLowerCase()}`),
      figure("Egress load factor", load ? `${load.percent.toFixed(1)} %` : "-",
             load && load.raised ? "warn" : ""),
      figure("Uptime", seconds(b.uptime_seconds)),
    );
    rates.add([reading.messages_in_per_second, reading.messages_out_per_second]);
    held.add([b.messages, b.messages_unacked]);
    const egress = reading.egress;
    fillTable(document.getElementById("egress-table"),
              Object.keys(egress.queued_messages).map((q) => el("tr", {},
                cell(q), cell(egress.queued_messages[q]), cell(egress.queued_bytes[q]))),
              "no clients");
  }

  async function run(own) {
    const state = document.getElementById("stream-state");
    while (!own.signal.aborted) {
      try {
        state.textContent = "live";
        await Api.stream("/api/stream/metrics?interval=1", show, own);
      } catch (e) {
        if (own.signal.aborted) return;
        state.textContent = `stream interrupted (${e.message}); reconnecting`;
        if (e.status === 401 || e.status === 403) return;
        await new Promise((r) => setTimeout(r, 2000));
      }
    }
  }

  return {
    start() {
      rates = rates || new LineChart(document.getElementById("chart-rates"),
        [{name: "in", color: "#2b6cb0"}, {name: "out", color: "#c05621"}]);
      held = held || new LineChart(document.getElementById("chart-held"),
        [{name: "held", color: "#2f855a"}, {name: "unacked", color: "#6b46c1"}]);
      controller = new AbortController();
      run(controller);
    },
    stop() {
      if (controller) controller.abort();
      controller = null;
    },
  };
})();

// -- destinations ---------------------------------------------------------------------

const DestinationsPage = (() => {
  const PAGE = 50;
  let offset = 0;
  const table = () => document.getElementById("dst-table");
  const poller = new Poller(refresh, 2000);

  function path(d, action = "") {
    return `/api/destinations/${d.type}/${Api.seg(d.name)}${action}`;
  }

  function row(d) {
    const what = `${d.type} ${d.name}`;
    const actions = el("td", {class: "actions"},
      dangerButton("Purge", path(d, "/purge"), () => act(`purged ${what}`, path(d, "/purge"),
                                      {method: "POST"}, () => poller.now())),
      d.state === "RUNNING"
        ? actionButton("Pause", () => act(`paused ${what}`, path(d, "/pause"),
                                          {method: "POST"}, () => poller.now()))
        : actionButton("Resume", () => act(`resumed ${what}`, path(d, "/resume"),
                                           {method: "POST"}, () => poller.now())),
      dangerButton("Destroy", path(d), () => act(`destroyed ${what}`, path(d),
                                        {method: "DELETE"}, () => poller.now())));
    return el("tr", {"data-name": d.name, "data-type": d.type},
      cell(d.name), cell(d.type), cell(d.state),
      el("td", {class: "depth", text: d.messages}), cell(d.messages_ready),
      cell(d.messages_unacked), cell(rate(d.messages_in_per_second)),
      cell(rate(d.messages_out_per_second)), cell(d.producers), cell(d.consumers),
      actions);
  }

  async function refresh(current) {
    const filter = document.getElementById("dst-filter").value.trim();
    const type = document.getElementById("dst-type").value;
    const query = new URLSearchParams({offset, limit: PAGE});
    if (filter) query.set("filter", filter);
    if (type) query.set("type", type);
    const page = await Api.call(`/api/destinations?${query}`);
    if (!current()) return;   // the filter or the page changed meanwhile
    if (page.total && offset >= page.total) {   // the last page emptied: step back
      offset = Math.max(0, Math.floor((page.total - 1) / PAGE) * PAGE);
      return refresh(current);
    }
    fillTable(table(), page.destinations.map(row),
              filter ? `no destination's name contains "${filter}"` : "no destinations");
    const last = Math.min(page.offset + page.destinations.length, page.total);
    document.getElementById("dst-range").textContent =
      page.total ? `${page.offset + 1}–${last} of ${page.total}` : "0 of 0";
    document.getElementById("dst-prev").disabled = offset === 0;
    document.getElementById("dst-next").disabled = last >= page.total;
  }

  function setup() {
    let typing = null;
    document.getElementById("dst-filter").addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(() => { offset = 0; poller.now(); }, 250);
    });
    document.getElementById("dst-type").addEventListener("change", () => {
      offset = 0; poller.now();
    });
    document.getElementById("dst-prev").addEventListener("click", () => {
      offset = Math.max(0, offset - PAGE); poller.now();
    });
    document.getElementById("dst-next").addEventListener("click", () => {
      offset += PAGE; poller.now();
    });
    document.getElementById("dst-create").addEventListener("submit", (event) => {
      event.preventDefault();
      const form = event.target;
      const name = form.name.value.trim();
      const type = form.type.value;
      act(`created ${type} ${name}`, `/api/destinations/${type}/${Api.seg(name)}`,
          {method: "PUT", body: {}}, () => { form.reset(); poller.now(); });
    });
  }

  return {setup, start: () => poller.start(), stop: () => poller.stop()};
})();

// -- connections and clients ------------------------------------------------------------

const ConnectionsPage = (() => {
  const poller = new Poller(refresh, 3000);

  function connectionRow(c) {
    return el("tr", {"data-id": c.id},
      cell(c.id), cell(c.service), cell(c.protocol), cell(c.user), cell(c.client_id),
      cell(`${c.host}:${c.port}`), cell(seconds(c.connected_seconds)),
      cell(c.messages_out),
      el("td", {}, dangerButton("Disconnect", `cxn ${c.id}`, () => act(
        `disconnected connection ${c.id}`, `/api/connections/${Api.seg(String(c.id))}`,
        {method: "DELETE"}, () => poller.now()))));
  }

  function clientRow(c) {
    const queues = c.queues || [];
    const held = queues.map((q) => `${q.queue} ${q.length_msgs}`).join(", ");
    const bytes = queues.reduce((sum, q) => sum + q.length_bytes, 0);
    const discards = queues.reduce((sum, q) => sum + q.discards, 0);
    return el("tr", {class: c.slow ? "slow" : ""},
      cell(c.client), cell(c.user), cell(c.peer), cell(c.profile),
      cell(c.slow ? "slow" : "no"), cell(held), cell(bytes), cell(discards));
  }

  async function refresh(current) {
    const [connections, clients] = await Promise.all(
      [Api.call("/api/connections"), Api.call("/api/clients")]);
    if (!current()) return;
    fillTable(document.getElementById("cxn-table"), connections.map(connectionRow),
              "no connections");
    clients.sort((a, b) => (b.slow - a.slow));   // slow subscribers first
    fillTable(document.getElementById("client-table"), clients.map(clientRow),
              "no clients");
  }

  return {start: () => poller.start(), stop: () => poller.stop()};
})();

// -- durable subscriptions --------------------------------------------------------------

const DurablesPage = (() => {
  const poller = new Poller(refresh, 3000);

  function row(d) {
    const path = `/api/durables/${Api.seg(d.client_id)}/${Api.seg(d.name)}`;
    const what = `durable subscription ${d.name} of ${d.client_id}`;
    return el("tr", {},
      cell(d.name), cell(d.client_id), cell(d.topic), cell(d.selector), cell(d.state),
      cell(d.consumers), cell(d.messages), cell(d.unacked), cell(d.owner),
      el("td", {class: "actions"},
        dangerButton("Purge", `${path}/purge`, () => act(`purged ${what}`, `${path}/purge`,
                                        {method: "POST"}, () => poller.now())),
        dangerButton("Destroy", path, () => act(`destroyed ${what}`, path,
                                          {method: "DELETE"}, () => poller.now()))));
  }

  async function refresh(current) {
    const durables = await Api.call("/api/durables");
    if (!current()) return;
    fillTable(document.getElementById("dur-table"), durables.map(row),
              "no durable subscriptions");
  }

  return {start: () => poller.start(), stop: () => poller.stop()};
})();
