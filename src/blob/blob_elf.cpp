// The compiled-blob file: BlobImage <-> ELF64 little-endian relocatable object.
//
// Why ELF: the blob is "an object file for the NPU". Standard tools (readelf, objdump -h, hexdump
// with section offsets) can look inside it, and the loader's job maps onto ELF ideas exactly:
// allocatable sections become device memory, .npu.scratch is .bss-like, and operand addresses are
// filled in by RELA relocations against symbols (internal ones at load, user I/O ones at bind).
//
// ---------------------------------------------------------------------------------------------
// File layout
//   ELF header (64 bytes)
//   section contents, in section-index order, each at a multiple of its sh_addralign
//   section header table (8-aligned), last: any truncation cuts it, so it is caught first.
//
//   idx name              type      flags   align entsize link     info   contents
//    1  .npu.tasks        PROGBITS  WA      64    184     0        0      TaskDesc[n] (host layout)
//    2  .npu.barriers     PROGBITS  A       8     8       0        0      BarrierDesc[n]
//    3  .npu.consts       PROGBITS  A       64    0       0        0      raw constant bytes
//    4  .npu.scratch      NOBITS    WA      64    0       0        0      size = scratch_bytes
//    5  .npu.io           PROGBITS  -       8     0       .strtab  0      I/O records (below)
//    6  .npu.weights      PROGBITS  -       8     0       .strtab  0      weight records (below)
//    7  .npu.plan         PROGBITS  -       8     32      .strtab  0      plan records (below)
//    8  .strtab           STRTAB    -       1     0       0        0      names (symbols + records)
//    9  .symtab           SYMTAB    -       8     24      .strtab  3      symbols (below)
//   10  .rela.npu.tasks   RELA      I       8     24      .symtab  tasks  Elf64_Rela[n]
//   11  .npu.meta         PROGBITS  -       1     0       0        0      JSON text, no NUL
//   12  .npu.check        PROGBITS  -       8     16      0        0      checksum records (below)
//   13  .shstrtab         STRTAB    -       1     0       0        0      section names
// The writer emits exactly this. The reader finds sections by name, requires each of them exactly
// once and nothing else, and checks type, flags, alignment, entsize, link and info against the
// table (link/info as the indices the names resolve to).
//
// ELF header: ELFCLASS64, ELFDATA2LSB, EV_CURRENT, ELFOSABI_NONE, e_type ET_REL (a blob is never
// linked by ld; the driver performs the relocation itself), e_machine kMachine (see below),
// e_flags = kFormatVersion, no program headers.
//
// e_machine: EM_NONE ("no machine"). A blob holds no code for any real processor. Tried with
// binutils 2.40 `readelf -a` (exit 0, empty stderr for all of these), the choices differ in what
// the relocation listing says:
//   EM_X86_64 / EM_AARCH64 / EM_BPF: our private types 1..4 are decoded as that processor's
//     relocations (R_X86_64_64, R_X86_64_PC32, R_X86_64_GOT32, R_X86_64_PLT32 ...): false.
//   an unassigned number (0x4e50, say): "Machine: <unknown>", and the number may be assigned to a
//     real processor one day.
//   EM_NONE: "Machine: None", types shown as "unrecognized: N" on stdout, nothing on stderr,
//     e_flags printed as plain hex, and no machine-specific checks to trip. Honest and stable.
// tests/blob/test_blob_elf.cpp runs `readelf -a` and `readelf -a -W` and requires empty stderr.
//
// Relocation types (ELF64_R_TYPE of r_info), private to e_machine EM_NONE + this format:
//   R_NPU_SCRATCH = 1   S = .npu.scratch section symbol; slot = scratch base + A   (at load)
//   R_NPU_CONST   = 2   S = .npu.consts section symbol;  slot = consts base + A    (at load)
//   R_NPU_WEIGHT  = 3   S = weight symbol;               slot = weight data + A    (at load)
//   R_NPU_IO      = 4   S = I/O symbol;                  slot = bound buffer + A   (at bind)
// They equal the RelocKind values. r_offset is the byte offset of a uint64 ptr[] slot inside
// .npu.tasks; the slot itself holds 0 in the file (the addend lives in r_addend).
//
// All multi-byte fields are little-endian. Record layouts:
//
// .npu.io: variable-length records, back to back, 8-aligned, in io-index order:
//   u32 name      offset into .strtab
//   u32 role      IoRole (1 input, 2 output, 3 state)
//   u32 type      GgmlType id
//   u32 ndim
//   u64 bytes
//   i64 shape[ndim]
// .npu.weights: the same layout, in weight-index order, with the weight's layout (a WeightLayout:
// 0 rows, 16 panels16) in place of `role`.
// .npu.plan: fixed 32-byte records:
//   u32 name, u32 first_stage, u32 last_stage, u32 reserved (0), u64 offset, u64 bytes
//
// .symtab, in this exact order:
//   [0]            the null symbol
//   [1]            STT_SECTION, STB_LOCAL symbol of .npu.scratch   (target of R_NPU_SCRATCH)
//   [2]            STT_SECTION, STB_LOCAL symbol of .npu.consts    (target of R_NPU_CONST)
//   [3 + i]        io i:     STB_GLOBAL STT_OBJECT, SHN_UNDEF, value 0, size = bytes, name = io name
//   [3 + nio + j]  weight j: the same with the weight's name and bytes
// I/O tensors and weights are undefined symbols on purpose: their storage is outside the blob
// (bound by the user / found in the weights bank), exactly like an extern resolved at link time.
//
// .npu.check: fixed 16-byte records { u32 what, u32 reserved (0), u64 xxh64 (seed 0) }:
//   first       what = 0            hash of the ELF header followed by the section header table
//   then        what = section idx  hash of that section's bytes, for every section in index order
//                                   except the null section, NOBITS sections and .npu.check itself
//   last        what = 0xffffffff   hash of the whole file except this record's 8-byte hash field
// The reader checks per-section hashes before the whole-file one, so a damaged section is named.
// ---------------------------------------------------------------------------------------------
#include <elf.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

#include "blob/blob_image.h"
#include "common/error.h"

