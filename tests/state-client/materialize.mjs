// Materializes State Protocol streams with the official client: StreamDB
// (createStreamDB from @durable-streams/state/db, on @tanstack/db), read
// up to date with live: false. Installed by tests/state-client/install.sh.
//
// stdin: one request per line, {"url": "<stream url>", "types": ["user", ...]}
// stdout: one line per request, in order, and nothing else:
//   {"url": ..., "state": {"<type>": {"<key>": <value>, ...}, ...}}
//   {"url": ..., "error": "<message>"}
// A type with no rows is left out of "state". Each value is the row StreamDB
// holds with what StreamDB and TanStack DB add to it taken off again: the
// primary key field (__key), _seq, and TanStack's virtual $synced, $origin,
// $key, $collectionId; so a value that itself has one of those fields does
// not come back as it was stored.
//
// With live: false the official client (0.2.6) makes ONE read request: when
// the server answers a long stream in several responses (ours does, about
// 1 MiB each) the read ends before up-to-date and StreamDB's preload()
// would wait forever; that answers an error here instead. DS_STATE_CLIENT_LIVE
// set to "long-poll" (or "true", "sse") reads such streams whole: preload()
// resolves at the first up-to-date and the live read is then closed.
// A request that takes longer than DS_STATE_CLIENT_TIMEOUT_MS (default
// 60000) answers an error. Logs go to stderr; exits 0 at the end of stdin.
import { createInterface } from "node:readline"
import { setTimeout as sleep } from "node:timers/promises"
import { DurableStream } from "@durable-streams/client"
import { createStateSchema, createStreamDB } from "@durable-streams/state/db"

// The packages log with console.*: keep all of it off stdout, which is ours.
for (const level of ["log", "info", "debug", "warn"]) console[level] = (...args) => console.error(...args)
process.on("unhandledRejection", (e) => console.error("materialize: unhandled rejection:", e))

const PRIMARY_KEY = "__key"
const ADDED_FIELDS = [PRIMARY_KEY, "_seq", "$synced", "$origin", "$key", "$collectionId"]
const TIMEOUT_MS = Number(process.env.DS_STATE_CLIENT_TIMEOUT_MS) || 60000
const LIVE = { undefined: false, "": false, false: false, true: true }[process.env.DS_STATE_CLIENT_LIVE] ?? process.env.DS_STATE_CLIENT_LIVE
// A Standard Schema that accepts any value as it is.
const anything = { "~standard": { version: 1, vendor: "ds-test", validate: (value) => ({ value }) } }

function parseRequest(line) {
  const req = JSON.parse(line)
  if (req === null || typeof req !== "object" || typeof req.url !== "string") throw new Error("request needs a string url")
  if (!Array.isArray(req.types) || !req.types.every((t) => typeof t === "string")) throw new Error("request needs types: an array of strings")
  return req
}

async function materialize(url, types) {
  types = [...new Set(types)]
  // Collection names of our own: a type may be a reserved name (preload, close, ...).
  const definitions = {}
  types.forEach((type, i) => { definitions[`c_${i}`] = { schema: anything, type, primaryKey: PRIMARY_KEY } })
  // The handle StreamDB would make from streamOptions, made here to see its read end.
  const stream = new DurableStream({ url, contentType: "application/json" })
  let readEnded
  const ended = new Promise((resolve) => { readEnded = resolve })
  const read = stream.stream.bind(stream)
  stream.stream = async (options) => {
    const response = await read(options)
    response.closed.then(readEnded, () => {}) // a failed read fails preload() itself
    return response
  }
  let upToDate = false
  const db = createStreamDB({
    stream,
    state: createStateSchema(definitions),
    live: LIVE,
    onBatch: (batch) => { upToDate = batch.upToDate },
  })
  let timer
  const done = new AbortController()
  try {
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${TIMEOUT_MS} ms`)), TIMEOUT_MS)
    })
    // Once the read has ended, preload() has a moment to see its last batch.
    const endedEarly = ended.then(() => sleep(2000, undefined, { signal: done.signal })).then(() => {
      throw new Error(`the read ended before the stream was up to date (last batch up to date: ${upToDate}); ` +
        `with live: false the client reads one response only`)
    })
    endedEarly.catch(() => {})
    await Promise.race([db.preload(), timeout, endedEarly])
    const state = {}
    types.forEach((type, i) => {
      const rows = {}
      let any = false
      for (const [key, row] of db.collections[`c_${i}`].entries()) {
        const value = { ...row }
        for (const field of ADDED_FIELDS) delete value[field]
        rows[key] = value
        any = true
      }
      if (any) state[type] = rows
    })
    return state
  } finally {
    clearTimeout(timer)
    done.abort()
    try { db.close() } catch (e) { console.error("materialize: close:", e) }
    for (const collection of Object.values(db.collections)) {
      collection.cleanup().catch((e) => console.error("materialize: collection cleanup:", e))
    }
  }
}

function answer(obj) {
  return new Promise((resolve) => process.stdout.write(JSON.stringify(obj) + "\n", () => resolve()))
}

const rl = createInterface({ input: process.stdin, crlfDelay: Infinity })
for await (const line of rl) {
  if (line.trim() === "") continue
  let url = null
  try {
    const req = parseRequest(line)
    url = req.url
    await answer({ url, state: await materialize(url, req.types) })
  } catch (e) {
    const message = e instanceof Error ? `${e.name !== "Error" ? e.name + ": " : ""}${e.message}` : String(e)
    await answer({ url, error: message || "unknown error" })
  }
}
process.exit(0)
