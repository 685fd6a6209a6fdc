// Sequence slots and batched generate blobs (DESIGN rule 7: same answer whatever the batch).
// Each sequence is first run alone in a one-slot runtime; then the same sequences run in one
// runtime with several slots, arriving at different steps, decoded together in batches of
// changing size and company, with other slots' prompts prefilled between the steps. Every
// sequence's greedy ids must be identical to its run alone, and so must its logits, bit for bit
// (a row of a batched matmul is computed as the same row alone). The K/V state of each slot must
// be that of its run alone, and nothing is copied per token.
#include <gtest/gtest.h>

#include <cstring>

#include "common/error.h"
#include "genai/sampling/sampler.h"
#include "npuw/llm_runtime.h"
#include "test_util.h"

namespace npullm {
namespace {

struct Seq {
  std::vector<int32_t> prompt;
  int64_t arrives = 0;  // decode step at which it joins
  int64_t n_new = 0;
};

struct Model {
  const char* path;
  std::vector<int32_t> (*tokens)();
};

std::vector<int32_t> stories_tokens() {
  return test::stories_sequence();
}

std::vector<int32_t> golden_tokens() {
  return test::golden_tokens("golden/qwen2-gpt2.Q4_0.json");
}

// Five sequences cut from the model's reference tokens at different places and lengths.
std::vector<Seq> make_seqs(const std::vector<int32_t>& src) {
  std::vector<Seq> out;
  const int64_t starts[] = {0, 3, 7, 1, 11}, lens[] = {5, 12, 3, 20, 9}, arrive[] = {0, 0, 2, 5, 9}, n_new[] = {24, 16, 30, 12, 20};
  for (int i = 0; i < 5; ++i) {
    Seq s;
    for (int64_t k = 0; k < lens[i]; ++k) s.prompt.push_back(src[static_cast<size_t>((starts[i] + k) % static_cast<int64_t>(src.size()))]);
    s.arrives = arrive[i];
    s.n_new = n_new[i];
    out.push_back(s);
  }
  return out;
}

npuw::RuntimeConfig config(int64_t parallel) {
  npuw::RuntimeConfig cfg;
  cfg.use_cache = false;
  cfg.variants = {16, 32, 64};
  cfg.prefill_chunk = 8;
  cfg.parallel = parallel;
  cfg.threads = 2;
  return cfg;
}

struct Trace {
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> logits;  // after each generated token's input
};

Trace run_alone(const std::string& path, const Seq& s) {
  npuw::LlmRuntime rt(path, config(1));
  Trace t;
  std::span<const float> lg = rt.prefill(s.prompt);
  for (int64_t i = 0; i < s.n_new; ++i) {
    const int32_t id = genai::argmax(lg);
    t.ids.push_back(id);
    t.logits.emplace_back(lg.begin(), lg.end());
    if (i + 1 < s.n_new) lg = rt.decode(id);
  }
  return t;
}

class BatchedDecode : public ::testing::TestWithParam<Model> {};

// Runs `seqs` through a runtime of `slots` slots (arrivals at their steps, a free slot each) and
// checks every sequence against its run alone.
void check_against_alone(const std::string& path, const std::vector<Seq>& seqs, int64_t slots, const std::vector<int64_t>& want_batches) {
  std::vector<Trace> alone;
  for (const Seq& s : seqs) alone.push_back(run_alone(path, s));
  npuw::LlmRuntime rt(path, config(slots));
  const int64_t V = rt.n_vocab();
  struct Live {
    size_t seq;
    int64_t slot;
    int32_t next;
    int64_t produced = 0;
  };
  std::vector<Live> live;
  std::vector<Trace> got(seqs.size());
  std::vector<bool> free_slot(static_cast<size_t>(slots), true);
  size_t joined = 0;
  for (int64_t step = 0; joined < seqs.size() || !live.empty(); ++step) {
    ASSERT_LT(step, 400);
    // Arrivals: prefill between decode steps into a free slot (a used slot is reset first).
    while (joined < seqs.size() && seqs[joined].arrives <= step) {
      int64_t slot = -1;
      for (int64_t k = 0; k < slots; ++k)
        if (free_slot[static_cast<size_t>(k)]) { slot = k; break; }
      if (slot < 0) break;
      free_slot[static_cast<size_t>(slot)] = false;
      rt.reset(slot);
      std::span<const float> lg = rt.prefill_slot(slot, seqs[joined].prompt);
      Live l{joined, slot, genai::argmax(lg)};
      got[joined].ids.push_back(l.next);
      got[joined].logits.emplace_back(lg.begin(), lg.end());
      l.produced = 1;
      live.push_back(l);
      ++joined;
    }
    // One batched step for every live sequence that still wants a token.
    std::vector<npuw::SlotToken> batch;
    std::vector<size_t> who;
    for (size_t i = 0; i < live.size(); ++i)
      if (live[i].produced < seqs[live[i].seq].n_new) {
        batch.push_back({live[i].slot, live[i].next});
        who.push_back(i);
      }
    if (!batch.empty()) {
      const std::span<const float> lg = rt.decode_batch(batch);
      ASSERT_EQ(lg.size(), batch.size() * static_cast<size_t>(V));
      for (size_t r = 0; r < batch.size(); ++r) {
        Live& l = live[who[r]];
        const std::span<const float> row = lg.subspan(r * static_cast<size_t>(V), static_cast<size_t>(V));
        l.next = genai::argmax(row);
        got[l.seq].ids.push_back(l.next);
        got[l.seq].logits.emplace_back(row.begin(), row.end());
        l.produced++;
      }
    }
    // Finished sequences leave; their slot is free for the next arrival.
    for (size_t i = 0; i < live.size();) {
      if (live[i].produced >= seqs[live[i].seq].n_new) {
        EXPECT_EQ(rt.position(live[i].slot), static_cast<int64_t>(seqs[live[i].seq].prompt.size()) + seqs[live[i].seq].n_new - 1);
        free_slot[static_cast<size_t>(live[i].slot)] = true;
        live.erase(live.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    SCOPED_TRACE("sequence " + std::to_string(i));
    EXPECT_EQ(got[i].ids, alone[i].ids);
    ASSERT_EQ(got[i].logits.size(), alone[i].logits.size());
    for (size_t k = 0; k < got[i].logits.size(); ++k)
      ASSERT_EQ(0, std::memcmp(got[i].logits[k].data(), alone[i].logits[k].data(), got[i].logits[k].size() * 4))
          << "logits differ at generated token " << k;
  }
  const npuw::RuntimeStats& st = rt.stats();
  EXPECT_EQ(st.kv_bytes_copied, 0);
  EXPECT_GT(st.batched_steps, 0);
  for (int64_t b : want_batches) EXPECT_TRUE(st.batch_sizes_used.count(b)) << "the schedule should use B = " << b;
  EXPECT_GT(st.padded_rows, 0);  // e.g. 3 live sequences run in the B = 4 blob
}

TEST_P(BatchedDecode, EverySequenceGetsItsAloneAnswerWhateverItsCompany) {
  const std::string rel = GetParam().path;
  NPULLM_REQUIRE_SHARED(rel);
  // 4 slots for 5 sequences: the last one takes the slot the first frees.
  check_against_alone(test::shared_path(rel), make_seqs(GetParam().tokens()), 4, {2, 4});
}

// Eight at once (the B = 8 blob, whose matmuls take 8 rows of x in one pass over each weight
// panel), then fewer as they finish.
TEST_P(BatchedDecode, EightSequencesAtOnce) {
  const std::string rel = GetParam().path;
  NPULLM_REQUIRE_SHARED(rel);
  std::vector<Seq> seqs = make_seqs(GetParam().tokens());
  const std::vector<Seq> more = make_seqs(GetParam().tokens());
  seqs.insert(seqs.end(), more.begin(), more.begin() + 3);
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].arrives = 0;
    seqs[i].n_new = 10 + 2 * static_cast<int64_t>(i);
    seqs[i].prompt.push_back(seqs[(i + 1) % seqs.size()].prompt.front());  // 8 different prompts
  }
  check_against_alone(test::shared_path(rel), seqs, 8, {8, 4});
}

std::vector<int32_t> moe_tokens() {
  return test::golden_tokens("golden/moe/qwen3moe-spm.Q4_K_M.json");
}

std::string model_name(size_t index) {
  static const char* const names[] = {"stories260K", "qwen2_Q4_0", "qwen3moe_Q4_K_M", "gpt_oss_MXFP4"};
  return names[index];
}

// The mixtures of experts too: a batch's tokens are grouped by expert (each chosen slab read once
// for all its rows), and each row still gets the bits it gets alone.
INSTANTIATE_TEST_SUITE_P(Models, BatchedDecode,
                         ::testing::Values(Model{"models/llama2c/stories260K.gguf", stories_tokens},
                                           Model{"golden/qwen2-gpt2.Q4_0.gguf", golden_tokens},
                                           Model{"golden/moe/qwen3moe-spm.Q4_K_M.gguf", moe_tokens},
                                           Model{"golden/moe/gpt-oss-spm.MXFP4_MOE.gguf", moe_tokens}),
                         [](const auto& info) { return model_name(info.index); });

// A slot's K/V rows are its own: prefilling one slot leaves another's state as it was, and a
// slot truncated to a prefix continues exactly as a fresh run of that prefix would.
TEST(SequenceSlots, RegionsAreSeparateAndAPrefixIsReused) {
  NPULLM_REQUIRE_SHARED("models/llama2c/stories260K.gguf");
  const std::string path = test::shared_path("models/llama2c/stories260K.gguf");
  const std::vector<int32_t> t = stories_tokens();
  npuw::LlmRuntime rt(path, config(3));
  const std::vector<int32_t> a(t.begin(), t.begin() + 10), b(t.begin() + 5, t.begin() + 30);
  rt.prefill_slot(1, a);
  const std::vector<float> before = rt.get_state("blk.0.key", 1);
  rt.prefill_slot(2, b);
  rt.prefill_slot(0, b);
  EXPECT_EQ(rt.get_state("blk.0.key", 1), before);
  EXPECT_EQ(rt.position(1), 10);
  EXPECT_EQ(rt.position(2), 25);

  // Slot 2 keeps the first 6 of b and prefills the rest of another prompt sharing them.
  std::vector<int32_t> c(b.begin(), b.begin() + 6);
  c.insert(c.end(), t.begin() + 40, t.begin() + 47);
  rt.truncate(2, 6);
  const std::vector<int32_t> rest(c.begin() + 6, c.end());
  const std::span<const float> reused = rt.prefill_slot(2, rest);
  const std::vector<float> reused_logits(reused.begin(), reused.end());
  npuw::LlmRuntime fresh(path, config(1));
  const std::span<const float> whole = fresh.prefill(c);
  ASSERT_EQ(reused_logits.size(), whole.size());
  EXPECT_EQ(0, std::memcmp(reused_logits.data(), whole.data(), whole.size() * 4));

  EXPECT_THROW(rt.prefill_slot(3, a), Error);
  const npuw::SlotToken twice[] = {{1, 5}, {1, 6}};
  EXPECT_THROW(rt.decode_batch(twice), Error);
  EXPECT_THROW(rt.truncate(1, 11), Error);
}

}  // namespace
}  // namespace npullm