namespace npullm::blob {
namespace {

// TaskDesc and BarrierDesc are stored as raw host structs, which is only the documented
// little-endian layout on a little-endian host with this exact packing.
static_assert(std::endian::native == std::endian::little, "blob format is little-endian");
static_assert(std::is_trivially_copyable_v<TaskDesc> && std::is_trivially_copyable_v<BarrierDesc>);
static_assert(sizeof(TaskDesc) == 184 && offsetof(TaskDesc, ptr) == 40);
static_assert(sizeof(BarrierDesc) == 8);

constexpr Elf64_Half kMachine = EM_NONE;
constexpr Elf64_Word kFormatVersion = 2;  // e_flags (2: eight operands a task, for attention sinks)

constexpr uint32_t R_NPU_SCRATCH = 1, R_NPU_CONST = 2, R_NPU_WEIGHT = 3, R_NPU_IO = 4;

constexpr uint64_t kPtrBegin = offsetof(TaskDesc, ptr);
constexpr uint64_t kPtrEnd = kPtrBegin + sizeof(TaskDesc::ptr);

constexpr uint32_t kCheckHeaders = 0;
constexpr uint32_t kCheckWholeFile = 0xffffffffu;
constexpr uint64_t kCheckRecord = 16;
constexpr uint64_t kPlanRecord = 32;

constexpr uint32_t kSymScratch = 1, kSymConsts = 2, kFirstGlobalSym = 3;

enum Sec : uint32_t {
  kNull, kTasks, kBarriers, kConsts, kScratch, kIo, kWeights, kPlan,
  kStrtab, kSymtab, kRela, kMeta, kCheck, kShstrtab, kNumSections
};

// What each section must look like (see the table at the top). link/info are section *ids* in
// this enum (resolved to real indices by name on read), except symtab's info, a symbol count.
struct SectionSpec {
  const char* name;
  Elf64_Word type;
  Elf64_Xword flags;
  Elf64_Xword align;
  Elf64_Xword entsize;
  Sec link;
  uint32_t info;  // Sec id for RELA, first global symbol for SYMTAB, else 0
};

constexpr SectionSpec kSpecs[kNumSections] = {
    {"", SHT_NULL, 0, 0, 0, kNull, 0},
    {".npu.tasks", SHT_PROGBITS, SHF_ALLOC | SHF_WRITE, 64, sizeof(TaskDesc), kNull, 0},
    {".npu.barriers", SHT_PROGBITS, SHF_ALLOC, 8, sizeof(BarrierDesc), kNull, 0},
    {".npu.consts", SHT_PROGBITS, SHF_ALLOC, 64, 0, kNull, 0},
    {".npu.scratch", SHT_NOBITS, SHF_ALLOC | SHF_WRITE, 64, 0, kNull, 0},
    {".npu.io", SHT_PROGBITS, 0, 8, 0, kStrtab, 0},
    {".npu.weights", SHT_PROGBITS, 0, 8, 0, kStrtab, 0},
    {".npu.plan", SHT_PROGBITS, 0, 8, kPlanRecord, kStrtab, 0},
    {".strtab", SHT_STRTAB, 0, 1, 0, kNull, 0},
    {".symtab", SHT_SYMTAB, 0, 8, sizeof(Elf64_Sym), kStrtab, kFirstGlobalSym},
    {".rela.npu.tasks", SHT_RELA, SHF_INFO_LINK, 8, sizeof(Elf64_Rela), kSymtab, kTasks},
    {".npu.meta", SHT_PROGBITS, 0, 1, 0, kNull, 0},
    {".npu.check", SHT_PROGBITS, 0, 8, kCheckRecord, kNull, 0},
    {".shstrtab", SHT_STRTAB, 0, 1, 0, kNull, 0},
};

uint64_t align_up(uint64_t v, uint64_t a) { return a <= 1 ? v : (v + a - 1) / a * a; }

// True when [off, off + len) lies inside [0, size), without overflowing.
bool in_range(uint64_t off, uint64_t len, uint64_t size) { return off <= size && len <= size - off; }

// xxh64 over a list of byte ranges, as if they were concatenated.
class Hasher {
 public:
  Hasher() : st_(XXH64_createState(), &XXH64_freeState) {
    if (!st_) fail("blob: out of memory creating an xxh64 state");
    XXH64_reset(st_.get(), 0);
  }
  void add(const uint8_t* p, uint64_t n) { XXH64_update(st_.get(), p, n); }
  uint64_t digest() const { return XXH64_digest(st_.get()); }

