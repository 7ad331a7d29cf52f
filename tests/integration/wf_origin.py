#!/usr/bin/env python3
"""A small HTTP/1.1 origin for the workflow, timed-rotation and host-limit
integration tests (it_workflow.sh, it_timed.sh, it_host_limits.sh).

    wf_origin.py LOGFILE        prints the port it listens on (127.0.0.1:0)

Keep-alive (HTTP/1.1, Content-Length on every answer), one thread per
connection.  Every request appends one line to LOGFILE:

    <unix_ms> <peer_ip> <peer_port> <METHOD> <target> <status> cookie=<Cookie|-> t0=<unix_ms>

(unix_ms when the answer is written, t0 when the request was read)

so a test sees which exit sent each request (peer_ip), on which connection
(peer_port: a new tunnel is a new port), in which order, with which cookies.

Paths (k = a key the test chooses; counters are per key):
  /login?k=K               200, Set-Cookie: sid=K-<n> (n counts logins of K)
  /flaky?k=K&n=N&code=C&ra=V
                           the first N requests of K answer C (503), with
                           Retry-After: V when ra is given; then 200
  /slow?ms=M               200 after M ms
  anything else            200, a small page
"""
import http.server
import socketserver
import sys
import threading
import time
import urllib.parse

log = open(sys.argv[1], "a", buffering=1)
lock = threading.Lock()
logins = {}
flaky = {}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, method):
        t0 = int(time.time() * 1000)
        u = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(u.query))
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        k = q.get("k", "-")
        status, extra = 200, []
        if u.path == "/slow":
            time.sleep(int(q.get("ms", "500")) / 1000.0)
        with lock:
            if u.path == "/login":
                logins[k] = logins.get(k, 0) + 1
                extra.append(("Set-Cookie", "sid=%s-%d; Path=/" % (k, logins[k])))
            elif u.path == "/flaky":
                c = flaky.get(k, 0) + 1
                flaky[k] = c
                if c <= int(q.get("n", "1")):
                    status = int(q.get("code", "503"))
                    if "ra" in q:
                        extra.append(("Retry-After", q["ra"]))
            cookie = (self.headers.get("Cookie") or "-").replace(" ", "")
            log.write("%d %s %d %s %s %d cookie=%s t0=%d\n" % (
                int(time.time() * 1000), self.client_address[0],
                self.client_address[1], method, self.path, status, cookie, t0))
        body = ("<html><body>%s %s %s</body></html>\n" % (method, u.path, k)).encode()
        self.send_response(status)
        for name, value in extra:
            self.send_header(name, value)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        self.answer("GET")

    def do_POST(self):
        self.answer("POST")

    def do_HEAD(self):
        self.answer("HEAD")


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # the default 5 drops SYNs (1 s retransmits)


srv = Server(("127.0.0.1", 0), Handler)
print(srv.server_address[1], flush=True)
srv.serve_forever()
