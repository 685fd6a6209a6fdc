#include "npuw/cache_admin.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fmt/format.h>
#include <fstream>

#include "common/error.h"

namespace npullm::npuw {

namespace fs = std::filesystem;

namespace {

bool is_model_key(const std::string& name) {
  return name.size() == 16 && std::all_of(name.begin(), name.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

}  // namespace

std::vector<CachedModel> list_cache(const std::string& dir) {
  std::vector<CachedModel> out;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return out;
  for (const fs::directory_entry& d : fs::directory_iterator(dir, ec)) {
    if (!d.is_directory(ec) || !is_model_key(d.path().filename().string())) continue;
    CachedModel m;
    m.key = d.path().filename().string();
    m.model_path = "?";
    m.last_used = d.last_write_time(ec);
    const fs::path stamp = d.path() / "model.txt";
    if (fs::exists(stamp, ec)) {
      std::ifstream in(stamp);
      std::getline(in, m.model_path);
      m.last_used = fs::last_write_time(stamp, ec);
    }
    for (const fs::directory_entry& f : fs::recursive_directory_iterator(d.path(), ec)) {
      if (!f.is_regular_file(ec)) continue;
      const uint64_t size = f.file_size(ec);
      const std::string ext = f.path().extension().string();
      if (ext == ".blob") {
        m.blobs++;
        m.blob_bytes += size;
      } else if (ext == ".w") {
        m.packed++;
        m.packed_bytes += size;
      } else {
        m.other_bytes += size;
      }
    }
    out.push_back(std::move(m));
  }
  std::sort(out.begin(), out.end(), [](const CachedModel& a, const CachedModel& b) { return a.last_used < b.last_used; });
  return out;
}

PruneReport prune_cache(const std::string& dir, uint64_t max_bytes, double older_than_days, const std::string& keep) {
  PruneReport r;
  std::vector<CachedModel> models = list_cache(dir);
  uint64_t total = 0;
  for (const CachedModel& m : models) total += m.bytes();
  const auto now = fs::file_time_type::clock::now();
  std::error_code ec;
  for (const CachedModel& m : models) {  // least recently used first
    if (m.key == keep) continue;
    const double age_days = std::chrono::duration<double>(now - m.last_used).count() / 86400.0;
    const bool too_old = older_than_days >= 0 && age_days > older_than_days;
    const bool too_big = max_bytes > 0 && total > max_bytes;
    if (!too_old && !too_big) continue;
    fs::remove_all(fs::path(dir) / m.key, ec);
    if (ec) {
      fmt::print(stderr, "npullm: warning: cannot remove cache folder {}/{}: {}\n", dir, m.key, ec.message());
      continue;
    }
    r.removed++;
    r.freed_bytes += m.bytes();
    total -= m.bytes();
  }
  r.kept_bytes = total;
  return r;
}

uint64_t default_cache_max_bytes(const std::string& dir) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  fs::path p = dir;
  std::error_code ec;
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();  // the cache may not exist yet
  struct statvfs st{};
  if (p.empty() || ::statvfs(p.c_str(), &st) != 0) return 20 * kGiB;
  const uint64_t fs_bytes = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
  return std::clamp<uint64_t>(fs_bytes / 10, kGiB, 64 * kGiB);
}

uint64_t parse_size(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    fail("'{}' is not a size (e.g. 10G, 512M, 2000000)", text);
  }
  std::string unit = text.substr(used);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  double mult = 1;
  if (unit == "K") mult = 1024.0;
  else if (unit == "M") mult = 1024.0 * 1024;
  else if (unit == "G") mult = 1024.0 * 1024 * 1024;
  else if (unit == "T") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty() && unit != "B") fail("'{}' is not a size (units: K, M, G, T)", text);
  if (v < 0 || v * mult > 1.8e19) fail("'{}' is not a size", text);
  return static_cast<uint64_t>(v * mult);
}

std::string format_size(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

void mark_model_used(const std::string& model_dir, const std::string& model_path) {
  std::error_code ec;
  fs::create_directories(model_dir, ec);
  const fs::path stamp = fs::path(model_dir) / "model.txt";
  std::ofstream out(stamp, std::ios::trunc);  // rewriting it also moves its time to now
  if (out) out << fs::weakly_canonical(model_path, ec).string() << "\n";
}

}  // namespace npullm::npuw
