// Tests of the compiled-blob file format (src/blob/blob_elf.cpp): round trip, `readelf -a`
// cleanliness, and that read_blob refuses every kind of damage with an npullm::Error that says
// where — never a crash (run these under -fsanitize=address,undefined too).
//
// The helpers below parse the ELF with <elf.h> independently of blob_elf.cpp, and re-seal the
// .npu.check checksums from the layout documented there, so that damage *behind* the checksums
// (bad symbol indices, strings, ...) reaches the deeper checks of read_blob.
#include <elf.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "blob/blob_image.h"
#include "blob/task.h"
#include "common/error.h"
#include "test_util.h"

namespace npullm::blob {
namespace {

constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8, kI32 = 26;
constexpr uint64_t kTask = sizeof(TaskDesc);

uint64_t ptr_slot(uint32_t task, int k) { return task * kTask + offsetof(TaskDesc, ptr) + 8 * k; }

TaskDesc task(OpCode op, uint32_t stage) {
  TaskDesc t{};
  t.op = static_cast<uint32_t>(op);
  t.stage = stage;
  return t;
}

// A small prefill-like blob: 8 positions, model width 64, 2 heads of 32, a 16-row KV state.
BlobImage make_image() {
  BlobImage img;
  img.meta_json = R"({"name":"prefill_s8","config":{"chunk":8,"threads":4}})";

  img.ios = {
      {"tokens", IoRole::Input, kI32, {8}, 32},
      {"positions", IoRole::Input, kI32, {8}, 32},
      {"attention_mask", IoRole::Input, kF32, {8, 16}, 512},
      {"logits", IoRole::Output, kF32, {8, 64}, 2048},
      {"past_key_values.0.key", IoRole::State, kF16, {16, 2, 32}, 2048},
      {"past_key_values.0.value", IoRole::State, kF16, {16, 2, 32}, 2048},
  };
  img.weights = {
      {"token_embd.weight", kQ8_0, {64, 64}, 64 * 2 * 34},
      {"blk.0.attn_norm.weight", kF32, {64}, 256},
      {"output.weight", kQ4_0, {64, 64}, 64 * 2 * 18 + 64, 16},  // panels16
  };
  img.consts.resize(128);
  for (size_t i = 0; i < img.consts.size(); ++i) img.consts[i] = static_cast<uint8_t>(i * 7 + 3);
  img.scratch_bytes = 8192;

  // Stage 0: embedding. Stage 1: norm, output projection, attention (independent in this toy).
  TaskDesc embed = task(OpCode::Embed, 0);
  embed.type[0] = kQ8_0;
  embed.type[1] = kI32;
  embed.dim[0] = 8, embed.dim[1] = 64, embed.dim[2] = 64;

  TaskDesc norm = task(OpCode::RmsNorm, 1);
  norm.dim[0] = 8, norm.dim[1] = 64;
  norm.fparam[0] = 1e-5f;

  TaskDesc mm = task(OpCode::MatMul, 1);
  mm.type[1] = kQ4_0;
  mm.dim[0] = 8, mm.dim[1] = 64, mm.dim[2] = 64;

  TaskDesc att = task(OpCode::Attention, 1);
  att.type[1] = kF16, att.type[2] = kF16;
  att.dim[0] = 8, att.dim[1] = 2, att.dim[2] = 2, att.dim[3] = 32, att.dim[4] = 16;
  att.fparam[0] = 1.0f / std::sqrt(32.0f);
  att.iparam[3] = -7;

  img.tasks = {embed, norm, mm, att};
  img.barriers = {{1, 0}, {3, 0}};

  img.relocs = {
      {ptr_slot(0, 0), RelocKind::Weight, 0, 0},      // embed table
      {ptr_slot(0, 1), RelocKind::Io, 0, 0},          // token ids
      {ptr_slot(0, 2), RelocKind::Scratch, 0, 0},     // x
      {ptr_slot(1, 0), RelocKind::Scratch, 0, 0},     // x
      {ptr_slot(1, 1), RelocKind::Weight, 1, 0},      // norm weight
      {ptr_slot(1, 2), RelocKind::Scratch, 0, 2048},  // xn
      {ptr_slot(2, 0), RelocKind::Scratch, 0, 2048},
      {ptr_slot(2, 1), RelocKind::Weight, 2, 0},
      {ptr_slot(2, 2), RelocKind::Io, 3, 0},          // logits
      {ptr_slot(2, 3), RelocKind::Const, 0, 64},      // bias
      {ptr_slot(3, 0), RelocKind::Scratch, 0, 4096},
      {ptr_slot(3, 1), RelocKind::Io, 4, 1024},       // K, second head's half (addend inside)
      {ptr_slot(3, 2), RelocKind::Io, 5, 0},
      {ptr_slot(3, 3), RelocKind::Io, 2, 0},
      {ptr_slot(3, 4), RelocKind::Scratch, 0, 6144},
  };
  img.plan = {
      {"x", 0, 2048, 0, 1},
      {"xn", 2048, 2048, 1, 1},
      {"q", 4096, 2048, 1, 1},
      {"attn_out", 6144, 2048, 1, 1},
  };
  return img;
}

void expect_equal(const BlobImage& a, const BlobImage& b) {
  EXPECT_EQ(a.meta_json, b.meta_json);
  ASSERT_EQ(a.tasks.size(), b.tasks.size());
  for (size_t i = 0; i < a.tasks.size(); ++i)
    EXPECT_EQ(0, std::memcmp(&a.tasks[i], &b.tasks[i], sizeof(TaskDesc))) << "task " << i;
  ASSERT_EQ(a.barriers.size(), b.barriers.size());
  for (size_t i = 0; i < a.barriers.size(); ++i) {
    EXPECT_EQ(a.barriers[i].count, b.barriers[i].count);
    EXPECT_EQ(a.barriers[i].reserved, b.barriers[i].reserved);
  }
  EXPECT_EQ(a.consts, b.consts);
  EXPECT_EQ(a.scratch_bytes, b.scratch_bytes);
  ASSERT_EQ(a.ios.size(), b.ios.size());
  for (size_t i = 0; i < a.ios.size(); ++i) {
    EXPECT_EQ(a.ios[i].name, b.ios[i].name);
    EXPECT_EQ(a.ios[i].role, b.ios[i].role);
    EXPECT_EQ(a.ios[i].type, b.ios[i].type);
    EXPECT_EQ(a.ios[i].shape, b.ios[i].shape);
    EXPECT_EQ(a.ios[i].bytes, b.ios[i].bytes);
  }
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i) {
    EXPECT_EQ(a.weights[i].name, b.weights[i].name);
    EXPECT_EQ(a.weights[i].type, b.weights[i].type);
    EXPECT_EQ(a.weights[i].shape, b.weights[i].shape);
    EXPECT_EQ(a.weights[i].bytes, b.weights[i].bytes);
    EXPECT_EQ(a.weights[i].layout, b.weights[i].layout);
  }
  ASSERT_EQ(a.relocs.size(), b.relocs.size());
  for (size_t i = 0; i < a.relocs.size(); ++i) {
    EXPECT_EQ(a.relocs[i].offset, b.relocs[i].offset) << "reloc " << i;
    EXPECT_EQ(a.relocs[i].kind, b.relocs[i].kind) << "reloc " << i;
    EXPECT_EQ(a.relocs[i].index, b.relocs[i].index) << "reloc " << i;
    EXPECT_EQ(a.relocs[i].addend, b.relocs[i].addend) << "reloc " << i;
  }
  ASSERT_EQ(a.plan.size(), b.plan.size());
  for (size_t i = 0; i < a.plan.size(); ++i) {
    EXPECT_EQ(a.plan[i].name, b.plan[i].name);
    EXPECT_EQ(a.plan[i].offset, b.plan[i].offset);
    EXPECT_EQ(a.plan[i].bytes, b.plan[i].bytes);
    EXPECT_EQ(a.plan[i].first_stage, b.plan[i].first_stage);
    EXPECT_EQ(a.plan[i].last_stage, b.plan[i].last_stage);
  }
}

BlobImage read(const std::vector<uint8_t>& f, const std::string& label = "test") {
  return read_blob(f.data(), f.size(), label);
}

// Runs read_blob and returns the npullm::Error message ("" if it did not throw). Any other
// exception type fails the test: the contract is npullm::Error or success.
std::string read_error(const std::vector<uint8_t>& f, const std::string& label = "test") {
  try {
    read_blob(f.data(), f.size(), label);
  } catch (const npullm::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "read_blob threw a non-npullm exception: " << e.what();
    return "<wrong exception>";
  }
  return "";
}

// ---- an independent look at the ELF, for locating sections and re-sealing checksums ----------

struct SectionInfo {
  uint32_t index;
  Elf64_Shdr h;
};

std::map<std::string, SectionInfo> sections_of(const std::vector<uint8_t>& f) {
  Elf64_Ehdr eh;
  std::memcpy(&eh, f.data(), sizeof eh);
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  std::memcpy(sh.data(), f.data() + eh.e_shoff, sh.size() * sizeof(Elf64_Shdr));
  const char* names = reinterpret_cast<const char*>(f.data() + sh[eh.e_shstrndx].sh_offset);
  std::map<std::string, SectionInfo> out;
  for (uint32_t i = 1; i < sh.size(); ++i) out[names + sh[i].sh_name] = {i, sh[i]};
  return out;
}

// Recomputes .npu.check as documented in blob_elf.cpp: {u32 what, u32 0, u64 xxh64} records for
// the headers (what 0), each section with file bytes except .npu.check (what = index), then the
// whole file without the last record's hash field (what 0xffffffff). Expects an intact layout.
void reseal(std::vector<uint8_t>& f) {
  Elf64_Ehdr eh;
  std::memcpy(&eh, f.data(), sizeof eh);
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  std::memcpy(sh.data(), f.data() + eh.e_shoff, sh.size() * sizeof(Elf64_Shdr));
  const uint32_t check = sections_of(f).at(".npu.check").index;
  uint8_t* rec = f.data() + sh[check].sh_offset;
  auto put = [&](uint32_t what, uint64_t hash) {
    std::memcpy(rec, &what, 4);
    std::memset(rec + 4, 0, 4);
    std::memcpy(rec + 8, &hash, 8);
    rec += 16;
  };
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  XXH64_update(st, f.data(), sizeof eh);
  XXH64_update(st, f.data() + eh.e_shoff, sh.size() * sizeof(Elf64_Shdr));
  put(0, XXH64_digest(st));
  for (uint32_t i = 1; i < sh.size(); ++i)
    if (i != check && sh[i].sh_type != SHT_NOBITS)
      put(i, XXH64(f.data() + sh[i].sh_offset, sh[i].sh_size, 0));
  const uint64_t field = (rec - f.data()) + 8;
  std::memcpy(rec, "\xff\xff\xff\xff\0\0\0\0", 8);
  XXH64_reset(st, 0);
  XXH64_update(st, f.data(), field);
  XXH64_update(st, f.data() + field + 8, f.size() - field - 8);
  const uint64_t whole = XXH64_digest(st);
  std::memcpy(rec + 8, &whole, 8);
  XXH64_freeState(st);
}

template <typename T>
void poke(std::vector<uint8_t>& f, uint64_t off, T v) {
  ASSERT_LE(off + sizeof(T), f.size());
  std::memcpy(f.data() + off, &v, sizeof(T));
}

// ---- tests -------------------------------------------------------------------------------------

TEST(BlobElf, OpNames) {
  EXPECT_STREQ(op_name(static_cast<uint32_t>(OpCode::Embed)), "Embed");
  EXPECT_STREQ(op_name(static_cast<uint32_t>(OpCode::MatMul)), "MatMul");
  EXPECT_STREQ(op_name(static_cast<uint32_t>(OpCode::Attention)), "Attention");
  EXPECT_STREQ(op_name(static_cast<uint32_t>(OpCode::SwiGlu)), "SwiGlu");
  EXPECT_STREQ(op_name(static_cast<uint32_t>(OpCode::GatherRows)), "GatherRows");
  EXPECT_STREQ(op_name(static_cast<uint32_t>(OpCode::SliceCols)), "SliceCols");
  EXPECT_STREQ(op_name(static_cast<uint32_t>(OpCode::GeGlu)), "GeGlu");
  EXPECT_STREQ(op_name(static_cast<uint32_t>(OpCode::MoeRoute)), "MoeRoute");
  EXPECT_STREQ(op_name(static_cast<uint32_t>(OpCode::MoeMatMul)), "MoeMatMul");
  EXPECT_STREQ(op_name(static_cast<uint32_t>(OpCode::SwiGluOai)), "SwiGluOai");
  EXPECT_STREQ(op_name(0), "?");
  EXPECT_STREQ(op_name(19), "?");
  EXPECT_STREQ(op_name(0xffffffffu), "?");
}

TEST(BlobElf, RoundTrip) {
  const BlobImage img = make_image();
  const std::vector<uint8_t> f = write_blob(img);
  expect_equal(img, read(f));
  // Deterministic: the same image gives the same bytes (caches may key on them).
  EXPECT_EQ(f, write_blob(img));
}

TEST(BlobElf, RoundTripEmptyImage) {
  const BlobImage img;
  const std::vector<uint8_t> f = write_blob(img);
  expect_equal(img, read(f));
}

BlobImage make_edge_image() {
  BlobImage img = make_image();
  img.scratch_bytes = uint64_t{1} << 40;  // NOBITS: costs no file bytes
  img.relocs[2].addend = static_cast<int64_t>(img.scratch_bytes - 1);
  img.tasks[1].fparam[3] = std::numeric_limits<float>::quiet_NaN();
  img.tasks[1].iparam[0] = INT32_MIN;
  img.tasks[1].dim[5] = INT64_MIN;
  img.ios[0].shape = {};  // a scalar
  img.weights[2].shape = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  img.plan.push_back({"", 0, 0, 1, 1});  // plan entries may be unnamed
  img.meta_json = "";                      // "no metadata"
  return img;
}

TEST(BlobElf, RoundTripEdgeValues) {
  const BlobImage img = make_edge_image();
  const std::vector<uint8_t> f = write_blob(img);
  EXPECT_LT(f.size(), 16384u);
  expect_equal(img, read(f));
}

TEST(BlobElf, ReadsFromAnUnalignedBuffer) {
  const BlobImage img = make_image();
  const std::vector<uint8_t> f = write_blob(img);
  std::vector<uint8_t> buf(f.size() + 1);
  std::memcpy(buf.data() + 1, f.data(), f.size());
  expect_equal(img, read_blob(buf.data() + 1, f.size(), "unaligned"));
}

TEST(BlobElf, LayoutIsTheDocumentedElf) {
  const std::vector<uint8_t> f = write_blob(make_image());
  Elf64_Ehdr eh;
  std::memcpy(&eh, f.data(), sizeof eh);
  EXPECT_EQ(0, std::memcmp(eh.e_ident, ELFMAG, SELFMAG));
  EXPECT_EQ(eh.e_ident[EI_CLASS], ELFCLASS64);
  EXPECT_EQ(eh.e_ident[EI_DATA], ELFDATA2LSB);
  EXPECT_EQ(eh.e_type, ET_REL);
  EXPECT_EQ(eh.e_machine, EM_NONE);
  // Section header table last, so truncation always cuts it.
  EXPECT_EQ(eh.e_shoff + eh.e_shnum * sizeof(Elf64_Shdr), f.size());

  const auto s = sections_of(f);
  const auto& tasks = s.at(".npu.tasks");
  EXPECT_EQ(tasks.h.sh_type, SHT_PROGBITS);
  EXPECT_EQ(tasks.h.sh_flags, uint64_t{SHF_ALLOC | SHF_WRITE});
  EXPECT_EQ(tasks.h.sh_entsize, sizeof(TaskDesc));
  EXPECT_EQ(tasks.h.sh_offset % 64, 0u);
  EXPECT_EQ(tasks.h.sh_size, 4 * sizeof(TaskDesc));
  const auto& scratch = s.at(".npu.scratch");
  EXPECT_EQ(scratch.h.sh_type, SHT_NOBITS);
  EXPECT_EQ(scratch.h.sh_size, 8192u);
  const auto& rela = s.at(".rela.npu.tasks");
  EXPECT_EQ(rela.h.sh_type, SHT_RELA);
  EXPECT_EQ(rela.h.sh_link, s.at(".symtab").index);
  EXPECT_EQ(rela.h.sh_info, tasks.index);
  EXPECT_EQ(rela.h.sh_entsize, sizeof(Elf64_Rela));
  for (const char* name : {".npu.barriers", ".npu.consts", ".npu.io", ".npu.weights", ".npu.plan",
                           ".strtab", ".symtab", ".npu.meta", ".npu.check", ".shstrtab"})
    EXPECT_TRUE(s.count(name)) << name;

  // Relocations name the right symbols: I/O relocs an I/O symbol, scratch ones the section symbol.
  const auto& symtab = s.at(".symtab");
  const auto& strtab = s.at(".strtab");
  auto sym_name = [&](uint64_t sym) {
    Elf64_Sym e;
    std::memcpy(&e, f.data() + symtab.h.sh_offset + sym * sizeof e, sizeof e);
    if (ELF64_ST_TYPE(e.st_info) == STT_SECTION) return std::string("section ") + std::to_string(e.st_shndx);
    return std::string(reinterpret_cast<const char*>(f.data() + strtab.h.sh_offset + e.st_name));
  };
  auto rela_at = [&](size_t i) {
    Elf64_Rela r;
    std::memcpy(&r, f.data() + rela.h.sh_offset + i * sizeof r, sizeof r);
    return r;
  };
  EXPECT_EQ(sym_name(ELF64_R_SYM(rela_at(0).r_info)), "token_embd.weight");
  EXPECT_EQ(sym_name(ELF64_R_SYM(rela_at(1).r_info)), "tokens");
  EXPECT_EQ(sym_name(ELF64_R_SYM(rela_at(2).r_info)), "section " + std::to_string(scratch.index));
  EXPECT_EQ(sym_name(ELF64_R_SYM(rela_at(9).r_info)),
            "section " + std::to_string(s.at(".npu.consts").index));
  EXPECT_EQ(ELF64_R_TYPE(rela_at(11).r_info), static_cast<uint32_t>(RelocKind::Io));
  EXPECT_EQ(rela_at(11).r_addend, 1024);
}

// readelf must read every blob with exit status 0 and nothing at all on stderr.
void expect_readelf_clean(const std::vector<uint8_t>& f, const std::string& tag, const char* flags) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("npullm_blob_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path blob = dir / (tag + ".blob"), out = dir / (tag + ".out"), err = dir / (tag + ".err");
  {
    std::FILE* fp = std::fopen(blob.c_str(), "wb");
    ASSERT_NE(fp, nullptr);
    ASSERT_EQ(std::fwrite(f.data(), 1, f.size(), fp), f.size());
    std::fclose(fp);
  }
  const std::string cmd = std::string("readelf ") + flags + " '" + blob.string() + "' >'" +
                          out.string() + "' 2>'" + err.string() + "'";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << cmd;
  EXPECT_EQ(WEXITSTATUS(status), 0) << cmd;
  const std::string err_text = npullm::test::read_file(err.string());
  EXPECT_EQ(err_text, "") << cmd;
  const std::string out_text = npullm::test::read_file(out.string());
  EXPECT_NE(out_text.find(".rela.npu.tasks"), std::string::npos) << out_text;
  EXPECT_NE(out_text.find(".npu.scratch"), std::string::npos) << out_text;
  fs::remove_all(dir);
}

bool have_readelf() { return std::system("command -v readelf >/dev/null 2>&1") == 0; }

TEST(BlobElf, ReadelfReadsItCleanly) {
  if (!have_readelf()) {
    // scripts/setup.sh installs binutils: in CI its absence is a failure, as missing data is.
    if (npullm::test::data_required()) GTEST_FAIL() << "readelf (binutils) not installed (NPULLM_REQUIRE_DATA=1)";
    GTEST_SKIP() << "needs readelf (binutils, not installed)";
  }
  const std::vector<uint8_t> f = write_blob(make_image());
  expect_readelf_clean(f, "full", "-a");
  expect_readelf_clean(f, "full_wide", "-a -W");
  expect_readelf_clean(write_blob(BlobImage{}), "empty", "-a");
  expect_readelf_clean(write_blob(make_edge_image()), "edge", "-a");

  // The symbols readelf lists are the I/O tensors and weights.
  namespace fs = std::filesystem;
  const fs::path p = fs::temp_directory_path() / ("npullm_blob_syms_" + std::to_string(::getpid()));
  {
    std::FILE* fp = std::fopen(p.c_str(), "wb");
    ASSERT_NE(fp, nullptr);
    std::fwrite(f.data(), 1, f.size(), fp);
    std::fclose(fp);
  }
  std::string text;
  if (std::FILE* pipe = ::popen(("readelf -s -r -W '" + p.string() + "' 2>&1").c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, n);
    EXPECT_EQ(::pclose(pipe), 0);
  }
  fs::remove(p);
  for (const char* name : {"tokens", "logits", "past_key_values.0.key", "token_embd.weight", "output.weight"})
    EXPECT_NE(text.find(name), std::string::npos) << name << "\n" << text;
  EXPECT_EQ(text.find("Warning"), std::string::npos) << text;
}

// Every single-byte change anywhere in the file is refused, and for a change inside a section's
// contents the message names that section.
TEST(BlobElf, EveryByteFlipIsCaught) {
  const std::vector<uint8_t> good = write_blob(make_image());
  const auto secs = sections_of(good);
  Elf64_Ehdr eh;
  std::memcpy(&eh, good.data(), sizeof eh);
  auto owner = [&](uint64_t off) -> std::string {
    for (const auto& [name, s] : secs)
      if (s.h.sh_type != SHT_NOBITS && off >= s.h.sh_offset && off < s.h.sh_offset + s.h.sh_size)
        return name;
    return "";
  };
  std::map<std::string, int> flips_per_section;
  for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
    for (uint64_t off = 0; off < good.size(); ++off) {
      std::vector<uint8_t> bad = good;
      bad[off] ^= mask;
      const std::string msg = read_error(bad, "flip");
      ASSERT_FALSE(msg.empty()) << "flip of byte " << off << " with mask " << int(mask) << " was accepted";
      ASSERT_EQ(msg.rfind("blob 'flip': ", 0), 0u) << msg;
      const std::string sec = owner(off);
      ++flips_per_section[sec.empty() ? (off < sizeof eh ? "ELF header" : off >= eh.e_shoff ? "SHT" : "gap") : sec];
      // Section names are how a section is found, and a damaged checksum record reports the
      // section it covers; every other section is named by its own checksum.
      if (!sec.empty() && sec != ".shstrtab" && sec != ".npu.check") {
        ASSERT_NE(msg.find("section " + sec), std::string::npos) << "byte " << off << ": " << msg;
      }
    }
  }
  // Make sure the loop really covered every section with contents, the ELF header and the table.
  for (const char* name : {".npu.tasks", ".npu.barriers", ".npu.consts", ".npu.io", ".npu.weights",
                           ".npu.plan", ".strtab", ".symtab", ".rela.npu.tasks", ".npu.meta",
                           ".npu.check", ".shstrtab", "ELF header", "SHT"})
    EXPECT_GT(flips_per_section[name], 0) << name;
}

