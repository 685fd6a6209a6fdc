// GGUF reader over a read-only mmap.
//
// GgufFile::open() validates the whole header eagerly — every metadata value, every tensor info,
// alignment, and that every tensor's bytes lie inside the file — so that nothing later can read
// out of bounds. Any problem is an npullm::Error naming the file, the byte offset and what was
// expected. Tensor data is never copied: tensor(i).data points into the mapping, which lives as long
// as the GgufFile.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "formats/ggml_types.h"

namespace npullm {

enum class GgufValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
  U64 = 10, I64 = 11, F64 = 12,
};

// How much of the metadata GgufFile keeps. kWithoutLarge: an array of more than kGgufLargeArray
// elements is read and checked as any other but only its length is kept. Those are a vocabulary's
// tokens, scores, types and merges, a GgufValue of ~48 bytes an element (7 MiB of heap for a
// 151,936-token Qwen2.5 vocabulary, more with its merges) that a runtime never reads: the tokenizer
// builds its own tables from a reader that keeps them and lets it go.
enum class GgufArrays { kAll, kWithoutLarge };
inline constexpr uint64_t kGgufLargeArray = 4096;

// One metadata value. Arrays keep their element type (nested arrays are arrays of GgufValue); an
// array that was not kept (GgufArrays::kWithoutLarge) holds its length (uint64_t) instead.
struct GgufValue {
  GgufValueType type = GgufValueType::U8;
  GgufValueType elem_type = GgufValueType::U8;  // for ARRAY
  std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<GgufValue>> v;

  bool is_array() const { return type == GgufValueType::ARRAY; }
  bool is_string() const { return type == GgufValueType::STRING; }
  bool is_integer() const;  // any of U8..I64 (not bool, not float)
  // Typed access; each throws npullm::Error naming `what` if the type does not fit.
  int64_t as_int(const std::string& what) const;       // integer types (range-checked into int64)
  uint64_t as_uint(const std::string& what) const;     // non-negative integers
  double as_float(const std::string& what) const;      // F32/F64 and integers
  bool as_bool(const std::string& what) const;
  const std::string& as_string(const std::string& what) const;
  const std::vector<GgufValue>& as_array(const std::string& what) const;  // throws for an array not kept
  size_t array_size(const std::string& what) const;                       // kept or not
  bool is_kept_array() const { return is_array() && std::holds_alternative<std::vector<GgufValue>>(v); }
};

std::string_view gguf_value_type_name(GgufValueType t);

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // GGUF order: dims[0] (ne0) is the fastest-varying (row length)
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;        // relative to the data section
  uint64_t n_bytes = 0;       // computed from dims and type
  const uint8_t* data = nullptr;  // points into the mapping

  int64_t n_elements() const;
  int64_t rows() const;       // product of dims[1..]
};

class GgufFile {
 public:
  // Maps and validates `path`. Throws npullm::Error with "<path>: <problem> at offset N".
  static std::unique_ptr<GgufFile> open(const std::string& path, GgufArrays arrays = GgufArrays::kAll);
  // Validates an in-memory image (not copied; must outlive the GgufFile). `label` names it in errors.
  static std::unique_ptr<GgufFile> from_memory(const uint8_t* data, size_t size, std::string label,
                                               GgufArrays arrays = GgufArrays::kAll);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  size_t file_size() const { return size_; }
  const uint8_t* file_data() const { return base_; }

  // Metadata in file order and by key.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(const std::string& key) const;      // nullptr when absent
  const GgufValue& get(const std::string& key) const;       // throws "missing key" when absent

  // Convenience getters that check the value type; throw naming the key when it is wrong.
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;  // nullptr when absent
  const GgufTensorInfo& tensor(const std::string& name) const;       // throws when absent
  // Hands the pages of a tensor back to the page cache (the mapping stays valid: a later read
  // faults them in again). For a tensor only read once, to build another form of it, so that it
  // does not stay in this process's resident memory. No effect on an in-memory image.
  void release(const GgufTensorInfo& t) const;
  // The same for the whole pages inside bytes [offset, offset + bytes) of the tensor.
  void release(const GgufTensorInfo& t, uint64_t offset, uint64_t bytes) const;
  // The same for the whole pages before the data section: the header, whose values were copied
  // out by the parse (a 150k-token vocabulary is ~2 MB of it).
  void release_header() const;

 private:
  GgufFile() = default;
  void parse(GgufArrays arrays);

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool owns_mapping_ = false;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Writes GGUF v3 files (used by tests to build small and malformed models, and later by `synth`).
class GgufWriter {
 public:
  void set_alignment(uint64_t a) { alignment_ = a; }
  void add(const std::string& key, GgufValue value);
  // Convenience setters.
  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string(const std::string& key, const std::string& v);
  void add_string_array(const std::string& key, const std::vector<std::string>& v);
  void add_f32_array(const std::string& key, const std::vector<float>& v);
  void add_i32_array(const std::string& key, const std::vector<int32_t>& v);
  // Adds a tensor whose bytes are already in `type` layout (size must match dims and type).
  void add_tensor(const std::string& name, std::vector<int64_t> dims, GgmlType type,
                  std::vector<uint8_t> bytes);
  std::vector<uint8_t> serialize() const;
  void write(const std::string& path) const;  // throws npullm::Error on I/O failure

  // Streaming, for files too large to hold in memory (`npullm synth`): a tensor declared with
  // add_tensor_info() has a shape and type but no bytes yet; write_streaming() writes the header,
  // then for each such tensor, in order, calls `fill` with a sink that must receive exactly the
  // tensor's byte count (in as many pieces as the caller likes). Tensors added with add_tensor()
  // are written from their bytes. serialize() and write() refuse declared-only tensors.
  using TensorSink = std::function<void(const void* data, size_t n)>;
  using TensorFill = std::function<void(size_t index, const TensorSink& sink)>;
  void add_tensor_info(const std::string& name, std::vector<int64_t> dims, GgmlType type);
  // Like write(): a temp file renamed into place, so a failure (an I/O error, or `fill` throwing or
  // giving the wrong byte count) never leaves a partial file at `path`. Returns the file size.
  uint64_t write_streaming(const std::string& path, const TensorFill& fill) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    GgmlType type;
    std::vector<uint8_t> bytes;
    uint64_t n_bytes = 0;   // == bytes.size() unless streamed
    bool streamed = false;  // declared by add_tensor_info(): bytes come from write_streaming's fill
  };
  // Validates a tensor's shape and type and returns its byte size (throws naming the tensor).
  static uint64_t tensor_bytes(const std::string& name, const std::vector<int64_t>& dims, GgmlType type);
  // Everything before the data section (not yet padded to its start); `offsets` receives each
  // tensor's data offset relative to that start and `alignment` the data alignment in force.
  std::vector<uint8_t> header(std::vector<uint64_t>& offsets, uint64_t& alignment) const;

  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace npullm
