// node demo.mjs <stream URL> <region>: create the stream, append, read it back,
// every request signed (see signed-fetch.mjs).
import { DurableStream } from "@durable-streams/client"
import { signingFetch } from "./signed-fetch.mjs"

const [url, region = "us-east-1"] = process.argv.slice(2)
if (!url) throw new Error("usage: node demo.mjs <stream URL> [region]")
const fetch = signingFetch({ region })
const stream = await DurableStream.create({ url, contentType: "text/plain", fetch })
await stream.append("hello ")
await stream.append("world")
const res = await stream.stream({ live: false })
console.log(`read back: ${JSON.stringify(await res.text())}`)
