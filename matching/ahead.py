"""Scanning a large regular file ahead of the reader, on another core.

The prefilter (matching/prefilter.py) is most of a large log's time and needs none of the reader's
state, so a forked helper runs it for the blocks it claims while the reader counts lines and does
the per-line work (matching/explain.py). DOCTOR_AHEAD=0 turns it off.
"""
from __future__ import annotations

import mmap
import os
import select
import signal
import sys
from array import array

AHEAD_MIN_BLOCKS = 4       # a smaller file is scanned by the reader alone: the fork would not pay
AHEAD_MAX_BLOCKS = 16384   # their claim tokens (4 bytes each) fit an empty pipe; later ones: alone
_HEAD = 40                 # a result's header: block, start, end, cheap hits, other hits (8 bytes each)
_HIT = "i"                 # a hit's offset in a result: signed (a match that ends at offset 0 is a hit at -1)
AHEAD_LEAD = 2             # blocks the reader may hold scanned ahead of the one it needs (their hits wait in memory)


def block_spans(fd: int, size: int, block: int):
    """(start, end) of each block the reader cuts from a regular file, in order: it fills `block`
    bytes and cuts after their last newline. Only blocks ending before the file's last read, and
    none after one without a newline (the reader grows its buffer there)."""
    start = 0
    while start + block <= size:
        tail = max(start, start + block - (64 << 10))
        cut = os.pread(fd, start + block - tail, tail).rfind(b"\n")
        if cut < 0 and tail > start:  # a line over 64 KiB ends the block: look at all of it
            tail, cut = start, os.pread(fd, block, start).rfind(b"\n")
        if cut < 0:
            return
        yield start, tail + cut + 1
        start = tail + cut + 1


def _hits(prefilter, fd: int, span: tuple[int, int], view: memoryview | None) -> tuple[list[int], list[int]]:
    """The prefilter's (cheap, other) hits in [start, end) of the file, read into `view`, or with
    no view (the helper's) scanned where the page cache holds it: that block alone mapped, with no
    copy (a tenth of the helper's time; a mapping's pages count as the process's memory, so no more
    than the block is mapped at once). A file cut short meanwhile faults (SIGBUS) the helper in the
    pages past its new end, and reads as zeros in the page it now ends in: the size is checked
    after the scan. Either way the helper is gone and the reader scans the rest, as for any helper
    that died."""
    start, end = span
    if view is None:
        at = start - start % mmap.ALLOCATIONGRANULARITY
        with mmap.mmap(fd, end - at, offset=at, access=mmap.ACCESS_READ) as mapped:
            with memoryview(mapped) as whole, whole[start - at:] as block:
                hits = prefilter.candidates(block)
        if os.fstat(fd).st_size < end:
            raise OSError("the file got shorter")
        return hits
    size, got = end - start, 0
    while got < size:
        n = os.preadv(fd, [view[got:size]], start + got)
        if n <= 0:
            raise OSError("the file got shorter")
        got += n
    return prefilter.candidates(view[:size])


def _answer(prefilter, fd: int, k: int, span: tuple[int, int] | None) -> bytes:
    """The helper's result for block k: where it is and its prefilter hits (none past its spans)."""
    if span is None:
        return array("Q", [k, 0, 0, 0, 0]).tobytes()
    cheap, other = _hits(prefilter, fd, span, None)
    head = array("Q", [k, *span, len(cheap), len(other)])
    return b"".join((head.tobytes(), array(_HIT, cheap).tobytes(), array(_HIT, other).tobytes()))


def _helper(prefilter, fd: int, size: int, block: int, tokens: int, results: int) -> None:
    """The forked helper: claim the next block, answer it, until no token is left. It never
    returns into the reader's code (os._exit), whatever happens."""
    code = 1
    try:
        # A fault in the mapped file must end the helper: a handler the host set (Python's only sets
        # a flag and returns) would repeat the faulting read forever; and it leaves no core file.
        import resource  # here: a forked child, so a POSIX system
        signal.signal(signal.SIGBUS, signal.SIG_DFL)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        spans, at = block_spans(fd, size, block), -1
        while len(token := os.read(tokens, 4)) == 4:
            k = int.from_bytes(token, sys.byteorder)
            span = None
            while at < k and (span := next(spans, None)) is not None:  # skip those the reader took
                at += 1
            data = memoryview(_answer(prefilter, fd, k, span if at == k else None))
            while data:
                data = data[os.write(results, data):]
        code = 0
    finally:
        os._exit(code)


def _put_tokens(fd: int, n: int) -> None:
    """Tokens 0..n-1 into the pipe, as many as it holds (a pipe may be small: the rest of the file
    is then the reader's alone), and close it so that reading an empty one ends."""
    os.set_blocking(fd, False)
    data = array("I", range(n)).tobytes()
    try:
        for at in range(0, len(data), 4096):  # at most PIPE_BUF bytes: written whole or not at all
            os.write(fd, data[at:at + 4096])
    except BlockingIOError:
        pass
    os.close(fd)


