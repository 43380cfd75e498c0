/*
 * options.h — RocksDB options beyond the C API (store/options.cc).
 * Called by store.c only, before the options are used to open.
 */
#ifndef BERTH_STORE_OPTIONS_H
#define BERTH_STORE_OPTIONS_H

#include <stddef.h>

#include <rocksdb/c.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Memtable inserts keep one insertion point per key prefix of prefix_len
 * bytes (keys shorter than that insert as usual). */
void store_options_insert_hints(rocksdb_options_t *o, size_t prefix_len);
/* The store's WAL files are written over zeros kept ahead of their end, so
 * that a sync need not write the inode (options.cc). */
void store_options_zeroed_logs(rocksdb_options_t *o);
/* RocksDB's own messages, warnings and worse, go to stderr ("rocksdb: "),
 * not to a LOG file in the data directory (options.cc). */
void store_options_log_to_stderr(rocksdb_options_t *o);

#ifdef __cplusplus
}
#endif

#endif
