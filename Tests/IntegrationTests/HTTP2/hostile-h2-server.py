#!/usr/bin/env python3
"""A hostile HTTP/2 server for HTTP2FaultTests: TLS with ALPN h2, built on the `h2` library, with
the faults production brings chosen by the request's path.

    hostile-h2-server.py CERT KEY LOG

Listens on three loopback ports and prints `ready DEFAULT LIMITED WINDOW0` once they accept:
DEFAULT is a plain server; LIMITED announces SETTINGS_MAX_CONCURRENT_STREAMS 1; WINDOW0 never
sends WINDOW_UPDATE, so a request body past the first 65,535 bytes meets a window left at 0 and stops.
(Announcing SETTINGS_INITIAL_WINDOW_SIZE 0 instead races the client's first DATA frames, which RFC
9113 allows and the `h2` library refuses.)

Paths (TOKEN names a test's requests; ID one request):
  /echo/ID                      200, body "ID:LENGTH-OF-REQUEST-BODY"
  /goaway/TOKEN/N/KEEP/ID       the first connection that sees TOKEN waits for N such requests, answers
                                the KEEP lowest stream ids, sends GOAWAY with the last of them as the
                                last stream id (0 when KEEP is 0) and closes: the others were never
                                processed (RFC 9113 §6.8); later connections answer like /echo
  /refuse/TOKEN/TIMES/ID        the first TIMES requests with TOKEN are reset with REFUSED_STREAM before
                                they are processed; later ones answer like /echo
  /reset-mid-body/TOKEN/TIMES/ID  the first TIMES requests with TOKEN get 200 and 1,000 body bytes, then
                                RST_STREAM INTERNAL_ERROR; later ones answer like /echo
  /huge-headers                 a response header list of about 600 KiB (4,000 fields)
  /ping-flood                   stops reading and sends PING frames until the client goes (or 20 s)
  /continuation-flood           HEADERS without END_HEADERS, then CONTINUATION frames, each with a new
                                header field, until the client goes (or 20 s)
  /hang                         never answers
On LIMITED every request is answered 20 ms after it ends, so that concurrent streams would overlap.

Every event is a line in LOG: `processed ID conn=C stream=S`, `refused ID`, `reset ID`,
`goaway-dropped ID`, `goaway-sent last=S`, `concurrent-max C N`, `too-many-streams C`,
`refused-over-limit C acked=BOOL` (LIMITED refused a stream over its limit; whether the client had
acknowledged the limit),
`flood ping|continuation sent=BYTES`.
"""
import select
import socket
import ssl
import sys
import threading
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import hpack
import hyperframe.frame

CERT, KEY, LOG = sys.argv[1], sys.argv[2], sys.argv[3]

log_lock = threading.Lock()
state_lock = threading.Lock()
goaway_tokens = set()       # tokens whose GOAWAY connection has been chosen
refused_counts = {}         # token -> requests refused so far
reset_counts = {}           # token -> resets done
connection_ids = iter(range(1, 1 << 30))


def log(line):
    with log_lock:
        with open(LOG, "a") as f:
            f.write(line + "\n")


