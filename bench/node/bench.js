#!/usr/bin/env node
'use strict';
// A load generator that shares no code with mqgate: rhea for AMQP 1.0 and a plain
// STOMP 1.2 client written here over Node's `net`. One process, one connection per
// client, every scenario run in turn against the broker at --amqp-url / --stomp-url,
// so that mqgate and another broker listening on the same ports are measured by the
// same generator on the same machine. One JSON line per scenario on stdout; a failed
// scenario's line has an "error" field instead of numbers. `node bench.js --help`.

const net = require('net');
const { performance } = require('perf_hooks');
const rhea = require('rhea');

const USAGE = `usage: node bench.js [options]
  --amqp-url URL       amqp://HOST:PORT of the broker's AMQP 1.0 port (default amqp://127.0.0.1:5672)
  --stomp-url URL      stomp://HOST:PORT of its STOMP port (default stomp://127.0.0.1:61613)
  --messages N         messages received per queue scenario (default 200000); the fan-out
                       publishes N/10 to ten consumers, so it too delivers N
  --seconds S          how long the latency scenario sends (default 10; the first second is warm-up)
  --rate R             the latency scenario's messages per second (default 2000)
  --user U --password P  SASL PLAIN / STOMP login (default guest/guest; --user '' for none)
  --only NAMES         comma-separated scenario names (default all): ${'{'}amqp,stomp}-{queue-presettled,
                       queue-persistent,fanout-10,latency-2000,queue-4k}
  --timeout S          seconds a scenario may go without progress before it fails (default 30)
  --amqp-queue-prefix P  put P before the AMQP queue names (default none: mqgate and ActiveMQ
                       take a bare name as a queue; RabbitMQ 3.10 wants /queue/)
  --amqp-topic-prefix P  the AMQP topic's prefix (default topic://; RabbitMQ 3.10 wants /topic/)
  --stomp-host H       the STOMP CONNECT frame's host header (default the URL's host; RabbitMQ
                       takes it as its virtual host and wants /)`;

function parseArgs(argv) {
  const options = {
    amqpUrl: 'amqp://127.0.0.1:5672', stompUrl: 'stomp://127.0.0.1:61613',
    messages: 200000, seconds: 10, rate: 2000, user: 'guest', password: 'guest',
    only: [], timeout: 30, amqpQueuePrefix: '', amqpTopicPrefix: 'topic://', stompHost: '',
  };
  const names = {
    '--amqp-url': 'amqpUrl', '--stomp-url': 'stompUrl', '--messages': 'messages',
    '--seconds': 'seconds', '--rate': 'rate', '--user': 'user', '--password': 'password',
    '--only': 'only', '--timeout': 'timeout',
    '--amqp-queue-prefix': 'amqpQueuePrefix', '--amqp-topic-prefix': 'amqpTopicPrefix',
    '--stomp-host': 'stompHost',
  };
  for (let i = 0; i < argv.length; i += 1) {
    if (argv[i] === '--help' || argv[i] === '-h') {
      console.log(USAGE);
      process.exit(0);
    }
    const key = names[argv[i]];
    if (!key || i + 1 >= argv.length) {
      console.error(`${USAGE}\nbench.js: unknown option or missing value: ${argv[i]}`);
      process.exit(2);
    }
    const value = argv[(i += 1)];
    if (key === 'only') options.only.push(...value.split(',').filter(Boolean));
    else if (typeof options[key] === 'number') options[key] = Number(value);
    else options[key] = value;
  }
  return options;
}

function hostPort(url, scheme, defaultPort) {
  const match = new RegExp(`^${scheme}://([^:/]+)(?::(\\d+))?/?$`).exec(url);
  if (!match) throw new Error(`expected ${scheme}://HOST:PORT, got ${url}`);
  return { host: match[1], port: Number(match[2] || defaultPort) };
}

// --- progress and deadlines ---------------------------------------------------------

