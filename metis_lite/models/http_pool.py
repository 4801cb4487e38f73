"""Several servers of one embedding model behind one embedder, and an index run's batches that
follow each server's pace.

A spec may name several servers of the same model (`"urls"`, beside or instead of `"url"`);
their vectors are one model's, so the base records one label whichever server made a vector
(registry.model_label). Two ways of asking them:

- `ask` (a question, or any caller of `embed`): each batch within the provider's deadline
  (`timeout_s`, settings.MODEL_DEADLINE_S by default), sent to the fastest server that answers:
  a server's answer time is followed as a moving average, one not yet heard from is tried
  first (to learn its pace), one that is resting last. A server that does not answer passes
  the question to the next, within the same deadline.
- `spread` (an index run's batch, `embed_documents`): cut into pieces that go to every server
  that is not resting, at once. A piece is given the provider's deadline plus a second per
  INDEX_CHARS_PER_S characters, because an index run loses nothing by waiting for a slow
  server, while a question's reader would: an answer that comes after `timeout_s` but before
  that longer deadline is used, and the server's next pieces are half as large (down to one
  text); an answer within QUICK_SHARE of `timeout_s` doubles them again (up to `batch_size`).
  A piece that gets no answer goes back to be sent again, to this server or another.

A server that fails SERVER_FAILURES_MAX times in a row rests for SERVER_REST_S, then is tried
again (one more failure sends it back to rest); an index batch fails only when every server
rests after failing it (a batch that finds them all resting from earlier batches first tries
the one back soonest), and then the run's embedding stops with a warning, as for one server
that is down. An
answer that cannot be used (not JSON, a wrong dimension, NaN) fails the batch at once, whoever
sent it: nothing of that batch is stored.

No HTTP here: the pool is handed `send(url, texts, deadline)`, the provider's one request.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from metis_lite.errors import ModelAnswerInvalid, ModelUnavailable

SERVER_FAILURES_MAX = 3
"""Failures in a row after which a server is left to rest."""

SERVER_REST_S = 30.0
"""How long a server that failed SERVER_FAILURES_MAX times in a row is left before it is
tried again: long enough that a run does not wait on it batch after batch, short enough that
one restarted is back within a run."""

INDEX_CHARS_PER_S = 1_000
"""An index piece's deadline grows by a second per this many characters of its texts: a server
slower than this (~250 tokens a second, a hundredth of what multilingual-e5-small does on one
CPU core) is treated as down; characters stand in for tokens, which only the server counts."""

QUICK_SHARE = 0.5
"""An answer within this share of `timeout_s` doubles the server's next pieces again."""

SPEED_WEIGHT = 0.3
"""Weight of the newest answer time in a server's moving average."""

BUSY_POLL_S = 0.05
"""How often a batch that finds every server awake still busy (with a piece of an earlier call
that stopped waiting for it) looks again."""

Send = Callable[[str, list[str], float], np.ndarray]
"""(url, texts, deadline on time.monotonic) → their vectors, else the model's error."""


@dataclass
class ServerState:
    """What the pool knows of one server: its next pieces' size, its failures in a row, until
    when it rests, its moving average answer time for questions (None: not heard from)."""

    url: str
    batch: int
    failures: int = 0
    resting_until: float = 0.0
    seconds: float | None = None
    busy: bool = False


@dataclass(frozen=True)
class _Piece:
    start: int
    texts: list[str]


@dataclass
class _Call:
    """One `spread` call: its pieces' answers, and whether it still reads them."""

    answers: queue.SimpleQueue[tuple[ServerState, _Piece, float, object]] = field(
        default_factory=queue.SimpleQueue
    )
    abandoned: bool = False


