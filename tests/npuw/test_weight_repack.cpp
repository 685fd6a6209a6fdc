// Weights repacked into the layout the CPU device prefers (formats/weight_layout.h: Panels16) give
// the same logits, bit for bit, as the GGUF layout; the packed forms are built once, kept beside
// the blob cache and read (onto huge pages) or mapped on the next start, and a damaged one, or one made from other weight
// values under the same GGUF header, is rebuilt.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "device/cpu/cpu_device.h"
#include "device/cpu/kernels.h"
#include "formats/gguf.h"
#include "model/synth.h"
#include "npuw/llm_runtime.h"
#include "test_util.h"

namespace npullm {
namespace {

namespace fs = std::filesystem;

struct RunResult {
  std::vector<float> logits;  // prefill (every row) then each decode step's
  npuw::RuntimeStats stats;
};

RunResult run(const std::string& model, bool repack, const std::string& cache_dir, bool huge_pages = true) {
  npuw::RuntimeConfig cfg;
  cfg.huge_pages = huge_pages;
  cfg.prefill_chunk = 16;
  cfg.variants = {64};
  cfg.threads = 2;
  cfg.all_logits = true;
  cfg.repack_weights = repack;
  cfg.use_cache = !cache_dir.empty();
  cfg.cache_dir = cache_dir;
  npuw::LlmRuntime rt(model, cfg);
  std::vector<int32_t> ids(21);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 5) % static_cast<size_t>(rt.n_vocab()));
  RunResult r;
  rt.prefill(ids, &r.logits);
  int32_t next = 1;
  for (int step = 0; step < 6; ++step) {
    const auto l = rt.decode(next);
    r.logits.insert(r.logits.end(), l.begin(), l.end());
    next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  }
  r.stats = rt.stats();
  return r;
}

using test::same_bits;

