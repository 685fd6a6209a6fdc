// On-disk cache of compiled blobs, so that a second start compiles nothing.
//
// Layout: <dir>/<model-hash>/<blob-name>-<config-hash>.blob. The model hash covers the model file's
// header and size; the config hash covers the compiler version and the blob's compile options.
//
// Faults the cache survives (tests/npuw/test_cache_faults.cpp proves each):
// - Every entry is published atomically (publish_file): written to a temporary file in the same
//   folder (<entry>.tmp.<host>.<pid>.<n>) and renamed into place (not fsync'd: see publish_file). A
//   process killed mid-write, or a disk that fills, leaves at most a temporary file, never half an
//   entry under a valid name; temporary files of processes that are gone are swept at the next start.
//   Two processes compiling the same model write their own temporary files; the last rename wins,
//   and both entries are whole.
// - Nothing read from the cache is trusted before it is verified: a blob carries xxh64 checksums of
//   its headers, of each section and of the whole file (blob_elf.cpp), checked when it is loaded; a
//   packed weight carries an xxh3 of its header and bytes (weights_bank.cpp). A damaged entry is
//   reported on stderr once, removed and rebuilt by the caller.
// - A cache that cannot be written (read-only, missing and not creatable, disk full) is reported
//   once per run and skipped: the run compiles in memory and goes on.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace npullm::npuw {

class BlobCache {
 public:
  // An empty dir disables the cache. Sweeps the model's folder of temporary files left by
  // processes that died while writing.
  BlobCache(std::string dir, uint64_t model_hash);
  bool enabled() const { return !dir_.empty(); }
  std::string model_dir() const;  // <dir>/<model-hash>: this model's entries
  std::string path_for(const std::string& name, const std::string& config) const;
  // The entry's bytes, unverified: the caller parses them as a blob, which checks every byte.
  std::optional<std::vector<uint8_t>> load(const std::string& name, const std::string& config) const;
  // Best effort: a cache that cannot be written is reported once (warning on stderr) and skipped.
  void store(const std::string& name, const std::string& config, const std::vector<uint8_t>& bytes) const;
  void remove(const std::string& name, const std::string& config) const;

  static std::string default_dir();  // $NPULLM_CACHE_DIR, else $XDG_CACHE_HOME/npullm, else ~/.cache/npullm

 private:
  std::string dir_;
  uint64_t model_hash_;
  mutable std::atomic<bool> warned_{false};
};

// xxh3-64 of a byte range (the model file is hashed through its mapping).
uint64_t hash_bytes(const void* data, size_t size);

// Publishes `parts` (concatenated) as the file `path`, atomically: a fresh temporary file in the same
// folder (the folder is created if missing), written, then renamed over `path`. Not synced: a crash
// may leave a renamed entry short or zeroed, which verification at load catches (then it is rebuilt).
// `before_rename`, when given, sees the temporary file's descriptor (open for reading and writing)
// once its bytes are written, e.g. to map it. Returns "" on success, else what
// failed (the temporary file is removed; `path` is untouched).
std::string publish_file(const std::string& path, std::span<const std::span<const uint8_t>> parts,
                         const std::function<void(int fd)>& before_rename = {});

// Removes temporary files (see publish_file) in `folder` whose writer is gone: made on this host by
// a process that no longer runs, or older than a day. Returns how many were removed.
int sweep_temp_files(const std::string& folder);

}  // namespace npullm::npuw
