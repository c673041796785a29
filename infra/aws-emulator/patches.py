"""The moto patches serve.py installs (moto 5.2.5): item-level rollback for
TransactWriteItems, partition-scoped Query, and read metering of Query and
Scan (what DynamoDB bills them for). Each checks the source of the moto
method it relies on and refuses to start on any other.
"""

import copy
import functools
import hashlib
import inspect
import sys
import threading

from collections import defaultdict
from io import BytesIO
from urllib.parse import parse_qs

from faults import Faults, TransactTokens, fault_response

PINNED_MOTO_VERSION = "5.2.5"
# sha256 of inspect.getsource(moto.dynamodb.models.DynamoDBBackend.transact_write_items)
# in moto 5.2.5. The patch relies on that method doing exactly this:
#   - back up each touched table with `copy.deepcopy(self.tables[name])`, using the
#     module-level name `copy` of moto.dynamodb.models
#   - write through self.put_item / self.update_item / self.delete_item, which
#     keep items in Table.items ({hash: Item} or {hash: {range: Item}}) and add
#     stream records to Table.stream_shard.items (a list)
#   - on failure put the backups back (`self.tables[name] = backup`) and raise.
TX_SOURCE_SHA256 = "81db2cb7d94e39c90b3a2077e1f4bb41a449c558ef9b1b1e2910fdaa39978ad4"

# sha256 of inspect.getsource(moto.dynamodb.models.table.Table.query) and of
# Table.all_items in moto 5.2.5. The query patch relies on: Table.items being
# {hash: {range: Item}} (or {hash: Item} without a range key); query() taking
# the table's partition value as `hash_key` and, without an index, keeping the
# items of self.all_items() whose hash_key equals it, then sorting them by
# range key itself; all_items() returning every item sorted by key.
QUERY_SOURCE_SHA256 = "002b4d00be6df07cf37f6cbe0132e5eb89455ae12a8e79b23db3fb492450f21e"
ALL_ITEMS_SOURCE_SHA256 = "c80d2ee3c896acd0cab6ca35aaeae3ab3fb65858933f8a3403d4e027c240f31d"

EXIT_BAD_MOTO = 3


def fail(msg, status=EXIT_BAD_MOTO):
    print(f"aws-emulator: {msg}", file=sys.stderr, flush=True)
    sys.exit(status)


def check_moto_version():
    try:
        from importlib.metadata import version

        import moto  # noqa: F401
    except ImportError as e:
        fail(f"cannot import moto ({e}). Run start.sh, which installs moto[server]=="
             f"{PINNED_MOTO_VERSION} into its own venv.")
    installed = version("moto")
    if installed != PINNED_MOTO_VERSION:
        fail(f"moto {installed} is installed, but this launcher is pinned to moto "
             f"{PINNED_MOTO_VERSION}: its TransactWriteItems patch depends on moto "
             f"internals. Use the venv that start.sh creates, or re-check the patch "
             f"against the new version and update PINNED_MOTO_VERSION / TX_SOURCE_SHA256.")
    return installed


# ---------------------------------------------------------------------------
# Patch: item-level rollback for TransactWriteItems
# ---------------------------------------------------------------------------

