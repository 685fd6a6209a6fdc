// The blob loader: read_blob (ELF header, section table, checksums, I/O and weight records,
// symbols, barriers, tasks, relocations, memory plan, metadata) and the driver's load on top
// (driver::Executable: scratch reservation, constants, weight resolution, relocation patching),
// with the CPU device's checks of the program it would run (cpu::checked_scratch_floats).
//
// Every blob carries xxh64 checksums, so almost every mutation is (rightly) refused at the first
// checksum. To reach the checks behind them, an input the reader refuses is tried a second time
// with its .npu.check records recomputed by the harness (a best-effort fix that trusts nothing in
// the input). A blob that loads must also survive write_blob -> read_blob unchanged in meaning.
#include <elf.h>
#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "blob/blob_image.h"
#include "device/cpu/program_checks.h"
#include "device/device.h"
#include "driver/driver.h"
#include "fuzz_util.h"

using namespace npullm;

namespace {

// Weights resolve to one shared zero buffer: the load only patches their addresses.
class ZeroBank : public driver::WeightsBank {
 public:
  const void* resolve(const blob::WeightRef&) const override { return zeros_; }

 private:
  alignas(64) static inline uint8_t zeros_[64] = {};
};

// The driver's part of the load, then the CPU device's own checks of the program (its prepare():
// every task's dimensions, layouts and prologue, and the scratch per thread they ask for, bounded),
// without the kernels: nothing runs, and the scratch is not allocated.
class CheckingDevice : public device::Device {
 public:
  std::string name() const override { return "fuzz"; }
  int threads() const override { return 1; }
  void prepare(const device::Program& prog) override { (void)cpu::checked_scratch_floats(prog); }
  void execute(const device::Program&) override {}
};

bool in_range(uint64_t off, uint64_t len, uint64_t size) { return off <= size && len <= size - off; }

// Rewrites the .npu.check records of `b` (layout in src/blob/blob_elf.cpp) when the section table
// is sane enough to find them; otherwise leaves `b` as it is.
void fix_checksums(std::vector<uint8_t>& b) {
  if (b.size() < sizeof(Elf64_Ehdr)) return;
  Elf64_Ehdr eh;
  std::memcpy(&eh, b.data(), sizeof eh);
  const uint64_t n = eh.e_shnum;
  if (n == 0 || n > 64 || !in_range(eh.e_shoff, n * sizeof(Elf64_Shdr), b.size())) return;
  std::vector<Elf64_Shdr> sh(n);
  std::memcpy(sh.data(), b.data() + eh.e_shoff, n * sizeof(Elf64_Shdr));
  if (eh.e_shstrndx >= n) return;
  const Elf64_Shdr& ss = sh[eh.e_shstrndx];
  if (!in_range(ss.sh_offset, ss.sh_size, b.size())) return;
  uint64_t check = 0;
  for (uint64_t i = 1; i < n && !check; ++i) {
    const char want[] = ".npu.check";
    if (sh[i].sh_name < ss.sh_size && ss.sh_size - sh[i].sh_name >= sizeof want &&
        std::memcmp(b.data() + ss.sh_offset + sh[i].sh_name, want, sizeof want) == 0)
      check = i;
  }
  if (!check) return;
  std::vector<uint64_t> covered;
  for (uint64_t i = 1; i < n; ++i)
    if (i != check && sh[i].sh_type != SHT_NOBITS) {
      if (!in_range(sh[i].sh_offset, sh[i].sh_size, b.size())) return;
      covered.push_back(i);
    }
  const uint64_t n_rec = covered.size() + 2;
  const uint64_t at = sh[check].sh_offset;
  if (sh[check].sh_size != n_rec * 16 || !in_range(at, n_rec * 16, b.size())) return;
  auto put = [&](uint64_t rec, uint32_t what, uint64_t hash) {
    const uint32_t zero = 0;
    std::memcpy(b.data() + at + rec * 16, &what, 4);
    std::memcpy(b.data() + at + rec * 16 + 4, &zero, 4);
    std::memcpy(b.data() + at + rec * 16 + 8, &hash, 8);
  };
  put(0, 0, 0);
  for (uint64_t k = 0; k < covered.size(); ++k) put(k + 1, static_cast<uint32_t>(covered[k]), 0);
  put(n_rec - 1, 0xffffffffu, 0);
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  XXH64_update(st, b.data(), sizeof(Elf64_Ehdr));
  XXH64_update(st, b.data() + eh.e_shoff, n * sizeof(Elf64_Shdr));
  put(0, 0, XXH64_digest(st));
  for (uint64_t k = 0; k < covered.size(); ++k)
    put(k + 1, static_cast<uint32_t>(covered[k]), XXH64(b.data() + sh[covered[k]].sh_offset, sh[covered[k]].sh_size, 0));
  const uint64_t field = at + (n_rec - 1) * 16 + 8;
  XXH64_reset(st, 0);
  XXH64_update(st, b.data(), field);
  XXH64_update(st, b.data() + field + 8, b.size() - field - 8);
  put(n_rec - 1, 0xffffffffu, XXH64_digest(st));
  XXH64_freeState(st);
}

void load(const uint8_t* data, size_t size) {
  const blob::BlobImage img = blob::read_blob(data, size, "fuzz.blob");
  // What the writer makes of a loaded image must load again (the compiler's output path).
  const std::vector<uint8_t> again = blob::write_blob(img);
  const blob::BlobImage img2 = blob::read_blob(again.data(), again.size(), "fuzz.blob (rewritten)");
  if (img2.tasks.size() != img.tasks.size() || img2.relocs.size() != img.relocs.size() ||
      img2.ios.size() != img.ios.size() || img2.weights.size() != img.weights.size() ||
      img2.meta_json != img.meta_json || img2.scratch_bytes != img.scratch_bytes)
    __builtin_trap();
  static CheckingDevice dev;
  static ZeroBank bank;
  driver::Executable exe(std::span<const uint8_t>(data, size), "fuzz.blob", bank, dev);
  for (const blob::IoDesc& io : exe.image().ios) (void)exe.io_index(io.name);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bool loaded = false;
  fuzz::expect_ok_or_error([&] {
    load(data, size);
    loaded = true;
  });
  if (loaded) return 0;
  std::vector<uint8_t> fixed(data, data + size);
  fix_checksums(fixed);
  if (fixed != std::vector<uint8_t>(data, data + size))
    fuzz::expect_ok_or_error([&] { load(fixed.data(), fixed.size()); });
  return 0;
}
