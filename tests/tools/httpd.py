#!/usr/bin/env python3
"""httpd.py: a small HTTP/1.1 file server for mfc's fetch tests.

Serves files under --root on 127.0.0.1 with what a download client must cope
with, and which python3 -m http.server lacks: Range and If-Range, strong ETags,
If-None-Match (304), and failures chosen by path prefix:

  /drop/N/FILE        the first request for this path sends N body bytes, then closes
  /failNNN/K/FILE     the first K requests for this path answer status NNN
                      (503, 500, 429, ...)
  /redirect/K/FILE    K chained 302 redirects, then FILE
  /lie/FILE           Content-Length 100 bytes more than the file has, then close
  /auth/FILE          401 unless "Authorization: Bearer $TOKEN" (--token)
  /O/R/resolve/REV/P  the Hugging Face Hub's URL form: serves ROOT/hf/O/R/REV/P
  /O/R/resolve/cdn/P  302 to http://127.0.0.1:PORT/hf/O/R/main/P (another host
                      when the request came to localhost)

Each request is logged to --log as one JSON line (method, path, range,
if_range, if_none_match, authorization, status, sent) so tests can assert
what went over the wire. The chosen port is written to --port-file. The
server exits by itself after --lifetime seconds, so a failed test cannot
leave it running.
"""
import argparse
import email.utils
import hashlib
import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE = {"counts": {}, "lock": threading.Lock()}


def bump(path):
    """Returns how many earlier requests this exact path had."""
    with STATE["lock"]:
        n = STATE["counts"].get(path, 0)
        STATE["counts"][path] = n + 1
        return n


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def record(self, status, sent):
        entry = {
            "method": self.command,
            "path": self.path,
            "range": self.headers.get("Range"),
            "if_range": self.headers.get("If-Range"),
            "if_none_match": self.headers.get("If-None-Match"),
            "authorization": self.headers.get("Authorization"),
            "status": status,
            "sent": sent,
        }
        with STATE["lock"], open(self.server.log_path, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def reply(self, status, headers=(), body=b""):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        # logged before the body goes out: a client that has the whole reply
        # must find its request in the log (tests read it right after)
        self.record(status, len(body))
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        m = re.match(r"^/(drop|fail\d{3}|redirect)/(\d+)/(.+)$", path)
        if m:
            return self.special(m.group(1), int(m.group(2)), m.group(3))
        if path.startswith("/lie/"):
            return self.serve(path[len("/lie/"):], lie=100)
        if path.startswith("/auth/"):
            if self.headers.get("Authorization") != "Bearer " + self.server.token:
                return self.reply(401, [("WWW-Authenticate", 'Bearer realm="test"')])
            return self.serve(path[len("/auth/"):])
        m = re.match(r"^/([^/]+)/([^/]+)/resolve/([^/]+)/(.+)$", path)
        if m and m.group(3) == "cdn":
            # like the Hub sending LFS files to its CDN: another host (127.0.0.1
            # when the request came to localhost), which must not see the token
            target = "http://127.0.0.1:%d/hf/%s/%s/main/%s" % (
                (self.server.server_address[1],) + m.group(1, 2, 4))
            return self.reply(302, [("Location", target)])
        if m:
            return self.serve("hf/%s/%s/%s/%s" % m.groups())
        return self.serve(path.lstrip("/"))

    def special(self, kind, n, rest):
        seen = bump(self.path)
        if kind == "drop":
            return self.serve(rest, drop_after=n if seen == 0 else None)
        if kind.startswith("fail"):
            if seen < n:
                return self.reply(int(kind[4:]), [("Content-Type", "text/plain")], b"busy\n")
            return self.serve(rest)
        target = "/redirect/%d/%s" % (n - 1, rest) if n > 1 else "/" + rest
        return self.reply(302, [("Location", target)])

    def load(self, rel):
        full = os.path.realpath(os.path.join(self.server.root, rel))
        if not full.startswith(self.server.root + os.sep) or not os.path.isfile(full):
            return None, None
        with open(full, "rb") as f:
            data = f.read()
        return data, os.stat(full).st_mtime

    def serve(self, rel, drop_after=None, lie=0):
        data, mtime = self.load(rel)
        if data is None:
            return self.reply(404, [("Content-Type", "text/plain")], b"not found\n")
        etag = '"%s"' % hashlib.sha256(data).hexdigest()[:32]
        validators = [("ETag", etag), ("Last-Modified", email.utils.formatdate(mtime, usegmt=True))]
        if self.headers.get("If-None-Match") == etag:
            return self.reply(304, validators)
        size = len(data) + lie
        start, status = self.range_start(etag, size)
        if start is None:
            return self.reply(416, [("Content-Range", "bytes */%d" % size)])
        headers = list(validators) + [("Accept-Ranges", "bytes")]
        if status == 206:
            headers.append(("Content-Range", "bytes %d-%d/%d" % (start, size - 1, size)))
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(size - start))
        self.end_headers()
        body = data[start:]
        if drop_after is not None:
            body = body[:drop_after]
        self.record(status, len(body))
        if self.command != "HEAD":
            self.wfile.write(body)
        if drop_after is not None or lie:
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)

    def range_start(self, etag, size):
        """(start, status): (0, 200) for the whole file, (n, 206) for a range, (None, 416)."""
        rng = self.headers.get("Range")
        m = re.match(r"^bytes=(\d+)-$", rng or "")
        if not m:
            return 0, 200
        if_range = self.headers.get("If-Range")
        if if_range is not None and if_range != etag:
            return 0, 200  # the file changed: RFC 9110 says send it all
        start = int(m.group(1))
        if start >= size:
            return None, 416
        return start, 206


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--token", default="secret")
    ap.add_argument("--lifetime", type=float, default=60)
    a = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.root = os.path.realpath(a.root)
    srv.log_path = a.log
    srv.token = a.token
    open(a.log, "a").close()
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, a.port_file)
    threading.Timer(a.lifetime, lambda: os._exit(0)).start()
    srv.serve_forever()


if __name__ == "__main__":
    main()
