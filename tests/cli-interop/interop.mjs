// The CLI against the official TypeScript packages, both ways (run.sh says
// what and why). Every server is on 127.0.0.1. Exits 1 on the first failure.
import { spawn } from "node:child_process"
import assert from "node:assert/strict"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DurableStream, stream } from "@durable-streams/client"
import { DurableStreamTestServer, createRegistryHooks } from "@durable-streams/server"
import { MaterializedState } from "@durable-streams/state"

const CLI = process.env.DS_CLI
const OURS = `${process.env.OUR_URL}/v1/stream`
const RUN = Date.now().toString(36)
let checks = 0

function cli(base, args, input) {
  return new Promise((resolve, reject) => {
    const env = { ...process.env, STREAM_URL: base }
    delete env.STREAM_AUTH
    const child = spawn(CLI, args, { env, stdio: ["pipe", "pipe", "pipe"] })
    const out = [], err = []
    child.stdout.on("data", (d) => out.push(d))
    child.stderr.on("data", (d) => err.push(d))
    child.on("error", reject)
    child.on("close", (code) => resolve({ code, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString() }))
    if (input !== undefined) child.stdin.end(input)
    else child.stdin.end()
  })
}

async function ok(base, args, input) {
  const r = await cli(base, args, input)
  assert.equal(r.code, 0, `durable-streams ${args.join(" ")} exited ${r.code}: ${r.stderr}`)
  return r.stdout
}

async function check(name, f) {
  try {
    await f()
    checks++
    console.log(`ok: ${name}`)
  } catch (e) {
    console.error(`FAILED: ${name}: ${e.stack || e}`)
    process.exit(1)
  }
}

const lines = (buf) => buf.toString().split("\n").filter((l) => l !== "")

/// Follows `path` with the CLI while `write` appends, until the stream is closed.
async function followWhile(base, path, write) {
  const env = { ...process.env, STREAM_URL: base }
  const child = spawn(CLI, ["read", path], { env, stdio: ["ignore", "pipe", "pipe"] })
  const out = [], err = []
  child.stdout.on("data", (d) => out.push(d))
  child.stderr.on("data", (d) => err.push(d))
  const done = new Promise((resolve) => child.on("close", resolve))
  await new Promise((r) => setTimeout(r, 300))
  await write()
  const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error("read did not end after the close")), 30000))
  const code = await Promise.race([done, timeout]).catch((e) => { child.kill("SIGKILL"); throw e })
  assert.equal(code, 0, `read exited ${code}: ${Buffer.concat(err)}`)
  return Buffer.concat(out)
}

// ---- our server: the official client reads what the CLI wrote, and back ----
const msgs = [{ user: "alice", text: "hi" }, { n: 1 }, [1, 2]]

await check("the official client reads JSON messages the CLI wrote", async () => {
  const path = `cli-${RUN}/json`
  await ok(OURS, ["create", path, "--json"])
  await ok(OURS, ["write", path, "--batch-json"], JSON.stringify(msgs.slice(0, 2)))
  await ok(OURS, ["write", path, JSON.stringify(msgs[2]), "--json"])
  const res = await stream({ url: `${OURS}/${path}`, offset: "-1", live: false })
  assert.deepEqual(await res.json(), msgs)
})

await check("the official client reads bytes the CLI uploaded as a producer, retried", async () => {
  const path = `cli-${RUN}/bytes`
  const data = randomBytes(20000)
  await ok(OURS, ["create", path])
  const args = ["write", path, "--producer-id", "up", "--chunk-size", "1KiB"]
  await ok(OURS, args, data)
  await ok(OURS, args, data) // the rerun finds every piece there: nothing twice
  const res = await stream({ url: `${OURS}/${path}`, offset: "-1", live: false })
  assert.ok(Buffer.from(await res.body()).equals(data), "the stream holds the upload once, byte for byte")
})

await check("the CLI reads JSON and text the official client wrote", async () => {
  const json = await DurableStream.create({ url: `${OURS}/ts-${RUN}/json`, contentType: "application/json" })
  for (const m of msgs) await json.append(JSON.stringify(m))
  const read = await ok(OURS, ["read", `ts-${RUN}/json`, "--no-follow"])
  assert.deepEqual(lines(read), msgs.map((m) => JSON.stringify(m)))
  const text = await DurableStream.create({ url: `${OURS}/ts-${RUN}/text`, contentType: "text/plain" })
  await text.append("one\n")
  await text.append("two\n")
  assert.equal((await ok(OURS, ["read", `ts-${RUN}/text`, "--no-follow"])).toString(), "one\ntwo\n")
})