TEST(BlobElf, SpecificCorruptionMessages) {
  const std::vector<uint8_t> good = write_blob(make_image());
  const auto secs = sections_of(good);
  {
    std::vector<uint8_t> bad = good;
    bad[secs.at(".npu.tasks").h.sh_offset + 5] ^= 0x10;
    EXPECT_EQ(read_error(bad, "x").rfind("blob 'x': section .npu.tasks checksum mismatch (corrupt file?)", 0), 0u)
        << read_error(bad, "x");
  }
  {
    std::vector<uint8_t> bad = good;
    bad[0] = 0x7e;
    EXPECT_NE(read_error(bad).find("ELF header at offset 0x0: not an ELF file"), std::string::npos);
  }
  {
    std::vector<uint8_t> bad = good;
    bad[EI_CLASS] = ELFCLASS32;
    EXPECT_NE(read_error(bad).find("ELFCLASS64"), std::string::npos) << read_error(bad);
  }
  {
    std::vector<uint8_t> bad = good;
    poke<uint16_t>(bad, offsetof(Elf64_Ehdr, e_machine), EM_X86_64);
    EXPECT_NE(read_error(bad).find("e_machine"), std::string::npos) << read_error(bad);
  }
  {
    std::vector<uint8_t> bad = good;
    poke<uint64_t>(bad, offsetof(Elf64_Ehdr, e_shoff), bad.size());
    EXPECT_NE(read_error(bad).find("section header table"), std::string::npos) << read_error(bad);
  }
  {
    std::vector<uint8_t> bad = good;
    bad.push_back(0);  // a byte after the section header table
    EXPECT_NE(read_error(bad).find("whole-file checksum"), std::string::npos) << read_error(bad);
  }
}

