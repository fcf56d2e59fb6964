#!/usr/bin/env python3
"""A TCP proxy on loopback that can black-hole its traffic: for BlackHoleTests.

    black-hole-proxy.py TARGET_PORT PORT_FILE

Forwards 127.0.0.1:PORT (written to PORT_FILE once listening) to 127.0.0.1:TARGET_PORT. SIGUSR1
black-holes it: nothing read is forwarded and no new connection reaches the target, but no
connection is closed either (a peer sees silence, as behind a dead switch or a partition);
SIGUSR2 lets everything flow again, what was held back first.
"""
import asyncio
import signal
import sys

TARGET_PORT = int(sys.argv[1])
PORT_FILE = sys.argv[2]


async def main():
    flowing = asyncio.Event()
    flowing.set()

    async def pipe(reader, writer):
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await flowing.wait()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def accept(client_reader, client_writer):
        await flowing.wait()
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", TARGET_PORT)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, upstream_writer), pipe(upstream_reader, client_writer))

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, flowing.clear)
    loop.add_signal_handler(signal.SIGUSR2, flowing.set)
    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    with open(PORT_FILE + ".tmp", "w") as f:
        f.write(str(server.sockets[0].getsockname()[1]))
    import os
    os.rename(PORT_FILE + ".tmp", PORT_FILE)
    async with server:
        await server.serve_forever()


asyncio.run(main())
