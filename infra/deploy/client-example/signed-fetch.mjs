// A fetch that signs every request with SigV4 for an AWS_IAM Lambda Function
// URL (service "lambda"), for the Durable Streams client's `fetch` option.
// Credentials come from the default AWS provider chain (env, profile, SSO, role).
import { Sha256 } from "@aws-crypto/sha256-js"
import { fromNodeProviderChain } from "@aws-sdk/credential-providers"
import { HttpRequest } from "@smithy/protocol-http"
import { SignatureV4 } from "@smithy/signature-v4"

export function signingFetch({ region, credentials = fromNodeProviderChain(), fetchImpl = globalThis.fetch }) {
  const signer = new SignatureV4({ service: "lambda", region, credentials, sha256: Sha256 })
  return async function fetchSigned(input, init = {}) {
    const request = input instanceof Request ? input : new Request(input, init)
    const url = new URL(request.url)
    // The signature covers the body: read it once, send the same bytes.
    const body = ["GET", "HEAD"].includes(request.method) ? undefined : new Uint8Array(await request.arrayBuffer())
    const headers = Object.fromEntries(request.headers.entries())
    const signed = await signer.sign(new HttpRequest({
      method: request.method,
      protocol: url.protocol,
      hostname: url.hostname,
      port: url.port ? Number(url.port) : undefined,
      path: url.pathname,
      query: Object.fromEntries(url.searchParams.entries()),
      headers: { ...headers, host: url.host },
      body,
    }))
    const { host, ...sendHeaders } = signed.headers // fetch sets Host itself
    return fetchImpl(url, { method: request.method, headers: sendHeaders, body, signal: init.signal ?? request.signal })
  }
}
