#include "npuw/blob_cache.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <unistd.h>
#include <xxhash.h>

namespace npullm::npuw {

namespace fs = std::filesystem;

uint64_t hash_bytes(const void* data, size_t size) { return XXH3_64bits(data, size); }

BlobCache::BlobCache(std::string dir, uint64_t model_hash) : dir_(std::move(dir)), model_hash_(model_hash) {}

std::string BlobCache::default_dir() {
  if (const char* d = std::getenv("NPULLM_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/npullm";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/npullm";
  return ".npullm-cache";
}

std::string BlobCache::model_dir() const { return fmt::format("{}/{:016x}", dir_, model_hash_); }

std::string BlobCache::path_for(const std::string& name, const std::string& config) const {
  return fmt::format("{}/{:016x}/{}-{:016x}.blob", dir_, model_hash_, name, hash_bytes(config.data(), config.size()));
}

std::optional<std::vector<uint8_t>> BlobCache::load(const std::string& name, const std::string& config) const {
  if (!enabled()) return std::nullopt;
  std::ifstream in(path_for(name, config), std::ios::binary);
  if (!in) return std::nullopt;
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return bytes;
}

void BlobCache::store(const std::string& name, const std::string& config, const std::vector<uint8_t>& bytes) const {
  if (!enabled()) return;
  const std::string path = path_for(name, config);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      fmt::print(stderr, "npullm: warning: cannot write blob cache entry {} (continuing without it)\n", tmp);
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fmt::print(stderr, "npullm: warning: cannot store blob cache entry {}: {}\n", path, ec.message());
    fs::remove(tmp, ec);
  }
}

void BlobCache::remove(const std::string& name, const std::string& config) const {
  std::error_code ec;
  fs::remove(path_for(name, config), ec);
}

}  // namespace npullm::npuw
