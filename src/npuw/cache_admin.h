// What the on-disk cache holds and keeping it bounded: `npullm cache list | prune | clear`, and the
// size bound every runtime enforces when it starts (RuntimeConfig::cache_max_bytes).
//
// The cache folder holds one folder per model (<dir>/<model-hash>/: blobs, and panels16/ with the
// packed weights, which take about as much space as the model itself). A runtime writes the model's
// path into <model-hash>/model.txt and touches that file at every start: its time is the model's
// last use. Pruning removes whole model folders, least recently used first, never the one a
// runtime is using; a concurrent runtime that loses its folder recompiles (entries are only ever
// renamed into place, so nobody reads half a file).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace npullm::npuw {

struct CachedModel {
  std::string key;            // the folder name (hash of the GGUF header)
  std::string model_path;     // from model.txt ("?" for a folder written before it existed)
  int64_t blobs = 0, packed = 0;
  uint64_t blob_bytes = 0, packed_bytes = 0, other_bytes = 0;
  std::filesystem::file_time_type last_used{};
  uint64_t bytes() const { return blob_bytes + packed_bytes + other_bytes; }
};

// Every model folder of the cache, least recently used first.
std::vector<CachedModel> list_cache(const std::string& dir);

struct PruneReport {
  int64_t removed = 0;        // model folders removed
  uint64_t freed_bytes = 0;
  uint64_t kept_bytes = 0;    // what the cache holds afterwards
};

// Removes model folders unused for more than `older_than_days` (< 0: no age rule), then, least
// recently used first, until the cache holds at most `max_bytes` (0: no size rule). The folder
// named `keep` (the caller's own model) is never removed.
PruneReport prune_cache(const std::string& dir, uint64_t max_bytes, double older_than_days, const std::string& keep = "");

// The default bound: a tenth of the size of the filesystem the cache lives on, at most 64 GiB
// (20 GiB when that size cannot be read).
uint64_t default_cache_max_bytes(const std::string& dir);

// "10G", "512M", "1.5GiB", "2000000" -> bytes; an npullm::Error naming anything else.
uint64_t parse_size(const std::string& text);
std::string format_size(uint64_t bytes);

// Writes <model_dir>/model.txt (the model's path) and marks the model as used now.
void mark_model_used(const std::string& model_dir, const std::string& model_path);

}  // namespace npullm::npuw
