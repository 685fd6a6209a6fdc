// GGUF reader: metadata values, the bounds-checked cursor, and GgufFile's eager validation.
//
// The reader trusts nothing in the file. Every read goes through Cursor, which checks the bytes
// are there before touching them; every count is compared with the bytes left before anything is
// allocated for it; every size is computed with overflow checks. The writer is in gguf_writer.cpp.
#include "formats/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>

#include "common/error.h"

namespace npullm {

namespace {

constexpr uint32_t kMaxDims = 4;
// Arrays of arrays are legal; the limit only stops a crafted file from recursing the stack away.
constexpr int kMaxArrayDepth = 8;
// Elements of all metadata arrays of a file together. Each becomes a GgufValue (~48 bytes), so a
// header of zero-length strings could otherwise ask for 6x its own size in memory (a 4 GB file:
// 24 GB). The largest real arrays are vocabularies (Gemma 3: 3 arrays of 262,144).
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 23;
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// The smallest possible encodings. A count larger than (bytes left / smallest item) cannot be
// honest, so it is rejected before anything is reserved for it.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // key length, value type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset

bool is_known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::F64); }

bool is_unsigned_type(GgufValueType t) {
  return t == GgufValueType::U8 || t == GgufValueType::U16 || t == GgufValueType::U32 ||
         t == GgufValueType::U64;
}

bool is_signed_type(GgufValueType t) {
  return t == GgufValueType::I8 || t == GgufValueType::I16 || t == GgufValueType::I32 ||
         t == GgufValueType::I64;
}

// Bytes the smallest value of type `t` takes in a file (strings: the length; arrays: type + count).
uint64_t min_encoded_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::BOOL: return 1;
    case GgufValueType::U16: case GgufValueType::I16: return 2;
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::F32: return 4;
    case GgufValueType::U64: case GgufValueType::I64: case GgufValueType::F64:
    case GgufValueType::STRING: return 8;  // a string is at least its u64 length
    case GgufValueType::ARRAY: return 4 + 8;
  }
  return 1;
}

std::string hex_bytes(const uint8_t* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += fmt::format("{}{:02x}", i ? " " : "", p[i]);
  return s;
}