TEST(WeightRepack, SameLogitsBuiltOnceThenMappedRebuiltWhenDamagedOrStale) {
  if (cpu::create_cpu_device(1)->panels16_types().empty())
    NPULLM_SKIP_UNSUPPORTED("this CPU's device keeps every weight in the GGUF layout (no AVX-512)");
  const fs::path dir = fs::temp_directory_path() / ("npullm-repack-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // Q4_K_M mixes Q4_K, Q6_K and, for the narrow tensors, the 32-element types; Q8_0 and Q4_0 whole.
  for (const char* type : {"Q4_K_M", "Q8_0", "Q4_0"}) {
    SCOPED_TRACE(type);
    const std::string model = (dir / (std::string(type) + ".gguf")).string();
    test::write_synth(model, "tiny", type, 3);
    const std::string cache = (dir / (std::string("cache-") + type)).string();

    // The GGUF layout, mapped from the file (no huge pages): the reference.
    const RunResult rows = run(model, false, "", false);
    EXPECT_EQ(rows.stats.packed_weights_built, 0);
    EXPECT_TRUE(same_bits(run(model, false, "").logits, rows.logits)) << "GGUF layout copied onto huge pages";
    const RunResult first = run(model, true, cache);
    EXPECT_GT(first.stats.packed_weights_built, 0);
    EXPECT_EQ(first.stats.packed_weights_cached, 0);
    EXPECT_GT(first.stats.huge_page_weight_bytes, 0);
    EXPECT_TRUE(same_bits(first.logits, rows.logits));

    const RunResult second = run(model, true, cache);
    EXPECT_EQ(second.stats.packed_weights_built, 0);
    EXPECT_EQ(second.stats.packed_weights_cached, first.stats.packed_weights_built);
    EXPECT_EQ(second.stats.compiled_blobs, 0);
    EXPECT_TRUE(same_bits(second.logits, rows.logits));
    const RunResult mapped = run(model, true, cache, false);  // the packed files mapped, not copied
    EXPECT_EQ(mapped.stats.packed_weights_cached, first.stats.packed_weights_built);
    EXPECT_TRUE(same_bits(mapped.logits, rows.logits));

    // Damage one packed file (cut short, then a wrong header): rebuilt, same logits.
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(cache))
      if (e.path().extension() == ".w") files.push_back(e.path());
    ASSERT_EQ(static_cast<int64_t>(files.size()), first.stats.packed_weights_built);
    fs::resize_file(files[0], fs::file_size(files[0]) - 1);
    const RunResult cut = run(model, true, cache);
    EXPECT_EQ(cut.stats.packed_weights_built, 1);
    EXPECT_TRUE(same_bits(cut.logits, rows.logits));
    {
      FILE* f = std::fopen(files[1].c_str(), "r+b");
      ASSERT_NE(f, nullptr);
      std::fputc('X', f);  // the magic
      std::fclose(f);
    }
    const RunResult bad = run(model, true, cache);
    EXPECT_EQ(bad.stats.packed_weights_built, 1);
    EXPECT_TRUE(same_bits(bad.logits, rows.logits));
    // One flipped byte in the packed data of every file (header intact): each is caught by its
    // hash and rebuilt, and the logits stay those of the GGUF layout.
    for (const fs::path& file : files) {
      FILE* f = std::fopen(file.c_str(), "r+b");
      ASSERT_NE(f, nullptr);
      const long at_byte = 128 + static_cast<long>((fs::file_size(file) - 128) / 2);
      std::fseek(f, at_byte, SEEK_SET);
      const int c = std::fgetc(f);
      std::fseek(f, at_byte, SEEK_SET);
      std::fputc(c ^ 0x10, f);
      std::fclose(f);
    }
    const RunResult flipped = run(model, true, cache);
    EXPECT_EQ(flipped.stats.packed_weights_built, first.stats.packed_weights_built);
    EXPECT_EQ(flipped.stats.packed_weights_cached, 0);
    EXPECT_TRUE(same_bits(flipped.logits, rows.logits));

    // New weight values under the same header (the blob cache key): the packed forms are rebuilt
    // when the file's time changed, and from the samples when even the time is put back.
    const std::string tensor = "blk.1.ffn_up.weight";
    uint64_t at = 0;
    {
      auto f = GgufFile::open(model);
      at = f->data_offset() + f->tensor(tensor).offset + 64;
    }
    for (bool keep_time : {false, true}) {
      SCOPED_TRACE(keep_time ? "time put back" : "time changed");
      const auto time = fs::last_write_time(model);
      {
        FILE* f = std::fopen(model.c_str(), "r+b");
        ASSERT_NE(f, nullptr);
        std::fseek(f, static_cast<long>(at), SEEK_SET);
        for (int i = 0; i < 32; ++i) std::fputc(keep_time ? 0x11 * i : 0x5A ^ i, f);
        std::fclose(f);
      }
      if (keep_time) fs::last_write_time(model, time);
      const RunResult fresh = run(model, false, "");
      EXPECT_FALSE(same_bits(fresh.logits, rows.logits)) << "the edit changes the model";
      const RunResult repacked = run(model, true, cache);
      EXPECT_GE(repacked.stats.packed_weights_built, 1);
      EXPECT_TRUE(same_bits(repacked.logits, fresh.logits));
    }
  }
  fs::remove_all(dir);
}

// Weights kept in the GGUF layout are copied onto huge pages from 2 MiB up (here the F16 token
// embedding and output projection of the tiny shape, 2 MiB each) and give the bits of the mapping.
TEST(WeightRepack, GgufLayoutWeightsOnHugePagesGiveTheBitsOfTheMapping) {
  const fs::path dir = fs::temp_directory_path() / ("npullm-huge-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string model = (dir / "F16.gguf").string();
  test::write_synth(model, "tiny", "F16", 5);
  const RunResult mapped = run(model, true, "", false);
  const RunResult copied = run(model, true, "", true);
  EXPECT_EQ(mapped.stats.huge_page_weight_bytes, 0);
  EXPECT_EQ(copied.stats.huge_page_weight_bytes, 2 * 4096 * 256 * 2) << "token_embd and output, nothing smaller";
  EXPECT_TRUE(same_bits(copied.logits, mapped.logits));
  fs::remove_all(dir);
}

// The CPU device asks for Panels16 only for types its matmul reads in that layout.
TEST(WeightRepack, DeviceAsksOnlyForLayoutsItsKernelsRead) {
  for (GgmlType t : cpu::create_cpu_device(1)->panels16_types())
    EXPECT_TRUE(cpu::matmul_reads_panels16(t, 256)) << ggml_type_name(t);
}

}  // namespace
}  // namespace npullm