 private:
  std::unique_ptr<XXH64_state_t, XXH_errorcode (*)(XXH64_state_t*)> st_;
};

// ============================================================================================
// Writing
// ============================================================================================

// Appends fields to a byte vector in host order, which the static_asserts above pin to little-endian.
class ByteWriter {
 public:
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void i64(int64_t v) { raw(&v, 8); }
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  }
  std::vector<uint8_t> bytes;
};

// .strtab builder: offset 0 is the empty string, equal strings are stored once.
class StringTable {
 public:
  StringTable() { bytes_.push_back(0); }
  uint32_t add(const std::string& s, std::string_view what) {
    if (s.find('\0') != std::string::npos) fail("write_blob: {} '{}' contains a NUL byte", what, s);
    if (s.empty()) return 0;
    auto it = index_.find(s);
    if (it != index_.end()) return it->second;
    if (bytes_.size() + s.size() + 1 > UINT32_MAX) fail("write_blob: string table exceeds 4 GiB");
    uint32_t off = static_cast<uint32_t>(bytes_.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    bytes_.push_back(0);
    index_.emplace(s, off);
    return off;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
  std::unordered_map<std::string, uint32_t> index_;
};

void put_tensor_record(ByteWriter& w, uint32_t name, uint32_t role, uint32_t type,
                       const std::vector<int64_t>& shape, uint64_t bytes) {
  if (shape.size() > UINT32_MAX) fail("write_blob: tensor shape has too many dimensions");
  w.u32(name);
  w.u32(role);
  w.u32(type);
  w.u32(static_cast<uint32_t>(shape.size()));
  w.u64(bytes);
  for (int64_t d : shape) w.i64(d);
}

}  // namespace

// write_blob only refuses what it cannot encode (NUL in a name, an index in a Scratch/Const
// relocation, counts beyond 32 bits). Semantic checks (op codes, stages, relocation targets and
// addends, ...) are read_blob's job, so a bad image still becomes a file that read_blob refuses —
// that is how the loader's checks are tested. Compilers wanting an early check can read back.
std::vector<uint8_t> write_blob(const BlobImage& img) {
  std::vector<uint8_t> content[kNumSections];
  StringTable strtab;
  ByteWriter shstr;
  uint32_t name_off[kNumSections] = {};
  shstr.bytes.push_back(0);
  for (uint32_t s = 1; s < kNumSections; ++s) {
    name_off[s] = static_cast<uint32_t>(shstr.bytes.size());
    shstr.raw(kSpecs[s].name, std::strlen(kSpecs[s].name) + 1);
  }

  // Descriptors: raw host structs (layout pinned by the static_asserts above).
  {
    auto& t = content[kTasks];
    t.resize(img.tasks.size() * sizeof(TaskDesc));
    if (!t.empty()) std::memcpy(t.data(), img.tasks.data(), t.size());
    auto& b = content[kBarriers];
    b.resize(img.barriers.size() * sizeof(BarrierDesc));
    if (!b.empty()) std::memcpy(b.data(), img.barriers.data(), b.size());
  }
  content[kConsts] = img.consts;

  // Records and symbols.
  uint64_t n_globals = img.ios.size() + img.weights.size();
  if (n_globals > UINT32_MAX - kFirstGlobalSym) fail("write_blob: too many I/O tensors and weights");
  ByteWriter io, wt, plan, syms;
  syms.raw(std::array<uint8_t, sizeof(Elf64_Sym)>{}.data(), sizeof(Elf64_Sym));  // [0] null
  for (uint32_t shndx : {uint32_t{kScratch}, uint32_t{kConsts}}) {
    Elf64_Sym s{};
    s.st_info = ELF64_ST_INFO(STB_LOCAL, STT_SECTION);
    s.st_shndx = static_cast<Elf64_Section>(shndx);
    syms.raw(&s, sizeof s);
  }
  auto global_sym = [&](uint32_t name, uint64_t bytes) {
    Elf64_Sym s{};
    s.st_name = name;
    s.st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT);
    s.st_other = STV_DEFAULT;
    s.st_shndx = SHN_UNDEF;
    s.st_size = bytes;
    syms.raw(&s, sizeof s);
  };
  for (const IoDesc& d : img.ios) {
    uint32_t name = strtab.add(d.name, "I/O name");
    put_tensor_record(io, name, static_cast<uint32_t>(d.role), d.type, d.shape, d.bytes);
    global_sym(name, d.bytes);
  }
  for (const WeightRef& d : img.weights) {
    uint32_t name = strtab.add(d.name, "weight name");
    put_tensor_record(wt, name, d.layout, d.type, d.shape, d.bytes);
    global_sym(name, d.bytes);
  }
  for (const PlanEntry& p : img.plan) {
    plan.u32(strtab.add(p.name, "plan entry name"));
    plan.u32(p.first_stage);
    plan.u32(p.last_stage);
    plan.u32(0);
    plan.u64(p.offset);
    plan.u64(p.bytes);
  }
  content[kIo] = std::move(io.bytes);
  content[kWeights] = std::move(wt.bytes);
  content[kPlan] = std::move(plan.bytes);
  content[kSymtab] = std::move(syms.bytes);
  content[kStrtab] = strtab.bytes();

  // Relocations. The type number is the RelocKind value; an invalid kind is written as is (with
  // the null symbol) so that read_blob's refusal of it can be tested.
  {
    ByteWriter rela;
    for (size_t i = 0; i < img.relocs.size(); ++i) {
      const Reloc& r = img.relocs[i];
      const uint32_t type = static_cast<uint32_t>(r.kind);
      uint64_t sym = 0;
      switch (r.kind) {
        case RelocKind::Scratch:
        case RelocKind::Const:
          if (r.index != 0)
            fail("write_blob: relocation {} of a section kind has index {} (must be 0)", i, r.index);
          sym = r.kind == RelocKind::Scratch ? kSymScratch : kSymConsts;
          break;
        // An out-of-range index still encodes (as a symbol index past the io / weight block);
        // read_blob reports it.
        case RelocKind::Io: sym = uint64_t{kFirstGlobalSym} + r.index; break;
        case RelocKind::Weight: sym = uint64_t{kFirstGlobalSym} + img.ios.size() + r.index; break;
      }
      if (sym > UINT32_MAX) fail("write_blob: relocation {} index {} is not encodable", i, r.index);
      Elf64_Rela e{};
      e.r_offset = r.offset;
      e.r_info = ELF64_R_INFO(sym, type);
      e.r_addend = r.addend;
      rela.raw(&e, sizeof e);
    }
    content[kRela] = std::move(rela.bytes);
  }
  content[kMeta].assign(img.meta_json.begin(), img.meta_json.end());
  content[kShstrtab] = std::move(shstr.bytes);

  // .npu.check: one record for the headers, one per section with file bytes (except itself),
  // one for the whole file. Its size must be known before the layout; the hashes come last.
  uint64_t n_check = 2;
  for (uint32_t s = 1; s < kNumSections; ++s)
    if (s != kCheck && kSpecs[s].type != SHT_NOBITS) ++n_check;
  content[kCheck].assign(n_check * kCheckRecord, 0);

  // Layout.
  Elf64_Shdr sh[kNumSections] = {};
  uint64_t pos = sizeof(Elf64_Ehdr);
  for (uint32_t s = 1; s < kNumSections; ++s) {
    const SectionSpec& spec = kSpecs[s];
    pos = align_up(pos, spec.align);
    sh[s].sh_name = name_off[s];
    sh[s].sh_type = spec.type;
    sh[s].sh_flags = spec.flags;
    sh[s].sh_offset = pos;
    sh[s].sh_size = s == kScratch ? img.scratch_bytes : content[s].size();
    sh[s].sh_link = spec.link;  // enum ids equal the written indices
    sh[s].sh_info = spec.info;
    sh[s].sh_addralign = spec.align;
    sh[s].sh_entsize = spec.entsize;
    if (spec.type != SHT_NOBITS) pos += content[s].size();
  }
  const uint64_t shoff = align_up(pos, 8);
  std::vector<uint8_t> file(shoff + sizeof sh, 0);

  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_ident[EI_OSABI] = ELFOSABI_NONE;
  eh.e_type = ET_REL;
  eh.e_machine = kMachine;
  eh.e_version = EV_CURRENT;
  eh.e_shoff = shoff;
  eh.e_flags = kFormatVersion;
  eh.e_ehsize = sizeof(Elf64_Ehdr);
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = kNumSections;
  eh.e_shstrndx = kShstrtab;
  std::memcpy(file.data(), &eh, sizeof eh);
  std::memcpy(file.data() + shoff, sh, sizeof sh);
  for (uint32_t s = 1; s < kNumSections; ++s)
    if (!content[s].empty() && kSpecs[s].type != SHT_NOBITS)
      std::memcpy(file.data() + sh[s].sh_offset, content[s].data(), content[s].size());

