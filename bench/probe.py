"""A PING every millisecond, from a process of its own, to see how long Redis stops answering.

Run as ``python -m bench.probe PORT``: it prints ``ready`` once connected, PINGs until its
standard input is closed, then prints the longest round trip it saw as one JSON line. Being its own
process, it is not held up by the work it watches (in a thread it would wait for the GIL).
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from typing import Final

INTERVAL: Final = 0.001


def main() -> None:
    port = int(sys.argv[1])
    stop = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        print("ready", flush=True)
        times = []
        while not stop.is_set():
            started = time.perf_counter()
            sock.sendall(b"PING\r\n")
            reply = b""
            while not reply.endswith(b"\r\n"):
                reply += sock.recv(64)
            took = time.perf_counter() - started
            times.append(took)
            time.sleep(max(INTERVAL - took, 0))
    print(json.dumps({"max": max(times)}), flush=True)


if __name__ == "__main__":
    main()