TEST(BlobElf, EveryTruncationIsCaught) {
  const std::vector<uint8_t> good = write_blob(make_image());
  for (size_t len = 0; len < good.size(); ++len) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + len);
    const std::string msg = read_error(cut, "cut");
    ASSERT_FALSE(msg.empty()) << "truncated to " << len << " bytes was accepted";
    ASSERT_EQ(msg.rfind("blob 'cut': ", 0), 0u) << msg;
  }
  EXPECT_THROW(read_blob(nullptr, 0, "null"), npullm::Error);
}

TEST(BlobElf, RandomGarbageIsRefused) {
  std::mt19937_64 rng(1234);
  const std::vector<uint8_t> good = write_blob(make_image());
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<uint8_t> g(rng() % 4096);
    for (auto& b : g) b = static_cast<uint8_t>(rng());
    // Half of them start with the real ELF header so that the section table checks run too.
    if (iter % 2 && g.size() >= sizeof(Elf64_Ehdr)) std::memcpy(g.data(), good.data(), sizeof(Elf64_Ehdr));
    ASSERT_FALSE(read_error(g, "garbage").empty()) << "iteration " << iter;
  }
  // The real headers (ELF header + section header table) around random section contents.
  for (int iter = 0; iter < 500; ++iter) {
    std::vector<uint8_t> g = good;
    Elf64_Ehdr eh;
    std::memcpy(&eh, good.data(), sizeof eh);
    for (uint64_t i = sizeof eh; i < eh.e_shoff; ++i) g[i] = static_cast<uint8_t>(rng());
    ASSERT_FALSE(read_error(g, "garbage").empty());
  }
}

