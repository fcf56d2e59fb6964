#!/usr/bin/env python3
"""A listener standing for something internal, for EgressLabTests: logs every connection it
accepts (one line per accept in LOG) and answers each with `HTTP/1.1 200` and NAME.

    accept_counter.py ADDRESS PORT NAME LOG
"""
import socket
import sys

ADDRESS, PORT, NAME, LOG = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
family = socket.AF_INET6 if ":" in ADDRESS else socket.AF_INET
listener = socket.socket(family, socket.SOCK_STREAM)
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if family == socket.AF_INET6:
    listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
listener.bind((ADDRESS, PORT))
listener.listen(16)
open(LOG, "a").close()
print("ready", flush=True)
while True:
    connection, _ = listener.accept()
    with open(LOG, "a") as log:
        log.write("accept\n")
    try:
        connection.settimeout(5)
        connection.recv(4096)
        body = NAME.encode()
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
    except OSError:
        pass
    finally:
        connection.close()