// Reads little-endian fields from [data, data + size). Nothing is read without first checking it
// lies inside the buffer, and every failure names the file, the offset and what was expected.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& label)
      : data_(data), size_(size), label_(label) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  uint64_t array_elements = 0;  // metadata array elements read so far (kMaxArrayElements)
  bool keep_large_arrays = true;  // GgufArrays::kAll
  const std::string& label() const { return label_; }

  [[noreturn]] void fail_at(size_t offset, std::string_view what, std::string_view expected) const {
    fail("{}: {} at offset {} (expected {})", label_, what, offset, expected);
  }

  // Throws "unexpected end of file" unless `n` more bytes are available.
  void need(uint64_t n, std::string_view what) const {
    if (n > remaining())
      fail_at(pos_, fmt::format("unexpected end of file reading {}", what),
              fmt::format("{} bytes but only {} left; file truncated?", n, remaining()));
  }

  uint8_t u8(std::string_view what) { return static_cast<uint8_t>(uint_le(1, what)); }
  uint16_t u16(std::string_view what) { return static_cast<uint16_t>(uint_le(2, what)); }
  uint32_t u32(std::string_view what) { return static_cast<uint32_t>(uint_le(4, what)); }
  uint64_t u64(std::string_view what) { return uint_le(8, what); }

  // A GGUF string: u64 length, then that many bytes (no terminator).
  std::string string(std::string_view what) {
    const size_t at = pos_;
    const uint64_t len = u64(what);
    if (len > remaining())
      fail_at(at, fmt::format("{} string length {} runs past end of file", what, len),
              fmt::format("at most {} bytes; file truncated?", remaining()));
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

  // Checks that `count` items of at least `min_item` bytes each can still fit, before the caller
  // reserves memory for them. `ctx` (e.g. " for key 'x'") follows the count in the message.
  void check_count(size_t at, uint64_t count, uint64_t min_item, std::string_view what,
                   std::string_view ctx = {}) const {
    const uint64_t most = remaining() / min_item;
    if (count > most)
      fail_at(at, fmt::format("{} {}{} is too large for the bytes left", what, count, ctx),
              fmt::format("at most {} (each needs >= {} bytes and {} bytes remain before end of file)",
                          most, min_item, remaining()));
  }

 private:
  // Assembles the value byte by byte, so the result does not depend on the host's byte order or
  // on the field's alignment.
  uint64_t uint_le(size_t n, std::string_view what) {
    need(n, what);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(data_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& label_;
};

// ---- Metadata values ----------------------------------------------------------------------------

GgufValue read_value(Cursor& cur, GgufValueType type, const std::string& ctx, int depth);

GgufValueType read_value_type(Cursor& cur, const std::string& ctx) {
  const size_t at = cur.pos();
  const uint32_t t = cur.u32("value type");
  if (!is_known_value_type(t))
    cur.fail_at(at, fmt::format("unknown value type {} for {}", t, ctx), "a GGUF value type 0..12");
  return static_cast<GgufValueType>(t);
}

GgufValue read_array(Cursor& cur, const std::string& ctx, int depth) {
  const size_t at = cur.pos();
  if (depth > kMaxArrayDepth)
    cur.fail_at(at, fmt::format("arrays nested more than {} deep in {}", kMaxArrayDepth, ctx),
                fmt::format("at most {} levels of nesting", kMaxArrayDepth));
  GgufValue out;
  out.type = GgufValueType::ARRAY;
  out.elem_type = read_value_type(cur, ctx);
  const size_t count_at = cur.pos();
  const uint64_t count = cur.u64("array count");
  cur.check_count(count_at, count, min_encoded_size(out.elem_type), "array count", " for " + ctx);
  if (count > kMaxArrayElements - cur.array_elements)
    cur.fail_at(count_at, fmt::format("array count {} for {} takes the file's metadata arrays past {} elements", count, ctx,
                                      kMaxArrayElements),
                fmt::format("at most {} array elements in all", kMaxArrayElements));
  cur.array_elements += count;
  if (!cur.keep_large_arrays && count > kGgufLargeArray) {  // checked element by element, then let go
    for (uint64_t i = 0; i < count; ++i) read_value(cur, out.elem_type, ctx, depth);
    out.v = count;
    return out;
  }
  std::vector<GgufValue> elems;
  elems.reserve(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) elems.push_back(read_value(cur, out.elem_type, ctx, depth));
  out.v = std::move(elems);
  return out;
}

// `depth` counts the arrays enclosing this value (0 for a top-level value).
GgufValue read_value(Cursor& cur, GgufValueType type, const std::string& ctx, int depth) {
  GgufValue out;
  out.type = type;
  switch (type) {
    case GgufValueType::U8: out.v = uint64_t{cur.u8(ctx)}; break;
    case GgufValueType::U16: out.v = uint64_t{cur.u16(ctx)}; break;
    case GgufValueType::U32: out.v = uint64_t{cur.u32(ctx)}; break;
    case GgufValueType::U64: out.v = cur.u64(ctx); break;
    case GgufValueType::I8: out.v = int64_t{static_cast<int8_t>(cur.u8(ctx))}; break;
    case GgufValueType::I16: out.v = int64_t{static_cast<int16_t>(cur.u16(ctx))}; break;
    case GgufValueType::I32: out.v = int64_t{static_cast<int32_t>(cur.u32(ctx))}; break;
    case GgufValueType::I64: out.v = static_cast<int64_t>(cur.u64(ctx)); break;
    case GgufValueType::F32: out.v = double{std::bit_cast<float>(cur.u32(ctx))}; break;
    case GgufValueType::F64: out.v = std::bit_cast<double>(cur.u64(ctx)); break;
    case GgufValueType::BOOL: {
      const size_t at = cur.pos();
      const uint8_t b = cur.u8(ctx);
      if (b > 1) cur.fail_at(at, fmt::format("bool value {} for {}", b, ctx), "0 or 1");
      out.v = b == 1;
      break;
    }
    case GgufValueType::STRING: out.v = cur.string(ctx); break;
    case GgufValueType::ARRAY: return read_array(cur, ctx, depth + 1);
  }
  return out;
}

std::string describe_type(const GgufValue& v) {
  if (!v.is_array()) return std::string(gguf_value_type_name(v.type));
  return fmt::format("ARRAY of {}", gguf_value_type_name(v.elem_type));
}

// Keys whose type the rest of the runtime relies on: checked here so a wrong one is reported
// against the file and offset, not later as a confusing failure elsewhere.
struct KnownKey {
  std::string_view key;
  GgufValueType type;
  GgufValueType elem_type;  // only for ARRAY
};
constexpr KnownKey kKnownKeys[] = {
    {"general.alignment", GgufValueType::U32, GgufValueType::U8},
    {"general.architecture", GgufValueType::STRING, GgufValueType::U8},
    {"tokenizer.ggml.tokens", GgufValueType::ARRAY, GgufValueType::STRING},
    {"tokenizer.ggml.scores", GgufValueType::ARRAY, GgufValueType::F32},
    {"tokenizer.ggml.token_type", GgufValueType::ARRAY, GgufValueType::I32},
};

void check_known_key_type(const Cursor& cur, const std::string& key, const GgufValue& v, size_t at) {
  for (const KnownKey& k : kKnownKeys) {
    if (k.key != key) continue;
    const bool ok = v.type == k.type && (k.type != GgufValueType::ARRAY || v.elem_type == k.elem_type);
    if (ok) return;
    GgufValue want;
    want.type = k.type;
    want.elem_type = k.elem_type;
    cur.fail_at(at, fmt::format("key '{}' has type {}", key, describe_type(v)), describe_type(want));
  }
}

// ---- Tensor infos -------------------------------------------------------------------------------

struct TensorSite {  // where a tensor's info fields sit, for error messages
  size_t info_at = 0;
  size_t offset_at = 0;
};

// Reads dims[n_dims], rejecting zero, negative (as int64) and overflowing shapes.
std::vector<int64_t> read_dims(Cursor& cur, const std::string& name) {
  const size_t at = cur.pos();
  const uint32_t n_dims = cur.u32("n_dims");
  if (n_dims > kMaxDims)
    cur.fail_at(at, fmt::format("tensor '{}' has n_dims {}", name, n_dims),
                fmt::format("at most {}", kMaxDims));
  std::vector<int64_t> dims(n_dims);
  int64_t elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const size_t dim_at = cur.pos();
    const uint64_t dim = cur.u64("tensor dimension");
    if (dim == 0 || dim > kInt64Max)
      cur.fail_at(dim_at, fmt::format("tensor '{}' dim {} is {}", name, d, static_cast<int64_t>(dim)),
                  "a dimension between 1 and 2^63-1");
    dims[d] = static_cast<int64_t>(dim);
    if (__builtin_mul_overflow(elements, dims[d], &elements))
      cur.fail_at(dim_at, fmt::format("tensor '{}' element count overflows at dim {}", name, d),
                  "fewer than 2^63 elements");
  }
  return dims;
}

GgmlType read_ggml_type(Cursor& cur, const std::string& name) {
  const size_t at = cur.pos();
  const uint32_t id = cur.u32("tensor type");
  if (!ggml_type_known(id))
    cur.fail_at(at, fmt::format("tensor '{}' has unknown ggml type {}", name, id),
                "a ggml type id this build knows");
  const GgmlTypeTraits& tr = ggml_type_traits(static_cast<GgmlType>(id));
  if (tr.block_size <= 0 || tr.type_size <= 0)
    cur.fail_at(at, fmt::format("tensor '{}' has ggml type {} ({}) without a block layout", name, id, tr.name),
                "a type with a known block size");
  return static_cast<GgmlType>(id);
}

// Bytes of a tensor: rows * row bytes, every step checked. `at` locates the type field.
uint64_t tensor_bytes(const Cursor& cur, size_t at, const std::string& name,
                      const std::vector<int64_t>& dims, GgmlType type) {
  const GgmlTypeTraits& tr = ggml_type_traits(type);
  const int64_t ne0 = dims.empty() ? 1 : dims[0];
  if (ne0 % tr.block_size != 0)
    cur.fail_at(at, fmt::format("tensor '{}' dims[0] = {} is not a multiple of the {} block size",
                                name, ne0, tr.name),
                fmt::format("a multiple of {}", tr.block_size));
  // Prove the row size fits before asking ggml_row_bytes, which does not check for overflow.
  uint64_t row = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(ne0 / tr.block_size),
                             static_cast<uint64_t>(tr.type_size), &row))
    cur.fail_at(at, fmt::format("tensor '{}' row byte size overflows", name), "a row below 2^64 bytes");
  row = ggml_row_bytes(type, ne0);
  uint64_t rows = 1;
  for (size_t d = 1; d < dims.size(); ++d) rows *= static_cast<uint64_t>(dims[d]);  // < 2^63: checked
  uint64_t total = 0;
  if (__builtin_mul_overflow(row, rows, &total) || total > kInt64Max)
    cur.fail_at(at, fmt::format("tensor '{}' byte size overflows", name), "fewer than 2^63 bytes");
  return total;
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }  // callers keep x < 2^63

}  // namespace