// Damage behind valid checksums (as a buggy writer would produce): random edits of section
// contents, re-sealed. read_blob may accept harmless edits (a float parameter, say), but must
// never crash or throw anything other than npullm::Error.
TEST(BlobElf, ResealedMutationsNeverCrash) {
  std::mt19937_64 rng(99);
  const std::vector<uint8_t> good = write_blob(make_image());
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, s] : sections_of(good))
    if (s.h.sh_type != SHT_NOBITS && name != ".npu.check" && name != ".shstrtab" && s.h.sh_size > 0)
      ranges.push_back({s.h.sh_offset, s.h.sh_size});
  int refused = 0;
  const int iters = 6000;
  for (int iter = 0; iter < iters; ++iter) {
    std::vector<uint8_t> bad = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const auto& [off, size] = ranges[rng() % ranges.size()];
      const uint64_t at = off + rng() % size;
      switch (rng() % 3) {
        case 0: bad[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 1: bad[at] = static_cast<uint8_t>(rng()); break;
        default: bad[at] = (rng() % 2) ? 0x00 : 0xff; break;
      }
    }
    reseal(bad);
    if (!read_error(bad, "mut").empty()) {
      ++refused;
      continue;
    }
    // Whatever the reader accepts must survive another write / read unchanged.
    const BlobImage once = read(bad);
    expect_equal(once, read(write_blob(once)));
  }
  EXPECT_GT(refused, iters / 4);  // most edits of structure are refused
}

