"""``python -m bench.harness.probe PORT``: PINGs Redis every millisecond until its standard input
closes, then prints the longest round trip as JSON (``servers.stall_probe``)."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time

if __name__ == "__main__":
    stop = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    longest = 0.0
    with socket.create_connection(("127.0.0.1", int(sys.argv[1]))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        print("ready", flush=True)
        while not stop.is_set():
            started = time.perf_counter()
            sock.sendall(b"PING\r\n")
            reply = b""
            while not reply.endswith(b"\r\n"):
                reply += sock.recv(64)
            took = time.perf_counter() - started
            longest = max(longest, took)
            time.sleep(max(0.001 - took, 0))
    print(json.dumps({"max": longest}), flush=True)