// ---- GgufValue ----------------------------------------------------------------------------------

std::string_view gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: return "U8";
    case GgufValueType::I8: return "I8";
    case GgufValueType::U16: return "U16";
    case GgufValueType::I16: return "I16";
    case GgufValueType::U32: return "U32";
    case GgufValueType::I32: return "I32";
    case GgufValueType::F32: return "F32";
    case GgufValueType::BOOL: return "BOOL";
    case GgufValueType::STRING: return "STRING";
    case GgufValueType::ARRAY: return "ARRAY";
    case GgufValueType::U64: return "U64";
    case GgufValueType::I64: return "I64";
    case GgufValueType::F64: return "F64";
  }
  return "unknown";
}

bool GgufValue::is_integer() const { return is_unsigned_type(type) || is_signed_type(type); }

int64_t GgufValue::as_int(const std::string& what) const {
  if (!is_integer()) fail("{}: has type {} (expected an integer)", what, describe_type(*this));
  if (const auto* s = std::get_if<int64_t>(&v)) return *s;
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > kInt64Max) fail("{}: value {} does not fit in int64 (expected at most 2^63-1)", what, *u);
    return static_cast<int64_t>(*u);
  }
  fail("{}: {} value holds no integer (expected an integer payload)", what, describe_type(*this));
}