await check("the CLI follows live what the official client appends, and ends at its close", async () => {
  const handle = await DurableStream.create({ url: `${OURS}/ts-${RUN}/live`, contentType: "application/json" })
  const out = await followWhile(OURS, `ts-${RUN}/live`, async () => {
    for (let i = 0; i < 20; i++) await handle.append(JSON.stringify({ i }))
    await handle.close()
  })
  assert.deepEqual(lines(out), [...Array(20).keys()].map((i) => JSON.stringify({ i })))
})

// ---- our server's __registry__, through the official packages, across a crash ----
/// A free port on 127.0.0.1.
function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer()
    srv.on("error", reject)
    srv.listen(0, "127.0.0.1", () => { const { port } = srv.address(); srv.close(() => resolve(port)) })
  })
}

/// Our server on the local store at `dir`, listening on `port`; resolves once it answers.
async function startOurs(dir, port) {
  const child = spawn(CLI, ["serve", "--store", "local", "--data-dir", dir, "--bind", `127.0.0.1:${port}`],
    { stdio: ["ignore", "ignore", "pipe"] })
  const log = []
  child.stderr.on("data", (d) => log.push(d))
  for (let i = 0; i < 200; i++) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`our server exited: ${Buffer.concat(log)}`)
    try { if ((await fetch(`http://127.0.0.1:${port}/health`)).ok) return child } catch {}
    await new Promise((r) => setTimeout(r, 50))
  }
  child.kill("SIGKILL")
  throw new Error(`our server did not start: ${Buffer.concat(log)}`)
}

/// `__registry__` at `base` folded by @durable-streams/state: the listed paths, sorted.
async function materialized(base) {
  const res = await stream({ url: `${base}/__registry__`, offset: "-1", live: false })
  const state = new MaterializedState()
  state.applyBatch(await res.json())
  return [...state.getType("stream").keys()].sort()
}

await check("the official packages list our streams from __registry__ after creates, forks, deletes and a kill -9", async () => {
  const dir = mkdtempSync(join(tmpdir(), "ds-registry-"))
  const port = await freePort()
  const base = `http://127.0.0.1:${port}/v1/stream`
  let server = await startOurs(dir, port)
  try {
    const url = (p) => `${base}/${p}`
    // A live reader of the registry (the official client, long-poll) sees a create as it happens.
    // (Not awaited first: at `now` the first long-poll answers only once there is news.)
    const tailing = stream({ url: `${base}/__registry__`, offset: "now", live: "long-poll" })
    await new Promise((r) => setTimeout(r, 200))
    await DurableStream.create({ url: url("reg/first"), contentType: "application/json" })
    const tail = await tailing
    const seen = new Promise((resolve) => {
      const unsubscribe = tail.subscribeJson(async (batch) => {
        if (batch.items.some((m) => m.key === "reg/first" && m.headers.operation === "insert")) { unsubscribe(); resolve() }
      })
    })
    await Promise.race([seen, new Promise((_, reject) => setTimeout(() => reject(new Error("no live registry change")), 10000))])
    tail.cancel()
    for (let i = 0; i < 12; i++) await DurableStream.create({ url: url(`reg/s${i}`), contentType: i % 2 ? "text/plain" : "application/json" })
    for (let i = 0; i < 4; i++) await ok(base, ["fork", `reg/f${i}`, "--from", `reg/s${i}`])
    for (const i of [0, 1, 5, 7]) await DurableStream.delete({ url: url(`reg/s${i}`) }) // s0, s1: soft (forked)
    await DurableStream.delete({ url: url("reg/f0") }) // and the cascade collects s0
    // A burst of creates and deletes, killed while it runs: whatever each
    // did or did not commit, the registry must agree with the streams.
    const attempted = []
    const burst = []
    for (let i = 0; i < 60; i++) {
      const p = `reg/b${i}`
      attempted.push(p)
      // Plain fetches, cut off after 5 s: the client library would retry a refused connection.
      const send = (method) => fetch(url(p), { method, headers: { "content-type": "text/plain" }, signal: AbortSignal.timeout(5000) })
      burst.push(send("PUT").then((r) => (r.status === 201 && i % 3 === 0 ? send("DELETE") : undefined)).catch(() => {}))
    }
    await new Promise((r) => setTimeout(r, 40))
    server.kill("SIGKILL")
    await Promise.all(burst)
    await new Promise((resolve) => (server.exitCode !== null || server.signalCode !== null ? resolve() : server.on("exit", resolve)))
    server = await startOurs(dir, port)
    const listed = await materialized(base)
    const all = ["reg/first", ...[...Array(12).keys()].map((i) => `reg/s${i}`), ...[...Array(4).keys()].map((i) => `reg/f${i}`), ...attempted]
    const exists = []
    for (const p of all) {
      const head = await fetch(url(p), { method: "HEAD" })
      assert.ok([200, 404, 410].includes(head.status), `HEAD ${p}: ${head.status}`)
      if (head.status === 200) exists.push(p)
    }
    assert.deepEqual(listed.filter((p) => p.startsWith("reg/")), exists.sort())
    for (const gone of ["reg/s0", "reg/s1", "reg/s5", "reg/s7", "reg/f0"]) assert.ok(!listed.includes(gone), gone)
    assert.ok(listed.includes("reg/f1") && listed.includes("reg/s2"), `listed: ${listed}`)
    assert.deepEqual(lines(await ok(base, ["ls", "reg/"])), listed.filter((p) => p.startsWith("reg/")))
    console.log(`   (${exists.length} streams listed; ${exists.filter((p) => p.startsWith("reg/b")).length} of the 60 burst creates survived the kill)`)
  } finally {
    server.kill("SIGKILL")
    rmSync(dir, { recursive: true, force: true })
  }
})

