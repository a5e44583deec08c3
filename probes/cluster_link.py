"""Round 2 of the cluster check on one node: every node listens on the addresses Gloo/HCCL/NCCL
would bind there and connects to every other node's, on one agreed port.

Standard library only; pickled by value, so a node needs no copy of doctor to run it.
"""
from __future__ import annotations

import socket
import threading
import time


def _serve(sock: socket.socket, token: bytes, stop: float, expected: int, got: list) -> None:
    sock.settimeout(0.2)
    while time.monotonic() < stop and len(got) < expected:
        try:
            conn, peer = sock.accept()
        except OSError:
            continue
        with conn:
            try:
                conn.sendall(token)
            except OSError:
                pass
        got.append(peer[0])


def _connect(address: str, port: int, stop: float) -> dict:
    """Connect (retrying while the peer may not listen yet) and read the peer's token."""
    last = "no attempt"
    while time.monotonic() < stop:
        t0 = time.perf_counter()
        try:
            with socket.create_connection((address, port), timeout=max(0.1, stop - time.monotonic())) as s:
                ms = (time.perf_counter() - t0) * 1000
                s.settimeout(max(0.1, stop - time.monotonic()))
                token = s.recv(256).decode(errors="replace")
                return {"ok": True, "connect_ms": round(ms, 3), "token": token}
        except ConnectionRefusedError as exc:
            last = f"connection refused ({exc.strerror})"
            time.sleep(0.05)
        except OSError as exc:
            last = f"{type(exc).__name__}: {exc.strerror or exc}"
            if isinstance(exc, socket.timeout):
                break
            time.sleep(0.1)
    return {"ok": False, "error": last}


def expected_accepts(me: str, plan: dict) -> dict[str, int]:
    """Connections each of our addresses will get: one per peer and per transport both sides
    have, summed over the transports that share the address (GLOO_SOCKET_IFNAME and
    HCCL_SOCKET_IFNAME on one NIC give one listener two connections per peer)."""
    counts: dict[str, int] = {}
    for transport, addr in plan[me].items():
        peers = sum(1 for peer, addrs in plan.items() if peer != me and transport in addrs)
        counts[addr] = counts.get(addr, 0) + peers
    return counts


def listening_socket(addr: str, port: int) -> socket.socket:
    """A TCP listener on addr:port, or OSError. SO_REUSEADDR: a port the last round left in
    TIME_WAIT binds again."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((addr, port))
        sock.listen(64)
    except OSError:
        sock.close()
        raise
    return sock


def link_test(me: str, plan: dict, port: int, window: float) -> dict:
    """Round 2 on one node: listen on our addresses, connect to every peer's, on one port."""
    stop = time.monotonic() + window
    mine = plan[me]
    listeners, threads, accepted, errors = [], [], {}, {}
    expected = expected_accepts(me, plan)
    for addr in dict.fromkeys(mine.values()):
        try:
            sock = listening_socket(addr, port)
        except OSError as exc:
            errors[addr] = f"cannot listen on {addr}:{port}: {exc.strerror or exc}"
            continue
        accepted[addr] = []
        th = threading.Thread(target=_serve, args=(sock, f"{me}|{addr}".encode(), stop, expected[addr],
                                                   accepted[addr]), daemon=True)
        th.start()
        listeners.append(sock)
        threads.append(th)
    results = []
    for peer, addrs in plan.items():
        if peer == me:
            continue
        for transport, addr in addrs.items():
            if transport not in mine:
                continue
            r = _connect(addr, port, stop)
            if r.get("ok") and r.get("token") != f"{peer}|{addr}":
                r = {"ok": False, "error": f"reached {r.get('token') or 'something else'}, not {peer}"}
            results.append({"from": me, "to": peer, "transport": transport, "address": addr, **r})
    for th in threads:
        th.join(max(0.0, stop - time.monotonic()))
    for s in listeners:
        s.close()
    return {"results": results, "listen_errors": errors}