  // Checksums, now that every other byte is final.
  uint8_t* check = file.data() + sh[kCheck].sh_offset;
  auto put_check = [&](uint64_t rec, uint32_t what, uint64_t hash) {
    std::memcpy(check + rec * kCheckRecord, &what, 4);
    std::memcpy(check + rec * kCheckRecord + 8, &hash, 8);
  };
  uint64_t rec = 0;
  {
    Hasher h;
    h.add(file.data(), sizeof(Elf64_Ehdr));
    h.add(file.data() + shoff, sizeof sh);
    put_check(rec++, kCheckHeaders, h.digest());
  }
  for (uint32_t s = 1; s < kNumSections; ++s) {
    if (s == kCheck || kSpecs[s].type == SHT_NOBITS) continue;
    put_check(rec++, s, XXH64(file.data() + sh[s].sh_offset, sh[s].sh_size, 0));
  }
  // The last record's `what` is part of the hashed bytes, so it goes in before the hash is taken.
  put_check(rec, kCheckWholeFile, 0);
  const uint64_t whole_field = sh[kCheck].sh_offset + rec * kCheckRecord + 8;
  Hasher h;
  h.add(file.data(), whole_field);
  h.add(file.data() + whole_field + 8, file.size() - whole_field - 8);
  put_check(rec, kCheckWholeFile, h.digest());
  return file;
}

// ============================================================================================
// Reading
// ============================================================================================
namespace {

// Every read from the file goes through here: a bounds check, then a memcpy (the buffer has no
// alignment guarantee). A failure names the blob, the part of the file, and the file offset.
class FileView {
 public:
  FileView(const uint8_t* data, size_t size, const std::string& label)
      : data_(data), size_(size), label_(label) {}

  template <typename... Args>
  [[noreturn]] void fail_at(std::string_view where, uint64_t offset, fmt::format_string<Args...> f,
                            Args&&... args) const {
    fail("blob '{}': {} at offset {:#x}: {}", label_, where, offset,
         fmt::format(f, std::forward<Args>(args)...));
  }

  template <typename T>
  T get(uint64_t offset, std::string_view where) const {
    static_assert(std::is_trivially_copyable_v<T>);
    if (!in_range(offset, sizeof(T), size_))
      fail_at(where, offset, "read of {} bytes runs past the end of the {}-byte file", sizeof(T), size_);
    T v;
    std::memcpy(&v, data_ + offset, sizeof(T));
    return v;
  }

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& label() const { return label_; }

 private:
  const uint8_t* data_;
  uint64_t size_;
  const std::string& label_;
};

struct Section {
  Elf64_Shdr h{};
  std::string name;
  std::string where;  // "section .npu.io", for messages
};

// Sequential reads inside one section; never past its end.
class Cursor {
 public:
  Cursor(const FileView& f, const Section& s) : f_(f), s_(s) {}
  bool done() const { return pos_ == s_.h.sh_size; }
  uint64_t left() const { return s_.h.sh_size - pos_; }
  uint64_t file_offset() const { return s_.h.sh_offset + pos_; }
  uint32_t u32() { return take<uint32_t>(); }
  uint64_t u64() { return take<uint64_t>(); }
  int64_t i64() { return take<int64_t>(); }

 private:
  template <typename T>
  T take() {
    if (left() < sizeof(T))
      f_.fail_at(s_.where, file_offset(), "record runs past the end of the section ({} bytes)",
                 s_.h.sh_size);
    T v = f_.get<T>(file_offset(), s_.where);
    pos_ += sizeof(T);
    return v;
  }
  const FileView& f_;
  const Section& s_;
  uint64_t pos_ = 0;
};

// What a symbol stands for, once .symtab has been checked.
struct SymTarget {
  enum Kind { None, Scratch, Consts, Io, Weight } kind = None;
  uint32_t index = 0;
};

struct TensorRecord {
  uint64_t at;  // file offset, for messages
  std::string name;
  uint32_t role, type;
  std::vector<int64_t> shape;
  uint64_t bytes;
};

class BlobReader {
 public:
  BlobReader(const uint8_t* data, size_t size, const std::string& label) : f_(data, size, label) {}

  BlobImage read() {
    read_elf_header();
    read_section_table();
    verify_checksums();
    read_strtab();
    BlobImage img;
    read_tensor_records(kIo, img);
    read_tensor_records(kWeights, img);
    read_symtab(img);
    img.scratch_bytes = sec(kScratch).h.sh_size;
    img.consts.assign(f_.data() + sec(kConsts).h.sh_offset,
                      f_.data() + sec(kConsts).h.sh_offset + sec(kConsts).h.sh_size);
    read_barriers(img);
    read_tasks(img);
    read_relocs(img);
    read_plan(img);
    read_meta(img);
    return img;
  }

 private:
  const Section& sec(Sec id) const { return sections_[index_[id]]; }

