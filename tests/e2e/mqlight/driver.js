// One real MQ Light client (the mqlight npm package) driven by a test.
//
//   node driver.js SERVICE CLIENT_ID
//
// starts a client on SERVICE (amqp://user:password@host:port) with the id CLIENT_ID,
// then reads commands from stdin and writes what happens to stdout, one JSON object a
// line each way. The tests (tests/e2e/mqlight_client.py) wait on these events rather
// than on time.
//
// Commands, each answered by an event of the same name or by an "error" event that
// carries the command's "ref":
//   {"op": "subscribe", "pattern": P, "share": S?, "qos": 0|1, "autoConfirm": B?,
//    "ttl": MS?, "credit": N?}                            -> "subscribed"
//   {"op": "unsubscribe", "pattern": P, "share": S?, "ttl": MS?} -> "unsubscribed"
//   {"op": "send", "topic": T, "body": B, "qos": 0|1, "ttl": MS?} -> "sent"
//       (a body {"bytes": N} sends a Buffer of N bytes)
//   {"op": "confirm", "seq": N}: confirm message N (a qos 1 subscription without
//       autoConfirm)                                      -> "confirmed"
//   {"op": "stop"}                                        -> "stopped", then exit
// Unprompted events: "started", "message" (seq, data, topic, topicPattern, share, ttl),
// "error" (the client's error event: name, message), "restarted", "stopped".
'use strict';

const readline = require('readline');
const mqlight = require('mqlight');

const [service, clientId] = process.argv.slice(2);

function emit(event, fields) {
  process.stdout.write(JSON.stringify(Object.assign({event: event}, fields)) + '\n');
}

function describe(err) {
  return {name: err && err.name, message: err && err.message};
}

// A Buffer body is reported by its length: the tests check sizes, not bytes.
function report(data) {
  return Buffer.isBuffer(data) ? {bytes: data.length} : data;
}

const pending = new Map();  // seq -> delivery, for a later confirm
let seq = 0;

const client = mqlight.createClient({service: service, id: clientId}, (err) => {
  if (err) {
    emit('error', Object.assign({ref: 'start'}, describe(err)));
    process.exit(2);
  }
  emit('started', {id: client.id});
});

client.on('message', (data, delivery) => {
  seq += 1;
  if (delivery.message.confirmDelivery) {
    pending.set(seq, delivery);
  }
  emit('message', {
    seq: seq,
    data: report(data),
    topic: delivery.message.topic,
    ttl: delivery.message.ttl,
    topicPattern: delivery.destination && delivery.destination.topicPattern,
    share: delivery.destination && delivery.destination.share,
  });
});
client.on('error', (err) => emit('error', describe(err)));
client.on('restarted', () => emit('restarted'));
client.on('stopped', () => emit('stopped'));

function run(command) {
  const ref = command.ref;
  const answer = (event, fields) => (err) => {
    if (err) {
      emit('error', Object.assign({ref: ref, op: command.op}, describe(err)));
    } else {
      emit(event, Object.assign({ref: ref}, fields));
    }
  };
  switch (command.op) {
    case 'subscribe': {
      const options = {qos: command.qos || 0};
      for (const key of ['autoConfirm', 'ttl', 'credit']) {
        if (command[key] !== undefined) options[key] = command[key];
      }
      const done = answer('subscribed', {pattern: command.pattern, share: command.share});
      if (command.share) {
        client.subscribe(command.pattern, command.share, options, done);
      } else {
        client.subscribe(command.pattern, options, done);
      }
      break;
    }
    case 'unsubscribe': {
      const options = command.ttl === undefined ? {} : {ttl: command.ttl};
      const done = answer('unsubscribed', {pattern: command.pattern});
      if (command.share) {
        client.unsubscribe(command.pattern, command.share, options, done);
      } else {
        client.unsubscribe(command.pattern, options, done);
      }
      break;
    }
    case 'send': {
      const body = (command.body && command.body.bytes !== undefined)
        ? Buffer.alloc(command.body.bytes, 0x61) : command.body;
      const options = {qos: command.qos || 0};
      if (command.ttl !== undefined) options.ttl = command.ttl;
      client.send(command.topic, body, options, answer('sent', {topic: command.topic}));
      break;
    }
    case 'confirm': {
      const delivery = pending.get(command.seq);
      if (!delivery) {
        emit('error', {ref: ref, op: 'confirm', name: 'Error',
                       message: `no unconfirmed message ${command.seq}`});
        break;
      }
      pending.delete(command.seq);
      delivery.message.confirmDelivery(answer('confirmed', {seq: command.seq}));
      break;
    }
    case 'stop':
      client.stop(() => {
        emit('stopped', {ref: ref});
        process.exit(0);
      });
      break;
    default:
      emit('error', {ref: ref, name: 'Error', message: `unknown op ${command.op}`});
  }
}

const input = readline.createInterface({input: process.stdin});
input.on('line', (line) => {
  if (!line.trim()) return;
  let command = {};
  try {
    command = JSON.parse(line);
    run(command);
  } catch (err) {
    // The client throws its argument errors (UnsubscribedError ...) at once.
    emit('error', Object.assign({ref: command.ref, op: command.op}, describe(err)));
  }
});
// The test went away: leave without waiting for the broker.
input.on('close', () => process.exit(0));
