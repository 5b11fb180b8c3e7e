"""A real HTTP blob server on 127.0.0.1 for tests: Range, ETag and Content-MD5, like Azure."""

from __future__ import annotations

import base64
import hashlib
import http.server
import threading


class BlobServer:
    """A tiny Azure-like blob server: HEAD and GET, ranges, ETag, base64 Content-MD5.

    `cut_after[path] = n` makes the next full GET of `path` promise the whole blob but close
    the connection after n bytes; `lie_md5` advertises a wrong MD5 for a path.
    """

    def __init__(self):
        self.blobs: dict[str, bytes] = {}
        self.versions: dict[str, int] = {}
        self.cut_after: dict[str, int] = {}
        self.lie_md5: set[str] = set()
        self.requests: list[tuple[str, str, str | None]] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _headers(self, data: bytes, path: str) -> None:
                md5 = hashlib.md5(b"wrong" if path in server.lie_md5 else data).digest()
                self.send_header("ETag", f'"v{server.versions[path]}"')
                self.send_header("Content-MD5", base64.b64encode(md5).decode())
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Last-Modified", "Sat, 22 Nov 2025 00:00:00 GMT")

            def _lookup(self):
                path = self.path.split("?", 1)[0]
                server.requests.append((self.command, self.path, self.headers.get("Range")))
                if path not in server.blobs:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None, None
                return path, server.blobs[path]

            def do_HEAD(self):
                path, data = self._lookup()
                if path is None:
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self._headers(data, path)
                self.end_headers()

            def do_GET(self):
                path, data = self._lookup()
                if path is None:
                    return
                rng = self.headers.get("Range")
                if_range = self.headers.get("If-Range")
                etag = f'"v{server.versions[path]}"'
                if rng and (if_range is None or if_range == etag):
                    start = int(rng.removeprefix("bytes=").split("-")[0])
                    body = data[start:]
                    self.send_response(206)
                    self.send_header("Content-Range",
                                     f"bytes {start}-{len(data) - 1}/{len(data)}")
                    self.send_header("x-ms-blob-content-md5", base64.b64encode(
                        hashlib.md5(data).digest()).decode())
                    self.send_header("ETag", etag)
                    self.send_header("Accept-Ranges", "bytes")
                else:
                    body = data
                    self.send_response(200)
                    self._headers(data, path)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                cut = None if rng else server.cut_after.pop(path, None)
                if cut is not None:
                    self.wfile.write(body[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    def put(self, path: str, data: bytes) -> str:
        self.blobs[path] = data
        self.versions[path] = self.versions.get(path, 0) + 1
        return self.url(path)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def gets(self, path: str) -> list[str | None]:
        return [r for m, p, r in self.requests if m == "GET" and p.split("?")[0] == path]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


