#!/usr/bin/env python3
"""A DNS resolver with faults, for DNSFaultTests (Python `dnslib`), on UDP and TCP port 53.

    resolver.py ADDRESS CONTROL LOG

CONTROL is a file read on every query: `MODE [ADDRESS]`. Modes, for every name under brick.test:
  answer IP      A records with IP (AAAA: an empty answer)
  drop           no reply at all (the client's lookup times out)
  servfail N IP  SERVFAIL for the first N queries of each name, then as `answer IP`
  nxdomain       NXDOMAIN
  truncate IP    over UDP an empty reply with TC set; over TCP the whole answer (the client must
                 ask again over TCP)
  answer6 IP6    AAAA records with IP6 (A: an empty answer)
  rebind IP THEN the first A query of each name answers IP, every later one THEN; TTL 0 (DNS
                 rebinding: a name that looks public once, then points inside)
Every query is a line in LOG: `udp|tcp NAME TYPE RCODE`. Prints `ready` once both listen.
"""
import socket
import struct
import sys
import threading

from dnslib import AAAA, QTYPE, RCODE, RR, A, DNSRecord

ADDRESS, CONTROL, LOG = sys.argv[1], sys.argv[2], sys.argv[3]
lock = threading.Lock()
seen = {}
seen_a = {}


def log(line):
    with lock:
        with open(LOG, "a") as f:
            f.write(line + "\n")


def reply_for(data, transport):
    request = DNSRecord.parse(data)
    name = str(request.q.qname).rstrip(".").lower()
    qtype = QTYPE[request.q.qtype]
    words = open(CONTROL).read().split()
    mode = words[0] if words else "answer"
    reply = request.reply()
    with lock:
        count = seen.get(name, 0) + 1
        seen[name] = count
    if not name.endswith("brick.test"):
        reply.header.rcode = RCODE.NXDOMAIN
    elif mode == "drop":
        log(f"{transport} {name} {qtype} dropped")
        return None
    elif mode == "nxdomain":
        reply.header.rcode = RCODE.NXDOMAIN
    elif mode == "servfail" and count <= int(words[1]):
        reply.header.rcode = RCODE.SERVFAIL
    elif mode == "truncate" and transport == "udp":
        reply.header.tc = 1
    elif mode == "answer6":
        if request.q.qtype == QTYPE.AAAA:
            reply.add_answer(RR(request.q.qname, QTYPE.AAAA, rdata=AAAA(words[1]), ttl=300))
    elif mode == "rebind":
        if request.q.qtype == QTYPE.A:
            with lock:
                count_a = seen_a.get(name, 0) + 1
                seen_a[name] = count_a
            address = words[1] if count_a == 1 else words[2]
            reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(address), ttl=0))
    else:
        address = words[-1]
        if request.q.qtype == QTYPE.A:
            reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(address), ttl=300))
    log(f"{transport} {name} {qtype} {RCODE[reply.header.rcode]}{' TC' if reply.header.tc else ''}")
    return reply.pack()


def serve_udp(sock):
    while True:
        data, peer = sock.recvfrom(4096)
        try:
            answer = reply_for(data, "udp")
        except Exception as error:  # a query dnslib cannot read: no answer
            log(f"udp error {error}")
            continue
        if answer is not None:
            sock.sendto(answer, peer)


def serve_tcp_connection(connection):
    try:
        while True:
            header = connection.recv(2)
            if len(header) < 2:
                return
            (length,) = struct.unpack("!H", header)
            data = b""
            while len(data) < length:
                chunk = connection.recv(length - len(data))
                if not chunk:
                    return
                data += chunk
            answer = reply_for(data, "tcp")
            if answer is None:
                continue
            connection.sendall(struct.pack("!H", len(answer)) + answer)
    finally:
        connection.close()


def serve_tcp(sock):
    while True:
        connection, _ = sock.accept()
        threading.Thread(target=serve_tcp_connection, args=(connection,), daemon=True).start()


udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind((ADDRESS, 53))
tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind((ADDRESS, 53))
tcp.listen(16)
threading.Thread(target=serve_udp, args=(udp,), daemon=True).start()
threading.Thread(target=serve_tcp, args=(tcp,), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