// A scenario fails when nothing moves for `timeout` seconds (a stalled broker), never
// hangs: every client reports progress with touch(), and every socket it opened is
// registered so that it is destroyed however the scenario ends.
class Run {
  constructor(timeoutSeconds) {
    this.timeoutMs = timeoutSeconds * 1000;
    this.closers = [];
    this.last = performance.now();
    this.failed = null;
    this.done = new Promise((resolve, reject) => {
      this.finish = resolve;
      this.fail = (error) => { if (!this.failed) { this.failed = error; reject(error); } };
    });
    this.watch = setInterval(() => {
      if (performance.now() - this.last > this.timeoutMs) {
        this.fail(new Error(`no progress for ${timeoutSeconds} s: ${this.status()}`));
      }
    }, 250);
    this.status = () => 'waiting';
  }

  touch() { this.last = performance.now(); }

  onClose(closer) { this.closers.push(closer); }

  close() {
    clearInterval(this.watch);
    for (const closer of this.closers) {
      try { closer(); } catch (e) { /* already gone */ }
    }
  }
}

// The p-th fraction of sorted values, nearest rank (the Python benchmarks' rule).
function percentile(sorted, fraction) {
  const index = Math.min(sorted.length - 1, Math.max(0, Math.round(fraction * sorted.length) - 1));
  return sorted[index];
}

function round(value, places) {
  const scale = 10 ** places;
  return Math.round(value * scale) / scale;
}

// --- AMQP 1.0 (rhea) -----------------------------------------------------------------

function amqpConnect(options, run, name) {
  const { host, port } = hostPort(options.amqpUrl, 'amqp', 5672);
  const container = rhea.create_container({ id: `node-bench-${name}` });
  // noDelay: without it a small transfer written while the last is unacknowledged
  // waits for the broker's delayed ACK (Nagle), tens of ms in the latency scenario.
  const settings = { host, port, reconnect: false, container_id: container.id, noDelay: true };
  if (options.user) {
    settings.username = options.user;
    settings.password = options.password;
  }
  return new Promise((resolve) => {
    const connection = container.connect(settings);
    run.onClose(() => { if (connection.socket) connection.socket.destroy(); });
    if (connection.socket && connection.socket.setNoDelay) connection.socket.setNoDelay(true);
    const lost = (context) => {
      const error = context.error || (context.connection && context.connection.error);
      const why = error ? (error.description || error.condition || String(error)) : 'connection lost';
      run.fail(new Error(`${name}: ${why}`));
    };
    connection.on('connection_error', lost);
    connection.on('disconnected', lost);
    connection.on('connection_close', lost);
    connection.on('receiver_error', lost);
    connection.on('sender_error', lost);
    connection.on('error', lost);
    connection.on('connection_open', () => resolve(connection));
  });
}

function linkOpen(link, event) {
  return new Promise((resolve) => link.once(event, () => resolve(link)));
}

function amqpBody(size) {
  return rhea.message.data_section(Buffer.alloc(size, 0x78));
}

// A receiver that counts `total` messages; resolves with its first and last times.
// `durable` asks for a durable terminus (see amqpQueue).
async function amqpCounter(options, run, address, total, presettled, name, onMessage, durable) {
  const connection = await amqpConnect(options, run, name);
  const receiver = connection.open_receiver({
    source: { address, durable: durable ? 1 : 0 }, credit_window: 1000, autoaccept: !presettled,
    snd_settle_mode: presettled ? 1 : 0,
  });
  const counter = { count: 0, first: 0, last: 0, receiver };
  counter.done = new Promise((resolve) => {
    receiver.on('message', (context) => {
      const now = performance.now();
      if (counter.count === 0) counter.first = now;
      counter.count += 1;
      run.touch();
      // rhea keeps an arrived delivery until it is settled here too, presettled or
      // not, and stops granting credit once 2,048 are kept: settle it now.
      if (presettled) context.delivery.update(true);
      if (onMessage) onMessage(context.message, now);
      if (counter.count === total) {
        counter.last = now;
        resolve(counter);
      }
    });
  });
  await linkOpen(receiver, 'receiver_open');
  return counter;
}