uint64_t GgufValue::as_uint(const std::string& what) const {
  if (!is_integer()) fail("{}: has type {} (expected an integer)", what, describe_type(*this));
  if (const auto* u = std::get_if<uint64_t>(&v)) return *u;
  if (const auto* s = std::get_if<int64_t>(&v)) {
    if (*s < 0) fail("{}: value {} is negative (expected a non-negative integer)", what, *s);
    return static_cast<uint64_t>(*s);
  }
  fail("{}: {} value holds no integer (expected an integer payload)", what, describe_type(*this));
}

double GgufValue::as_float(const std::string& what) const {
  if (type == GgufValueType::F32 || type == GgufValueType::F64) {
    if (const auto* d = std::get_if<double>(&v)) return *d;
    fail("{}: {} value holds no number (expected a float payload)", what, describe_type(*this));
  }
  if (!is_integer()) fail("{}: has type {} (expected a number)", what, describe_type(*this));
  if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  return static_cast<double>(as_int(what));
}

bool GgufValue::as_bool(const std::string& what) const {
  const auto* b = std::get_if<bool>(&v);
  if (type != GgufValueType::BOOL || !b) fail("{}: has type {} (expected BOOL)", what, describe_type(*this));
  return *b;
}

const std::string& GgufValue::as_string(const std::string& what) const {
  const auto* s = std::get_if<std::string>(&v);
  if (type != GgufValueType::STRING || !s)
    fail("{}: has type {} (expected STRING)", what, describe_type(*this));
  return *s;
}

const std::vector<GgufValue>& GgufValue::as_array(const std::string& what) const {
  if (type != GgufValueType::ARRAY) fail("{}: has type {} (expected ARRAY)", what, describe_type(*this));
  const auto* a = std::get_if<std::vector<GgufValue>>(&v);
  if (!a)
    fail("{}: an array of {} elements that this reader did not keep (opened without its large arrays)", what,
         array_size(what));
  return *a;
}

