"""DynamoDB Streams bounded as AWS bounds them, so a long run's emulator does
not grow without end (moto 5.2.5 keeps every shard iterator it ever handed
out, and every stream record of the run, in memory):

- shard iterators expire 15 minutes after they are handed out, as AWS's do
  ("a shard iterator expires 15 minutes after it is returned to the
  requester", DynamoDB Streams API reference, GetShardIterator). A reader
  that follows a stream gets a new iterator with every GetRecords, so only a
  few minutes of them are ever kept.
- stream records older than a retention are trimmed when one is asked for
  (`serve.py --stream-retention SECONDS`, or AWS_EMULATOR_STREAM_RETENTION_S;
  off by default). AWS keeps them 24 hours; a long campaign whose only reader
  follows the stream within seconds asks for minutes. Trimmed records are
  skipped by GetRecords, as if the iterator had been past them (AWS answers
  TrimmedDataAccessException for an iterator into trimmed data: a reader
  that lags by more than the retention must not be run with it).

Each patch checks the source of the moto code it relies on and refuses to
start on any other.
"""

import collections
import functools
import hashlib
import inspect
import time

from patches import fail

ITERATOR_TTL_S = 15 * 60

# sha256 of inspect.getsource(StreamShard.add) + inspect.getsource(StreamShard.get)
# in moto 5.2.5. The retention relies on: add() appending one StreamRecord to
# self.items (a list indexed by sequence number - starting_sequence_number)
# unless a Lambda event source mapping of moto's own consumes them (we create
# none); get(start, quantity) returning the to_json() of items[start - starting:
# ... + quantity].
SHARD_SOURCE_SHA256 = "02c85d49be43a6609636e5e9efe400be04ea1bd1fae9e18a9d4d7a7066e99ce2"


def shard_source_digest():
    from moto.dynamodb.models.table import StreamShard

    src = inspect.getsource(StreamShard.add) + inspect.getsource(StreamShard.get)
    return hashlib.sha256(src.encode()).hexdigest()


class ExpiringIterators(dict):
    """moto's `shard_iterators` map, forgetting entries `ttl_s` after they
    were added (in insertion order, so each purge is O(what it drops))."""

    def __init__(self, ttl_s=ITERATOR_TTL_S, clock=time.monotonic):
        super().__init__()
        self._ttl_s = ttl_s
        self._clock = clock
        self._born = collections.deque()

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        now = self._clock()
        self._born.append((now, key))
        while self._born and self._born[0][0] < now - self._ttl_s:
            _, old = self._born.popleft()
            if old != key:
                self.pop(old, None)


def install_iterator_expiry(ttl_s=ITERATOR_TTL_S):
    from moto.dynamodbstreams.models import DynamoDBStreamsBackend

    original = DynamoDBStreamsBackend.__init__
    if getattr(original, "_expiring", False):
        return

    @functools.wraps(original)
    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.shard_iterators = ExpiringIterators(ttl_s)

    init._expiring = True
    DynamoDBStreamsBackend.__init__ = init


def install_stream_retention(retention_s, clock=time.monotonic):
    """Trim stream records older than `retention_s` (see the module docs)."""
    from moto.dynamodb.models.table import StreamShard

    if getattr(StreamShard.add, "_retention", False):
        return
    digest = shard_source_digest()
    if digest != SHARD_SOURCE_SHA256:
        fail(f"moto's StreamShard.add/get are not the code the stream retention was written for "
             f"(sha256 {digest}); refusing to start.")
    original_add = StreamShard.add

    @functools.wraps(original_add)
    def add(self, old, new):
        before = len(self.items)
        original_add(self, old, new)
        born = self.__dict__.setdefault("_born", collections.deque())
        now = clock()
        if len(self.items) == before + 1:
            born.append((now, before, self.items[before]))
        while born and born[0][0] < now - retention_s:
            _, index, record = born.popleft()
            # A failed transaction's records are cut off the list (patches.py's
            # rollback) and their slots reused: trim only the record itself.
            if index < len(self.items) and self.items[index] is record:
                self.items[index] = None

    def get(self, start, quantity):
        start -= self.starting_sequence_number
        assert start >= 0
        out, items = [], self.items
        while start < len(items) and len(out) < quantity:
            if items[start] is not None:
                out.append(items[start].to_json())
            start += 1
        return out

    add._retention = True
    StreamShard.add = add
    StreamShard.get = get
