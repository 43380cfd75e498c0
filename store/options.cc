/*
 * options.cc — what berth sets on RocksDB that its C API does not reach.
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
 *   insertion point per key prefix and repairs it only as high as it
 *   must: each stream walks forward from where it last wrote.
 *
 * WAL FILES WRITTEN OVER ZEROS
 *   Every acknowledged write waits for an fdatasync of the WAL. When the
 *   write grew the file, the sync must also write the inode (its size, and
 *   the extent that turned from allocated to written); when it only
 *   overwrote bytes already in the file, the sync writes the data alone.
 *   On this project's reference disk that is ~140 us against ~95 us (see
 *   BENCHMARKS.md). So, as PostgreSQL does for its WAL segments, the store
 *   writes zeros ahead of the log: a file system wrapper gives every
 *   `*.log` file RocksDB creates a companion descriptor, and before an
 *   append would pass the zeroed end it writes the next chunk of zeros
 *   there and starts its writeback. Safety rests on these facts:
 *   - zeros are written only at or past the end of what RocksDB wrote,
 *     under the same lock as RocksDB's appends to that file;
 *   - RocksDB's log reader skips zeros: the rest of a block after a
 *     header of zeros (record type 0 is "preallocated") and whole blocks
 *     of them. The zeros end on a block boundary, so a log ending in them
 *     reads to a clean end, and recovery goes on to the logs after it (an
 *     older log stays open, zeros and all, until RocksDB lets it go);
 *   - RocksDB trims a log to its written size when it closes it, and
 *     writes out the last log's buffer before it starts a new one: a
 *     record cut short can only end the newest log, as without zeros.
 *   A failed zero write (a full disk) takes that round's zeros back and
 *   stops the zeroing for that file: appends then grow it as before.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include <memory>
#include <mutex>
#include <string>

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
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

namespace
{

using rocksdb::DataVerificationInfo;
using rocksdb::FileOptions;
using rocksdb::FSWritableFile;
using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

constexpr uint64_t zero_chunk = 1u << 20; /* bytes of zeros written at a time */
/* RocksDB's log block (log_format.h kBlockSize). Zeros end on a block
 * boundary: a log ending 1 to 6 bytes into a block reads as a record
 * header cut short ("dropping 3 bytes; Corruption: truncated header"),
 * and point-in-time recovery then goes on to the later logs only after
 * checking that their sequence numbers leave no hole. Whole blocks of
 * zeros read as padding (record type 0) and end cleanly. */
constexpr uint64_t log_block = 32768;

/* A WAL file: RocksDB's own, plus zeros kept ahead of its end. */
class ZeroedLog : public rocksdb::FSWritableFileOwnerWrapper
{
  public:
    ZeroedLog(std::unique_ptr<FSWritableFile> &&f, int fd)
        : FSWritableFileOwnerWrapper(std::move(f)), fd_(fd)
    {
    }
    ~ZeroedLog() override
    {
        if (fd_ >= 0)
            ::close(fd_);
    }

    IOStatus Append(const Slice &data, const IOOptions &o, IODebugContext *dbg) override
    {
        return Appended(data.size(), [&] { return target()->Append(data, o, dbg); });
    }
    IOStatus Append(const Slice &data, const IOOptions &o, const DataVerificationInfo &v,
                    IODebugContext *dbg) override
    {
        return Appended(data.size(), [&] { return target()->Append(data, o, v, dbg); });
    }
    /* Direct-I/O writes; a log written so is left alone. */
    IOStatus PositionedAppend(const Slice &data, uint64_t offset, const IOOptions &o,
                              IODebugContext *dbg) override
    {
        std::lock_guard<std::mutex> g(mu_);
        StopZeroing();
        return target()->PositionedAppend(data, offset, o, dbg);
    }
    IOStatus PositionedAppend(const Slice &data, uint64_t offset, const IOOptions &o,
                              const DataVerificationInfo &v, IODebugContext *dbg) override
    {
        std::lock_guard<std::mutex> g(mu_);
        StopZeroing();
        return target()->PositionedAppend(data, offset, o, v, dbg);
    }
    IOStatus Truncate(uint64_t size, const IOOptions &o, IODebugContext *dbg) override
    {
        std::lock_guard<std::mutex> g(mu_);
        StopZeroing();
        return target()->Truncate(size, o, dbg);
    }
    IOStatus Close(const IOOptions &o, IODebugContext *dbg) override
    {
        std::lock_guard<std::mutex> g(mu_);
        StopZeroing();
        return target()->Close(o, dbg);
    }