class Ahead:
    """A forked helper that scans the blocks of a regular file ahead of the reader. Both claim
    blocks in order from one pipe of tokens (a 4-byte read of a pipe is atomic), so whoever is free
    takes the next one. Each cuts the blocks itself, the same way; an answer says which (start, end)
    it is for, and the reader scans alone what has no answer for the block it cut (a helper that
    died, a file that changed).

    The reader needs its blocks in order, so it reaches, every few blocks, one the helper is still
    scanning. It claims the next token then and scans that block at once, from its own small
    buffer, instead of waiting (waiting was a sixth of a large log's time), so neither core idles;
    it holds at most AHEAD_LEAD such blocks (a stalled helper: it then waits, as before)."""

    share = True  # the reader takes a block when no answer is ready (False: it waits for the helper)

    def __init__(self, prefilter, fd: int, size: int, block: int):
        self.ready: dict[int, tuple] = {}
        self.mine: set[int] = set()
        self.prefilter, self.fd = prefilter, fd
        self.spans, self.cut = block_spans(fd, size, block), []  # the blocks as the reader cuts them
        self.block, self.view = block, None  # the buffer for a block it claims ahead: made on first use
        self.early: set[int] = set()         # blocks it scanned ahead whose answers are not yet taken
        self.status: int | None = None       # the helper's wait status, once reaped
        tokens, tokens_w = os.pipe()
        results_r, results = os.pipe()
        try:
            import fcntl
            fcntl.fcntl(results, fcntl.F_SETPIPE_SZ, 1 << 20)  # room for a few blocks' results
        except (ImportError, OSError, AttributeError):
            pass
        # a block is cut after its last newline, so there are more blocks than size / block: twice
        # that is plenty for lines shorter than half a block (a token past the last block: "none")
        _put_tokens(tokens_w, min(2 * (size // block) + 2, AHEAD_MAX_BLOCKS))
        try:
            self.pid = os.fork()
        except OSError:  # no process to spare: the reader goes alone
            for end in (tokens, results_r, results):
                os.close(end)
            raise
        if self.pid == 0:
            os.close(results_r)
            _helper(prefilter, fd, size, block, tokens, results)
        os.close(results)
        self.tokens, self.results = tokens, results_r
        self.poll = select.poll()  # poll, not select: any fd number
        self.poll.register(results_r, select.POLLIN)

    def take(self, k: int, start: int, end: int) -> tuple | None:
        """The prefilter's (cheap, other) hits in the reader's block k, [start, end) of the file,
        or None: the reader scans it itself."""
        while k not in self.ready:
            if k in self.mine or self.results < 0:
                return None
            if self.share and len(self.early) < AHEAD_LEAD and not self.poll.poll(0):  # nothing yet: take one too
                token = os.read(self.tokens, 4)
                if len(token) == 4:
                    claimed = int.from_bytes(token, sys.byteorder)
                    if claimed == k:
                        return None
                    self._scan_ahead(claimed)
                    continue  # the helper's answer for k has likely come meanwhile
            self._receive()
        self.early.discard(k)
        span, hits = self.ready.pop(k)
        return hits if span == (start, end) else None

    def _scan_ahead(self, j: int) -> None:
        """Scan block j, a later one the reader claimed, now: its answer waits beside the helper's.
        A block past the file's last (or one the reader will cut otherwise) is left to the reader."""
        try:
            while len(self.cut) <= j and (span := next(self.spans, None)) is not None:
                self.cut.append(span)
            if len(self.cut) <= j:
                self.mine.add(j)
                return
            if self.view is None:
                self.view = memoryview(bytearray(self.block))
            self.ready[j] = (self.cut[j], _hits(self.prefilter, self.fd, self.cut[j], self.view))
            self.early.add(j)
        except OSError:  # the file changed under us: the reader scans the block it cuts there
            self.mine.add(j)

    def _receive(self) -> None:
        head = self._read(_HEAD)
        k, start, end, n_cheap, n_other = array("Q", head).tolist() if head else (0, 0, 0, 0, 0)
        body = self._read(array(_HIT).itemsize * (n_cheap + n_other)) if head else None
        if body is None:  # the helper is gone: the reader scans the rest alone
            os.close(self.results)
            self.results = -1
            return
        nums = array(_HIT, body).tolist()
        self.ready[k] = ((start, end), (nums[:n_cheap], nums[n_cheap:]))

    def _read(self, size: int) -> bytes | None:
        parts, left = [], size
        while left:
            part = os.read(self.results, min(left, 1 << 20))
            if not part:
                return None
            parts.append(part)
            left -= len(part)
        return b"".join(parts)

    def close(self) -> None:
        """Stop the helper (it may still be scanning a block nobody needs) and reap it."""
        for fd in (self.tokens, self.results):
            if fd >= 0:
                os.close(fd)
        self.results = -1
        try:  # reaped by us first, so the pid cannot be another process's when it is killed
            pid, self.status = os.waitpid(self.pid, os.WNOHANG)
            if pid == 0:
                os.kill(self.pid, signal.SIGKILL)
                self.status = os.waitpid(self.pid, 0)[1]
        except ChildProcessError:  # the host's own SIGCHLD handler reaped it
            pass


def start_ahead(prefilter, fd: int, size: int, block: int) -> Ahead | None:
    """A helper for a regular file of `size` bytes read from its start, or None where it would not
    pay (a small file, one core) or not be safe: no fork, or other threads (one could hold a lock
    the helper needs, and the reader would wait for it forever). DOCTOR_AHEAD=0: never."""
    if os.environ.get("DOCTOR_AHEAD") == "0" or not hasattr(os, "fork"):
        return None
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if size < AHEAD_MIN_BLOCKS * block or (cores or 1) < 2:
        return None
    return Ahead(prefilter, fd, size, block)
