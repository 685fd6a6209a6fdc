// Names of the task op codes, for messages, `inspect` output and logs.
#include "blob/task.h"

namespace npullm::blob {

const char* op_name(uint32_t op) {
  // A switch over the raw number (not OpCode) so any value read from a file is safe to pass in.
  switch (static_cast<OpCode>(op)) {
    case OpCode::Embed: return "Embed";
    case OpCode::RmsNorm: return "RmsNorm";
    case OpCode::MatMul: return "MatMul";
    case OpCode::Add: return "Add";
    case OpCode::Rope: return "Rope";
    case OpCode::ScatterRows: return "ScatterRows";
    case OpCode::Attention: return "Attention";
    case OpCode::SwiGlu: return "SwiGlu";
    case OpCode::GatherRows: return "GatherRows";
    case OpCode::SliceCols: return "SliceCols";
    case OpCode::Scale: return "Scale";
    case OpCode::SoftCap: return "SoftCap";
    case OpCode::GeGlu: return "GeGlu";
    case OpCode::MoeRoute: return "MoeRoute";
    case OpCode::MoeGather: return "MoeGather";
    case OpCode::MoeMatMul: return "MoeMatMul";
    case OpCode::MoeSum: return "MoeSum";
    case OpCode::SwiGluOai: return "SwiGluOai";
  }
  return "?";
}

}  // namespace npullm::blob