size_t GgufValue::array_size(const std::string& what) const {
  if (type != GgufValueType::ARRAY) fail("{}: has type {} (expected ARRAY)", what, describe_type(*this));
  if (const auto* a = std::get_if<std::vector<GgufValue>>(&v)) return a->size();
  return static_cast<size_t>(std::get<uint64_t>(v));
}

// ---- GgufTensorInfo -----------------------------------------------------------------------------

namespace {
int64_t checked_product(const std::vector<int64_t>& dims, size_t first, const std::string& name) {
  int64_t n = 1;
  for (size_t d = first; d < dims.size(); ++d)
    if (dims[d] < 0 || __builtin_mul_overflow(n, dims[d], &n))
      fail("tensor '{}': shape does not give a valid element count (expected dims in 1..2^63-1)", name);
  return n;
}
}  // namespace

int64_t GgufTensorInfo::n_elements() const { return checked_product(dims, 0, name); }
int64_t GgufTensorInfo::rows() const { return checked_product(dims, 1, name); }

// ---- GgufFile -----------------------------------------------------------------------------------

namespace {
// Closes a file descriptor on every path out of open().
struct FdGuard {
  int fd;
  ~FdGuard() { if (fd >= 0) ::close(fd); }
};
}  // namespace

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path, GgufArrays arrays) {
  FdGuard fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) fail("{}: cannot stat: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("{}: not a regular file (expected a GGUF file)", path);

  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {  // mmap refuses length 0; an empty file is reported by parse() as truncated
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd.fd, 0);
    if (p == MAP_FAILED) fail("{}: cannot mmap {} bytes: {}", path, f->size_, std::strerror(errno));
    f->base_ = static_cast<const uint8_t*>(p);
    f->owns_mapping_ = true;
  }
  f->parse(arrays);  // on failure the unique_ptr unmaps
  return f;
}

std::unique_ptr<GgufFile> GgufFile::from_memory(const uint8_t* data, size_t size, std::string label, GgufArrays arrays) {
  if (data == nullptr && size > 0) fail("{}: null data pointer for {} bytes", label, size);
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(label);
  f->base_ = data;
  f->size_ = size;
  f->parse(arrays);
  return f;
}

GgufFile::~GgufFile() {
  if (owns_mapping_ && base_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

void GgufFile::release(const GgufTensorInfo& t) const { release(t, 0, t.n_bytes); }

void GgufFile::release(const GgufTensorInfo& t, uint64_t offset, uint64_t bytes) const {
  if (!owns_mapping_ || !t.data || offset >= t.n_bytes || bytes == 0) return;
  bytes = std::min(bytes, t.n_bytes - offset);
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<uintptr_t>(t.data + offset) + page - 1) / page * page;  // whole pages inside
  const auto end = (reinterpret_cast<uintptr_t>(t.data + offset) + bytes) / page * page;
  if (end <= begin) return;
  // MADV_RANDOM too: no read-ahead and no fault-around into these pages when a neighbouring
  // tensor is read (fault-around maps up to 64 KiB of cached pages around each fault).
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_RANDOM);
}

void GgufFile::release_header() const {
  if (!owns_mapping_ || !base_) return;  // (the mapping starts on a page)
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t end = std::min<uint64_t>(data_offset_, size_) / page * page;
  if (end > 0) ::madvise(const_cast<uint8_t*>(base_), end, MADV_DONTNEED);
}

// ---- Parsing, section by section ----------------------------------------------------------------

