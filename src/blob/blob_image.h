// BlobImage: the in-memory form of a compiled blob, what the compiler produces and what
// write_blob() turns into an ELF64 file (and read_blob() turns back, after validating it).
//
// ELF layout (written by blob_elf.cpp):
//   .npu.tasks     PROGBITS, ALLOC|WRITE   TaskDesc[n]: patched by relocations at load / bind
//   .npu.barriers  PROGBITS, ALLOC         BarrierDesc[n]
//   .npu.consts    PROGBITS, ALLOC         small constants referenced by tasks
//   .npu.scratch   NOBITS,   ALLOC|WRITE   the intermediate-tensor arena (size only, like .bss)
//   .npu.io        PROGBITS                I/O metadata records
//   .npu.weights   PROGBITS                weight references (by name into the weights bank)
//   .npu.plan      PROGBITS                memory plan records (for inspect / humans)
//   .symtab/.strtab                        one symbol per I/O tensor and per weight
//   .rela.npu.tasks RELA                   relocations against .npu.tasks
//   .npu.meta      PROGBITS                JSON text: blob name and compile configuration
//   .npu.check     PROGBITS                xxh64 of every other section and of the headers
//   .shstrtab
// The byte layouts of the record sections, the relocation type numbers, the symbol order and the
// .npu.check records are documented at the top of blob_elf.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "blob/task.h"

namespace npullm::blob {

enum class IoRole : uint32_t {
  Input = 1,    // plain input, written by the runtime before each run
  Output = 2,   // plain output, read by the runtime after each run
  State = 3,    // lifted state variable: read and updated in place (past and present in one buffer)
};

struct IoDesc {
  std::string name;
  IoRole role = IoRole::Input;
  uint32_t type = 0;              // GgmlType id (F32 = 0, F16 = 1, I32 = 26)
  std::vector<int64_t> shape;     // row-major, outermost first
  uint64_t bytes = 0;
};

struct WeightRef {
  std::string name;               // tensor name in the weights bank (GGUF tensor name)
  uint32_t type = 0;              // GgmlType id
  std::vector<int64_t> shape;     // GGUF order (ne0 first), as in the bank
  uint64_t bytes = 0;             // in `layout`
  uint32_t layout = 0;            // WeightLayout (formats/weight_layout.h): 0 rows as in GGUF, 16 panels16
};

enum class RelocKind : uint32_t {
  Scratch = 1,   // internal: .npu.scratch base + addend, applied once (the driver's scratch arena)
  Const = 2,     // internal: .npu.consts base + addend, applied once at load
  Weight = 3,    // internal: weight[index] data + addend, applied once at load
  Io = 4,        // user I/O: io[index] buffer + addend, applied whenever the tensor is bound
};

struct Reloc {
  uint64_t offset = 0;            // byte offset of a uint64 slot inside .npu.tasks
  RelocKind kind = RelocKind::Scratch;
  uint32_t index = 0;             // weight or io index
  int64_t addend = 0;
};

// One intermediate tensor placed in the scratch arena, live over stages [first, last].
struct PlanEntry {
  std::string name;
  uint64_t offset = 0, bytes = 0;
  uint32_t first_stage = 0, last_stage = 0;
};

struct BlobImage {
  std::string meta_json;           // {"name": ..., "config": {...}}
  std::vector<TaskDesc> tasks;
  std::vector<BarrierDesc> barriers;
  std::vector<uint8_t> consts;
  uint64_t scratch_bytes = 0;
  std::vector<IoDesc> ios;
  std::vector<WeightRef> weights;
  std::vector<Reloc> relocs;
  std::vector<PlanEntry> plan;
};

// Serialises to an ELF64 little-endian relocatable file that `readelf -a` reads cleanly.
std::vector<uint8_t> write_blob(const BlobImage& img);
// Parses and validates (structure, bounds, checksums, descriptors, relocations). Throws
// npullm::Error naming the section and offset of the first problem. `label` names the blob.
BlobImage read_blob(const uint8_t* data, size_t size, const std::string& label);

}  // namespace npullm::blob