def install_item_level_rollback(lock):
    """Replace moto's whole-table backup in TransactWriteItems with an item-level one.

    moto's transact_write_items backs up every table the transaction names with
    copy.deepcopy(table) and, if any part fails, puts the copies back. The copy
    costs O(table size) per transaction. This wrapper instead, before calling
    moto's method:
      - deep-copies just the items the transaction names (or records that
        they are absent);
      - records the length of each touched table's stream shard;
      - makes moto's own deepcopy of a Table return the table itself while the
        call runs, so moto's backup is free and its restore
        (`self.tables[name] = backup`) assigns the same object.
    If moto's method raises (TransactionCanceledException, validation errors,
    anything), the named items and stream lengths are put back exactly, then
    the exception is re-raised. On success nothing extra happens. Cost: O(items
    in the transaction), independent of table size.

    One difference from a whole-table copy: an item restored after a rolled-back
    Delete moves to the end of moto's internal dict. Scan and Query sort by key,
    so this shows only in the order of GSI results whose index keys tie, which
    DynamoDB leaves unspecified.

    This also rolls back two cases moto's own backup misses: a table given by
    ARN instead of name, and an entry with two operations, which moto rejects
    after the earlier entries were already written.
    """
    import moto.dynamodb.models as ddb_models
    from moto.dynamodb.exceptions import ResourceNotFoundException
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    if getattr(DynamoDBBackend.transact_write_items, "_item_level_rollback", False):
        return  # already installed
    try:
        src = inspect.getsource(DynamoDBBackend.transact_write_items)
    except (OSError, TypeError) as e:
        fail(f"cannot read moto's transact_write_items source to verify the patch ({e})")
    digest = hashlib.sha256(src.encode()).hexdigest()
    if digest != TX_SOURCE_SHA256 or ddb_models.copy is not copy:
        fail("moto.dynamodb.models.DynamoDBBackend.transact_write_items is not the code "
             f"the patch was written for (sha256 {digest}); refusing to start.")

    active = threading.local()  # .on is True while moto's transact_write_items runs under us

    class _CopyModule:
        """Stands in for `copy` inside moto.dynamodb.models, and nowhere else."""

        def __getattr__(self, name):
            return getattr(copy, name)

        @staticmethod
        def deepcopy(x, memo=None):
            if isinstance(x, Table) and getattr(active, "on", False):
                return x  # moto's whole-table backup: skipped, see above
            return copy.deepcopy(x, memo)

    def snapshot(backend, transact_items):
        """Prior state of everything the transaction may write, or None if a target
        key cannot be worked out (then moto's own whole-table backup is used)."""
        targets, streams, seen = [], {}, set()
        try:
            for entry in transact_items:
                for op_type, op in entry.items():  # normally one op per entry
                    if op_type not in ("Put", "Update", "Delete", "ConditionCheck"):
                        continue  # moto rejects it without writing
                    try:
                        table = backend.get_table(op["TableName"])
                    except ResourceNotFoundException:
                        continue  # moto reports ResourceNotFound; nothing is written
                    src = op["Item"] if op_type == "Put" else op["Key"]
                    # Same key derivation as moto's put_item/update_item/delete_item.
                    h = DynamoType(src[table.hash_key_attr])
                    r = DynamoType(src[table.range_key_attr]) if table.range_key_attr else None
                    if (id(table), h, r) in seen:
                        continue  # moto cancels such a transaction; first state is the real one
                    seen.add((id(table), h, r))
                    # .get / `in`, not [], since Table.items is a defaultdict.
                    if r is None:
                        partition_existed, prior = True, table.items.get(h)
                    else:
                        partition_existed = h in table.items
                        prior = table.items[h].get(r) if partition_existed else None
                    targets.append((table, h, r, partition_existed, copy.deepcopy(prior)))
                    shard = table.stream_shard
                    if shard is not None:
                        streams.setdefault(id(shard), (shard, len(shard.items)))
        except Exception:
            return None
        return targets, streams

    def restore(snap):
        targets, streams = snap
        for table, h, r, partition_existed, prior in targets:
            if r is None:
                if prior is None:
                    table.items.pop(h, None)
                else:
                    table.items[h] = prior
            elif prior is not None:
                table.items[h][r] = prior
            elif h in table.items:
                table.items[h].pop(r, None)
                if not partition_existed and not table.items[h]:
                    del table.items[h]  # moto's lookups create empty partitions
        for shard, length in streams.values():
            del shard.items[length:]  # records of the failed transaction

    original = DynamoDBBackend.transact_write_items

    @functools.wraps(original)
    def transact_write_items(self, transact_items):
        with lock:  # the request lock (re-entrant); also guards in-process callers
            snap = snapshot(self, transact_items)
            if snap is None:
                return original(self, transact_items)
            active.on = True
            try:
                return original(self, transact_items)
            except BaseException:
                restore(snap)
                raise
            finally:
                active.on = False

    transact_write_items._item_level_rollback = True
    ddb_models.copy = _CopyModule()
    DynamoDBBackend.transact_write_items = transact_write_items


# ---------------------------------------------------------------------------
# Patch: Query reads one partition
# ---------------------------------------------------------------------------

