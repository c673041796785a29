#!/usr/bin/env python3
"""A fixed, sequential HTTP/1.1 client for instruction-count profiling.

    drive.py <port> append <n>    PUT a stream, then n POSTs of 100 B
    drive.py <port> catchup <n>   PUT a stream, 10,000 POSTs of 100 B, then
                                  n catch-up GETs of the whole stream
    drive.py <port> append-json <n>          PUT a JSON stream orders/bench,
                                  then n POSTs of one 100 B JSON event
                                  (issue 43: with and without a json-schema
                                  processor bound to orders/*)
    drive.py <port> append-json-invalid <n>  the same with qty 0: each POST
                                  must be refused (400) by the schema

One keep-alive connection; every request goes out in one send() (so the
server's reads do not depend on timing); each response is read whole
before the next request. The same n gives the server the same work, so
the server's instruction count (callgrind) is comparable across builds.
"""
import socket
import sys

RECORD = b"x" * 100
RECORDS = 10_000
# ds-load's json_event (tests/load/src/record.rs): 100 B; qty 0 is what
# bench/inline.sh's schema refuses.
EVENT = b'{"type":"order.placed","payload":{"id":"w000000s000000000001","qty":1,"note":"' + b"." * 19 + b'"}}'
INVALID = EVENT.replace(b'"qty":1', b'"qty":0')


def request(method, path, body=b"", headers=()):
    head = [f"{method} {path} HTTP/1.1", "host: 127.0.0.1"]
    head += list(headers)
    if body or method in ("POST", "PUT"):
        head.append(f"content-length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def exchange(self, raw, head_only=False):
        self.sock.sendall(raw)
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if head_only:
            length = 0
        while len(self.buf) < length:
            self._fill()
        body, self.buf = self.buf[:length], self.buf[length:]
        return status, body

    def _fill(self):
        data = self.sock.recv(1 << 20)
        if not data:
            raise SystemExit("connection closed by the server")
        self.buf += data


def main():
    port, workload, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    c = Conn(port)
    if workload.startswith("append-json"):
        ct = ("content-type: application/json",)
        status, _ = c.exchange(request("PUT", "/v1/stream/orders/bench", headers=ct))
        assert 200 <= status < 300, status
        refused = workload == "append-json-invalid"
        append = request("POST", "/v1/stream/orders/bench", INVALID if refused else EVENT, ct)
        for _ in range(n):
            status, _ = c.exchange(append)
            assert status == 400 if refused else 200 <= status < 300, status
        return
    ct = ("content-type: application/octet-stream",)
    status, _ = c.exchange(request("PUT", "/v1/stream/bench", headers=ct))
    assert 200 <= status < 300, status
    append = request("POST", "/v1/stream/bench", RECORD, ct)
    appends = n if workload == "append" else RECORDS
    for _ in range(appends):
        status, _ = c.exchange(append)
        assert 200 <= status < 300, status
    if workload == "catchup":
        read = request("GET", "/v1/stream/bench?offset=-1")
        for _ in range(n):
            status, body = c.exchange(read)
            assert status == 200 and len(body) == RECORDS * len(RECORD), (status, len(body))


if __name__ == "__main__":
    main()