  private:
    /* An append of len bytes at written_, over zeros. A failed one may
     * have written part of its bytes: where the file ends is then not
     * known, so the zeroing stops. */
    template <typename F> IOStatus Appended(size_t len, F &&append)
    {
        std::lock_guard<std::mutex> g(mu_);
        ZeroAhead(len);
        IOStatus s = append();
        if (s.ok())
            written_ += len;
        else
            StopZeroing();
        return s;
    }
    /* Caller holds mu_. Makes [written_, written_ + len) lie inside the
     * zeroed part, with at least half a chunk to spare. */
    void ZeroAhead(size_t len)
    {
        if (fd_ < 0 || written_ + len + zero_chunk / 2 <= zeroed_)
            return;
        static char zeros[zero_chunk]; /* never written: stays zero */
        uint64_t from = zeroed_ > written_ ? zeroed_ : written_;
        uint64_t upto = (written_ + len + zero_chunk + log_block - 1) / log_block * log_block;
        for (uint64_t at = from; at < upto;) {
            uint64_t n = upto - at < zero_chunk ? upto - at : zero_chunk;
            ssize_t w = ::pwrite(fd_, zeros, n, static_cast<off_t>(at));
            if (w <= 0 || static_cast<uint64_t>(w) != n) {
                /* A full disk, most likely. Take back this round's zeros,
                 * so that the file ends where it ended before (on a block
                 * boundary, or where RocksDB's own bytes end). */
                if (::ftruncate(fd_, static_cast<off_t>(from)) == 0)
                    zeroed_ = from;
                StopZeroing();
                return;
            }
            at += n;
            zeroed_ = at;
        }
        /* Start the zeros' writeback now, so that the syncs to come find
         * them clean. */
        ::sync_file_range(fd_, static_cast<off_t>(from), static_cast<off_t>(upto - from),
                          SYNC_FILE_RANGE_WRITE);
    }
    void StopZeroing()
    {
        if (fd_ >= 0)
            ::close(fd_);
        fd_ = -1;
    }

    std::mutex mu_;
    int fd_;               /* our descriptor of the file; -1: not zeroing */
    uint64_t written_ = 0; /* bytes RocksDB appended */
    uint64_t zeroed_ = 0;  /* zeros reach this offset */
};

bool IsLog(const std::string &fname)
{
    return fname.size() > 4 && fname.compare(fname.size() - 4, 4, ".log") == 0;
}

class ZeroedLogFileSystem : public rocksdb::FileSystemWrapper
{
  public:
    explicit ZeroedLogFileSystem(const std::shared_ptr<rocksdb::FileSystem> &t)
        : FileSystemWrapper(t)
    {
    }
    const char *Name() const override
    {
        return "BerthZeroedLogFileSystem";
    }

    IOStatus NewWritableFile(const std::string &fname, const FileOptions &o,
                             std::unique_ptr<FSWritableFile> *r, IODebugContext *dbg) override
    {
        IOStatus s = target()->NewWritableFile(fname, o, r, dbg);
        if (!s.ok() || !IsLog(fname) || o.use_direct_writes || o.use_mmap_writes)
            return s;
        int fd = ::open(fname.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd >= 0)
            r->reset(new ZeroedLog(std::move(*r), fd));
        return s;
    }
};

/* RocksDB's info log, to stderr. Its default, a LOG file beside the data,
 * shares the data's disk: once a write to it fails (a full disk), the
 * next message is written through a file writer that has seen an error,
 * which Debian's build of RocksDB (assertions on) answers with abort().
 * stderr is where berthd's operator reads everything else. */
class StderrLogger : public rocksdb::Logger
{
  public:
    explicit StderrLogger(rocksdb::InfoLogLevel level) : Logger(level)
    {
    }
    using rocksdb::Logger::Logv;
    void Logv(const char *format, va_list ap) override
    {
        char line[1024];
        int n = vsnprintf(line, sizeof(line), format, ap);
        if (n < 0)
            return;
        size_t len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == ' '))
            len--;
        std::fprintf(stderr, "rocksdb: %.*s\n", (int)len, line);
    }
};

} // namespace

extern "C" void store_options_log_to_stderr(rocksdb_options_t *o)
{
    o->rep.info_log = std::make_shared<StderrLogger>(rocksdb::InfoLogLevel::WARN_LEVEL);
    o->rep.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
}

extern "C" void store_options_zeroed_logs(rocksdb_options_t *o)
{
    /* One for the process: an Env must outlive every store that uses it. */
    static const std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(
        std::make_shared<ZeroedLogFileSystem>(rocksdb::FileSystem::Default()));
    o->rep.env = env.get();
}
