// A task descriptor's operands as the CPU device reads them: slot `slot`'s pointer as a T*, and
// its element type.
#pragma once

#include "blob/task.h"
#include "formats/ggml_types.h"

namespace npullm::cpu {

template <typename T>
T* operand(const blob::TaskDesc& t, int slot) { return reinterpret_cast<T*>(t.ptr[slot]); }
inline GgmlType operand_type(const blob::TaskDesc& t, int slot) { return static_cast<GgmlType>(t.type[slot]); }

}  // namespace npullm::cpu
