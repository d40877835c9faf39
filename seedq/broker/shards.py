"""``broker.shards=N``: N broker processes, one central inference.

Each shard (:mod:`seedq.broker.shard_process`) owns a ROUTER socket on a port of its own and
the actors that dial it (actor ``a`` dials shard ``a % N``, as the launcher tells it); it
receives, checks and batches their Steps and answers them. The :class:`ShardHub`, a thread of
the learner process, is their central inference: it registers every Hello in the one
:class:`~seedq.broker.registry.ActorRegistry` (learner-wide rows and env ids), acts for every
batch with the one model and records it in the one unroll store, and keeps the run's counters.

An actor that restarts on another shard joins there like a new run: the registry revokes it
on the shard it left (which takes its old run over: refused ``taken_over`` from then on), and
the consumer records only its live run.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import zmq

from seedq.broker import shard_link as link
from seedq.broker.batch import ActorSlot
from seedq.broker.registry import ActorRegistry
from seedq.broker.router import BatchConsumer
from seedq.core.stats import RunFault, RunStats
from seedq.exit_status import EXIT_REFUSED
from seedq.messages import EnvSpec, ProtocolError, decode_header, decode_hello
from seedq.schema import ConfigError

log = logging.getLogger(__name__)

# The longest wait for the next shard to report ready: shards start in parallel, each a fresh
# interpreter, and on a loaded box many take long together (16 took 58 s on two busy cores).
READY_TIMEOUT_S = 60.0
# How long the hub waits for the reason of a shard that exited refusing its settings.
REFUSAL_WAIT_MS = 2000
# The longest a send to a shard may wait. A PAIR socket whose peer is gone blocks its sends for
# good, and a live shard reads its link whenever its loop turns.
SEND_TIMEOUT_MS = 2000
# How long a stopping hub waits for the shards' last counts (a hung shard's never come).
FLUSH_TIMEOUT_S = 5.0
# The shortest silence taken for a hung shard: several of its heartbeats (HEARTBEAT_S) missed.
SILENT_AT_LEAST_S = 5.0

# Starts shard ``index``: (index, bind, link endpoint, spec dict, settings, keys_dir) -> a
# process handle with is_alive(), join(timeout), kill() and exitcode (seedq.launch.shards).
StartShard = Callable[[int, str, str, dict, dict, str], Any]


class BrokerShardLost(RunFault):
    """A broker shard process exited while the run went on."""


def _link_path(folder: str, index: int) -> str:
    return os.path.join(folder, f"shard-{index}")


LINK_PREFIX = "seedq-shards-"


def _link_folder(shards: int) -> str:
    """A private folder (mkdtemp's 0700) for the links' ipc sockets: in TMPDIR or, where that
    path is too long for a socket address (zmq.IPC_PATH_MAX_LEN, 107 bytes on Linux; a deep
    TMPDIR on a cluster), in /tmp. Named by the learner's pid: the folders of learners that
    died without removing theirs (kill -9) are removed here."""
    tried = []
    for parent in dict.fromkeys([tempfile.gettempdir(), "/tmp"]):
        remove_dead_learners_folders(parent)
        folder = tempfile.mkdtemp(prefix=f"{LINK_PREFIX}{os.getpid()}-", dir=parent)
        if len(_link_path(folder, shards - 1)) <= zmq.IPC_PATH_MAX_LEN:
            return folder
        os.rmdir(folder)
        tried.append(parent)
    raise BrokerShardLost(
        f"the broker shards' link sockets need a folder whose path leaves them at most "
        f"{zmq.IPC_PATH_MAX_LEN} bytes; {' and '.join(tried)} are too deep: set TMPDIR to a "
        "shorter folder"
    )


def remove_dead_learners_folders(parent: str) -> None:
    """Remove the link folders in ``parent`` whose learner (the pid in their name) is gone."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith(LINK_PREFIX)]
    except OSError:
        return
    for name in names:
        pid = name.removeprefix(LINK_PREFIX).partition("-")[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue  # an older seedq's folder, or this learner's own
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
        except OSError:
            continue  # alive, another user's


class _ShardProxy:
    """A shard as the registry sees it: something to revoke actors on."""

    def __init__(self, index: int, sock: zmq.Socket) -> None:
        self.index, self.sock = index, sock

    def revoke(self, actor_id: int, run_id: str, by_run: str) -> None:
        self.sock.send_multipart([link.REVOKE, link.pack([actor_id, run_id, by_run])])


class ShardHub:
    """Starts the shards, then (``serve``, in the learner's broker thread) answers them.

    Args:
        binds: one ``tcp://host:port`` per shard (port 0: any free one).
        settings: the shards' broker settings (max_batch, deadline_ms, silent_timeout_s,
            max_message_bytes, parent_pid, log_file, ...).
        start: starts one shard process (the launcher's).
    """

    def __init__(
        self,
        spec: EnvSpec,
        consumer: BatchConsumer,
        binds: list[str],
        settings: dict,
        start: StartShard,
        *,
        keys_dir: str = "",
        stats: RunStats | None = None,
        registry: ActorRegistry | None = None,
    ) -> None:
        self.spec = spec
        self.consumer = consumer
        self.settings = settings
        # A heartbeat is due each HEARTBEAT_S: a limit of a few of them at the least.
        timeout = float(settings.get("silent_timeout_s", 0.0))
        self.silent_limit_s = max(timeout, SILENT_AT_LEAST_S) if timeout else 0.0
        self.stats = stats if stats is not None else RunStats()
        self.registry = registry if registry is not None else ActorRegistry()
        self._dir = _link_folder(len(binds))
        self.ctx = zmq.Context()
        self.links: list[zmq.Socket] = []
        self.proxies: list[_ShardProxy] = []
        self.procs: list[Any] = []
        self.slots: dict[tuple[int, int], ActorSlot] = {}
        self.connected_envs = 0
        self._obs_dtype = np.dtype(spec.obs_dtype)
        try:
            for index, bind in enumerate(binds):
                sock = self.ctx.socket(zmq.PAIR)
                # Kept before it binds: close() must close it, or the context's term() waits
                # for it for ever.
                self.links.append(sock)
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.SNDTIMEO, SEND_TIMEOUT_MS)
                endpoint = f"ipc://{_link_path(self._dir, index)}"
                sock.bind(endpoint)
                self.proxies.append(_ShardProxy(index, sock))
                self.procs.append(start(index, bind, endpoint, spec.to_dict(), settings, keys_dir))
            self.endpoints = self._await_ready()
        except BaseException:
            self.close()
            raise

    def _await_ready(self) -> list[str]:
        endpoints: list[str | None] = [None] * len(self.links)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while None in endpoints:
            for index, sock in enumerate(self.links):
                if endpoints[index] is None and sock.poll(50):
                    endpoints[index] = self._ready(index, sock.recv_multipart())
                    deadline = time.monotonic() + READY_TIMEOUT_S
            for index, proc in enumerate(self.procs):
                if proc.exitcode == EXIT_REFUSED and self.links[index].poll(REFUSAL_WAIT_MS):
                    self._ready(index, self.links[index].recv_multipart())
            self._check_processes()
            if time.monotonic() > deadline:
                index = endpoints.index(None)
                raise BrokerShardLost(
                    f"broker shard {index} (pid {self.procs[index].pid}) did not start: no shard "
                    f"became ready for {READY_TIMEOUT_S:g} s ({endpoints.count(None)} of "
                    f"{len(endpoints)} not started); see its log lines (role broker-shard). On a "
                    "machine too busy to start them, use fewer broker.shards"
                )
        log.info("%d broker shards at %s", len(endpoints), ", ".join(endpoints))
        return endpoints

    def _ready(self, index: int, frames: list) -> str:
        """Shard ``index``'s first word: its endpoint, or why it refused its settings (a port
        taken, an address not this machine's), which refuses the run as one broker's would."""
        if frames[0] == link.REFUSED:
            raise ConfigError(link.unpack(frames[1])["detail"])
        if frames[0] != link.READY:
            raise RuntimeError(f"broker shard {index} sent {frames[0]!r} first")
        return link.unpack(frames[1])["endpoint"]

    def _check_processes(self) -> None:
        for index, proc in enumerate(self.procs):
            if not proc.is_alive():
                raise BrokerShardLost(
                    f"broker shard {index} exited (code {proc.exitcode}); its actors cannot "
                    "reach the learner. See its log lines (role broker-shard); supervise=true "
                    "restarts the run from its newest checkpoint"
                )

    def serve(self, stop: threading.Event) -> None:
        items = [(sock, zmq.POLLIN) for sock in self.links]
        next_check = 0.0
        heard = [time.monotonic()] * len(self.links)
        while not stop.is_set():
            for sock, _ in zmq.zmq_poll(items, 100):
                index = self.links.index(sock)
                while sock.poll(0):
                    frames = sock.recv_multipart(copy=False)
                    try:
                        self._handle(index, frames)
                    except zmq.Again:
                        self._send_failed()
                    if frames[0].bytes == link.ACT:
                        # One batch per shard per turn: a shard whose next batch is ready by
                        # the time its last is recorded (a full training queue makes recording
                        # slow) was served for good, and the other shards' actors starved.
                        break
                heard[index] = time.monotonic()
            now = time.monotonic()
            if now >= next_check:
                next_check = now + 1.0
                self._check_processes()
                self._check_heard(heard, now)
        self._flush_counts()

    def _flush_counts(self) -> None:
        """Read what each shard counted up to the run's stop, as one broker's own counts are:
        shards send their counts every shard_process.COUNTERS_EVERY_S, and those sent after
        the hub's last turn were lost (the run's last row and faults.json missed them). The
        shards go on serving until :meth:`close`; requests read here are not answered."""
        waiting = set()
        for index, sock in enumerate(self.links):
            try:
                sock.send_multipart([link.FLUSH], zmq.NOBLOCK)
                waiting.add(index)
            except zmq.ZMQError as exc:
                # No shard at the other end (it died): the run keeps the counts it last sent.
                log.warning("broker shard %d: its last counts cannot be asked for (%s)", index, exc)
        deadline = time.monotonic() + FLUSH_TIMEOUT_S
        while waiting and time.monotonic() < deadline:
            for index in list(waiting):
                sock = self.links[index]
                while sock.poll(0):
                    frames = sock.recv_multipart(copy=False)
                    if frames[0].bytes == link.COUNTERS and self._count(frames):
                        waiting.discard(index)
                if index in waiting and not self.procs[index].is_alive():
                    waiting.discard(index)
            if waiting:
                zmq.zmq_poll([(self.links[i], zmq.POLLIN) for i in waiting], 50)
        if waiting:
            log.warning(
                "broker shard(s) %s sent no last count within %.0f s; the run's counts of bad "
                "messages and evictions may miss their last moments",
                sorted(waiting),
                FLUSH_TIMEOUT_S,
            )

    def _send_failed(self) -> None:
        """A send to a shard (its answer, a revocation) waited SEND_TIMEOUT_MS: the shard died
        meanwhile, as one busy with actors usually does while it waits for its answer."""
        self._check_processes()
        raise BrokerShardLost(
            f"a broker shard read nothing from the learner for {SEND_TIMEOUT_MS / 1000:g} s while "
            "its process lived; its actors cannot reach the learner. supervise=true restarts "
            "the run from its newest checkpoint"
        )

    def _check_heard(self, heard: list[float], now: float) -> None:
        """A shard whose process lives but that sent nothing, not even its heartbeat (an
        empty count each shard_process.HEARTBEAT_S), for ``silent_timeout_s`` is hung: its
        actors wait for answers that never come. The hub owes a shard nothing between turns
        (it answers each request as it reads it), so the silence is the shard's."""
        limit = self.silent_limit_s
        if not limit:
            return
        for index, last in enumerate(heard):
            if now - last > limit and self.links[index].poll(0):
                heard[index] = now  # it spoke while the hub served another shard
            elif now - last > limit:
                raise BrokerShardLost(
                    f"broker shard {index} (pid {self.procs[index].pid}) has sent nothing, "
                    f"not even its heartbeat, for {now - last:.0f} s (broker.silent_timeout_s="
                    f"{self.settings['silent_timeout_s']:g}): its process is alive but hung, "
                    "and its actors cannot reach the learner. supervise=true restarts the run "
                    "from its newest checkpoint"
                )

    def _handle(self, shard: int, frames: list) -> None:
        op = frames[0].bytes
        if op == link.ACT:
            self._act(shard, frames)
        elif op == link.JOIN:
            self._join(shard, frames)
        elif op == link.STARTED:
            hello = decode_hello(decode_header(frames[1]))
            rows = link.int_array(frames[2]).copy()
            env_ids = np.arange(hello.first_env, hello.first_env + hello.n_envs, dtype=np.int64)
            slot = ActorSlot(hello, b"", rows, env_ids)
            self.slots[(shard, hello.actor_id)] = slot
            self.connected_envs += hello.n_envs
            self.consumer.actor_started(slot)
        elif op == link.LEFT:
            actor_id = int(link.int_array(frames[1])[0])
            slot = self.slots.pop((shard, actor_id), None)
            if slot is not None:
                self.connected_envs -= slot.hello.n_envs
                self.consumer.actor_left(slot)
        elif op == link.RELEASE:
            actor_id = int(link.int_array(frames[1])[0])
            self.registry.leave(actor_id, self.proxies[shard], link.int_array(frames[2]).copy())
        elif op == link.COUNTERS:
            self._count(frames)

    def _count(self, frames: list) -> bool:
        """Add a shard's counts to the run's; True when they answer the hub's flush."""
        counts = link.unpack(frames[1])
        self.stats.messages += counts["messages"]
        self.stats.evicted += counts["evicted"]
        self.stats.refused_peers += counts.get("refused", 0)
        for code, n in counts["bad"].items():
            self.stats.bad_messages[code] += n
        return bool(counts.get("flushed"))

    def _join(self, shard: int, frames: list) -> None:
        hello = decode_hello(decode_header(frames[1]))
        old = link.int_array(frames[2]).copy() if len(frames[2]) else None
        try:
            rows = self.registry.join(hello, self.proxies[shard], old)
        except ProtocolError as exc:
            self.links[shard].send_multipart(
                [link.REFUSED, link.pack({"code": exc.code, "detail": exc.detail})]
            )
            return
        self.links[shard].send_multipart([link.ROWS, np.asarray(rows, np.int64)])

    def _act(self, shard: int, frames: list) -> None:
        slots = [self.slots[(shard, a)] for a in link.int_array(frames[2]).tolist()]
        batch = link.decode_batch(frames, slots, self.spec.obs_shape, self._obs_dtype)
        actions = self.consumer.act(batch)
        self.links[shard].send_multipart([link.ACTIONS, np.ascontiguousarray(actions)])
        self.stats.record_batch(batch.num_envs, batch.episodes)
        self.consumer.record(batch)

    def close(self, timeout_s: float = 10.0) -> None:
        for sock in self.links:
            try:
                sock.send_multipart([link.STOP], zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
        deadline = time.monotonic() + timeout_s
        for proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(1.0)
        for sock in self.links:
            sock.close(linger=0)
        self.ctx.term()
        shutil.rmtree(self._dir, ignore_errors=True)
