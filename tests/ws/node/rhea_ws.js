// rhea (bench/node's copy) over WebSocket with its usual subprotocol offer
// ["binary", "AMQPWSB10", "amqp"]: sends COUNT messages to ADDRESS and receives them
// back on the same connection, then prints one JSON line and exits (0: all received).
// Node's own WebSocket (global in Node 22+, behind --experimental-websocket in 20).
const path = require('path');
const rhea = require(path.join(__dirname, '..', '..', '..', 'bench', 'node', 'node_modules', 'rhea'));
const [url, address, count] = [process.argv[2], process.argv[3], Number(process.argv[4] || 10)];
const ws = rhea.websocket_connect(WebSocket);
const connection = rhea.connect({
  connection_details: ws(url, ['binary', 'AMQPWSB10', 'amqp']),
  username: 'admin', password: 'admin', reconnect: false,
});
const bodies = [];
function finish(result, code) {
  console.log(JSON.stringify(result));
  process.exit(code);
}
connection.open_receiver(address);
connection.on('receiver_open', () => {
  const sender = connection.open_sender(address);
  let sent = 0;
  sender.on('sendable', () => {
    while (sender.sendable() && sent < count) sender.send({body: `rhea ${sent++}`});
  });
});
connection.on('message', (context) => {
  bodies.push(context.message.body);
  if (bodies.length === count) finish({received: bodies.length, bodies: bodies.slice(0, 3)}, 0);
});
connection.on('disconnected', (context) => finish(
  {error: `disconnected: ${context.error ? context.error.message : 'no reason'}`}, 1));
setTimeout(() => finish({error: `received ${bodies.length} of ${count} in 20 s`}, 2), 20000);
