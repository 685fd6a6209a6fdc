// The model loader on top of the GGUF reader, everything that turns a GGUF into a model
// description without running it: hyper-parameters (HParams::from_gguf), the K/V type check, the
// IR graphs (forward, forward with chosen logit rows, key re-rotation) with every weight's shape
// checked, and the vocabulary (Vocab::from_gguf) with the tokenizer built from it.
//
// The input is the GGUF's header (metadata and tensor table); the harness places it at the start
// of a 32 MiB zero-filled image, so seeds cut from real models at their data section (make_seeds)
// keep every tensor in bounds without each run copying megabytes of weights the loader never reads.
#include <sys/mman.h>

#include <cstdint>
#include <cstring>

#include "formats/gguf.h"
#include "fuzz_util.h"
#include "genai/tokenizer/tokenizer.h"
#include "model/hparams.h"
#include "model/llama_graph.h"

using namespace npullm;

namespace {
constexpr size_t kImage = size_t{32} << 20;
uint8_t* g_image = nullptr;
size_t g_dirty = 0;  // bytes of g_image the previous input wrote
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  void* p = ::mmap(nullptr, kImage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fuzz::die("cannot map the 32 MiB image");
  g_image = static_cast<uint8_t*>(p);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kImage) return 0;
  std::memset(g_image, 0, g_dirty);
  std::memcpy(g_image, data, size);
  g_dirty = size;
  fuzz::expect_ok_or_error([&] {
    auto f = GgufFile::from_memory(g_image, kImage, "fuzz.gguf");
    fuzz::expect_ok_or_error([&] {
      const model::HParams hp = model::HParams::from_gguf(*f);
      fuzz::expect_ok_or_error([&] { model::check_kv_type(hp, GgmlType::Q8_0); });
      (void)model::build_llama_graph(hp, *f, GgmlType::F16, {.logit_rows = true});
      (void)model::build_rerotate_graph(hp, *f, GgmlType::F16);
    });
    genai::Tokenizer tok(genai::Vocab::from_gguf(*f));
    const std::vector<int32_t> ids = tok.encode("Hello world <|im_start|>user\n 123 \xe2\x96\x81x", true, true);
    (void)tok.decode(ids, true);
  });
  return 0;
}
