#include "npuw/blob_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <xxhash.h>

namespace npullm::npuw {

namespace fs = std::filesystem;

uint64_t hash_bytes(const void* data, size_t size) { return XXH3_64bits(data, size); }

namespace {

std::string host_name() {
  char h[256] = {};
  if (::gethostname(h, sizeof h - 1) != 0 || !h[0]) return "host";
  std::string s = h;
  for (char& c : s)
    if (c == '/' || c == '.') c = '_';  // one path component, no dots (the name is split on them)
  return s;
}

const std::string& this_host() {
  static const std::string h = host_name();
  return h;
}

// Writes all of [p, p + n); false with errno set on failure (EFBIG, ENOSPC, EIO, ...).
bool write_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

std::string publish_file(const std::string& path, std::span<const std::span<const uint8_t>> parts,
                         const std::function<void(int fd)>& before_rename) {
  static std::atomic<uint64_t> serial{0};
  const fs::path folder = fs::path(path).parent_path();
  std::error_code ec;
  fs::create_directories(folder, ec);
  const std::string tmp = fmt::format("{}.tmp.{}.{}.{}", path, this_host(), ::getpid(), serial++);
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return fmt::format("cannot create {}: {}", tmp, std::strerror(errno));
  std::string err;
  for (std::span<const uint8_t> part : parts)
    if (!write_all(fd, part.data(), part.size())) {
      err = fmt::format("cannot write {}: {}", tmp, std::strerror(errno));
      break;
    }
  // No fdatasync: after a crash a renamed entry may hold zeros or be short, but every entry is
  // verified in full (its hash) before it is trusted and rebuilt when it fails, so syncing would only
  // buy durability of a cache, at 2-3x the cold start (TinyLlama Q4_0: 4.7-6.0 s with, 1.8-2.5 s without).
  if (err.empty() && before_rename) before_rename(fd);
  ::close(fd);
  if (err.empty() && ::rename(tmp.c_str(), path.c_str()) != 0)
    err = fmt::format("cannot rename {} to {}: {}", tmp, path, std::strerror(errno));
  if (!err.empty()) {
    ::unlink(tmp.c_str());
    return err;
  }
  return "";
}

int sweep_temp_files(const std::string& folder) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return 0;
  int removed = 0;
  const auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos) continue;
    // <entry>.tmp.<host>.<pid>.<n>
    const std::string rest = name.substr(at + 5);
    const size_t d2 = rest.rfind('.');
    const size_t d1 = d2 == std::string::npos || d2 == 0 ? std::string::npos : rest.rfind('.', d2 - 1);
    bool gone = false;
    if (d1 != std::string::npos && rest.substr(0, d1) == this_host()) {
      const long pid = std::strtol(rest.c_str() + d1 + 1, nullptr, 10);
      gone = pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    }
    std::error_code tec;
    const auto t = it->last_write_time(tec);
    if (!tec && now - t > std::chrono::hours(24)) gone = true;
    if (gone && fs::remove(it->path(), tec)) removed++;
  }
  return removed;
}

BlobCache::BlobCache(std::string dir, uint64_t model_hash) : dir_(std::move(dir)), model_hash_(model_hash) {
  if (enabled()) {
    sweep_temp_files(model_dir());
    sweep_temp_files(model_dir() + "/panels16");
  }
}

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
  if (in.bad()) return std::nullopt;  // an I/O error: compile instead (the entry may be fine)
  return bytes;
}

void BlobCache::store(const std::string& name, const std::string& config, const std::vector<uint8_t>& bytes) const {
  if (!enabled()) return;
  const std::span<const uint8_t> part(bytes);
  const std::string err = publish_file(path_for(name, config), std::span(&part, 1));
  if (!err.empty() && !warned_.exchange(true))
    fmt::print(stderr, "npullm: warning: the blob cache cannot be written ({}); continuing without it\n", err);
}

void BlobCache::remove(const std::string& name, const std::string& config) const {
  std::error_code ec;
  fs::remove(path_for(name, config), ec);
}

}  // namespace npullm::npuw