// Send `total` messages as fast as credit (and, unsettled, `window` outcomes) allow,
// yielding to the event loop every 500 sends so that acknowledgements are read.
async function amqpProduce(options, run, address, total, { presettled, durable, size, window }) {
  const connection = await amqpConnect(options, run, 'producer');
  const sender = connection.open_sender({
    target: { address, durable: durable ? 1 : 0 }, snd_settle_mode: presettled ? 1 : 0,
    autosettle: true,
  });
  const message = { body: amqpBody(size), durable: Boolean(durable) };
  const state = { sent: 0, accepted: 0, refused: 0 };
  await new Promise((resolve) => {
    let scheduled = false;
    const pump = () => {
      scheduled = false;
      let batch = 0;
      while (state.sent < total && sender.sendable() && batch < 500
             && (presettled || state.sent - state.accepted < window)) {
        sender.send(message);
        state.sent += 1;
        batch += 1;
      }
      if (presettled && state.sent === total) resolve();
      else if (batch === 500 && !scheduled) { scheduled = true; setImmediate(pump); }
    };
    sender.on('sendable', pump);
    sender.on('accepted', () => {
      state.accepted += 1;
      if (state.accepted === total) resolve();
      else if (!scheduled) { scheduled = true; setImmediate(pump); }
    });
    for (const outcome of ['rejected', 'released', 'modified']) {
      sender.on(outcome, () => {
        state.refused += 1;
        run.fail(new Error(`the broker answered ${outcome} to a message (${state.accepted} accepted)`));
      });
    }
    linkOpen(sender, 'sendable').then(pump);
  });
  return state;
}

async function amqpQueue(options, run, scenario, { presettled, durable, size }) {
  const address = `${options.amqpQueuePrefix}bench.node.amqp.${scenario}`;
  const total = options.messages;
  // Persistent messages go to a queue attached with durable termini: RabbitMQ declares
  // the queue durable only then, and keeps a persistent message on disk only in a
  // durable queue (mqgate and ActiveMQ have no transient queues and ignore it).
  const consumer = await amqpCounter(options, run, address, total, presettled, 'consumer',
    undefined, durable);
  run.status = () => `received ${consumer.count} of ${total}`;
  const producing = amqpProduce(options, run, address, total,
    { presettled, durable, size, window: 1000 });
  await Promise.all([producing, consumer.done]);
  const seconds = (consumer.last - consumer.first) / 1000;
  return { messages: total, size, msgs_per_s: round(total / seconds, 1), seconds: round(seconds, 3) };
}

async function amqpFanout(options, run, consumers) {
  const address = `${options.amqpTopicPrefix}bench.node.amqp.fanout`;
  const published = Math.max(1, Math.floor(options.messages / consumers));
  const counters = [];
  for (let i = 0; i < consumers; i += 1) {
    counters.push(await amqpCounter(options, run, address, published, true, `consumer-${i}`));
  }
  run.status = () => `received ${counters.map((c) => c.count).join('/')} of ${published} each`;
  await amqpProduce(options, run, address, published, { presettled: true, size: 256 });
  await Promise.all(counters.map((c) => c.done));
  return fanoutLine(counters, published, consumers);
}

function fanoutLine(counters, published, consumers) {
  const first = Math.min(...counters.map((c) => c.first));
  const last = Math.max(...counters.map((c) => c.last));
  const deliveries = published * consumers;
  const seconds = (last - first) / 1000;
  return {
    messages: published, consumers, size: 256, deliveries,
    deliveries_per_s: round(deliveries / seconds, 1), seconds: round(seconds, 3),
  };
}

// Steady-rate sending: every millisecond, send what the clock says is due (as much of
// it as `ready()` allows: a sender out of credit catches up on the next tick, and the
// wait shows in the latencies).
function paced(options, run, send, ready = () => true) {
  const total = Math.floor(options.rate * options.seconds);
  return new Promise((resolve) => {
    const start = performance.now();
    let sent = 0;
    const tick = () => {
      if (run.failed) return;
      const due = Math.min(total, Math.floor(((performance.now() - start) / 1000) * options.rate));
      while (sent < due && ready()) {
        send(sent);
        sent += 1;
      }
      if (sent < total) setTimeout(tick, 1);
      else resolve(total);
    };
    tick();
  });
}

// The body of a latency message: its number and its send time, then padding to 256 B.
function stamped(number, size) {
  const body = Buffer.alloc(size, 0x78);
  body.writeUInt32BE(number, 0);
  body.writeDoubleBE(performance.now(), 4);
  return body;
}