namespace {

struct Header {
  uint32_t version = 0;
  uint64_t n_tensors = 0;
  size_t n_tensors_at = 0;
  uint64_t n_kv = 0;
};

Header read_header(Cursor& cur, const uint8_t* base) {
  cur.need(4, "magic");
  if (std::memcmp(base, "GGUF", 4) != 0)
    cur.fail_at(0, fmt::format("bad magic [{}]", hex_bytes(base, 4)), "\"GGUF\" [47 47 55 46]");
  cur.u32("magic");

  Header h;
  h.version = cur.u32("version");
  if (h.version == 1)
    cur.fail_at(4, "GGUF version 1 is not supported",
                "version 2 or 3; re-convert the model with a current converter");
  if (h.version != 2 && h.version != 3) {
    // A big-endian GGUF has the version's bytes reversed (e.g. 0x03000000).
    const uint32_t swapped = __builtin_bswap32(h.version);
    cur.fail_at(4, fmt::format("unsupported GGUF version {}{}", h.version,
                               swapped == 2 || swapped == 3 ? " (this looks like a big-endian file)" : ""),
                "version 2 or 3, little-endian");
  }
  h.n_tensors_at = cur.pos();
  h.n_tensors = cur.u64("tensor_count");
  const size_t n_kv_at = cur.pos();
  h.n_kv = cur.u64("kv_count");
  cur.check_count(h.n_tensors_at, h.n_tensors, kMinTensorInfoBytes, "tensor_count");
  cur.check_count(n_kv_at, h.n_kv, kMinKvBytes, "kv_count");
  return h;
}

using KvList = std::vector<std::pair<std::string, GgufValue>>;
using NameIndex = std::map<std::string, size_t>;

// Reads the key/value pairs; returns the offset of each value's type field (for later messages).
std::vector<size_t> read_metadata(Cursor& cur, uint64_t n_kv, KvList& kv, NameIndex& index) {
  std::vector<size_t> value_at;
  kv.reserve(static_cast<size_t>(n_kv));  // n_kv was bounded by the file size
  value_at.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const size_t key_at = cur.pos();
    std::string key = cur.string("metadata key");
    if (index.count(key)) cur.fail_at(key_at, fmt::format("duplicate key '{}'", key), "each key at most once");
    const std::string ctx = fmt::format("key '{}'", key);
    const size_t type_at = cur.pos();
    const GgufValueType type = read_value_type(cur, ctx);
    GgufValue value = read_value(cur, type, ctx, 0);
    check_known_key_type(cur, key, value, type_at);
    index.emplace(key, kv.size());
    kv.emplace_back(std::move(key), std::move(value));
    value_at.push_back(type_at);
  }
  return value_at;
}

uint64_t alignment_from(const Cursor& cur, const KvList& kv, const NameIndex& index,
                        const std::vector<size_t>& value_at) {
  const auto it = index.find("general.alignment");
  if (it == index.end()) return kDefaultAlignment;
  const uint64_t a = kv[it->second].second.as_uint(cur.label() + ": general.alignment");  // U32: checked
  if (a == 0 || (a & (a - 1)) != 0)
    cur.fail_at(value_at[it->second], fmt::format("general.alignment {} is not a power of two", a),
                "a nonzero power of two");
  return a;
}