class ServerPool:
    """The servers of one embedder and their state; `ask` and `spread` may run at once (a
    search beside an index run): the state is kept under a lock."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        batch: int,
        timeout_s: float,
        send: Send,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.servers = [ServerState(url, batch) for url in urls]
        self.batch_max = batch
        self.timeout_s = timeout_s
        self._send = send
        self._clock = clock
        self._lock = threading.Lock()

    # -- questions --------------------------------------------------------------------------

    def ask(self, texts: list[str]) -> np.ndarray:
        """Vectors of `texts`, batch_size at a time, each batch within timeout_s."""
        blocks = [
            self._ask_batch(texts[start : start + self.batch_max])
            for start in range(0, len(texts), self.batch_max)
        ]
        return _joined(blocks)

    def _ask_batch(self, batch: list[str]) -> np.ndarray:
        deadline = self._clock() + self.timeout_s
        failures: list[tuple[str, ModelUnavailable]] = []
        for server in self._by_speed():
            if failures and self._clock() >= deadline:
                break
            started = self._clock()
            try:
                vectors = self._send(server.url, batch, deadline)
            except ModelUnavailable as exc:
                self._failed(server)
                failures.append((server.url, exc))
                continue
            self._answered(server, self._clock() - started, timed=True)
            return vectors
        raise _unavailable(failures)

    def _by_speed(self) -> list[ServerState]:
        """Servers not resting, the fastest first (one not heard from before them), then
        those resting, the soonest back first."""
        now = self._clock()
        with self._lock:
            awake = [s for s in self.servers if s.resting_until <= now]
            resting = sorted(
                (s for s in self.servers if s.resting_until > now), key=lambda s: s.resting_until
            )
            awake.sort(key=lambda s: -1.0 if s.seconds is None else s.seconds)
        return awake + resting

    # -- index runs -------------------------------------------------------------------------

    def spread(self, texts: list[str]) -> np.ndarray:
        """Vectors of `texts`, in pieces over every server not resting (module docstring)."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        pending: deque[_Piece] = deque([_Piece(0, list(texts))])
        done: dict[int, np.ndarray] = {}
        call = _Call()
        running = 0
        failures: list[tuple[str, ModelUnavailable]] = []
        try:
            while pending or running:
                running += self._hand_out(pending, call)
                if not running:
                    if self._awake_but_busy():  # with a piece of a call that gave up on it
                        time.sleep(BUSY_POLL_S)
                    elif failures:
                        raise _unavailable(failures)  # every server rests, this batch tried them
                    else:
                        self._wake_soonest()  # rested by earlier batches: one more try
                    continue
                server, piece, took, result = call.answers.get()
                running -= 1
                if isinstance(result, np.ndarray):
                    self._answered(server, took, timed=False)
                    done[piece.start] = result
                elif isinstance(result, ModelUnavailable):
                    self._failed(server, shrink=len(piece.texts))
                    failures.append((server.url, result))
                    pending.appendleft(piece)
                else:  # an answer that is wrong, not late: the server is free, the call ends
                    with self._lock:
                        server.busy = False
                    raise result if isinstance(result, BaseException) else RuntimeError(result)
        finally:
            self._abandon(call)
        return _joined([done[start] for start in sorted(done)])

    def _abandon(self, call: _Call) -> None:
        """The call ends: a piece still on its way frees its server itself when it ends; one
        answered and not read frees it here."""
        with self._lock:
            call.abandoned = True
            while not call.answers.empty():
                call.answers.get_nowait()[0].busy = False

    def _hand_out(
        self,
        pending: deque[_Piece],
        call: _Call,
    ) -> int:
        """Give each idle server that is not resting its next piece; how many were sent. A
        piece is at most the server's batch, and at most an even share of what is left among
        the servers awake, so that two servers share one batch."""
        sent = 0
        now = self._clock()
        with self._lock:
            awake = [s for s in self.servers if s.resting_until <= now]
            share = math.ceil(sum(len(piece.texts) for piece in pending) / max(1, len(awake)))
            for server in awake:
                if not pending:
                    break
                if server.busy:
                    continue
                piece = pending.popleft()
                size = min(server.batch, len(piece.texts), share)
                if size < len(piece.texts):
                    rest = _Piece(piece.start + size, piece.texts[size:])
                    pending.appendleft(rest)
                    piece = _Piece(piece.start, piece.texts[:size])
                server.busy = True
                deadline = now + self.timeout_s + sum(map(len, piece.texts)) / INDEX_CHARS_PER_S
                threading.Thread(
                    target=self._run_piece,
                    args=(server, piece, deadline, call),
                    name="metis-model-piece",
                    daemon=True,
                ).start()
                sent += 1
        return sent

    def _run_piece(
        self,
        server: ServerState,
        piece: _Piece,
        deadline: float,
        call: _Call,
    ) -> None:
        """A piece's thread: one request (the provider's own thread keeps its deadline)."""
        started = self._clock()
        result: object
        try:
            result = self._send(server.url, piece.texts, deadline)
        except BaseException as exc:  # handed to the caller's thread, raised there
            result = exc
        with self._lock:
            if call.abandoned:  # nobody reads it: the server is free for the next call
                server.busy = False
            else:  # the caller frees it once it has counted the answer
                call.answers.put((server, piece, self._clock() - started, result))

    def _wake_soonest(self) -> None:
        """End the rest of the server that rests the shortest, for one try: a batch never
        fails untried (one more failure sends it back to rest)."""
        with self._lock:
            soonest = min(self.servers, key=lambda s: s.resting_until)
            soonest.resting_until = 0.0

    def _awake_but_busy(self) -> bool:
        now = self._clock()
        with self._lock:
            return any(s.busy and s.resting_until <= now for s in self.servers)

    # -- what answers say of a server -------------------------------------------------------

    def _answered(self, server: ServerState, took: float, *, timed: bool) -> None:
        with self._lock:
            server.busy = False
            server.failures = 0
            server.resting_until = 0.0
            if timed:
                before = server.seconds
                server.seconds = took if before is None else before + SPEED_WEIGHT * (took - before)
            elif took > self.timeout_s:
                server.batch = max(1, server.batch // 2)
            elif took < QUICK_SHARE * self.timeout_s:
                server.batch = min(self.batch_max, server.batch * 2)

    def _failed(self, server: ServerState, *, shrink: int = 0) -> None:
        with self._lock:
            server.busy = False
            server.failures += 1
            if shrink:
                server.batch = max(1, min(server.batch, shrink // 2))
            if server.failures >= SERVER_FAILURES_MAX:
                server.resting_until = self._clock() + SERVER_REST_S


def _joined(blocks: list[np.ndarray]) -> np.ndarray:
    """The blocks' rows in order; blocks of two widths (two servers of different models behind
    one spec) are refused, never mixed."""
    widths = {block.shape[1] for block in blocks}
    if len(widths) > 1:
        raise ModelAnswerInvalid(
            f"the model servers answered vectors of dimensions {sorted(widths)}: the urls of one"
            " spec must serve one model"
        )
    return np.concatenate(blocks) if len(blocks) > 1 else blocks[0]


def _unavailable(failures: list[tuple[str, ModelUnavailable]]) -> ModelUnavailable:
    """One server's last error as it was; several servers' last errors said together."""
    if not failures:
        return ModelUnavailable("no model server to ask")
    last = dict(failures)
    if len(last) == 1:
        return failures[-1][1]
    said = "; ".join(error.message for error in last.values())
    return type(failures[-1][1])(f"no model server answered: {said}")