function latencyLine(options, latencies, total, elapsed) {
  const warm = Math.floor(options.rate * 1.0);
  const kept = latencies.slice(warm).sort((a, b) => a - b);
  if (kept.length === 0) throw new Error('no message after the warm-up second');
  return {
    messages: kept.length, size: 256, rate: options.rate,
    p50_ms: round(percentile(kept, 0.5), 3), p99_ms: round(percentile(kept, 0.99), 3),
    max_ms: round(kept[kept.length - 1], 3), achieved_rate: round(total / elapsed, 1),
  };
}

async function amqpLatency(options, run) {
  const address = `${options.amqpQueuePrefix}bench.node.amqp.latency`;
  const total = Math.floor(options.rate * options.seconds);
  const latencies = new Array(total);
  const consumer = await amqpCounter(options, run, address, total, true, 'consumer',
    (message, now) => {
      const body = message.body.content || message.body;
      latencies[body.readUInt32BE(0)] = now - body.readDoubleBE(4);
    });
  run.status = () => `received ${consumer.count} of ${total}`;
  const connection = await amqpConnect(options, run, 'producer');
  const sender = connection.open_sender({ target: { address }, snd_settle_mode: 1 });
  await linkOpen(sender, 'sendable');
  const start = performance.now();
  await paced(options, run, (number) => {
    sender.send({ body: rhea.message.data_section(stamped(number, 256)) });
  }, () => sender.sendable());
  const elapsed = (performance.now() - start) / 1000;
  await consumer.done;
  return latencyLine(options, latencies, total, elapsed);
}

// --- STOMP 1.2 over net --------------------------------------------------------------

