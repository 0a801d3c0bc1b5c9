"""A TCP proxy in front of the model server that can be cut: while cut, it refuses new
connections and drops the ones open, as a model server that crashed or a network that
failed would. `longrun eval --chaos` cuts it, whatever server is behind it."""

from __future__ import annotations

import asyncio
import contextlib


class CuttableProxy:
    """Forwards 127.0.0.1:`port` to `target_host`:`target_port`."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._serving: set[asyncio.Task[None]] = set()
        self.cut = False
        self.port = 0

    async def start(self) -> None:
        """Listen on a free loopback port (`port`)."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and drop every connection."""
        self._drop()
        if self._server is not None:
            self._server.close()
        for task in self._serving:
            task.cancel()
        await asyncio.gather(*self._serving, return_exceptions=True)

    def set_cut(self, cut: bool) -> None:
        """Cut the model server off (dropping the connections open), or bring it back."""
        self.cut = cut
        if cut:
            self._drop()

    def _drop(self) -> None:
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)
        if self.cut:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._open |= {writer, up_writer}
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except asyncio.CancelledError:
            # Closed with the proxy: asyncio (3.11) logs a connection task that ends
            # cancelled as an error, so this one ends as a dropped connection does.
            return
        finally:
            self._open -= {writer, up_writer}
            for end in (writer, up_writer):
                end.transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError, ConnectionError):
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    with contextlib.suppress(OSError, RuntimeError):
        writer.write_eof()
