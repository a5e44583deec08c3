"""The ports of verl's multi-machine checklist, tested for real on one node (part of round 2).

Each node listens on a sample of its HCCL host port range (on the address HCCL binds there) and
connects to every peer's sample and to the head's Ray ports (GCS, dashboard), all at once, on
non-blocking sockets with one deadline: a port a firewall drops answers nothing until then, one
another process holds cannot be listened on (and its holder is named), one that is closed refuses.

Standard library only (psutil, which Ray needs, where used); pickled by value like the other
node-side modules, so a node needs no copy of doctor to run it.
"""
from __future__ import annotations

import errno
import selectors
import socket
import time

from probes.cluster_link import listening_socket

RETRY_S = 0.05  # a refused connect is retried: the peer may not listen yet


def parse_port_list(value: str) -> tuple[list[tuple[int, int]] | None, str | None]:
    """HCCL's port-list syntax ('auto'; ports and lo-hi ranges, comma-separated, no overlap):
    ([(lo, hi), ...], None), ([], None) for 'auto', or (None, why it is invalid)."""
    text = value.strip()
    if text == "auto":
        return [], None
    spans: list[tuple[int, int]] = []
    for item in text.split(","):
        lo, sep, hi = item.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            return None, f"{item.strip() or 'an empty item'!r} is not a port or a lo-hi range"
        a, b = int(lo), int(hi) if sep else int(lo)
        if not 1 <= a <= b <= 65535:
            return None, f"{item.strip()!r} is not within 1-65535 with lo <= hi"
        if any(a <= y and x <= b for x, y in spans):
            return None, f"{item.strip()!r} overlaps another item of the list"
        spans.append((a, b))
    return spans, None


def port_count(spans: list[tuple[int, int]]) -> int:
    return sum(b - a + 1 for a, b in spans)


def sample_ports(spans: list[tuple[int, int]], k: int) -> list[int]:
    """k ports spread evenly over the list, both ends included (all of them when it holds fewer)."""
    ports = [p for a, b in spans for p in range(a, b + 1)] if port_count(spans) <= 4 * k else None
    if ports is None:  # a large range: index into it without listing it
        total = port_count(spans)

        def nth(i: int) -> int:
            for a, b in spans:
                if i <= b - a:
                    return a + i
                i -= b - a + 1
            return spans[-1][1]
        return sorted({nth(round(i * (total - 1) / (k - 1))) for i in range(k)})
    if len(ports) <= k:
        return ports
    return sorted({ports[round(i * (len(ports) - 1) / (k - 1))] for i in range(k)})


def holder_of(addr: str, port: int) -> str:
    """Who listens on addr:port on this node ('python3 pid 123'), when psutil can tell."""
    try:
        import psutil

        for c in psutil.net_connections(kind="tcp"):
            if c.status == "LISTEN" and c.laddr and c.laddr.port == port and c.laddr.ip in (addr, "0.0.0.0", "::"):
                name = psutil.Process(c.pid).name() if c.pid else "?"
                return f"{name} pid {c.pid}" if c.pid else "a process of another user"
    except Exception:  # no psutil, no permission: the port is still taken
        pass
    return "another process"


def _listen(sel, me: str, addr: str, port: int, expected: int) -> str | None:
    try:
        s = listening_socket(addr, port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return f"taken by {holder_of(addr, port)}"
        return f"cannot listen: {exc.strerror or exc}"
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ, {"kind": "listen", "token": f"{me}|{addr}:{port}".encode(),
                                           "left": expected})
    return None


def _start(sel, c: dict) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    c["t0"] = time.perf_counter()
    rc = s.connect_ex((c["addr"], c["port"]))
    if rc not in (0, errno.EINPROGRESS):
        s.close()
        c["error"], c["retry_at"] = f"connect failed: {errno.errorcode.get(rc, rc)}", time.monotonic() + RETRY_S
        return
    sel.register(s, selectors.EVENT_WRITE, {"kind": "connect", "c": c})


def _on_event(sel, key, mask) -> None:
    data, s = key.data, key.fileobj
    if data["kind"] == "listen":
        try:
            conn, _ = s.accept()
            conn.setblocking(False)
            conn.send(data["token"])  # a few bytes into an empty send buffer
            # The peer closes first, so TIME_WAIT stays on its ephemeral port, never on the HCCL
            # port a rank will bind next (HCCL need not set SO_REUSEADDR).
            sel.register(conn, selectors.EVENT_READ, {"kind": "drain"})
        except OSError:
            pass
        data["left"] -= 1
        if data["left"] <= 0:
            sel.unregister(s)
            s.close()
        return
    if data["kind"] == "drain":
        sel.unregister(s)
        s.close()
        return
    c = data["c"]
    if mask & selectors.EVENT_WRITE and "connect_ms" not in c:
        err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            sel.unregister(s)
            s.close()
            refused = err == errno.ECONNREFUSED
            c["error"] = "connection refused" if refused else f"connect failed: {errno.errorcode.get(err, err)}"
            c["retry_at"] = time.monotonic() + (RETRY_S if refused else 2 * RETRY_S)
            return
        c["connect_ms"] = round((time.perf_counter() - c["t0"]) * 1000, 3)
        if c.get("token") is None:  # one of Ray's own ports: the connect is the test
            c["ok"] = True
            sel.unregister(s)
            s.close()
            return
        sel.modify(s, selectors.EVENT_READ, data)
        return
    try:
        got = s.recv(256).decode(errors="replace")
    except OSError as exc:
        got, c["error"] = "", f"read failed: {exc.strerror or exc}"
    sel.unregister(s)
    s.close()
    c["ok"] = got == c["token"]
    if not c["ok"]:
        c["error"] = f"reached {got!r}, not the test listener" if got else "the peer closed without a word"


def ports_test(me: str, job: dict, window: float) -> dict:
    """Listen on job['listen'] ([addr, port, connections expected]) and connect to every
    job['connect'] target ({to, what, addr, port, token|None}) within `window` seconds."""
    stop = time.monotonic() + window
    sel = selectors.DefaultSelector()
    listen_errors = {}
    for addr, port, expected in job.get("listen") or []:
        why = _listen(sel, me, addr, port, expected)
        if why:
            listen_errors[f"{addr}:{port}"] = why
    targets = [dict(c) for c in job.get("connect") or []]
    for c in targets:
        _start(sel, c)
    while time.monotonic() < stop and (sel.get_map() or any("retry_at" in c for c in targets)):
        if not sel.get_map():
            time.sleep(RETRY_S)
        for key, mask in sel.select(timeout=RETRY_S) if sel.get_map() else []:
            _on_event(sel, key, mask)
        now = time.monotonic()
        for c in targets:
            if c.get("retry_at", now + 1) <= now and "ok" not in c:
                del c["retry_at"]
                _start(sel, c)
    for key in list(sel.get_map().values()):
        if key.data["kind"] == "connect":
            c = key.data["c"]
            c.setdefault("error", "no answer from the test listener" if "connect_ms" in c
                         else f"no answer within {window:g} s (dropped on the way?)")
        key.fileobj.close()
    sel.close()
    results = [{k: c.get(k) for k in ("to", "what", "addr", "port", "connect_ms", "error")} | {"ok": bool(c.get("ok"))}
               for c in targets]
    return {"results": results, "listen_errors": listen_errors}
