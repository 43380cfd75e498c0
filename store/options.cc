/*
 * options.cc — RocksDB options that the C API does not reach.
 *
 * RocksDB's C API wraps its C++ Options as `struct rocksdb_options_t {
 * Options rep; }` (db/c.cc, unchanged since the C API began). Declaring
 * the same struct here lets the store set the few options that c.h does
 * not expose, on a rocksdb_options_t made by rocksdb_options_create().
 * This is the only C++ in berth; it needs the RocksDB the store links.
 *
 * INSERT HINTS
 *   A memtable is a skip list. An insert that lands next to the previous
 *   one is cheap; any other costs a search from the top, a dozen or more
 *   key comparisons that miss the cache. Rows keyed by sequence see three
 *   streams at once: new rows at the end, claims and deletions near the
 *   front, and a delete or overwrite is never "next to the previous
 *   insert" (the older version of the key sits in between). With
 *   memtable_insert_with_hint_prefix_extractor, RocksDB keeps one
 *   insertion point per key prefix and repairs it only as far up as it
 *   must: each stream walks forward from where it last wrote. See
 *   BENCHMARKS.md for what it saves.
 */
#include <rocksdb/options.h>
#include <rocksdb/slice_transform.h>

#include "store/options.h"

struct rocksdb_options_t {
    rocksdb::Options rep;
};

extern "C" void store_options_insert_hints(rocksdb_options_t *o, size_t prefix_len)
{
    o->rep.memtable_insert_with_hint_prefix_extractor.reset(
        rocksdb::NewFixedPrefixTransform(prefix_len));
}
