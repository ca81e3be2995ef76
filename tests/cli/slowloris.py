#!/usr/bin/env python3
"""slowloris.py: slow HTTP clients against mfc-serve, for serve-limits.bats.

  slowloris.py hold PORT COUNT SOURCES [DRIP_MS] [TIMEOUT_S]
      Opens COUNT connections to 127.0.0.1:PORT from the loopback addresses
      127.0.0.2 .. 127.0.0.(SOURCES+1), round robin; each sends half a request
      head and then one more header byte every DRIP_MS (default 500), so an
      idle timeout alone never fires. Once all are open it times GET /health
      and a POST /v1/completions from 127.0.0.1 (three of each), then waits up
      to TIMEOUT_S (default 30) for the server to close the slow ones, reading
      what each was answered. Prints one JSON object: opened, held (still
      open when the probes ran), probes ([status, ms] each), answered (a 408
      with a JSON body), closed_silently, still_open, closed_by_s (seconds
      from the last open to the last close), fd_limit.
  slowloris.py cap PORT SOURCE COUNT
      Holds COUNT slow connections from SOURCE, then sends one whole GET
      /v1/models from SOURCE and one from 127.0.0.1; prints
      {"held": N, "same": [status, body], "other": [status, body]}.

The descriptor limit is raised to its hard maximum; COUNT is lowered to
what it allows (fd_limit says which), so a small `ulimit -n` shrinks the test
instead of breaking it.
"""
import json
import resource
import selectors
import socket
import sys
import time


def raise_fd_limit(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        new = hard if hard != resource.RLIM_INFINITY else max(soft, want + 64)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (ValueError, OSError):
            pass
    return soft


def slow_socket(port, source):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    s.setblocking(False)
    return s


def request(port, source, raw, timeout=10.0):
    """Sends raw from source; returns (status, body, ms)."""
    t0 = time.monotonic()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    s.sendall(raw)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    s.close()
    ms = (time.monotonic() - t0) * 1000
    head, _, body = data.partition(b"\r\n\r\n")
    parts = head.split(b" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    return status, body.decode("utf-8", "replace"), ms


def hold(port, count, sources, drip_ms=500, timeout_s=30):
    limit = raise_fd_limit(count + 64)
    count = min(count, max(16, limit - 64))
    socks, opened = [], 0
    for i in range(count):
        try:
            socks.append(slow_socket(port, "127.0.0.%d" % (2 + i % sources)))
            opened += 1
        except OSError:
            break
    t_open = time.monotonic()
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    state = {s: b"" for s in socks}  # what each was answered so far
    closed, answered, silent = set(), 0, 0

    def pump(wait):
        nonlocal answered, silent
        for key, _ in sel.select(wait):
            s = key.fileobj
            try:
                chunk = s.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if chunk:
                state[s] += chunk
                continue
            sel.unregister(s)
            s.close()
            closed.add(s)
            got = state[s]
            head, _, body = got.partition(b"\r\n\r\n")
            try:
                ok = head.startswith(b"HTTP/1.1 408 ") and "error" in json.loads(body)
            except ValueError:
                ok = False
            if ok:
                answered += 1
            else:
                silent += 1

    pump(0)
    held = opened - len(closed)
    get = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    body = b'{"prompt":"hi","max_tokens":2}'
    post = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    probes = []
    for raw in (get, post, get, post, get, post):
        st, _, ms = request(port, "127.0.0.1", raw)
        probes.append([st, round(ms, 1)])
    last_drip, t_last_close = time.monotonic(), None
    while len(closed) < opened and time.monotonic() - t_open < timeout_s:
        before = len(closed)
        pump(0.05)
        if len(closed) > before:
            t_last_close = time.monotonic()
        if time.monotonic() - last_drip >= drip_ms / 1000:
            last_drip = time.monotonic()
            for s in socks:
                if s not in closed:
                    try:
                        s.send(b"a")
                    except OSError:
                        pass
    print(json.dumps({
        "opened": opened, "held": held, "probes": probes, "answered": answered,
        "closed_silently": silent, "still_open": opened - len(closed),
        "closed_by_s": round(t_last_close - t_open, 2) if t_last_close else None,
        "fd_limit": limit}))
    for s in socks:
        if s not in closed:
            s.close()


def cap(port, source, count):
    raise_fd_limit(count + 64)
    socks = [slow_socket(port, source) for _ in range(count)]
    time.sleep(0.5)  # the door has counted them
    get = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    same = request(port, source, get)
    other = request(port, "127.0.0.1", get)
    print(json.dumps({"held": len(socks), "same": list(same[:2]), "other": list(other[:2])}))
    for s in socks:
        s.close()


def main(argv):
    if len(argv) >= 4 and argv[1] == "hold":
        hold(int(argv[2]), int(argv[3]), int(argv[4]) if len(argv) > 4 else 1,
             int(argv[5]) if len(argv) > 5 else 500, float(argv[6]) if len(argv) > 6 else 30)
    elif len(argv) == 5 and argv[1] == "cap":
        cap(int(argv[2]), argv[3], int(argv[4]))
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
