#include "npuw/weights_bank.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <xxhash.h>

#include "common/error.h"
#include "common/page_buffer.h"
#include "formats/weight_layout.h"
#include "npuw/blob_cache.h"

namespace npullm::npuw {

namespace fs = std::filesystem;

namespace {

// Rows-layout weights from this size up are copied onto huge pages (the output projection, a tied
// embedding); smaller ones (norms, biases) gain nothing from it.
constexpr uint64_t kResidentMin = uint64_t{2} << 20;

// A packed file: this header (128 bytes, little-endian: the data stays 64-byte aligned), then the
// packed bytes.
struct PackedHeader {
  char magic[8];     // "NPUPNL16"
  uint32_t type;     // GgmlType
  uint32_t layout;   // WeightLayout
  int64_t rows, cols;
  uint64_t bytes;    // of the packed data after the header
  uint64_t source;   // offset of the tensor in the GGUF file (a different file has other offsets)
  // The cache is keyed by the GGUF header, which does not change when only weight values do (a
  // re-quantised or re-synthesised file of the same shape): the file's modification time and a
  // hash of three 4 KiB samples of the tensor tell a packed form made from other values.
  int64_t mtime_ns;
  uint64_t sample;
  // xxh3 of this header (with this field 0) and the packed bytes: a file damaged on disk (a flipped
  // bit anywhere, a torn write) is never trusted. Checked at every start; one pass over bytes the
  // first matmul reads anyway (measured in bench/RESULTS.md).
  uint64_t data_hash;
  uint64_t reserved[7];  // 0
};
static_assert(sizeof(PackedHeader) == 128);
constexpr char kMagic[8] = {'N', 'P', 'U', 'P', 'N', 'L', '1', '8'};  // '17': data_hash covered the bytes only

// The hash a whole file carries: its bytes, seeding a hash of the header without its own hash field.
uint64_t entry_hash(const PackedHeader& h, const uint8_t* data, size_t n) {
  PackedHeader c = h;
  c.data_hash = 0;
  return XXH3_64bits_withSeed(&c, sizeof c, XXH3_64bits(data, n));
}

// Why a file of `size` bytes starting with header `h` is not a whole packed file ("" when it is,
// as far as the header tells; the hash is checked by the caller, over the mapping).
std::string header_problem(const PackedHeader& h, uint64_t size) {
  if (std::memcmp(h.magic, kMagic, 8) != 0) return "not a packed weight file of this version";
  if (h.bytes > size || size - h.bytes != sizeof h)
    return fmt::format("{} bytes where its header says {} (truncated or extended)", size, sizeof h + h.bytes);
  return "";
}

// Reads n bytes at `offset` of fd into dst: "" or what went wrong.
std::string read_at(int fd, uint8_t* dst, size_t n, uint64_t offset) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, dst, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return std::strerror(errno);
    if (got == 0) return "the file ended early";
    dst += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return "";
}

}  // namespace

// One packed tensor: a read-only mapping of its file (data after the header), or anonymous pages
// of its own (data at 0). Pages straight from mmap, not the heap: a transient packing buffer goes
// back to the system when unmapped, where freed heap blocks of this size could stay resident.
// With huge pages on, the bytes live in `pages` instead (read or copied there).
struct GgufWeightsBank::Packed {
  void* map = nullptr;
  size_t map_bytes = 0, data_offset = 0;
  PageBuffer pages;
  const void* data() const { return pages.data() ? pages.data() : static_cast<const uint8_t*>(map) + data_offset; }
  Packed() = default;
  Packed(const Packed&) = delete;
  Packed& operator=(const Packed&) = delete;
  ~Packed() {
    if (map) ::munmap(map, map_bytes);
  }
};

