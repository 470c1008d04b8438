"""Which scheduler nodes own which jobs: rendezvous (highest random weight) hashing.

Pure code, no I/O. Every node computes the same answer from the same member
list, on any platform and in any process:

- ``job_hash(job_id)`` and ``node_hash(node_id)`` are 64-bit BLAKE2b digests
  (with different personalisation), never Python's salted ``hash()``;
- ``score(node, job)`` is the splitmix64 finaliser of ``job_hash ^ node_hash``.
  The finaliser is a bijection on 64-bit integers, so two distinct node
  hashes never give one job the same score; ties (two node ids with the same
  64-bit hash) are broken by node id all the same;
- a job's owners are the ``replicas`` nodes with the highest scores, highest
  first. Its *rank* for a node is how many nodes come before it (0 = first
  owner); the node owns the job when its rank is below ``replicas``.

When a node joins or leaves, only the jobs whose owner set includes that node
move (about ``replicas / N`` of them); all other jobs keep their owners.

Reconciling a whole job set on every membership change is the hot path, so
``Ownership.ranks`` / ``owned_mask`` / ``owned`` evaluate many jobs at once
with SIMD-within-a-register on Python integers: each 64-bit job hash sits in
its own 128-bit lane of one big integer, and the mixing steps (xor, shift,
multiply by a 64-bit constant, mask) then run lane by lane inside CPython's
big-integer C code. A product of two 64-bit values fits in 128 bits, so no
lane spills into its neighbour; shifted-in bits from the next lane land above
bit 64 and are masked away. Jobs are processed in chunks so one call never
holds the interpreter for long and the working set stays in cache.
The scalar methods (``owners``, ``rank_of``, ``owns``) are the reference the
bulk path is tested against.

Callers should compute ``job_hash`` once, when a job is loaded, and keep it
next to the job: hashing costs about a microsecond, mixing far less.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Iterable, Sequence
from itertools import compress

_MASK64 = (1 << 64) - 1
_C1 = 0xBF58476D1CE4E5B9
_C2 = 0x94D049BB133111EB
_JOB_PERSON = b"cronman-job"
_NODE_PERSON = b"cronman-node"

#: Jobs evaluated per big-integer pass (64 KiB integers: fast and cache-friendly).
CHUNK = 4096
_LANE_BYTES = 16
# array('Q') is native-endian; the lane arithmetic reads and writes little-endian.
_BIG_ENDIAN = sys.byteorder == "big"


def _blake64(text: str, person: bytes) -> int:
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8, person=person).digest()
    return int.from_bytes(digest, "little")


def job_hash(job_id: str) -> int:
    """The stable 64-bit hash of a job id (compute once per job and keep it)."""
    return _blake64(job_id, _JOB_PERSON)


def node_hash(node_id: str) -> int:
    """The stable 64-bit hash of a node id."""
    return _blake64(node_id, _NODE_PERSON)


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * _C1) & _MASK64
    z = ((z ^ (z >> 27)) * _C2) & _MASK64
    return z ^ (z >> 31)


def score(node_h: int, job_h: int) -> int:
    """The rendezvous weight of a node (by hash) for a job (by hash)."""
    return _mix(job_h ^ node_h)


def _job_h(job: str | int) -> int:
    if isinstance(job, str):
        return job_hash(job)
    if not 0 <= job <= _MASK64:
        raise ValueError("a job hash is an unsigned 64-bit integer")
    return job


def owners(job_id: str, nodes: Sequence[str], replicas: int) -> list[str]:
    """The ``replicas`` nodes owning ``job_id``, first owner first.

    Duplicate node ids count once; with fewer nodes than replicas every node
    is an owner.
    """
    if replicas < 1:
        raise ValueError("replicas must be >= 1")
    jh = job_hash(job_id)
    ranked = sorted(set(nodes), key=lambda n: (-score(node_hash(n), jh), n))
    return ranked[:replicas]


class Ownership:
    """One node's view of ownership for a fixed member list.

    ``self_id`` always counts as a member, even when absent from
    ``node_ids`` (a node knows it is alive before its first heartbeat shows up
    in the membership). Build a new instance whenever the membership changes;
    instances are immutable and cheap to make (one hash per node).

    Every job argument is a job id (``str``) or its precomputed ``job_hash``
    (``int``).
    """

    __slots__ = ("nodes", "self_id", "replicas", "_hashes", "_self_h", "_others", "_lanes")

    def __init__(self, node_ids: Iterable[str], self_id: str, replicas: int) -> None:
        if replicas < 1:
            raise ValueError("replicas must be >= 1")
        ids = sorted(set(node_ids) | {self_id})
        self.nodes: tuple[str, ...] = tuple(ids)
        self.self_id = self_id
        self.replicas = replicas
        self._hashes = {n: node_hash(n) for n in ids}
        self._self_h = self._hashes[self_id]
        # (hash, wins a tie against self): ties go to the smaller node id.
        self._others = tuple((self._hashes[n], n < self_id) for n in ids if n != self_id)
        self._lanes: dict[int, _Lanes] = {}

    def __repr__(self) -> str:
        return (
            f"Ownership(nodes={list(self.nodes)!r}, self_id={self.self_id!r}, "
            f"replicas={self.replicas})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ownership):
            return NotImplemented
        return (self.nodes, self.self_id, self.replicas) == (
            other.nodes,
            other.self_id,
            other.replicas,
        )

    def __hash__(self) -> int:
        return hash((self.nodes, self.self_id, self.replicas))

    @property
    def owns_everything(self) -> bool:
        """True when there are no more nodes than replicas."""
        return len(self.nodes) <= self.replicas

    # -- one job ---------------------------------------------------------

    def owners(self, job: str | int) -> list[str]:
        """The job's owners among the members, first owner first."""
        jh = _job_h(job)
        ranked = sorted(self.nodes, key=lambda n: (-score(self._hashes[n], jh), n))
        return ranked[: self.replicas]

    def rank_of(self, job: str | int) -> int | None:
        """This node's place among the job's owners (0 = first), or None.

        A scheduler may use it to stagger claims: the first owner tries the
        lock at once, the second a few milliseconds later, so the loser's
        round trip is usually saved. Correctness never depends on it.
        """
        jh = _job_h(job)
        mine = _mix(jh ^ self._self_h)
        rank = 0
        for oh, wins_tie in self._others:
            theirs = _mix(jh ^ oh)
            if theirs > mine or (wins_tie and theirs == mine):
                rank += 1
                if rank >= self.replicas:
                    return None
        return rank

    def owns(self, job: str | int) -> bool:
        """Whether this node is one of the job's owners."""
        return self.rank_of(job) is not None

    # -- many jobs -------------------------------------------------------

    def ranks(self, job_hashes: Sequence[int]) -> array[int]:
        """This node's rank for each job hash (``array('Q')``, same order).

        A rank of ``replicas`` or more means "not an owner".
        """
        out = array("Q")
        for start in range(0, len(job_hashes), CHUNK):
            chunk = job_hashes[start : start + CHUNK]
            counts = self._count_chunk(chunk)
            lanes = array("Q")
            lanes.frombytes(counts.to_bytes(len(chunk) * _LANE_BYTES, "little"))
            if _BIG_ENDIAN:
                lanes.byteswap()
            out.extend(lanes[0::2])
        return out

    def owned_mask(self, job_hashes: Sequence[int]) -> bytes:
        """One byte per job hash: 1 where this node owns the job, else 0."""
        if self.owns_everything:
            return b"\x01" * len(job_hashes)
        parts = []
        limit = self.replicas - 1
        for start in range(0, len(job_hashes), CHUNK):
            chunk = job_hashes[start : start + CHUNK]
            lanes = self._lanes_for(len(chunk))
            counts = self._count_chunk(chunk)
            # Lane bit 64 of (R - 1 + 2**64 - count) is set iff count <= R - 1.
            owned = (((lanes.rep * limit) + lanes.high - counts) >> 64) & lanes.rep
            parts.append(owned.to_bytes(len(chunk) * _LANE_BYTES, "little")[0::_LANE_BYTES])
        return b"".join(parts)

    def owned(self, job_ids: Sequence[str], job_hashes: Sequence[int] | None = None) -> list[str]:
        """The subset of ``job_ids`` this node owns, in their order.

        Pass the precomputed ``job_hashes`` (same order) when you have them.
        """
        if job_hashes is None:
            job_hashes = array("Q", [job_hash(j) for j in job_ids])
        elif len(job_hashes) != len(job_ids):
            raise ValueError("job_ids and job_hashes differ in length")
        return list(compress(job_ids, self.owned_mask(job_hashes)))

    def _lanes_for(self, n: int) -> _Lanes:
        lanes = self._lanes.get(n)
        if lanes is None:
            lanes = _Lanes(n, self._self_h, self._others)
            if n == CHUNK or len(self._lanes) < 4:
                self._lanes[n] = lanes
        return lanes

    def _count_chunk(self, chunk: Sequence[int]) -> int:
        """Per lane: how many members rank before this node for that job."""
        n = len(chunk)
        lanes = self._lanes_for(n)
        packed = array("Q", bytes(n * _LANE_BYTES))
        packed[0::2] = (
            chunk if isinstance(chunk, array) and chunk.typecode == "Q" else array("Q", chunk)
        )
        if _BIG_ENDIAN:
            packed.byteswap()
        x = int.from_bytes(packed, "little")
        mask = lanes.mask
        mine = _mix_lanes(x ^ lanes.self_pattern, mask)
        count = 0
        for pattern, offset in lanes.others:
            theirs = _mix_lanes(x ^ pattern, mask)
            # Lane bit 64 of (theirs + offset - mine) is set iff they rank first.
            count += ((theirs + offset - mine) >> 64) & lanes.rep
        return count


class _Lanes:
    """Per-chunk-size constants of the lane arithmetic."""

    __slots__ = ("rep", "mask", "high", "self_pattern", "others")

    def __init__(self, n: int, self_h: int, others: Sequence[tuple[int, bool]]) -> None:
        self.rep = int.from_bytes((b"\x01" + bytes(_LANE_BYTES - 1)) * n, "little")
        self.mask = self.rep * _MASK64
        self.high = self.rep << 64
        self.self_pattern = self.rep * self_h
        # Winning ties: theirs >= mine, i.e. offset 2**64; else theirs > mine, 2**64 - 1.
        self.others = [
            (self.rep * oh, self.high if wins_tie else self.high - self.rep)
            for oh, wins_tie in others
        ]


def _mix_lanes(z: int, mask: int) -> int:
    """``_mix`` applied to every 128-bit lane of ``z`` (values below 2**64)."""
    z ^= (z >> 30) & mask
    z = (z * _C1) & mask
    z ^= (z >> 27) & mask
    z = (z * _C2) & mask
    return z ^ ((z >> 31) & mask)
