// GGUF v3 writer.
//
// The writer is strict about what it must understand to serialise (value payloads that match
// their declared type, tensor bytes that match dims and type) and deliberately permissive about
// the rest: duplicate keys, duplicate tensor names and wrong types for well-known keys are written
// as given, so tests can build files the reader has to refuse.
#include "formats/gguf.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>

#include <fmt/ranges.h>
#include <unistd.h>

#include "common/error.h"

namespace npullm {

namespace {

constexpr uint64_t kDefaultAlignment = 32;

bool valid_alignment(uint64_t a) {
  return a != 0 && (a & (a - 1)) == 0 && a <= std::numeric_limits<uint32_t>::max();
}

class ByteSink {
 public:
  std::vector<uint8_t> bytes;

  void uint_le(uint64_t v, size_t n) {
    for (size_t i = 0; i < n; ++i) bytes.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u32(uint32_t v) { uint_le(v, 4); }
  void u64(uint64_t v) { uint_le(v, 8); }
  void string(const std::string& s) {
    u64(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t offset) {
    if (bytes.size() < offset) bytes.resize(static_cast<size_t>(offset), 0);
  }
};

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Writes an integer of type `t` after checking it fits the type's width.
void put_integer(ByteSink& out, const GgufValue& v, const std::string& what) {
  size_t width = 0;
  bool is_signed = false;
  switch (v.type) {
    case GgufValueType::U8: width = 1; break;
    case GgufValueType::U16: width = 2; break;
    case GgufValueType::U32: width = 4; break;
    case GgufValueType::U64: width = 8; break;
    case GgufValueType::I8: width = 1; is_signed = true; break;
    case GgufValueType::I16: width = 2; is_signed = true; break;
    case GgufValueType::I32: width = 4; is_signed = true; break;
    case GgufValueType::I64: width = 8; is_signed = true; break;
    default: fail("{}: {} is not an integer type", what, gguf_value_type_name(v.type));
  }
  const int bits = static_cast<int>(width * 8);
  if (is_signed) {
    const int64_t x = v.as_int(what);
    const int64_t lo = bits == 64 ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << (bits - 1));
    const int64_t hi = bits == 64 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << (bits - 1)) - 1;
    if (x < lo || x > hi) fail("{}: value {} does not fit in {}", what, x, gguf_value_type_name(v.type));
    out.uint_le(static_cast<uint64_t>(x), width);
  } else {
    const uint64_t x = v.as_uint(what);
    if (bits < 64 && x >> bits != 0)
      fail("{}: value {} does not fit in {}", what, x, gguf_value_type_name(v.type));
    out.uint_le(x, width);
  }
}

// Writes a value's payload (its type tag is written by the caller: once per key or per array).
void put_payload(ByteSink& out, const GgufValue& v, const std::string& what) {
  switch (v.type) {
    case GgufValueType::F32: out.u32(std::bit_cast<uint32_t>(static_cast<float>(v.as_float(what)))); return;
    case GgufValueType::F64: out.u64(std::bit_cast<uint64_t>(v.as_float(what))); return;
    case GgufValueType::BOOL: out.uint_le(v.as_bool(what) ? 1 : 0, 1); return;
    case GgufValueType::STRING: out.string(v.as_string(what)); return;
    case GgufValueType::ARRAY: {
      const auto& elems = v.as_array(what);
      out.u32(static_cast<uint32_t>(v.elem_type));
      out.u64(elems.size());
      for (size_t i = 0; i < elems.size(); ++i) {
        if (elems[i].type != v.elem_type)
          fail("{}: array element {} has type {} (expected {})", what, i,
               gguf_value_type_name(elems[i].type), gguf_value_type_name(v.elem_type));
        put_payload(out, elems[i], what);
      }
      return;
    }
    default: put_integer(out, v, what); return;
  }
}

GgufValue scalar(GgufValueType t, decltype(GgufValue::v) payload) {
  GgufValue v;
  v.type = t;
  v.v = std::move(payload);
  return v;
}

template <typename T>
GgufValue array_of(GgufValueType elem, const std::vector<T>& xs) {
  GgufValue v;
  v.type = GgufValueType::ARRAY;
  v.elem_type = elem;
  std::vector<GgufValue> elems;
  elems.reserve(xs.size());
  for (const T& x : xs) {
    if constexpr (std::is_same_v<T, float>) elems.push_back(scalar(elem, double{x}));
    else if constexpr (std::is_same_v<T, int32_t>) elems.push_back(scalar(elem, int64_t{x}));
    else elems.push_back(scalar(elem, x));
  }
  v.v = std::move(elems);
  return v;
}

}  // namespace

void GgufWriter::add(const std::string& key, GgufValue value) { kv_.emplace_back(key, std::move(value)); }

void GgufWriter::add_u32(const std::string& key, uint32_t v) { add(key, scalar(GgufValueType::U32, uint64_t{v})); }
void GgufWriter::add_i32(const std::string& key, int32_t v) { add(key, scalar(GgufValueType::I32, int64_t{v})); }
void GgufWriter::add_f32(const std::string& key, float v) { add(key, scalar(GgufValueType::F32, double{v})); }
void GgufWriter::add_bool(const std::string& key, bool v) { add(key, scalar(GgufValueType::BOOL, v)); }
void GgufWriter::add_string(const std::string& key, const std::string& v) {
  add(key, scalar(GgufValueType::STRING, v));
}
void GgufWriter::add_string_array(const std::string& key, const std::vector<std::string>& v) {
  add(key, array_of(GgufValueType::STRING, v));
}
void GgufWriter::add_f32_array(const std::string& key, const std::vector<float>& v) {
  add(key, array_of(GgufValueType::F32, v));
}
void GgufWriter::add_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  add(key, array_of(GgufValueType::I32, v));
}