  // ---- ELF header --------------------------------------------------------------------------
  void read_elf_header() {
    const char* W = "ELF header";
    if (f_.size() < sizeof(Elf64_Ehdr))
      f_.fail_at(W, 0, "file is {} bytes, too small for an ELF64 header", f_.size());
    eh_ = f_.get<Elf64_Ehdr>(0, W);
    if (std::memcmp(eh_.e_ident, ELFMAG, SELFMAG) != 0) f_.fail_at(W, 0, "not an ELF file (bad magic)");
    if (eh_.e_ident[EI_CLASS] != ELFCLASS64)
      f_.fail_at(W, EI_CLASS, "ELF class {} (expected ELFCLASS64)", eh_.e_ident[EI_CLASS]);
    if (eh_.e_ident[EI_DATA] != ELFDATA2LSB)
      f_.fail_at(W, EI_DATA, "ELF data encoding {} (expected little-endian)", eh_.e_ident[EI_DATA]);
    if (eh_.e_ident[EI_VERSION] != EV_CURRENT)
      f_.fail_at(W, EI_VERSION, "ELF ident version {}", eh_.e_ident[EI_VERSION]);
    if (eh_.e_ident[EI_OSABI] != ELFOSABI_NONE || eh_.e_ident[EI_ABIVERSION] != 0)
      f_.fail_at(W, EI_OSABI, "OS ABI {}/{} (expected 0/0)", eh_.e_ident[EI_OSABI],
                 eh_.e_ident[EI_ABIVERSION]);
    if (eh_.e_type != ET_REL)
      f_.fail_at(W, offsetof(Elf64_Ehdr, e_type), "e_type {} (expected ET_REL)", eh_.e_type);
    if (eh_.e_machine != kMachine)
      f_.fail_at(W, offsetof(Elf64_Ehdr, e_machine), "e_machine {} (expected {}: not an npullm blob)",
                 eh_.e_machine, kMachine);
    if (eh_.e_version != EV_CURRENT)
      f_.fail_at(W, offsetof(Elf64_Ehdr, e_version), "e_version {}", eh_.e_version);
    if (eh_.e_flags != kFormatVersion)
      f_.fail_at(W, offsetof(Elf64_Ehdr, e_flags), "blob format version {} (this build reads {})",
                 eh_.e_flags, kFormatVersion);
    if (eh_.e_entry != 0 || eh_.e_phoff != 0 || eh_.e_phnum != 0 || eh_.e_phentsize != 0)
      f_.fail_at(W, offsetof(Elf64_Ehdr, e_entry), "entry point or program headers present");
    if (eh_.e_ehsize != sizeof(Elf64_Ehdr))
      f_.fail_at(W, offsetof(Elf64_Ehdr, e_ehsize), "e_ehsize {}", eh_.e_ehsize);
    if (eh_.e_shentsize != sizeof(Elf64_Shdr))
      f_.fail_at(W, offsetof(Elf64_Ehdr, e_shentsize), "e_shentsize {} (expected {})",
                 eh_.e_shentsize, sizeof(Elf64_Shdr));
    if (eh_.e_shnum != kNumSections)
      f_.fail_at(W, offsetof(Elf64_Ehdr, e_shnum), "{} sections (expected {})", eh_.e_shnum,
                 uint32_t{kNumSections});
    if (eh_.e_shstrndx == SHN_UNDEF || eh_.e_shstrndx >= eh_.e_shnum)
      f_.fail_at(W, offsetof(Elf64_Ehdr, e_shstrndx), "e_shstrndx {} out of range", eh_.e_shstrndx);
    const uint64_t sht_bytes = uint64_t{eh_.e_shnum} * sizeof(Elf64_Shdr);
    if (eh_.e_shoff < sizeof(Elf64_Ehdr) || eh_.e_shoff % 8 != 0 ||
        !in_range(eh_.e_shoff, sht_bytes, f_.size()))
      f_.fail_at(W, offsetof(Elf64_Ehdr, e_shoff),
                 "section header table at {:#x} ({} bytes) is misplaced or outside the {}-byte file",
                 eh_.e_shoff, sht_bytes, f_.size());
  }

  // ---- section header table ------------------------------------------------------------------
  void read_section_table() {
    const uint64_t n = eh_.e_shnum;
    sections_.resize(n);
    for (uint64_t i = 0; i < n; ++i)
      sections_[i].h = f_.get<Elf64_Shdr>(eh_.e_shoff + i * sizeof(Elf64_Shdr), "section header table");
    auto hdr_at = [&](uint64_t i) { return eh_.e_shoff + i * sizeof(Elf64_Shdr); };

    const Elf64_Shdr zero{};
    if (std::memcmp(&sections_[0].h, &zero, sizeof zero) != 0)
      f_.fail_at("section header 0", hdr_at(0), "the null section header is not all zero");

    // Section names first (they are how every other check reports where it is).
    const Elf64_Shdr& ss = sections_[eh_.e_shstrndx].h;
    if (ss.sh_type != SHT_STRTAB || ss.sh_size == 0 || !in_range(ss.sh_offset, ss.sh_size, f_.size()))
      f_.fail_at("section header table", hdr_at(eh_.e_shstrndx),
                 "section-name table (index {}) is not a string table inside the file", eh_.e_shstrndx);
    const char* names = reinterpret_cast<const char*>(f_.data() + ss.sh_offset);
    if (names[0] != '\0' || names[ss.sh_size - 1] != '\0')
      f_.fail_at("section-name table", ss.sh_offset, "must start and end with a NUL byte");

    std::fill(std::begin(index_), std::end(index_), 0u);
    for (uint64_t i = 1; i < n; ++i) {
      Section& s = sections_[i];
      const uint64_t at = hdr_at(i);
      if (s.h.sh_name >= ss.sh_size)
        f_.fail_at("section header table", at, "section {} name offset {} outside the name table", i,
                   s.h.sh_name);
      s.name = names + s.h.sh_name;  // terminated: the table's last byte is NUL
      s.where = "section " + s.name;
      uint32_t id = 1;
      while (id < kNumSections && s.name != kSpecs[id].name) ++id;
      if (id == kNumSections)
        f_.fail_at("section header table", at, "unknown section '{}' (index {})", s.name, i);
      if (index_[id] != 0)
        f_.fail_at("section header table", at, "section {} appears twice (indices {} and {})", s.name,
                   index_[id], i);
      index_[id] = static_cast<uint32_t>(i);
    }
    // e_shnum == kNumSections and every name is distinct and known, so all are present.

    for (uint32_t id = 1; id < kNumSections; ++id) check_section_header(id);
    check_no_overlap();
  }

  void check_section_header(uint32_t id) {
    const SectionSpec& spec = kSpecs[id];
    const uint32_t i = index_[id];
    const Section& s = sections_[i];
    const Elf64_Shdr& h = s.h;
    const uint64_t at = eh_.e_shoff + uint64_t{i} * sizeof(Elf64_Shdr);
    auto bad = [&](auto what, auto got, auto want) {
      f_.fail_at(s.where, at, "section header: {} is {} (expected {})", what, got, want);
    };
    if (h.sh_type != spec.type) bad("sh_type", h.sh_type, spec.type);
    if (h.sh_flags != spec.flags) bad("sh_flags", h.sh_flags, spec.flags);
    if (h.sh_addr != 0) bad("sh_addr", h.sh_addr, 0);
    if (h.sh_addralign != spec.align) bad("sh_addralign", h.sh_addralign, spec.align);
    if (h.sh_entsize != spec.entsize) bad("sh_entsize", h.sh_entsize, spec.entsize);
    if (h.sh_link != index_[spec.link]) bad("sh_link", h.sh_link, index_[spec.link]);
    const uint32_t want_info = spec.type == SHT_RELA ? index_[spec.info] : spec.info;
    if (h.sh_info != want_info) bad("sh_info", h.sh_info, want_info);
    if (spec.entsize != 0 && h.sh_size % spec.entsize != 0)
      f_.fail_at(s.where, at, "size {} is not a multiple of the entry size {}", h.sh_size, spec.entsize);
    if (spec.type == SHT_NOBITS) return;  // occupies no file bytes: offset and size are free
    if (h.sh_offset % spec.align != 0)
      f_.fail_at(s.where, at, "file offset {:#x} is not {}-aligned", h.sh_offset, spec.align);
    if (h.sh_offset < sizeof(Elf64_Ehdr) || !in_range(h.sh_offset, h.sh_size, f_.size()))
      f_.fail_at(s.where, at, "contents [{:#x}, +{}) lie outside the {}-byte file", h.sh_offset,
                 h.sh_size, f_.size());
  }

