#!/usr/bin/python3
"""The bytes alone through TCP: the floor under any transfer protocol on a link.

raw_tcp.py recv HOST PORT SIZE REPS   (in the receiving namespace; serves one connection)
raw_tcp.py send HOST PORT SIZE REPS   (prints one JSON object: seconds per rep, first dropped)

Each rep: the sender writes SIZE bytes on an open connection, the receiver reads them all and
answers one byte; timed on the sender from the first write to that answer (one round trip more
than the bytes need, like the transfer's durable acknowledgement).  10 ms between reps.
"""
import json
import socket
import sys
import time


def main():
    mode, host, port, size, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    if mode == "recv":
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((host, port))
        srv.listen(1)
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = memoryview(bytearray(4 << 20))
        for _ in range(reps):
            got = 0
            while got < size:
                n = conn.recv_into(buf, min(len(buf), size - got))
                if n == 0:
                    sys.exit("raw_tcp: connection closed early")
                got += n
            conn.sendall(b"k")
        return
    for _ in range(100):
        try:
            conn = socket.create_connection((host, port))
            break
        except ConnectionRefusedError:
            time.sleep(0.05)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    data = b"\x5a" * size
    seconds = []
    for _ in range(reps):
        t0 = time.perf_counter()
        conn.sendall(data)
        if conn.recv(1) != b"k":
            sys.exit("raw_tcp: no answer")
        seconds.append(time.perf_counter() - t0)
        time.sleep(0.01)
    print(json.dumps({"size": size, "seconds": seconds[1:]}))


if __name__ == "__main__":
    main()
