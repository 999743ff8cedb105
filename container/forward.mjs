// pincer's egress forwarder inside an agent container (sandbox.mode = "docker").
//
// The container has no network. The agent's tools use HTTP(S)_PROXY =
// http://127.0.0.1:3128, and this carries each connection made there, byte
// for byte, to the egress proxy's Unix socket that pincer mounts in; pincer
// applies the group's policy there. It does in the image what `pincer
// forward` does in a bwrap sandbox, in Node (the image has it for the CLI)
// so that pincer's own binary need not run against the image's libc.
//
// Usage: node forward.mjs [LISTEN_HOST:PORT] [SOCKET]
import net from "node:net";

const [listen = "127.0.0.1:3128", socket = "/run/pincer/egress.sock"] = process.argv.slice(2);
const colon = listen.lastIndexOf(":");
const [host, port] = [listen.slice(0, colon), Number(listen.slice(colon + 1))];

const server = net.createServer((client) => {
  // Small writes (a CONNECT line, TLS records) go out at once.
  client.setNoDelay(true);
  const upstream = net.connect(socket);
  const end = () => {
    client.destroy();
    upstream.destroy();
  };
  client.on("error", end);
  upstream.on("error", end);
  client.pipe(upstream).pipe(client);
});
server.on("error", (e) => {
  console.error(`pincer forward.mjs: ${e.message}`);
  process.exit(1);
});
server.listen(port, host);