  // Sections must not share bytes with each other or with the section header table: a
  // checksum per section only means something if each byte belongs to one section.
  void check_no_overlap() {
    struct Range { uint64_t begin, end; std::string_view what; };
    std::vector<Range> r;
    r.push_back({eh_.e_shoff, eh_.e_shoff + uint64_t{eh_.e_shnum} * sizeof(Elf64_Shdr),
                 "the section header table"});
    for (const Section& s : sections_)
      if (s.h.sh_type != SHT_NOBITS && s.h.sh_type != SHT_NULL && s.h.sh_size > 0)
        r.push_back({s.h.sh_offset, s.h.sh_offset + s.h.sh_size, s.where});
    std::sort(r.begin(), r.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
    for (size_t k = 1; k < r.size(); ++k)
      if (r[k].begin < r[k - 1].end)
        f_.fail_at(r[k].what, r[k].begin, "overlaps {}", r[k - 1].what);
  }

  // ---- .npu.check ----------------------------------------------------------------------------
  void verify_checksums() {
    const Section& cs = sec(kCheck);
    std::vector<uint32_t> covered;
    for (uint32_t i = 1; i < eh_.e_shnum; ++i)
      if (i != index_[kCheck] && sections_[i].h.sh_type != SHT_NOBITS) covered.push_back(i);
    const uint64_t n_rec = covered.size() + 2;
    if (cs.h.sh_size != n_rec * kCheckRecord)
      f_.fail_at(cs.where, cs.h.sh_offset, "{} bytes, expected {} records of {} bytes", cs.h.sh_size,
                 n_rec, kCheckRecord);
    struct Rec { uint32_t what, reserved; uint64_t hash; uint64_t at; };
    auto rec = [&](uint64_t k) {
      const uint64_t at = cs.h.sh_offset + k * kCheckRecord;
      return Rec{f_.get<uint32_t>(at, cs.where), f_.get<uint32_t>(at + 4, cs.where),
                 f_.get<uint64_t>(at + 8, cs.where), at};
    };
    auto expect_what = [&](const Rec& r, uint32_t want) {
      if (r.what != want || r.reserved != 0)
        f_.fail_at(cs.where, r.at, "record covers {}/{} (expected {}/0)", r.what, r.reserved, want);
    };
    const uint8_t* d = f_.data();

    Rec r = rec(0);
    expect_what(r, kCheckHeaders);
    {
      Hasher h;
      h.add(d, sizeof(Elf64_Ehdr));
      h.add(d + eh_.e_shoff, uint64_t{eh_.e_shnum} * sizeof(Elf64_Shdr));
      if (h.digest() != r.hash)
        fail("blob '{}': ELF header / section header table checksum mismatch (corrupt file?)",
             f_.label());
    }
    for (size_t k = 0; k < covered.size(); ++k) {
      r = rec(k + 1);
      const Section& s = sections_[covered[k]];
      expect_what(r, covered[k]);
      if (XXH64(d + s.h.sh_offset, s.h.sh_size, 0) != r.hash)
        fail("blob '{}': {} checksum mismatch (corrupt file?) [contents at offset {:#x}, {} bytes]",
             f_.label(), s.where, s.h.sh_offset, s.h.sh_size);
    }
    r = rec(n_rec - 1);
    expect_what(r, kCheckWholeFile);
    const uint64_t field = r.at + 8;
    Hasher h;
    h.add(d, field);
    h.add(d + field + 8, f_.size() - field - 8);
    if (h.digest() != r.hash)
      fail("blob '{}': whole-file checksum mismatch (corrupt file? bytes outside the sections "
           "or the checksum record at offset {:#x})", f_.label(), field);
  }

  // ---- .strtab / names -----------------------------------------------------------------------
  void read_strtab() {
    const Section& s = sec(kStrtab);
    if (s.h.sh_size == 0 || f_.data()[s.h.sh_offset] != 0 ||
        f_.data()[s.h.sh_offset + s.h.sh_size - 1] != 0)
      f_.fail_at(s.where, s.h.sh_offset, "string table must start and end with a NUL byte");
  }

  // The string at `off` in .strtab; `where`/`at` say who referenced it.
  std::string str(uint32_t off, std::string_view where, uint64_t at) const {
    const Section& s = sec(kStrtab);
    if (off >= s.h.sh_size)
      f_.fail_at(where, at, "name offset {} is outside .strtab ({} bytes)", off, s.h.sh_size);
    const char* p = reinterpret_cast<const char*>(f_.data() + s.h.sh_offset + off);
    const void* nul = std::memchr(p, 0, s.h.sh_size - off);
    if (!nul) f_.fail_at(where, at, "name at .strtab offset {} is not NUL-terminated", off);
    return std::string(p, static_cast<const char*>(nul));
  }

  // ---- .npu.io / .npu.weights ---------------------------------------------------------------
  void read_tensor_records(Sec id, BlobImage& img) {
    const Section& s = sec(id);
    Cursor c(f_, s);
    std::unordered_set<std::string> seen;
    for (uint32_t k = 0; !c.done(); ++k) {
      TensorRecord t;
      t.at = c.file_offset();
      const uint32_t name = c.u32();
      t.role = c.u32();
      t.type = c.u32();
      const uint32_t ndim = c.u32();
      t.bytes = c.u64();
      // Check the count against what is left before allocating for it.
      if (ndim > c.left() / 8)
        f_.fail_at(s.where, t.at, "record {}: {} dimensions run past the end of the section", k, ndim);
      for (uint32_t d = 0; d < ndim; ++d) {
        t.shape.push_back(c.i64());
        if (t.shape.back() < 0)
          f_.fail_at(s.where, t.at, "record {}: dimension {} is negative ({})", k, d, t.shape.back());
      }
      t.name = str(name, s.where, t.at);
      if (t.name.empty()) f_.fail_at(s.where, t.at, "record {} has an empty name", k);
      if (!seen.insert(t.name).second)
        f_.fail_at(s.where, t.at, "record {}: name '{}' appears twice", k, t.name);
      if (id == kIo) {
        if (t.role < 1 || t.role > 3)
          f_.fail_at(s.where, t.at, "I/O '{}': unknown role {}", t.name, t.role);
        img.ios.push_back({t.name, static_cast<IoRole>(t.role), t.type, t.shape, t.bytes});
      } else {
        if (t.role != 0 && t.role != 16) f_.fail_at(s.where, t.at, "weight '{}': unknown layout {}", t.name, t.role);
        img.weights.push_back({t.name, t.type, t.shape, t.bytes, t.role});
      }
      records_[id].push_back(std::move(t));
    }
  }

  // ---- .symtab -------------------------------------------------------------------------------
  void read_symtab(const BlobImage& img) {
    const Section& s = sec(kSymtab);
    const uint64_t n = s.h.sh_size / sizeof(Elf64_Sym);
    const uint64_t want = kFirstGlobalSym + img.ios.size() + img.weights.size();
    if (n != want)
      f_.fail_at(s.where, s.h.sh_offset, "{} symbols, expected {} (3 + {} I/O + {} weights)", n, want,
                 img.ios.size(), img.weights.size());
    targets_.assign(n, SymTarget{});
    auto sym_at = [&](uint64_t k) { return s.h.sh_offset + k * sizeof(Elf64_Sym); };
    const Elf64_Sym zero{};
    Elf64_Sym sym = f_.get<Elf64_Sym>(sym_at(0), s.where);
    if (std::memcmp(&sym, &zero, sizeof sym) != 0)
      f_.fail_at(s.where, sym_at(0), "symbol 0 is not the null symbol");
    for (uint32_t k : {kSymScratch, kSymConsts}) {
      sym = f_.get<Elf64_Sym>(sym_at(k), s.where);
      const Sec target = k == kSymScratch ? kScratch : kConsts;
      if (sym.st_name != 0 || sym.st_info != ELF64_ST_INFO(STB_LOCAL, STT_SECTION) ||
          sym.st_other != 0 || sym.st_shndx != index_[target] || sym.st_value != 0 || sym.st_size != 0)
        f_.fail_at(s.where, sym_at(k), "symbol {} is not the section symbol of {}", k,
                   kSpecs[target].name);
      targets_[k] = {k == kSymScratch ? SymTarget::Scratch : SymTarget::Consts, 0};
    }
    for (uint64_t k = kFirstGlobalSym; k < n; ++k) {
      sym = f_.get<Elf64_Sym>(sym_at(k), s.where);
      const bool is_io = k - kFirstGlobalSym < img.ios.size();
      const uint32_t idx = static_cast<uint32_t>(is_io ? k - kFirstGlobalSym
                                                       : k - kFirstGlobalSym - img.ios.size());
      const TensorRecord& t = records_[is_io ? kIo : kWeights][idx];
      const std::string name = str(sym.st_name, s.where, sym_at(k));
      if (name != t.name || sym.st_info != ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT) ||
          sym.st_other != STV_DEFAULT || sym.st_shndx != SHN_UNDEF || sym.st_value != 0 ||
          sym.st_size != t.bytes)
        f_.fail_at(s.where, sym_at(k),
                   "symbol {} ('{}') does not match {} {} '{}' (global undefined object of {} bytes)",
                   k, name, is_io ? "I/O" : "weight", idx, t.name, t.bytes);
      targets_[k] = {is_io ? SymTarget::Io : SymTarget::Weight, idx};
    }
  }