uint64_t GgufWriter::tensor_bytes(const std::string& name, const std::vector<int64_t>& dims, GgmlType type) {
  const uint32_t id = static_cast<uint32_t>(type);
  if (!ggml_type_known(id)) fail("GgufWriter: tensor '{}': unknown ggml type {}", name, id);
  if (dims.size() > 4) fail("GgufWriter: tensor '{}': {} dims (expected at most 4)", name, dims.size());
  uint64_t rows = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] <= 0) fail("GgufWriter: tensor '{}': dim {} is {} (expected >= 1)", name, d, dims[d]);
    if (d > 0 && __builtin_mul_overflow(rows, static_cast<uint64_t>(dims[d]), &rows))
      fail("GgufWriter: tensor '{}': shape overflows", name);
  }
  const int64_t ne0 = dims.empty() ? 1 : dims[0];
  const GgmlTypeTraits& tr = ggml_type_traits(type);
  if (ne0 % tr.block_size != 0)
    fail("GgufWriter: tensor '{}': dims[0] = {} is not a multiple of the {} block size {}", name, ne0,
         tr.name, tr.block_size);
  uint64_t expected = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(ggml_row_bytes(type, ne0)), rows, &expected))
    fail("GgufWriter: tensor '{}': byte size overflows", name);
  return expected;
}

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> dims, GgmlType type,
                            std::vector<uint8_t> bytes) {
  const uint64_t expected = tensor_bytes(name, dims, type);
  if (bytes.size() != expected)
    fail("GgufWriter: tensor '{}': {} bytes given (expected {} for {} {})", name, bytes.size(), expected,
         ggml_type_name(type), fmt::join(dims, "x"));
  tensors_.push_back(Tensor{name, std::move(dims), type, std::move(bytes), expected, false});
}

void GgufWriter::add_tensor_info(const std::string& name, std::vector<int64_t> dims, GgmlType type) {
  const uint64_t n_bytes = tensor_bytes(name, dims, type);
  tensors_.push_back(Tensor{name, std::move(dims), type, {}, n_bytes, true});
}

std::vector<uint8_t> GgufWriter::header(std::vector<uint64_t>& offsets, uint64_t& alignment_out) const {
  // Placement follows a valid U32 general.alignment when one was added, otherwise set_alignment();
  // a malformed general.alignment (for reader tests) is written as given and data uses alignment_.
  uint64_t alignment = alignment_;
  bool have_alignment_key = false;
  for (const auto& [key, value] : kv_) {
    if (key != "general.alignment") continue;
    have_alignment_key = true;
    if (value.type != GgufValueType::U32 || !value.is_integer()) continue;
    const uint64_t a = value.as_uint("GgufWriter: general.alignment");
    if (!valid_alignment(a)) continue;
    if (alignment_ != kDefaultAlignment && a != alignment_)
      fail("GgufWriter: general.alignment {} conflicts with set_alignment({})", a, alignment_);
    alignment = a;
  }
  if (!valid_alignment(alignment))
    fail("GgufWriter: alignment {} (expected a nonzero power of two that fits in 32 bits)", alignment);
  const bool add_alignment_key = !have_alignment_key && alignment != kDefaultAlignment;

  ByteSink out;
  for (char c : std::string_view("GGUF")) out.bytes.push_back(static_cast<uint8_t>(c));  // magic
  out.u32(3);
  out.u64(tensors_.size());
  out.u64(kv_.size() + (add_alignment_key ? 1 : 0));
  for (const auto& [key, value] : kv_) {
    out.string(key);
    out.u32(static_cast<uint32_t>(value.type));
    put_payload(out, value, fmt::format("GgufWriter: key '{}'", key));
  }
  if (add_alignment_key) {
    out.string("general.alignment");
    out.u32(static_cast<uint32_t>(GgufValueType::U32));
    out.u32(static_cast<uint32_t>(alignment));
  }

  // Tensor infos, with each tensor's data placed at the next aligned offset.
  uint64_t next = 0;
  offsets.clear();
  for (const Tensor& t : tensors_) {
    const uint64_t offset = align_up(next, alignment);
    offsets.push_back(offset);
    next = offset + t.n_bytes;
    out.string(t.name);
    out.u32(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) out.u64(static_cast<uint64_t>(d));
    out.u32(static_cast<uint32_t>(t.type));
    out.u64(offset);
  }
  alignment_out = alignment;
  return std::move(out.bytes);
}

