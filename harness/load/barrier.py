"""A barrier for the load pods of one side (the k8s target's `load_parallelism`): each level starts in every pod
at once, so their shares of the level overlap as one level would. Pod 0 listens; the others connect to it
(an Indexed Job's pod 0 by its stable DNS name) and retry until it answers. Before each phase every pod says
`ready <phase>`; pod 0 answers `go` to all once all of them have. A pod that is gone, or a phase that differs,
fails the barrier with one message: the level would not be the one measured.

Plain sockets and one thread: the load loop itself runs between barriers, never beside one."""

from __future__ import annotations

import socket
import time

from harness.errors import LayerbenchError

CONNECT_RETRY_S = 1.0


class Barrier:
    def __init__(self, index: int, count: int, address: str, timeout_s: float = 1800.0):
        """address: host:port where pod 0 listens (pod 0 binds it; the host part is its own name there)."""
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise LayerbenchError(f"--barrier takes HOST:PORT, got {address!r}")
        if not 0 <= index < count:
            raise LayerbenchError(f"shard index {index} is outside 0..{count - 1}")
        self.index, self.count, self.host, self.port, self.timeout_s = index, count, host, int(port), timeout_s
        self._server: socket.socket | None = None
        self._peers: list[tuple[socket.socket, object]] = []  # (connection, its reader)
        self._conn: socket.socket | None = None
        self._reader = None

    # --- pod 0 ---
    def _accept_all(self, bind_host: str) -> None:
        self._server = socket.create_server((bind_host, self.port), reuse_port=False)
        self._server.settimeout(self.timeout_s)
        while len(self._peers) < self.count - 1:
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                raise LayerbenchError(f"barrier: {len(self._peers) + 1} of {self.count} load pods arrived within "
                                      f"{self.timeout_s:.0f} s") from None
            conn.settimeout(self.timeout_s)
            self._peers.append((conn, conn.makefile("r", encoding="ascii")))

    # --- the others ---
    def _connect(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                self._conn = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
                self._reader = self._conn.makefile("r", encoding="ascii")
                return
            except OSError as e:
                if time.monotonic() > deadline:
                    raise LayerbenchError(f"barrier: load pod 0 at {self.host}:{self.port} did not answer within "
                                          f"{self.timeout_s:.0f} s ({e})") from None
                time.sleep(CONNECT_RETRY_S)  # pod 0 may start later; its listening socket is the condition

    def wait(self, phase: str) -> None:
        """Blocks until every pod of the side reached `phase`."""
        if self.count == 1:
            return
        if self.index == 0:
            if self._server is None:  # a loopback address stays loopback; a pod's name is its pod network's
                loopback = self.host in ("127.0.0.1", "localhost", "::1")
                self._accept_all(self.host if loopback else "0.0.0.0")
            for _conn, reader in self._peers:
                line = reader.readline().strip()  # type: ignore[attr-defined]
                if line != f"ready {phase}":
                    raise LayerbenchError(f"barrier: a load pod said {line!r} at phase {phase!r} (gone, or out of "
                                          "step)")
            for conn, _ in self._peers:
                conn.sendall(b"go\n")
            return
        if self._conn is None:
            self._connect()
        assert self._conn is not None and self._reader is not None
        self._conn.sendall(f"ready {phase}\n".encode("ascii"))
        answer = self._reader.readline().strip()
        if answer != "go":
            raise LayerbenchError(f"barrier: load pod 0 ended before phase {phase!r} ({answer or 'connection closed'})")

    def close(self) -> None:
        for conn, _ in self._peers:
            conn.close()
        for s in (self._conn, self._server):
            if s is not None:
                s.close()


def share(total: int, index: int, count: int) -> int:
    """Pod `index`'s part of `total` split over `count` pods: the remainder goes to the first pods."""
    return total // count + (1 if index < total % count else 0)


class Shard:
    """This load process's part of a side's load: pod `index` of `count`, each level's slots and requests split
    between them, every level begun together (the barrier), each request recorded once by the pod that sent it."""

    def __init__(self, index: int, count: int, barrier: Barrier | None):
        self.index, self.count, self.barrier = index, count, barrier

    def part(self, total: int) -> int:
        return share(total, self.index, self.count)

    def sync(self, phase: str) -> None:
        if self.barrier is not None:
            self.barrier.wait(phase)

    def check(self, levels: list, open_loop: bool) -> None:
        """A closed-loop level needs at least one slot per pod (one with fewer is refused before the run)."""
        short = [c for c in levels if not open_loop and int(c) < self.count]
        if short:
            raise LayerbenchError(f"levels {short} have fewer slots than the {self.count} load pods: lower "
                                  "load_parallelism or drop those levels")