  // ---- .npu.barriers / .npu.tasks -----------------------------------------------------------
  void read_barriers(BlobImage& img) {
    const Section& s = sec(kBarriers);
    img.barriers.resize(s.h.sh_size / sizeof(BarrierDesc));
    for (size_t b = 0; b < img.barriers.size(); ++b) {
      const uint64_t at = s.h.sh_offset + b * sizeof(BarrierDesc);
      img.barriers[b] = f_.get<BarrierDesc>(at, s.where);
      if (img.barriers[b].reserved != 0)
        f_.fail_at(s.where, at, "barrier {}: reserved field is {}", b, img.barriers[b].reserved);
    }
  }

  void read_tasks(BlobImage& img) {
    const Section& s = sec(kTasks);
    img.tasks.resize(s.h.sh_size / sizeof(TaskDesc));
    std::vector<uint64_t> per_stage(img.barriers.size(), 0);
    for (size_t t = 0; t < img.tasks.size(); ++t) {
      const uint64_t at = s.h.sh_offset + t * sizeof(TaskDesc);
      const TaskDesc& d = img.tasks[t] = f_.get<TaskDesc>(at, s.where);
      if (std::string_view(op_name(d.op)) == "?")
        f_.fail_at(s.where, at, "task {}: unknown op code {}", t, d.op);
      if (d.stage >= img.barriers.size())
        f_.fail_at(s.where, at, "task {} ({}): stage {} but the blob has {} barriers", t, op_name(d.op),
                   d.stage, img.barriers.size());
      // The device runs tasks in array order and waits at each barrier, so a task of an earlier
      // stage after a later one would never run before its barrier: refuse it.
      if (t > 0 && d.stage < img.tasks[t - 1].stage)
        f_.fail_at(s.where, at, "task {} ({}): stage {} follows a task of stage {}", t, op_name(d.op),
                   d.stage, img.tasks[t - 1].stage);
      // Addresses do not exist at compile time: only relocations may fill operand slots.
      for (int k = 0; k < kMaxOperands; ++k)
        if (d.ptr[k] != 0)
          f_.fail_at(s.where, at + kPtrBegin + 8 * k, "task {} ({}): ptr[{}] is {:#x} in the file (must be 0)",
                     t, op_name(d.op), k, d.ptr[k]);
      ++per_stage[d.stage];
    }
    const Section& bs = sec(kBarriers);
    for (size_t b = 0; b < img.barriers.size(); ++b)
      if (img.barriers[b].count != per_stage[b])
        f_.fail_at(bs.where, bs.h.sh_offset + b * sizeof(BarrierDesc),
                   "barrier {} counts {} tasks but stage {} has {}", b, img.barriers[b].count, b,
                   per_stage[b]);
  }