class Connection:
    def __init__(self, sock, mode):
        self.sock = sock
        self.mode = mode
        with state_lock:
            self.id = next(connection_ids)
        config = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        self.h2 = h2.connection.H2Connection(config=config)
        self.settings_acked = 0
        self.requests = {}       # stream id -> (path, body bytearray)
        self.due = []            # (time, stream id, path, body) answers to send later
        self.goaway_batch = None  # (token, n, [stream ids]) while this connection collects its batch
        self.open_streams = set()
        self.max_open = 0
        self.closed = False

    def flush(self):
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def run(self):
        self.h2.initiate_connection()
        self.flush()
        if self.mode == "limited":
            # SETTINGS_MAX_CONCURRENT_STREAMS 1 in a frame of its own, enforced here rather than by
            # `h2` (which ends the whole connection): a stream over the limit is refused
            # (REFUSED_STREAM, RFC 9113 §5.1.2), as servers do.
            frame = hyperframe.frame.SettingsFrame(0)
            frame.settings = {h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1}
            self.sock.sendall(frame.serialize())
        while not self.closed:
            timeout = 1.0
            if self.due:
                timeout = max(0.0, min(t for t, *_ in self.due) - time.monotonic())
            if self.sock.pending() == 0:
                readable, _, _ = select.select([self.sock], [], [], timeout)
            else:
                readable = [self.sock]
            if readable:
                try:
                    data = self.sock.recv(65536)
                except (ssl.SSLError, OSError):
                    return
                if not data:
                    return
                try:
                    events = self.h2.receive_data(data)
                except h2.exceptions.TooManyStreamsError:
                    log(f"too-many-streams {self.id}")
                    return
                except h2.exceptions.ProtocolError as error:
                    log(f"protocol-error {self.id} {error}")
                    return
                for event in events:
                    self.handle(event)
                    if self.closed:
                        return
            now = time.monotonic()
            ready = [d for d in self.due if d[0] <= now]
            self.due = [d for d in self.due if d[0] > now]
            for _, stream, path, body in ready:
                self.answer(stream, path, body)
            try:
                self.flush()
            except OSError:
                return

    def handle(self, event):
        if isinstance(event, h2.events.SettingsAcknowledged):
            self.settings_acked += 1
        elif isinstance(event, h2.events.RequestReceived):
            headers = dict(event.headers)
            if self.mode == "limited" and self.open_streams:
                log(f"refused-over-limit {self.id} acked={self.settings_acked >= 2}")
                self.h2.reset_stream(event.stream_id, error_code=h2.errors.ErrorCodes.REFUSED_STREAM)
                return
            self.requests[event.stream_id] = (headers.get(":path", "/"), bytearray())
            self.open_streams.add(event.stream_id)
            if len(self.open_streams) > self.max_open:
                self.max_open = len(self.open_streams)
                log(f"concurrent-max {self.id} {self.max_open}")
            path = headers.get(":path", "/")
            if path.startswith("/refuse/"):
                _, _, token, times, ident = path.split("/")
                with state_lock:
                    done = refused_counts.get(token, 0)
                    refuse = done < int(times)
                    if refuse:
                        refused_counts[token] = done + 1
                if refuse:
                    log(f"refused {ident}")
                    self.h2.reset_stream(event.stream_id, error_code=h2.errors.ErrorCodes.REFUSED_STREAM)
                    self.requests.pop(event.stream_id, None)
                    self.open_streams.discard(event.stream_id)
            if event.stream_ended:
                self.complete(event.stream_id)
        elif isinstance(event, h2.events.DataReceived):
            if event.stream_id in self.requests:
                self.requests[event.stream_id][1].extend(event.data)
            if self.mode != "window0" and event.flow_controlled_length:
                try:
                    self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                except h2.exceptions.StreamClosedError:
                    pass
        elif isinstance(event, h2.events.StreamEnded):
            self.complete(event.stream_id)
        elif isinstance(event, h2.events.StreamReset):
            self.requests.pop(event.stream_id, None)
            self.open_streams.discard(event.stream_id)
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.closed = True

    def complete(self, stream):
        if stream not in self.requests:
            return
        path, body = self.requests.pop(stream)
        if self.mode == "limited":
            self.due.append((time.monotonic() + 0.02, stream, path, bytes(body)))
            return
        if path.startswith("/goaway/"):
            _, _, token, count, keep, ident = path.split("/")
            if self.goaway_batch is None:
                with state_lock:
                    first = token not in goaway_tokens
                    goaway_tokens.add(token)
                if first:
                    self.goaway_batch = (token, int(count), int(keep), [])
                    # A batch that never fills is answered whole after 5 s (the test then fails).
                    self.due.append((time.monotonic() + 5, 0, "/goaway-timeout", b""))
            if self.goaway_batch is not None and self.goaway_batch[0] == token:
                batch = self.goaway_batch[3]
                batch.append((stream, ident, bytes(body)))
                if len(batch) >= self.goaway_batch[1]:
                    self.goaway(batch, self.goaway_batch[2])
                return
        self.answer(stream, path, bytes(body))

    def goaway(self, batch, keep):
        batch.sort()
        kept, dropped = batch[:keep], batch[keep:]
        for stream, ident, body in kept:
            self.respond(stream, ident, body)
        last = kept[-1][0] if kept else 0
        for _, ident, _ in dropped:
            log(f"goaway-dropped {ident}")
        self.h2.close_connection(error_code=h2.errors.ErrorCodes.NO_ERROR, last_stream_id=last)
        log(f"goaway-sent last={last}")
        self.flush()
        # Let the client read everything before the socket goes: stop writing, drain, close.
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        deadline = time.monotonic() + 3
        self.sock.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                if not self.sock.recv(65536):
                    break
            except socket.timeout:
                continue
            except (ssl.SSLError, OSError):
                break
        self.closed = True

    def respond(self, stream, ident, body, extra=()):
        payload = f"{ident}:{len(body)}".encode()
        self.h2.send_headers(stream, [(":status", "200"), ("content-length", str(len(payload)))] + list(extra))
        self.h2.send_data(stream, payload, end_stream=True)
        self.open_streams.discard(stream)
        log(f"processed {ident} conn={self.id} stream={stream}")

    def answer(self, stream, path, body):
        parts = path.split("/")
        if path == "/goaway-timeout":
            if self.goaway_batch is not None and not self.closed:
                log("goaway-batch-timeout")
                for stream, ident, body in self.goaway_batch[3]:
                    self.respond(stream, ident, body)
                self.goaway_batch = (None, 0, 0, [])
        elif path.startswith("/echo/"):
            self.respond(stream, parts[2], body)
        elif path.startswith("/goaway/"):
            self.respond(stream, parts[5], body)
        elif path.startswith("/refuse/"):
            self.respond(stream, parts[4], body)
        elif path.startswith("/limited/"):
            self.respond(stream, parts[2], body)
        elif path.startswith("/reset-mid-body/"):
            _, _, token, times, ident = parts
            with state_lock:
                done = reset_counts.get(token, 0)
                reset = done < int(times)
                if reset:
                    reset_counts[token] = done + 1
            if not reset:
                self.respond(stream, ident, body)
                return
            self.h2.send_headers(stream, [(":status", "200"), ("content-length", "100000")])
            self.h2.send_data(stream, b"x" * 1000)
            self.flush()
            self.h2.reset_stream(stream, error_code=h2.errors.ErrorCodes.INTERNAL_ERROR)
            self.open_streams.discard(stream)
            log(f"reset {ident}")
        elif path == "/huge-headers":
            fields = [(f"x-filler-{i}", "v" * 140) for i in range(4000)]
            self.h2.send_headers(stream, [(":status", "200")] + fields)
            self.h2.send_data(stream, b"never", end_stream=True)
            log("huge-headers sent")
        elif path == "/ping-flood":
            self.flood_pings()
        elif path == "/continuation-flood":
            self.flood_continuations(stream)
        elif path == "/hang":
            pass
        else:
            self.h2.send_headers(stream, [(":status", "404"), ("content-length", "0")], end_stream=True)

    def flood_pings(self):
        self.flush()
        frame = hyperframe.frame.PingFrame(0)
        frame.opaque_data = b"floodfld"
        chunk = frame.serialize() * 4096
        sent = 0
        deadline = time.monotonic() + 20
        self.sock.settimeout(5)
        try:
            while time.monotonic() < deadline:
                self.sock.sendall(chunk)
                sent += len(chunk)
        except (OSError, ssl.SSLError):
            pass
        log(f"flood ping sent={sent}")
        self.closed = True

    def flood_continuations(self, stream):
        self.flush()
        encoder = hpack.Encoder()
        headers = hyperframe.frame.HeadersFrame(stream)
        headers.data = encoder.encode([(":status", "200")])
        sent = 0
        deadline = time.monotonic() + 20
        self.sock.settimeout(5)
        try:
            self.sock.sendall(headers.serialize())
            index = 0
            while time.monotonic() < deadline:
                batch = bytearray()
                for _ in range(256):
                    frame = hyperframe.frame.ContinuationFrame(stream)
                    # A literal field without indexing: every frame adds a new field to the list.
                    frame.data = encoder.encode([(f"x-flood-{index}", "c" * 100)], huffman=False)
                    index += 1
                    batch += frame.serialize()
                self.sock.sendall(bytes(batch))
                sent += len(batch)
        except (OSError, ssl.SSLError):
            pass
        log(f"flood continuation sent={sent}")
        self.closed = True


def listener(mode):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(128)
    return server


def serve_forever(server, mode, context):
    while True:
        client, _ = server.accept()

        def run(client=client):
            try:
                tls = context.wrap_socket(client, server_side=True)
            except (ssl.SSLError, OSError):
                client.close()
                return
            try:
                Connection(tls, mode).run()
            except (OSError, ssl.SSLError):
                pass
            finally:
                try:
                    tls.close()
                except OSError:
                    pass

        threading.Thread(target=run, daemon=True).start()


def main():
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(CERT, KEY)
    context.set_alpn_protocols(["h2"])
    servers = {mode: listener(mode) for mode in ("default", "limited", "window0")}
    for mode, server in servers.items():
        threading.Thread(target=serve_forever, args=(server, mode, context), daemon=True).start()
    ports = " ".join(str(servers[m].getsockname()[1]) for m in ("default", "limited", "window0"))
    print(f"ready {ports}", flush=True)
    threading.Event().wait()


main()
