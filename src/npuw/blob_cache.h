// On-disk cache of compiled blobs, so that a second start compiles nothing.
//
// Layout: <dir>/<model-hash>/<blob-name>-<config-hash>.blob. The model hash covers the whole model
// file's bytes; the config hash covers the compiler version and the blob's compile options. Entries
// are written to a temporary file and renamed into place, so a crash never leaves half a blob under
// a valid name; a corrupt entry found on load is reported, removed and rebuilt by the caller.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace npullm::npuw {

class BlobCache {
 public:
  // An empty dir disables the cache.
  BlobCache(std::string dir, uint64_t model_hash);
  bool enabled() const { return !dir_.empty(); }
  std::string model_dir() const;  // <dir>/<model-hash>: this model's entries
  std::string path_for(const std::string& name, const std::string& config) const;
  std::optional<std::vector<uint8_t>> load(const std::string& name, const std::string& config) const;
  // Best effort: a cache that cannot be written is reported (warning on stderr) and skipped.
  void store(const std::string& name, const std::string& config, const std::vector<uint8_t>& bytes) const;
  void remove(const std::string& name, const std::string& config) const;

  static std::string default_dir();  // $NPULLM_CACHE_DIR, else $XDG_CACHE_HOME/npullm, else ~/.cache/npullm

 private:
  std::string dir_;
  uint64_t model_hash_;
};

// xxh3-64 of a byte range (the model file is hashed through its mapping).
uint64_t hash_bytes(const void* data, size_t size);

}  // namespace npullm::npuw