  // ---- .rela.npu.tasks -----------------------------------------------------------------------
  void read_relocs(BlobImage& img) {
    const Section& s = sec(kRela);
    const uint64_t tasks_size = sec(kTasks).h.sh_size;
    const uint64_t n = s.h.sh_size / sizeof(Elf64_Rela);
    std::unordered_set<uint64_t> slots;
    img.relocs.reserve(n);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t at = s.h.sh_offset + i * sizeof(Elf64_Rela);
      const auto e = f_.get<Elf64_Rela>(at, s.where);
      const uint64_t off = e.r_offset;
      if (off % 8 != 0 || !in_range(off, 8, tasks_size))
        f_.fail_at(s.where, at, "relocation {}: r_offset {:#x} is not an 8-aligned slot inside "
                   ".npu.tasks ({} bytes)", i, off, tasks_size);
      const uint64_t in_task = off % sizeof(TaskDesc);
      if (in_task < kPtrBegin || in_task >= kPtrEnd)
        f_.fail_at(s.where, at, "relocation {}: r_offset {:#x} is byte {} of task {}, not a ptr[] slot",
                   i, off, in_task, off / sizeof(TaskDesc));
      if (!slots.insert(off).second)
        f_.fail_at(s.where, at, "relocation {}: slot {:#x} (task {} ptr[{}]) is relocated twice", i, off,
                   off / sizeof(TaskDesc), (in_task - kPtrBegin) / 8);

      const uint32_t type = ELF64_R_TYPE(e.r_info);
      const uint64_t sym = ELF64_R_SYM(e.r_info);
      if (type < R_NPU_SCRATCH || type > R_NPU_IO)
        f_.fail_at(s.where, at, "relocation {}: unknown relocation type {}", i, type);
      if (sym >= targets_.size())
        f_.fail_at(s.where, at, "relocation {}: symbol index {} outside .symtab ({} symbols)", i, sym,
                   targets_.size());
      const SymTarget tg = targets_[sym];
      Reloc r;
      r.offset = off;
      r.kind = static_cast<RelocKind>(type);
      r.addend = e.r_addend;
      uint64_t limit = 0;
      std::string target;
      switch (type) {
        case R_NPU_SCRATCH:
          if (tg.kind != SymTarget::Scratch)
            f_.fail_at(s.where, at, "relocation {}: scratch relocation against symbol {}, not .npu.scratch", i, sym);
          limit = img.scratch_bytes;
          target = ".npu.scratch";
          break;
        case R_NPU_CONST:
          if (tg.kind != SymTarget::Consts)
            f_.fail_at(s.where, at, "relocation {}: const relocation against symbol {}, not .npu.consts", i, sym);
          limit = img.consts.size();
          target = ".npu.consts";
          break;
        case R_NPU_WEIGHT:
          if (tg.kind != SymTarget::Weight)
            f_.fail_at(s.where, at, "relocation {}: weight relocation against symbol {}, which is not a "
                       "weight (weight index out of range?)", i, sym);
          r.index = tg.index;
          limit = img.weights[tg.index].bytes;
          target = "weight '" + img.weights[tg.index].name + "'";
          break;
        case R_NPU_IO:
          if (tg.kind != SymTarget::Io)
            f_.fail_at(s.where, at, "relocation {}: I/O relocation against symbol {}, which is not an "
                       "I/O tensor (io index out of range?)", i, sym);
          r.index = tg.index;
          limit = img.ios[tg.index].bytes;
          target = "I/O '" + img.ios[tg.index].name + "'";
          break;
      }
      // The operand must start inside its target (so a zero-sized target cannot be referenced).
      if (r.addend < 0 || static_cast<uint64_t>(r.addend) >= limit)
        f_.fail_at(s.where, at, "relocation {}: addend {} outside {} ({} bytes)", i, r.addend, target,
                   limit);
      img.relocs.push_back(r);
    }
  }

  // ---- .npu.plan / .npu.meta -----------------------------------------------------------------
  void read_plan(BlobImage& img) {
    const Section& s = sec(kPlan);
    Cursor c(f_, s);
    for (uint32_t k = 0; !c.done(); ++k) {
      const uint64_t at = c.file_offset();
      PlanEntry p;
      const uint32_t name = c.u32();
      p.first_stage = c.u32();
      p.last_stage = c.u32();
      const uint32_t reserved = c.u32();
      p.offset = c.u64();
      p.bytes = c.u64();
      p.name = str(name, s.where, at);
      if (reserved != 0) f_.fail_at(s.where, at, "plan entry {} ('{}'): reserved field is {}", k, p.name, reserved);
      if (!in_range(p.offset, p.bytes, img.scratch_bytes))
        f_.fail_at(s.where, at, "plan entry {} ('{}'): [{}, +{}) outside the {}-byte scratch arena", k,
                   p.name, p.offset, p.bytes, img.scratch_bytes);
      if (p.first_stage > p.last_stage || p.last_stage >= img.barriers.size())
        f_.fail_at(s.where, at, "plan entry {} ('{}'): stages [{}, {}] invalid for {} stages", k, p.name,
                   p.first_stage, p.last_stage, img.barriers.size());
      img.plan.push_back(std::move(p));
    }
  }

  void read_meta(BlobImage& img) {
    const Section& s = sec(kMeta);
    const char* p = reinterpret_cast<const char*>(f_.data() + s.h.sh_offset);
    img.meta_json.assign(p, s.h.sh_size);
    if (const void* nul = std::memchr(p, 0, s.h.sh_size))
      f_.fail_at(s.where, s.h.sh_offset + (static_cast<const char*>(nul) - p), "NUL byte in JSON text");
    // Empty means "no metadata" (hand-built images in tests); anything else must be JSON.
    if (!img.meta_json.empty() && !nlohmann::json::accept(img.meta_json))
      f_.fail_at(s.where, s.h.sh_offset, "not valid JSON");
  }

  FileView f_;
  Elf64_Ehdr eh_{};
  std::vector<Section> sections_;
  uint32_t index_[kNumSections] = {};         // section id -> section index
  std::vector<TensorRecord> records_[kNumSections];  // by Sec id: kIo and kWeights only
  std::vector<SymTarget> targets_;            // by symbol index
};

}  // namespace

BlobImage read_blob(const uint8_t* data, size_t size, const std::string& label) {
  if (data == nullptr && size != 0) fail("blob '{}': null data pointer", label);
  static const uint8_t kEmpty = 0;
  return BlobReader(data ? data : &kEmpty, data ? size : 0, label).read();
}

}  // namespace npullm::blob