// Images a buggy compiler could produce: write_blob encodes them, read_blob refuses them.
TEST(BlobElf, BadImagesAreRefusedByTheReader) {
  struct Case {
    const char* what;
    std::function<void(BlobImage&)> edit;
    const char* expect;  // substring of the message
  };
  const std::vector<Case> cases = {
      {"reloc past the tasks", [](BlobImage& i) { i.relocs[3].offset = 4 * kTask; }, "inside .npu.tasks"},
      {"reloc far outside", [](BlobImage& i) { i.relocs[0].offset = ~uint64_t{7}; }, "r_offset"},
      {"reloc misaligned", [](BlobImage& i) { i.relocs[0].offset += 4; }, "8-aligned"},
      {"reloc on a dim", [](BlobImage& i) { i.relocs[0].offset = kTask + offsetof(TaskDesc, dim); },
       "not a ptr[] slot"},
      {"reloc on op/stage", [](BlobImage& i) { i.relocs[0].offset = 2 * kTask; }, "not a ptr[] slot"},
      {"reloc twice on a slot", [](BlobImage& i) { i.relocs.push_back(i.relocs[5]); }, "relocated twice"},
      {"unknown reloc kind", [](BlobImage& i) { i.relocs[2].kind = static_cast<RelocKind>(9); },
       "unknown relocation type 9"},
      {"reloc kind 0", [](BlobImage& i) { i.relocs[2].kind = static_cast<RelocKind>(0); },
       "unknown relocation type 0"},
      {"io index out of range", [](BlobImage& i) { i.relocs[1].index = 6; }, "not an I/O tensor"},
      {"weight index out of range", [](BlobImage& i) { i.relocs[0].index = 3; }, "outside .symtab"},
      {"weight index huge", [](BlobImage& i) { i.relocs[0].index = 0xfffffff0u; }, "outside .symtab"},
      {"scratch addend", [](BlobImage& i) { i.relocs[2].addend = 8192; }, "outside .npu.scratch"},
      {"negative addend", [](BlobImage& i) { i.relocs[2].addend = -8; }, "addend -8"},
      {"const addend", [](BlobImage& i) { i.relocs[9].addend = 128; }, "outside .npu.consts"},
      {"io addend", [](BlobImage& i) { i.relocs[11].addend = 2048; }, "I/O 'past_key_values.0.key'"},
      {"weight addend", [](BlobImage& i) { i.relocs[4].addend = 256; }, "weight 'blk.0.attn_norm.weight'"},
      {"scratch arena gone", [](BlobImage& i) { i.scratch_bytes = 0; i.plan.clear(); }, "outside .npu.scratch"},
      {"unknown op", [](BlobImage& i) { i.tasks[2].op = 42; }, "unknown op code 42"},
      {"op 0", [](BlobImage& i) { i.tasks[0].op = 0; }, "task 0: unknown op code 0"},
      {"stage out of range", [](BlobImage& i) { i.tasks[3].stage = 2; }, "stage 2 but the blob has 2 barriers"},
      {"stages out of order", [](BlobImage& i) { std::swap(i.tasks[0], i.tasks[1]); }, "follows a task of stage 1"},
      {"barrier count", [](BlobImage& i) { i.barriers[1].count = 2; }, "barrier 1 counts 2 tasks but stage 1 has 3"},
      {"barrier reserved", [](BlobImage& i) { i.barriers[0].reserved = 1; }, "reserved"},
      {"no barriers", [](BlobImage& i) { i.barriers.clear(); }, "stage 0 but the blob has 0 barriers"},
      {"ptr set in file", [](BlobImage& i) { i.tasks[1].ptr[5] = 0x1000; }, "ptr[5]"},
      {"bad io role", [](BlobImage& i) { i.ios[2].role = static_cast<IoRole>(0); }, "unknown role 0"},
      {"empty io name", [](BlobImage& i) { i.ios[1].name.clear(); }, "empty name"},
      {"duplicate weight", [](BlobImage& i) { i.weights[2].name = i.weights[0].name; }, "appears twice"},
      {"negative dim", [](BlobImage& i) { i.weights[1].shape[0] = -64; }, "negative"},
      {"weight layout", [](BlobImage& i) { i.weights[1].layout = 8; }, "weight 'blk.0.attn_norm.weight': unknown layout 8"},
      {"plan past scratch", [](BlobImage& i) { i.plan[3].bytes = 4096; }, "outside the 8192-byte scratch"},
      {"plan stages", [](BlobImage& i) { i.plan[0].last_stage = 5; }, "stages [0, 5]"},
      {"plan stages reversed", [](BlobImage& i) { i.plan[1].first_stage = 1, i.plan[1].last_stage = 0; }, "stages [1, 0]"},
      {"meta not json", [](BlobImage& i) { i.meta_json = "{\"name\": "; }, "not valid JSON"},
      {"meta with NUL", [](BlobImage& i) { i.meta_json.push_back('\0'); }, "NUL byte"},
  };
  for (const Case& c : cases) {
    BlobImage img = make_image();
    c.edit(img);
    std::vector<uint8_t> f;
    ASSERT_NO_THROW(f = write_blob(img)) << c.what;
    const std::string msg = read_error(f, "bad");
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.what << ": got '" << msg << "'";
    EXPECT_EQ(msg.rfind("blob 'bad': section ", 0), 0u) << c.what << ": " << msg;
    EXPECT_NE(msg.find(" at offset 0x"), std::string::npos) << c.what << ": " << msg;
  }
}