// The tokenizer indexes scores and token types by token id, so the arrays must line up.
void check_vocab_lengths(const Cursor& cur, const KvList& kv, const NameIndex& index,
                         const std::vector<size_t>& value_at) {
  const auto tokens = index.find("tokenizer.ggml.tokens");
  if (tokens == index.end()) return;
  const size_t n = kv[tokens->second].second.array_size(cur.label());
  for (const char* key : {"tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
    const auto it = index.find(key);
    if (it == index.end()) continue;
    const size_t m = kv[it->second].second.array_size(cur.label());
    if (m != n)
      cur.fail_at(value_at[it->second],
                  fmt::format("key '{}' has {} entries but tokenizer.ggml.tokens has {}", key, m, n),
                  "one entry per token");
  }
}

std::vector<TensorSite> read_tensor_infos(Cursor& cur, const Header& h,
                                          std::vector<GgufTensorInfo>& tensors, NameIndex& index) {
  // Checked again now that the metadata's bytes are known.
  cur.check_count(h.n_tensors_at, h.n_tensors, kMinTensorInfoBytes, "tensor_count");
  std::vector<TensorSite> sites;
  tensors.reserve(static_cast<size_t>(h.n_tensors));
  sites.reserve(static_cast<size_t>(h.n_tensors));
  for (uint64_t i = 0; i < h.n_tensors; ++i) {
    TensorSite site;
    site.info_at = cur.pos();
    GgufTensorInfo t;
    t.name = cur.string("tensor name");
    if (index.count(t.name))
      cur.fail_at(site.info_at, fmt::format("duplicate tensor name '{}'", t.name),
                  "each tensor name at most once");
    t.dims = read_dims(cur, t.name);
    const size_t type_at = cur.pos();
    t.type = read_ggml_type(cur, t.name);
    t.n_bytes = tensor_bytes(cur, type_at, t.name, t.dims, t.type);
    site.offset_at = cur.pos();
    t.offset = cur.u64("tensor data offset");
    index.emplace(t.name, tensors.size());
    tensors.push_back(std::move(t));
    sites.push_back(site);
  }
  return sites;
}

// Checks each tensor's alignment and bounds, points it into the image, and rejects overlaps.
void place_tensors(const Cursor& cur, const uint8_t* base, size_t size, uint64_t data_offset,
                   uint64_t alignment, std::vector<GgufTensorInfo>& tensors,
                   const std::vector<TensorSite>& sites) {
  const uint64_t avail = data_offset <= size ? size - data_offset : 0;  // bytes in the data section
  for (size_t i = 0; i < tensors.size(); ++i) {
    GgufTensorInfo& t = tensors[i];
    if (t.offset % alignment != 0)
      cur.fail_at(sites[i].offset_at,
                  fmt::format("tensor '{}' data offset {} is not a multiple of the alignment", t.name, t.offset),
                  fmt::format("a multiple of {}", alignment));
    if (data_offset > size || t.offset > avail || t.n_bytes > avail - t.offset)
      cur.fail_at(sites[i].offset_at,
                  fmt::format("tensor '{}' data ({} bytes at data offset {}; data section starts at {}) "
                              "runs past end of file",
                              t.name, t.n_bytes, t.offset, data_offset),
                  fmt::format("it to end within the file's {} bytes; file truncated?", size));
    t.data = base + data_offset + t.offset;
  }
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const GgufTensorInfo& prev = tensors[order[k - 1]];
    const GgufTensorInfo& next = tensors[order[k]];
    if (prev.offset + prev.n_bytes > next.offset)  // both lie inside the file: no overflow
      cur.fail_at(sites[order[k]].offset_at,
                  fmt::format("tensor '{}' data overlaps tensor '{}'", next.name, prev.name),
                  fmt::format("data offset >= {}", prev.offset + prev.n_bytes));
  }
}

}  // namespace

void GgufFile::parse(GgufArrays arrays) {
  Cursor cur(base_, size_, path_);
  cur.keep_large_arrays = arrays == GgufArrays::kAll;
  const Header h = read_header(cur, base_);
  version_ = h.version;
  const std::vector<size_t> value_at = read_metadata(cur, h.n_kv, kv_, kv_index_);
  alignment_ = alignment_from(cur, kv_, kv_index_, value_at);
  check_vocab_lengths(cur, kv_, kv_index_, value_at);
  const std::vector<TensorSite> sites = read_tensor_infos(cur, h, tensors_, tensor_index_);
  // The data section starts at the first aligned offset after the infos (cur.pos() <= size < 2^63).
  // A file without tensors usually ends right after the infos, so this may lie past the end.
  data_offset_ = align_up(cur.pos(), alignment_);
  place_tensors(cur, base_, size_, data_offset_, alignment_, tensors_, sites);
}

// ---- Lookups ------------------------------------------------------------------------------------

const GgufValue* GgufFile::find(const std::string& key) const {
  const auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufValue& GgufFile::get(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail("{}: missing key '{}' (expected it in the metadata)", path_, key);
  return *v;
}

namespace {
std::string key_context(const std::string& path, const std::string& key) {
  return fmt::format("{}: key '{}'", path, key);
}
}  // namespace

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  return v->as_int(key_context(path_, key));
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  return v->as_float(key_context(path_, key));
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  return v->as_string(key_context(path_, key));
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  return v->as_bool(key_context(path_, key));
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t) fail("{}: no tensor named '{}' (expected one of its {} tensors)", path_, name, tensors_.size());
  return *t;
}

}  // namespace npullm