GgufWeightsBank::GgufWeightsBank(const GgufFile& f, std::string packed_dir, bool huge_pages)
    : f_(f), dir_(std::move(packed_dir)), huge_(huge_pages) {
  struct stat st{};
  if (!dir_.empty() && ::stat(f_.path().c_str(), &st) == 0)
    mtime_ns_ = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// xxh3 of the tensor's first, middle and last 4 KiB (or all of it when smaller).
uint64_t GgufWeightsBank::sample_hash(const GgufTensorInfo& t) {
  constexpr uint64_t kSlice = 4096;
  if (t.n_bytes <= 3 * kSlice) return hash_bytes(t.data, t.n_bytes);
  const uint64_t parts[3] = {hash_bytes(t.data, kSlice), hash_bytes(t.data + (t.n_bytes / 2 & ~uint64_t{63}), kSlice),
                             hash_bytes(t.data + t.n_bytes - kSlice, kSlice)};
  return hash_bytes(parts, sizeof parts);
}
GgufWeightsBank::~GgufWeightsBank() = default;

const void* GgufWeightsBank::resolve(const blob::WeightRef& w) const {
  const GgufTensorInfo* t = f_.find_tensor(w.name);
  if (!t) fail("{}: the blob needs tensor '{}', which the model file lacks", f_.path(), w.name);
  const auto layout = static_cast<WeightLayout>(w.layout);
  if (layout != WeightLayout::Rows && layout != WeightLayout::Panels16)
    fail("{}: the blob wants tensor '{}' in unknown layout {}", f_.path(), w.name, w.layout);
  const bool shape_ok = static_cast<uint32_t>(t->type) == w.type && t->dims == w.shape && !t->dims.empty();
  const uint64_t want = shape_ok && (layout == WeightLayout::Rows || panels16_possible(t->type, t->dims[0]))
                            ? weight_bytes(t->type, t->rows(), t->dims[0], layout) : 0;
  if (!shape_ok || want != w.bytes)
    fail("{}: tensor '{}' is {} [{}] ({} bytes as {}) but the blob was compiled for type {} [{}] ({} bytes)", f_.path(),
         w.name, ggml_type_name(t->type), fmt::join(t->dims, ","), want, weight_layout_name(layout), w.type,
         fmt::join(w.shape, ","), w.bytes);
  if (layout == WeightLayout::Rows) return huge_ && t->n_bytes >= kResidentMin ? resident(*t) : t->data;
  return packed(*t, w);
}

uint64_t GgufWeightsBank::huge_page_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  if (huge_)
    for (const auto& [name, p] : packed_) n += p->pages.size();
  return n;
}

const void* GgufWeightsBank::resident(const GgufTensorInfo& t) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = packed_.find(t.name); it != packed_.end()) return it->second->data();
  auto p = std::make_unique<Packed>();
  p->pages = PageBuffer(static_cast<size_t>(t.n_bytes));
  // In pieces, each handed back to the page cache once copied: the process holds one form of the
  // tensor at a time, not the mapping and the copy (a tied embedding is 100+ MiB).
  constexpr uint64_t kPiece = uint64_t{16} << 20;
  for (uint64_t at = 0; at < t.n_bytes; at += kPiece) {
    const uint64_t n = std::min(kPiece, t.n_bytes - at);
    std::memcpy(p->pages.data() + at, t.data + at, static_cast<size_t>(n));
    f_.release(t, at, n);
  }
  f_.release(t);  // the pages that straddled two pieces
  p->pages.protect_read_only();
  return packed_.emplace(t.name, std::move(p)).first->second->data();
}

std::string GgufWeightsBank::verify_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fmt::format("cannot open: {}", std::strerror(errno));
  struct stat st{};
  PackedHeader h{};
  std::string problem;
  if (::fstat(fd, &st) != 0 || ::pread(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h))
    problem = "shorter than its header";
  else
    problem = header_problem(h, static_cast<uint64_t>(st.st_size));
  if (problem.empty()) {
    void* m = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      problem = fmt::format("cannot map: {}", std::strerror(errno));
    } else {
      if (entry_hash(h, static_cast<const uint8_t*>(m) + sizeof h, static_cast<size_t>(h.bytes)) != h.data_hash)
        problem = "its bytes do not match their hash";
      ::munmap(m, static_cast<size_t>(st.st_size));
    }
  }
  ::close(fd);
  return problem;
}

