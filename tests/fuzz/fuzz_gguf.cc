// GGUF reader: header, metadata values (every type, nested arrays), tensor table, alignment and
// tensor placement. The input is the whole file. Each successful parse is walked the way the
// runtime walks it: every value through its typed accessors, every tensor's element count.
#include <cstdint>
#include <memory>

#include "formats/gguf.h"
#include "fuzz_util.h"

using namespace npullm;

namespace {
// Every accessor on a top-level value (most throw: a type mismatch); inside arrays only the ones
// that fit, so that a 256-entry vocabulary does not cost a thousand exceptions a run.
void walk(const GgufValue& v, const std::string& key, bool all) {
  if (all || v.is_integer()) {
    fuzz::expect_ok_or_error([&] { (void)v.as_int(key); });
    fuzz::expect_ok_or_error([&] { (void)v.as_uint(key); });
    fuzz::expect_ok_or_error([&] { (void)v.as_float(key); });
  }
  if (all || v.type == GgufValueType::F32 || v.type == GgufValueType::F64) (void)v.as_float(key);
  if (all || v.type == GgufValueType::BOOL) fuzz::expect_ok_or_error([&] { (void)v.as_bool(key); });
  if (all || v.is_string()) fuzz::expect_ok_or_error([&] { (void)v.as_string(key); });
  if (v.is_array())
    for (const GgufValue& e : v.as_array(key)) walk(e, key, false);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The runtime's reader (GgufArrays::kWithoutLarge: large arrays kept as their length) accepts
  // exactly what the full reader accepts and knows every array's length.
  std::unique_ptr<GgufFile> lean;
  fuzz::expect_ok_or_error([&] { lean = GgufFile::from_memory(data, size, "fuzz.gguf", GgufArrays::kWithoutLarge); });
  bool full_ok = false;
  fuzz::expect_ok_or_error([&] {
    auto f = GgufFile::from_memory(data, size, "fuzz.gguf");
    full_ok = true;
    if (!lean || lean->metadata().size() != f->metadata().size()) __builtin_trap();
    for (size_t i = 0; i < f->metadata().size(); ++i) {
      const std::string& key = f->metadata()[i].first;  // (not a structured binding: lambdas capture it below)
      const GgufValue& value = f->metadata()[i].second;
      const GgufValue& small = lean->metadata()[i].second;
      if (value.is_array() && small.array_size(key) != value.array_size(key)) __builtin_trap();
      if (!small.is_kept_array()) fuzz::expect_ok_or_error([&] { (void)small.as_array(key); });
    }
    for (const auto& [key, value] : f->metadata()) walk(value, key, true);
    for (const GgufTensorInfo& t : f->tensors()) {
      (void)t.n_elements();
      (void)t.rows();
      if (t.n_bytes > 0) {  // the reader promised these bytes lie inside the image
        volatile uint8_t first = t.data[0], last = t.data[t.n_bytes - 1];
        (void)first;
        (void)last;
      }
    }
    (void)f->get_string("general.architecture");
    (void)f->get_int("general.alignment");
  });
  if (lean && !full_ok) __builtin_trap();
  return 0;
}