std::vector<uint8_t> GgufWriter::serialize() const {
  for (const Tensor& t : tensors_)
    if (t.streamed) fail("GgufWriter: tensor '{}' has no bytes (declared for write_streaming)", t.name);
  std::vector<uint64_t> offsets;
  uint64_t alignment = 0;
  ByteSink out;
  out.bytes = header(offsets, alignment);
  if (tensors_.empty()) return std::move(out.bytes);  // no data section to align

  const uint64_t data_offset = align_up(out.bytes.size(), alignment);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    out.pad_to(data_offset + offsets[i]);
    out.bytes.insert(out.bytes.end(), tensors_[i].bytes.begin(), tensors_[i].bytes.end());
  }
  return std::move(out.bytes);
}

namespace {

// Writes `path` through a sibling temp file that is renamed into place only when everything was
// written, so a failed write never leaves a half-written model where a good one was. `body` writes
// the content to the open FILE; if it throws, the temp file is removed and the error passed on.
void write_atomically(const std::string& path, const std::function<void(std::FILE*)>& body) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, static_cast<long>(::getpid()));
  // Declared before the FILE so that it outlives fclose(), which may still flush from it.
  std::vector<char> buffer(size_t{1} << 20);  // fewer, larger writes for the many small pieces
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("{}: cannot create {}: {}", path, tmp, std::strerror(errno));
  std::setvbuf(f, buffer.data(), _IOFBF, buffer.size());
  try {
    body(f);
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  const bool wrote = std::ferror(f) == 0;
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) {
    const int err = !wrote ? write_errno : errno;
    std::remove(tmp.c_str());
    fail("{}: cannot write: {}", path, std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail("{}: cannot rename {} into place: {}", path, tmp, std::strerror(err));
  }
}

void put_bytes(std::FILE* f, const std::string& path, const void* data, size_t n) {
  if (n > 0 && std::fwrite(data, 1, n, f) != n) fail("{}: cannot write {} bytes: {}", path, n, std::strerror(errno));
}

}  // namespace

void GgufWriter::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = serialize();
  write_atomically(path, [&](std::FILE* f) { put_bytes(f, path, bytes.data(), bytes.size()); });
}

uint64_t GgufWriter::write_streaming(const std::string& path, const TensorFill& fill) const {
  std::vector<uint64_t> offsets;
  uint64_t alignment = 0;
  const std::vector<uint8_t> head = header(offsets, alignment);
  uint64_t written = 0;
  write_atomically(path, [&](std::FILE* f) {
    put_bytes(f, path, head.data(), head.size());
    written = head.size();
    if (tensors_.empty()) return;
    const uint64_t data_offset = align_up(head.size(), alignment);
    const std::vector<uint8_t> zeros(static_cast<size_t>(alignment), 0);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Tensor& t = tensors_[i];
      const uint64_t start = data_offset + offsets[i];
      put_bytes(f, path, zeros.data(), static_cast<size_t>(start - written));  // < alignment bytes
      written = start;
      if (!t.streamed) {
        put_bytes(f, path, t.bytes.data(), t.bytes.size());
        written += t.bytes.size();
        continue;
      }
      uint64_t got = 0;
      fill(i, [&](const void* data, size_t n) {
        if (got + n > t.n_bytes)
          fail("GgufWriter: tensor '{}': more than the expected {} bytes were written", t.name, t.n_bytes);
        put_bytes(f, path, data, n);
        got += n;
      });
      if (got != t.n_bytes)
        fail("GgufWriter: tensor '{}': {} bytes were written (expected {})", t.name, got, t.n_bytes);
      written += got;
    }
  });
  return written;
}

}  // namespace npullm