def install_partition_query():
    """Make a Query without an index read only the named partition.

    While moto's Table.query runs for a table's own key, Table.all_items() of
    that table returns the items of that partition only (sorted by range key,
    as all_items sorts), instead of every item of the table. query() filters
    what all_items() returns by hash key anyway, so its answer is unchanged;
    the cost becomes O(partition) as on DynamoDB instead of O(table log table).
    Queries on an index (index_name given) are left alone: they need the
    whole table.
    """
    from moto.dynamodb.models.table import Table

    if getattr(Table.query, "_partition_query", False):
        return  # already installed
    for fn, want in ((Table.query, QUERY_SOURCE_SHA256), (Table.all_items, ALL_ITEMS_SOURCE_SHA256)):
        try:
            digest = hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()
        except (OSError, TypeError) as e:
            fail(f"cannot read moto's Table.{fn.__name__} source to verify the query patch ({e})")
        if digest != want:
            fail(f"moto.dynamodb.models.table.Table.{fn.__name__} is not the code the query "
                 f"patch was written for (sha256 {digest}); refusing to start.")

    scoped = threading.local()  # .table, .partition while a partition query runs
    moto_query, moto_all_items = Table.query, Table.all_items

    @functools.wraps(moto_query)
    def query(self, hash_key, *args, **kwargs):
        index_name = kwargs.get("index_name", args[6] if len(args) > 6 else None)
        if index_name is not None or hash_key is None:
            return moto_query(self, hash_key, *args, **kwargs)
        scoped.table, scoped.partition = self, hash_key
        try:
            return moto_query(self, hash_key, *args, **kwargs)
        finally:
            scoped.table = scoped.partition = None

    @functools.wraps(moto_all_items)
    def all_items(self):
        if getattr(scoped, "table", None) is not self:
            return moto_all_items(self)
        part = self.items.get(scoped.partition)  # .get: never add an empty partition
        if part is None:
            return []
        if not self.range_key_attr:
            return [part]
        return sorted(part.values(), key=lambda x: x.range_key)

    query._partition_query = True
    Table.query, Table.all_items = query, all_items



# ---------------------------------------------------------------------------
# Read metering of Query and Scan
# ---------------------------------------------------------------------------

# sha256 of inspect.getsource(moto.dynamodb.models.table.Table.scan) in moto
# 5.2.5. The metering relies on Table.query and Table.scan calling
# `filter_expression.expr(item)` exactly once for every item the page read
# (after the Limit and 1 MB cut, before projection) when a filter is given.
SCAN_SOURCE_SHA256 = "5ef1ab21eef06a74d4d142aaf817f31c3147c39fd9aaaa5dd037cb62d64e4af3"


class ReadMeter:
    """What the Query or Scan running on this thread read: (table, partition
    or None for a Scan) and the size of each item, as DynamoDB bills reads
    (every item read, before the filter)."""

    def __init__(self):
        self._local = threading.local()

    def begin(self):
        self._local.items = []
        return self._local.items

    def end(self):
        items, self._local.items = getattr(self._local, "items", None), None
        return items

    def sink(self):
        return getattr(self._local, "items", None)


class _CountingFilter:
    """Stands in for a Query's or Scan's filter (or its absence): notes each
    item it is asked about, then answers as the real filter would."""

    def __init__(self, inner, sink, table, partition):
        self.inner, self.sink, self.table, self.partition = inner, sink, table, partition

    def expr(self, item):
        from dynamo import item_size

        self.sink.append(((self.table, self.partition), item_size(item)))
        return True if self.inner is None else self.inner.expr(item)


def install_read_metering(meter):
    """Wrap Table.query and Table.scan so that, while `meter` is active on
    the calling thread, every item they read is noted with its size."""
    from moto.dynamodb.models.table import Table

    if getattr(Table.scan, "_read_metering", False):
        return
    digest = hashlib.sha256(inspect.getsource(Table.scan).encode()).hexdigest()
    if digest != SCAN_SOURCE_SHA256:
        fail(f"moto.dynamodb.models.table.Table.scan is not the code the read metering was "
             f"written for (sha256 {digest}); refusing to start.")
    moto_query, moto_scan = Table.query, Table.scan

    def partition_id(value):
        if value is None:
            return None
        return f"{value.type}:{value.value!r}" if isinstance(value.value, bytes) else f"{value.type}:{value.value}"

    @functools.wraps(moto_query)
    def query(self, hash_key, *args, **kwargs):
        sink = meter.sink()
        if sink is None:
            return moto_query(self, hash_key, *args, **kwargs)
        args = list(args)
        counting = lambda f: _CountingFilter(f, sink, self.name, partition_id(hash_key))  # noqa: E731
        if len(args) > 8:  # filter_expression, positionally (as DynamoDBBackend.query passes it)
            args[8] = counting(args[8])
        else:
            kwargs["filter_expression"] = counting(kwargs.get("filter_expression"))
        return moto_query(self, hash_key, *args, **kwargs)

    @functools.wraps(moto_scan)
    def scan(self, *args, **kwargs):
        sink = meter.sink()
        if sink is None:
            return moto_scan(self, *args, **kwargs)
        args = list(args)
        counting = lambda f: _CountingFilter(f, sink, self.name, None)  # noqa: E731
        if len(args) > 3:
            args[3] = counting(args[3])
        else:
            kwargs["filter_expression"] = counting(kwargs.get("filter_expression"))
        return moto_scan(self, *args, **kwargs)

    query._partition_query = getattr(moto_query, "_partition_query", False)
    scan._read_metering = True
    Table.query, Table.scan = query, scan