// What write_blob cannot encode, it refuses.
TEST(BlobElf, WriterRefusesUnencodableImages) {
  BlobImage img = make_image();
  img.ios[0].name = std::string("tok\0ens", 7);
  EXPECT_THROW(write_blob(img), npullm::Error);
  img = make_image();
  img.relocs[2].index = 1;  // a scratch relocation has no index
  EXPECT_THROW(write_blob(img), npullm::Error);
}

// Damage behind valid checksums, aimed at specific checks.
TEST(BlobElf, ResealedStructuralDamage) {
  const std::vector<uint8_t> good = write_blob(make_image());
  const auto s = sections_of(good);
  const uint64_t io = s.at(".npu.io").h.sh_offset, strtab = s.at(".strtab").h.sh_offset;
  const uint64_t strsize = s.at(".strtab").h.sh_size, symtab = s.at(".symtab").h.sh_offset;
  const uint64_t rela = s.at(".rela.npu.tasks").h.sh_offset;
  auto hdr = [&](const char* name) {
    Elf64_Ehdr eh;
    std::memcpy(&eh, good.data(), sizeof eh);
    return eh.e_shoff + s.at(name).index * sizeof(Elf64_Shdr);
  };
  struct Case {
    const char* what;
    std::function<void(std::vector<uint8_t>&)> edit;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"io name offset out of range", [&](auto& f) { poke<uint32_t>(f, io, 0xffff); }, "outside .strtab"},
      {"io ndim huge", [&](auto& f) { poke<uint32_t>(f, io + 12, 0x7fffffff); }, "run past the end"},
      {"strtab not terminated", [&](auto& f) { f[strtab + strsize - 1] = 'x'; }, "NUL byte"},
      {"symbol renamed", [&](auto& f) { poke<uint32_t>(f, symtab + 3 * sizeof(Elf64_Sym), 0); }, "symbol 3"},
      {"symbol size", [&](auto& f) { poke<uint64_t>(f, symtab + 4 * sizeof(Elf64_Sym) + 16, 1); }, "symbol 4"},
      {"section symbol", [&](auto& f) { poke<uint16_t>(f, symtab + 1 * sizeof(Elf64_Sym) + 6, 3); },
       "section symbol of .npu.scratch"},
      {"io reloc against a weight symbol",
       [&](auto& f) { poke<uint64_t>(f, rela + 8, ELF64_R_INFO(3 + 6, 4)); }, "not an I/O tensor"},
      {"scratch reloc against an io symbol",
       [&](auto& f) { poke<uint64_t>(f, rela + 2 * 24 + 8, ELF64_R_INFO(3, 1)); }, "not .npu.scratch"},
      {"reloc symbol 0", [&](auto& f) { poke<uint64_t>(f, rela + 8, ELF64_R_INFO(0, 4)); }, "not an I/O"},
      {"rela sh_link", [&](auto& f) { poke<uint32_t>(f, hdr(".rela.npu.tasks") + 40, 1); }, "sh_link"},
      {"rela sh_info", [&](auto& f) { poke<uint32_t>(f, hdr(".rela.npu.tasks") + 44, 2); }, "sh_info"},
      {"symtab sh_info", [&](auto& f) { poke<uint32_t>(f, hdr(".symtab") + 44, 1); }, "sh_info"},
      {"tasks entsize", [&](auto& f) { poke<uint64_t>(f, hdr(".npu.tasks") + 56, 128); }, "sh_entsize"},
      {"tasks size not whole", [&](auto& f) { poke<uint64_t>(f, hdr(".npu.tasks") + 32, 4 * kTask - 8); },
       "not a multiple"},
      {"io flags", [&](auto& f) { poke<uint64_t>(f, hdr(".npu.io") + 8, SHF_ALLOC); }, "sh_flags"},
      {"section outside file", [&](auto& f) { poke<uint64_t>(f, hdr(".npu.meta") + 24, f.size() - 4); },
       "outside the"},
      {"sections overlap", [&](auto& f) { poke<uint64_t>(f, hdr(".npu.weights") + 24, io); }, "overlaps"},
      {"section renamed", [&](auto& f) { poke<uint32_t>(f, hdr(".npu.plan"), 1); }, "appears twice"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> f = good;
    c.edit(f);
    reseal(f);
    const std::string msg = read_error(f, "sealed");
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.what << ": got '" << msg << "'";
    EXPECT_EQ(msg.rfind("blob 'sealed': ", 0), 0u) << c.what << ": " << msg;
  }
}

}  // namespace
}  // namespace npullm::blob