function stompFrame(command, headers, body) {
  const lines = [command];
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}:${value}`);
  const head = Buffer.from(`${lines.join('\n')}\n\n`, 'utf8');
  return Buffer.concat([head, body || Buffer.alloc(0), Buffer.from([0])]);
}

// One STOMP connection: writes frames, splits what it reads into frames (headers up to
// the blank line, then content-length bytes or up to the NUL), and hands each to
// onFrame(command, headers, body). An ERROR frame or a close fails the run.
class StompClient {
  constructor(socket, run, name) {
    this.socket = socket;
    this.run = run;
    this.name = name;
    this.pending = Buffer.alloc(0);
    this.onFrame = () => {};
    this.afterData = () => {};
    socket.on('data', (chunk) => this.received(chunk));
    socket.on('error', (e) => run.fail(new Error(`${name}: ${e.message}`)));
    socket.on('close', () => run.fail(new Error(`${name}: the broker closed the connection`)));
  }

  static connect(options, run, name) {
    const { host, port } = hostPort(options.stompUrl, 'stomp', 61613);
    return new Promise((resolve) => {
      const socket = net.connect({ host, port, noDelay: true });
      run.onClose(() => { socket.removeAllListeners('close'); socket.destroy(); });
      const client = new StompClient(socket, run, name);
      client.onFrame = (command) => {
        if (command === 'CONNECTED') resolve(client);
      };
      const headers = { 'accept-version': '1.2', host: options.stompHost || host, 'heart-beat': '0,0' };
      if (options.user) {
        headers.login = options.user;
        headers.passcode = options.password;
      }
      socket.write(stompFrame('CONNECT', headers));
    });
  }

  write(data) { this.socket.write(data); }

  received(chunk) {
    let data = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    let at = 0;
    for (;;) {
      while (at < data.length && (data[at] === 0x0a || data[at] === 0x0d)) at += 1; // heart-beats
      const blank = data.indexOf('\n\n', at);
      if (blank < 0) break;
      const lines = data.toString('utf8', at, blank).split('\n');
      const command = lines[0].replace(/\r$/, '');
      const headers = {};
      for (let i = 1; i < lines.length; i += 1) {
        const colon = lines[i].indexOf(':');
        const name = lines[i].slice(0, colon);
        if (!(name in headers)) headers[name] = lines[i].slice(colon + 1).replace(/\r$/, '');
      }
      const start = blank + 2;
      let end;
      if ('content-length' in headers) {
        end = start + Number(headers['content-length']);
        if (end >= data.length) break;
      } else {
        end = data.indexOf(0, start);
        if (end < 0) break;
      }
      at = end + 1;
      if (command === 'ERROR') {
        this.run.fail(new Error(`${this.name}: ERROR frame: ${headers.message || ''} ${data.toString('utf8', start, end)}`.trim()));
        return;
      }
      this.onFrame(command, headers, data.subarray(start, end));
    }
    this.pending = at < data.length ? Buffer.from(data.subarray(at)) : Buffer.alloc(0);
    this.afterData();
  }
}

// A subscriber that counts `total` MESSAGE frames; in client-individual mode it sends
// one ACK per message, all the ACKs of one read in one write.
async function stompCounter(options, run, destination, total, ack, name, onMessage) {
  const client = await StompClient.connect(options, run, name);
  const counter = { count: 0, first: 0, last: 0 };
  let acks = [];
  counter.done = new Promise((resolve) => {
    client.onFrame = (command, headers, body) => {
      if (command !== 'MESSAGE') return;
      const now = performance.now();
      if (counter.count === 0) counter.first = now;
      counter.count += 1;
      run.touch();
      if (ack !== 'auto') acks.push(stompFrame('ACK', { id: headers.ack }));
      if (onMessage) onMessage(body, now);
      if (counter.count === total) {
        counter.last = now;
        resolve(counter);
      }
    };
  });
  client.afterData = () => {
    if (acks.length) {
      client.write(Buffer.concat(acks));
      acks = [];
    }
  };
  const subscribed = new Promise((resolve) => {
    const counting = client.onFrame;
    client.onFrame = (command, headers, body) => {
      if (command === 'RECEIPT' && headers['receipt-id'] === 'sub') {
        client.onFrame = counting;
        resolve();
      } else counting(command, headers, body);
    };
  });
  client.write(stompFrame('SUBSCRIBE', {
    // The prefetch of 1,000 in the words of ActiveMQ and of RabbitMQ (mqgate knows both).
    id: '1', destination, ack, 'activemq.prefetchSize': '1000', 'prefetch-count': '1000',
    receipt: 'sub',
  }));
  await subscribed;
  return counter;
}

// STOMP has no flow control: the producer asks for a RECEIPT on the last SEND of every
// `batch` and never runs more than `window` SENDs past the last RECEIPT it has read.
async function stompProduce(options, run, destination, total, { persistent, size, batch, window }) {
  const client = await StompClient.connect(options, run, 'producer');
  const headers = { destination, 'content-type': 'application/octet-stream' };
  if (persistent) headers.persistent = 'true';
  const body = Buffer.alloc(size, 0x78);
  const plain = stompFrame('SEND', headers, Buffer.from(body));
  const state = { sent: 0, confirmed: 0 };
  await new Promise((resolve) => {
    const pump = () => {
      while (state.sent < total && state.sent - state.confirmed < window) {
        const count = Math.min(batch, total - state.sent);
        const frames = new Array(count).fill(plain);
        frames[count - 1] = stompFrame('SEND', { ...headers, receipt: String(state.sent + count) }, body);
        client.write(Buffer.concat(frames));
        state.sent += count;
      }
    };
    client.onFrame = (command, frameHeaders) => {
      if (command !== 'RECEIPT') return;
      state.confirmed = Number(frameHeaders['receipt-id']);
      run.touch();
      if (state.confirmed === total) resolve();
      else pump();
    };
    pump();
  });
  return state;
}

async function stompQueue(options, run, scenario, { persistent, size }) {
  const destination = `/queue/bench.node.stomp.${scenario}`;
  const total = options.messages;
  const ack = persistent ? 'client-individual' : 'auto';
  const consumer = await stompCounter(options, run, destination, total, ack, 'consumer');
  run.status = () => `received ${consumer.count} of ${total}`;
  // Persistent: a RECEIPT every 100 SENDs and 1,000 unconfirmed at most, like the AMQP
  // producer's 1,000 unsettled; otherwise every 1,000 and 2,000 (the Python generator's).
  const flow = persistent ? { batch: 100, window: 1000 } : { batch: 1000, window: 2000 };
  const producing = stompProduce(options, run, destination, total, { persistent, size, ...flow });
  await Promise.all([producing, consumer.done]);
  const seconds = (consumer.last - consumer.first) / 1000;
  return { messages: total, size, msgs_per_s: round(total / seconds, 1), seconds: round(seconds, 3) };
}

async function stompFanout(options, run, consumers) {
  const destination = '/topic/bench.node.stomp.fanout';
  const published = Math.max(1, Math.floor(options.messages / consumers));
  const counters = [];
  for (let i = 0; i < consumers; i += 1) {
    counters.push(await stompCounter(options, run, destination, published, 'auto', `consumer-${i}`));
  }
  run.status = () => `received ${counters.map((c) => c.count).join('/')} of ${published} each`;
  await stompProduce(options, run, destination, published, { size: 256, batch: 1000, window: 2000 });
  await Promise.all(counters.map((c) => c.done));
  return fanoutLine(counters, published, consumers);
}

async function stompLatency(options, run) {
  const destination = '/queue/bench.node.stomp.latency';
  const total = Math.floor(options.rate * options.seconds);
  const latencies = new Array(total);
  const consumer = await stompCounter(options, run, destination, total, 'auto', 'consumer',
    (body, now) => { latencies[body.readUInt32BE(0)] = now - body.readDoubleBE(4); });
  run.status = () => `received ${consumer.count} of ${total}`;
  const producer = await StompClient.connect(options, run, 'producer');
  const headers = { destination, 'content-type': 'application/octet-stream', 'content-length': '256' };
  const start = performance.now();
  await paced(options, run, (number) => producer.write(stompFrame('SEND', headers, stamped(number, 256))));
  const elapsed = (performance.now() - start) / 1000;
  await consumer.done;
  return latencyLine(options, latencies, total, elapsed);
}

// --- scenarios -----------------------------------------------------------------------

// The five shapes, (a) to (e), for each protocol.
const SCENARIOS = [
  ['amqp-queue-presettled', 'node-rhea', (o, r) => amqpQueue(o, r, 'presettled', { presettled: true, size: 256 })],
  ['amqp-queue-persistent', 'node-rhea', (o, r) => amqpQueue(o, r, 'persistent', { presettled: false, durable: true, size: 256 })],
  ['amqp-fanout-10', 'node-rhea', (o, r) => amqpFanout(o, r, 10)],
  ['amqp-latency-RATE', 'node-rhea', (o, r) => amqpLatency(o, r)],
  ['amqp-queue-4k', 'node-rhea', (o, r) => amqpQueue(o, r, 'large', { presettled: true, size: 4096 })],
  ['stomp-queue-auto', 'node-stomp', (o, r) => stompQueue(o, r, 'auto', { persistent: false, size: 256 })],
  ['stomp-queue-persistent', 'node-stomp', (o, r) => stompQueue(o, r, 'persistent', { persistent: true, size: 256 })],
  ['stomp-fanout-10', 'node-stomp', (o, r) => stompFanout(o, r, 10)],
  ['stomp-latency-RATE', 'node-stomp', (o, r) => stompLatency(o, r)],
  ['stomp-queue-4k', 'node-stomp', (o, r) => stompQueue(o, r, 'large', { persistent: false, size: 4096 })],
];

async function runScenario(options, scenario, generator, body) {
  const run = new Run(options.timeout);
  const head = { scenario, generator };
  try {
    const line = await Promise.race([body(options, run), run.done]);
    return { ...head, ...line };
  } catch (error) {
    return { ...head, error: error.message };
  } finally {
    run.close();
  }
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const chosen = SCENARIOS.map(([name, generator, body]) => [name.replace('RATE', options.rate), generator, body]);
  const unknown = options.only.filter((name) => !chosen.some(([known]) => known === name));
  if (unknown.length) {
    console.error(`bench.js: no scenario named ${unknown.join(', ')}; known: ${chosen.map(([n]) => n).join(', ')}`);
    process.exit(2);
  }
  let failed = false;
  for (const [name, generator, body] of chosen) {
    if (options.only.length && !options.only.includes(name)) continue;
    const line = await runScenario(options, name, generator, body);
    failed = failed || 'error' in line;
    console.log(JSON.stringify(line));
  }
  process.exit(failed ? 1 : 0);
}

main();
