#!/usr/bin/env python3
"""Redis PFADD/PFCOUNT beside counter.hll: for each n and trial, adds the
decimal strings of t * 10^9 + 1 .. t * 10^9 + n to a fresh key and prints
"n,trial,estimate,bytes" (bytes = STRLEN of the key). Speaks RESP over a
plain socket (no client library needed).

usage: redis_hll.py PORT N:TRIALS [N:TRIALS ...]
"""
import socket
import sys


class Redis:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise RuntimeError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind in (b":", b"+"):
            return rest
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.sock.recv(1 << 16)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        raise RuntimeError("unexpected reply %r" % line)

    @staticmethod
    def encode(*args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def call(self, *args):
        self.sock.sendall(self.encode(*args))
        return self.reply()

    def pipeline(self, commands):
        self.sock.sendall(b"".join(commands))
        for _ in commands:
            self.reply()


def main():
    port = int(sys.argv[1])
    r = Redis(port)
    batch = 1000
    for spec in sys.argv[2:]:
        n, trials = (int(x) for x in spec.split(":"))
        for t in range(trials):
            key = b"bench:%d:%d" % (n, t)
            r.call("DEL", key)
            base = t * 10**9
            commands = []
            for start in range(1, n + 1, batch):
                end = min(n, start + batch - 1)
                values = [str(base + v).encode() for v in range(start, end + 1)]
                commands.append(Redis.encode(b"PFADD", key, *values))
                if len(commands) >= 100:
                    r.pipeline(commands)
                    commands = []
            if commands:
                r.pipeline(commands)
            estimate = int(r.call("PFCOUNT", key))
            size = int(r.call("STRLEN", key))
            r.call("DEL", key)
            print("%d,%d,%d,%d" % (n, t, estimate, size), flush=True)


if __name__ == "__main__":
    main()
