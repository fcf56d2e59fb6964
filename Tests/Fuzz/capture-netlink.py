#!/usr/bin/env python3
"""Writes the datagrams this machine's kernel answers a route dump with (IPv4 and IPv6) as seeds
for the netlink fuzz target: Tests/Fuzz/capture-netlink.py Tests/Fuzz/Corpus/netlink"""
import os, socket, struct, sys

RTM_GETROUTE, NLM_F_REQUEST, NLM_F_DUMP = 26, 1, 0x300
out = sys.argv[1]
for family, name in ((socket.AF_INET, "ipv4"), (socket.AF_INET6, "ipv6")):
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    sock.bind((0, 0))
    rtmsg = struct.pack("BBBBBBBBI", family, 0, 0, 0, 0, 0, 0, 0, 0)
    sock.send(struct.pack("IHHII", 16 + len(rtmsg), RTM_GETROUTE, NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + rtmsg)
    for index in range(8):
        datagram = sock.recv(65536)
        with open(os.path.join(out, f"route-dump-{name}-{index}.bin"), "wb") as f:
            f.write(datagram)
        if struct.unpack_from("H", datagram, 4)[0] == 3:  # NLMSG_DONE
            break
    sock.close()
