"""A TCP relay in front of ZooKeeper that a test can cut like a network partition: while cut, bytes stop
flowing both ways and the connections stay open (no reset, nothing refused: the client finds out only by
its own timeouts, as behind a dropped link); new connections are accepted and get nothing. ``restore``
closes the connections of the cut (their streams lost bytes) and forwards new ones again.

Threads: one accepting, two per connection pumping bytes; all daemons, ended by ``close``.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class ZooKeeperCut:
    def __init__(self, target: str) -> None:
        host, port = target.split(",", maxsplit=1)[0].rsplit(":", 1)
        self._target = (host, int(port))
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._cut = threading.Event()
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, name="zk-cut-accept", daemon=True).start()

    def cut(self) -> None:
        self._cut.set()

    def restore(self) -> None:
        with self._lock:
            stale, self._open = self._open, []
        for sock in stale:
            _close(sock)
        self._cut.clear()

    def close(self) -> None:
        self._closed = True
        _close(self._server)
        self.restore()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self._open.append(client)
            if self._cut.is_set():
                threading.Thread(target=self._swallow, args=(client,), daemon=True).start()
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=10)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                if not self._cut.is_set():
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            _close(source)
            _close(sink)

    def _swallow(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while sock.recv(65536):
                pass
        _close(sock)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
