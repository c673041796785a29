// Starts the Node reference server (@durable-streams/server, installed by
// bench/peers/install.sh into the bench cache) for the benchmark.
//
// Usage: node node-server.mjs PORT [DATA_DIR]
//   Without DATA_DIR the in-memory store is used; with it, the file-backed
//   store (log files + LMDB, fdatasync on every append before acknowledging).
// install.sh copies this file next to the npm prefix's node_modules so that
// the bare import below resolves to the installed package.
import { DurableStreamTestServer } from "@durable-streams/server"

const port = Number(process.argv[2])
const dataDir = process.argv[3]
if (!Number.isInteger(port) || port <= 0) {
  console.error("usage: node node-server.mjs PORT [DATA_DIR]")
  process.exit(2)
}

const server = new DurableStreamTestServer({
  port,
  host: "127.0.0.1",
  ...(dataDir ? { dataDir } : {}),
})
await server.start()
console.error(`node reference server on ${server.url} (${dataDir ? "file store " + dataDir : "memory"})`)

// The bench stops servers with SIGTERM; close cleanly so the file store's
// LMDB is not left locked for the next run.
for (const sig of ["SIGTERM", "SIGINT"]) {
  process.on(sig, () => {
    server.stop().finally(() => process.exit(0))
  })
}
