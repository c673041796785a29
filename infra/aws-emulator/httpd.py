"""The emulator's HTTP/1.1 server: werkzeug's threaded development server
(one thread per connection, moto's request handler), with keep-alive.

werkzeug answers every request with `Connection: close`, so each SDK call
opened a TCP connection and a thread of its own, and after each answer the
thread waited up to 10 ms for stray request bytes. Here a connection stays
open for the client's next request, as AWS's endpoints keep it: the request
body is read exactly (Content-Length, or chunked to its end) before the app
runs, and the answer is sent whole with its length. `Expect: 100-continue`
is answered by http.server before the body is read.
"""

from io import BytesIO

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}
IDLE_TIMEOUT_S = 300  # an idle keep-alive connection is closed after this


def make_server(app, port, keep_alive=True):
    """A threaded werkzeug server on 127.0.0.1 (keep-alive unless told not to)."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import make_server as werkzeug_server

    if not keep_alive:
        return werkzeug_server("127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler)

    class KeepAliveHandler(MotoRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = IDLE_TIMEOUT_S
        # The head and the body go out in two writes: without TCP_NODELAY the
        # second waits for the client's delayed ACK of the first (~40 ms).
        disable_nagle_algorithm = True

        def run_wsgi(self):
            environ = self.make_environ()
            try:
                body = read_body(environ)
            except (ValueError, OSError):
                self.close_connection = True
                return
            environ["wsgi.input"] = BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body)) if body or "CONTENT_LENGTH" in environ else ""
            if not environ["CONTENT_LENGTH"]:
                del environ["CONTENT_LENGTH"]
            self.environ = environ
            state = {}

            def start_response(status, headers, exc_info=None):
                state["status"], state["headers"] = status, headers
                return lambda data: state.setdefault("written", []).append(data)

            try:
                it = self.server.app(environ, start_response)
                try:
                    data = b"".join(state.get("written", [])) + b"".join(it)
                finally:
                    if hasattr(it, "close"):
                        it.close()
            except Exception as e:  # as werkzeug does: log it, answer 500
                self.server.log("error", f"Error on request: {type(e).__name__}: {e}")
                state = {"status": "500 Internal Server Error", "headers": [("Content-Type", "text/plain")]}
                data = b"Internal Server Error"
            self.answer(environ, state["status"], state["headers"], data)

        def answer(self, environ, status, headers, data):
            code, _, reason = status.partition(" ")
            code = int(code)
            self.send_response(code, reason)
            length = None
            for k, v in headers:
                if k.lower() == "content-length":
                    length = v
                elif k.lower() not in HOP_BY_HOP:
                    self.send_header(k, v)
            head = environ["REQUEST_METHOD"] == "HEAD"
            if not (head or 100 <= code < 200 or code in (204, 304)):
                length = str(len(data))
            if length is not None:
                self.send_header("Content-Length", length)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if data and not head and code not in (204, 304):
                self.wfile.write(data)
            self.wfile.flush()

    return werkzeug_server("127.0.0.1", port, app, threaded=True, request_handler=KeepAliveHandler)


def read_body(environ):
    """The whole request body, and no byte of the next request."""
    stream = environ["wsgi.input"]
    if environ.get("wsgi.input_terminated"):  # chunked: werkzeug's DechunkedInput ends it
        chunks = []
        while True:
            chunk = stream.read(1 << 16)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if length < 0:
        raise ValueError("negative Content-Length")
    data = stream.read(length) if length else b""
    if len(data) != length:
        raise OSError("connection closed mid-body")
    return data