const void* GgufWeightsBank::packed(const GgufTensorInfo& t, const blob::WeightRef& w) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = packed_.find(w.name); it != packed_.end()) return it->second->data();
  const int64_t rows = t.rows(), cols = t.dims[0];
  PackedHeader want{{}, static_cast<uint32_t>(t.type), w.layout, rows, cols, w.bytes, t.offset, mtime_ns_, sample_hash(t), 0, {}};
  std::memcpy(want.magic, kMagic, 8);
  auto p = std::make_unique<Packed>();
  std::string path;
  if (!dir_.empty()) {
    std::string file = w.name;
    for (char& c : file)
      if (c == '/') c = '_';
    path = fmt::format("{}/{}.w", dir_, file);
    // A file there is trusted only once every byte of it is verified: a header of this version
    // for this very tensor (type, layout, shape, source offset, the GGUF file's time, samples of
    // its values), the size the header says, and the hash of header and bytes. One made from
    // other weights or by an older npullm is rebuilt quietly; a damaged one is reported too.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      struct stat st{};
      PackedHeader h{};
      std::string damage;
      bool stale = false;
      if (::fstat(fd, &st) != 0 || ::pread(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) {
        damage = "shorter than its header";
      } else if (std::memcmp(h.magic, "NPUPNL17", 8) == 0) {
        stale = true;  // made by an older npullm (its hash covered the bytes only)
      } else {
        damage = header_problem(h, static_cast<uint64_t>(st.st_size));
      }
      if (damage.empty() && !stale) {
        // The hash first, so that a flipped bit in the header is reported as damage, not taken for
        // a file made from other weights. Mapped with MAP_POPULATE (the hash reads every page
        // anyway; one call costs far less than a fault per page), or, on huge pages, read into
        // them: the process then never holds the file's pages and the copy at once.
        const bool other = h.type != want.type || h.layout != want.layout || h.rows != rows || h.cols != cols ||
                           h.bytes != w.bytes || h.source != want.source || h.mtime_ns != want.mtime_ns || h.sample != want.sample;
        if (huge_) {
          // Memory the system cannot give says nothing about the file: the run fails, the file stays.
          PageBuffer pages;
          try {
            pages = PageBuffer(static_cast<size_t>(h.bytes));
          } catch (const Error& e) {
            ::close(fd);
            fail("{}: cannot load packed weight {}: {}", f_.path(), path, e.what());
          }
          damage = read_at(fd, pages.data(), static_cast<size_t>(h.bytes), sizeof h);
          if (!damage.empty()) {
            damage = "cannot read it: " + damage;
          } else if (entry_hash(h, pages.data(), static_cast<size_t>(h.bytes)) != h.data_hash) {
            damage = "its bytes do not match their hash";
          } else if (other) {
            stale = true;  // whole, but made from other weights: rebuilt (and replaced) quietly
          } else {
            pages.protect_read_only();
            p->pages = std::move(pages);
          }
        } else {
          void* m = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
          if (m == MAP_FAILED) {
            damage = fmt::format("cannot map it: {}", std::strerror(errno));
          } else if (entry_hash(h, static_cast<const uint8_t*>(m) + sizeof h, static_cast<size_t>(h.bytes)) != h.data_hash) {
            damage = "its bytes do not match their hash";
            ::munmap(m, static_cast<size_t>(st.st_size));
          } else if (other) {
            stale = true;
            ::munmap(m, static_cast<size_t>(st.st_size));
          } else {
            p->map = m;
            p->map_bytes = static_cast<size_t>(st.st_size);
            p->data_offset = sizeof(PackedHeader);
          }
        }
      }
      ::close(fd);
      if (p->map || p->pages.data()) {
        f_.release(t);  // never read here: keep its pages out of this process
        loaded_++;
        return packed_.emplace(w.name, std::move(p)).first->second->data();
      }
      if (!damage.empty()) {
        // Removed now, so that no later run meets it even if this one cannot store the rebuilt form.
        damaged_++;
        std::error_code ec;
        fs::remove(path, ec);
        fmt::print(stderr, "npullm: warning: packed weight {} is damaged ({}); {}, rebuilding it\n", path, damage,
                   ec ? "cannot remove it: " + ec.message() : std::string("removed"));
      }
    }
  }
  // Build it: pack from the mapping, then hand the source pages back.
  PageBuffer buf;
  try {
    buf = PageBuffer(static_cast<size_t>(w.bytes), huge_);
  } catch (const Error& e) {
    fail("{}: cannot repack tensor '{}': {}", f_.path(), w.name, e.what());
  }
  uint8_t* bytes = buf.data();
  pack_panels16(t.type, t.data, rows, cols, bytes, 0, (rows + 15) / 16);
  f_.release(t);
  built_++;
  if (!path.empty()) {
    PackedHeader h = want;
    h.data_hash = entry_hash(h, bytes, static_cast<size_t>(w.bytes));
    const std::span<const uint8_t> parts[2] = {{reinterpret_cast<const uint8_t*>(&h), sizeof h}, {bytes, static_cast<size_t>(w.bytes)}};
    // Map the file just written (its pages are in the page cache) and drop the anonymous copy: the
    // process then holds pages the kernel may drop and reread. Mapped through the temporary file's
    // own descriptor, so it is these bytes whatever another process renames into place meanwhile.
    // On huge pages the packed bytes stay where they are (the file is for the next start).
    void* m = MAP_FAILED;
    const std::string err = publish_file(path, parts, [&](int fd) {
      if (!huge_) m = ::mmap(nullptr, sizeof h + w.bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    });
    if (!err.empty()) {
      if (m != MAP_FAILED) ::munmap(m, sizeof h + w.bytes);
      if (!store_warned_) {
        store_warned_ = true;
        fmt::print(stderr, "npullm: warning: packed weights cannot be stored in {} ({}); keeping them in memory\n", dir_, err);
      }
    } else if (m != MAP_FAILED) {
      p->map = m;
      p->map_bytes = sizeof h + w.bytes;
      p->data_offset = sizeof h;
      return packed_.emplace(w.name, std::move(p)).first->second->data();
    }
  }
  buf.protect_read_only();
  p->pages = std::move(buf);
  return packed_.emplace(w.name, std::move(p)).first->second->data();
}

}  // namespace npullm::npuw