// ---- the Node reference server, with its __registry__ hooks ----
let hooks
const node = new DurableStreamTestServer({
  port: 0,
  host: "127.0.0.1",
  onStreamCreated: (e) => hooks.onStreamCreated(e),
  onStreamDeleted: (e) => hooks.onStreamDeleted(e),
})
await node.start()
hooks = createRegistryHooks(node.store, node.url)
const REF = `${node.url}/v1/stream`

await check("every CLI command against the Node reference server", async () => {
  await ok(REF, ["create", "chat/a", "--json"])
  await ok(REF, ["create", "chat/b", "--content-type", "text/plain"])
  await ok(REF, ["create", "tmp"])
  await ok(REF, ["write", "chat/a", '{"text":"hello"}', "--json"])
  await ok(REF, ["write", "chat/a", "--batch-json", "--producer-id", "p1"], '[{"n":1},{"n":2}]')
  assert.deepEqual(lines(await ok(REF, ["read", "chat/a", "--no-follow"])), ['{"text":"hello"}', '{"n":1}', '{"n":2}'])
  await ok(REF, ["write", "chat/b", "line\\n"])
  const head = (await ok(REF, ["head", "chat/b"])).toString()
  assert.match(head, /content-type: text\/plain/)
  assert.match(head, /closed: false/)
  await ok(REF, ["fork", "chat/a-fork", "--from", "chat/a"])
  assert.equal(lines(await ok(REF, ["read", "chat/a-fork", "--no-follow"])).length, 3)
  await ok(REF, ["close", "chat/b"])
  const refused = await cli(REF, ["write", "chat/b", "more"])
  assert.equal(refused.code, 5, `a write to a closed stream: exit ${refused.code}, ${refused.stderr}`)
  assert.equal((await ok(REF, ["read", "chat/b"])).toString(), "line\n")
  await ok(REF, ["delete", "tmp"])
  assert.equal((await cli(REF, ["head", "tmp"])).code, 4)
})

await check("the CLI follows the reference server live", async () => {
  await ok(REF, ["create", "live", "--content-type", "text/plain"])
  const out = await followWhile(REF, "live", async () => {
    for (let i = 0; i < 10; i++) await ok(REF, ["write", "live", `${i}\\n`])
    await ok(REF, ["close", "live"])
  })
  assert.equal(out.toString(), [...Array(10).keys()].map((i) => `${i}\n`).join(""))
})

await check("ls lists what @durable-streams/state materializes from the reference server's __registry__", async () => {
  const res = await stream({ url: `${REF}/__registry__`, offset: "-1", live: false })
  const state = new MaterializedState()
  state.applyBatch(await res.json())
  const expected = [...state.getType("stream").keys()].sort()
  assert.ok(expected.includes("chat/a") && !expected.includes("tmp"), `registry: ${expected}`)
  assert.deepEqual(lines(await ok(REF, ["ls"])), expected)
  assert.deepEqual(lines(await ok(REF, ["ls", "chat/"])), expected.filter((p) => p.startsWith("chat/")))
})

await node.stop()
console.log(`cli-interop: ${checks} checks passed`)
process.exit(0)