# ---------------------------------------------------------------------------
# Condition expressions lexed once per distinct text
# ---------------------------------------------------------------------------

# sha256 of inspect.getsource of ConditionExpressionParser._lex_condition_expression
# and _lex_one_node in moto 5.2.5: the lexer reads only self.condition_expression
# and returns a deque of Node tuples whose `children` is an empty list that no
# later stage mutates (they build new nodes).
LEX_SOURCE_SHA256 = ("2970c571202abeb9d5c0400ff19df99488008500647d99f7f4bf0887b7608677",)
LEX_CACHE_MAX = 4096


def install_lexer_cache():
    """Lex each distinct condition expression once (moto lexes it with a
    dozen regular expressions every time: three times per item of a
    TransactWriteItems)."""
    from collections import deque

    from moto.dynamodb.comparisons import ConditionExpressionParser as P

    if getattr(P._lex_condition_expression, "_cached", False):
        return
    src = inspect.getsource(P._lex_condition_expression) + inspect.getsource(P._lex_one_node)
    digest = hashlib.sha256(src.encode()).hexdigest()
    if digest not in LEX_SOURCE_SHA256:
        fail(f"moto's ConditionExpressionParser lexer is not the code the lexer cache was written "
             f"for (sha256 {digest}); refusing to start.")
    moto_lex = P._lex_condition_expression
    cache = {}

    @functools.wraps(moto_lex)
    def lex(self):
        text = self.condition_expression
        nodes = cache.get(text)
        if nodes is None:
            nodes = tuple(moto_lex(self))  # raises for a bad expression: nothing cached
            if len(cache) >= LEX_CACHE_MAX:
                cache.clear()
            cache[text] = nodes
        return deque(nodes)

    lex._cached = True
    P._lex_condition_expression = lex


# sha256 of inspect.getsource of DynamoHandler.update_item and
# DynamoHandler.transact_write_items in moto 5.2.5: the only users of
# UpdateExpressionParser in moto/dynamodb/responses.py, and both only read the
# tree (find_clauses) to validate attribute names. The backend parses again
# for itself (and its validator rewrites that tree), so its parser stays moto's.
UPDATE_VALIDATION_SOURCE_SHA256 = "db3852acf20d28a67d3f61f5244a814d7166760aea50580158793e2addc1631e"


def install_update_parse_cache():
    """Parse each distinct update expression once for the handlers' validation."""
    import moto.dynamodb.responses as responses

    if getattr(responses.UpdateExpressionParser, "_cached", False):
        return
    h = responses.DynamoHandler
    src = inspect.getsource(h.update_item) + inspect.getsource(h.transact_write_items)
    digest = hashlib.sha256(src.encode()).hexdigest()
    if digest != UPDATE_VALIDATION_SOURCE_SHA256:
        fail(f"moto's DynamoHandler.update_item / transact_write_items are not the code the "
             f"update-expression cache was written for (sha256 {digest}); refusing to start.")
    moto_parser = responses.UpdateExpressionParser

    class ReadOnlyTrees:
        _cached = True
        cache = {}

        @classmethod
        def make(cls, expression):
            tree = cls.cache.get(expression)
            if tree is None:
                tree = moto_parser.make(expression)  # raises for a bad expression: nothing cached
                if len(cls.cache) >= LEX_CACHE_MAX:
                    cls.cache.clear()
                cls.cache[expression] = tree
            return tree

    responses.UpdateExpressionParser = ReadOnlyTrees
