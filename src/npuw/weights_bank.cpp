#include "npuw/weights_bank.h"

#include <fmt/ranges.h>

#include "common/error.h"

namespace npullm::npuw {

const void* GgufWeightsBank::resolve(const blob::WeightRef& w) const {
  const GgufTensorInfo* t = f_.find_tensor(w.name);
  if (!t) fail("{}: the blob needs tensor '{}', which the model file lacks", f_.path(), w.name);
  if (static_cast<uint32_t>(t->type) != w.type || t->dims != w.shape || t->n_bytes != w.bytes)
    fail("{}: tensor '{}' is {} [{}] ({} bytes) but the blob was compiled for type {} [{}] ({} bytes)", f_.path(),
         w.name, ggml_type_name(t->type), fmt::join(t->dims, ","), t->n_bytes, w.type, fmt::join(w.shape, ","), w.bytes);
  return t->data;
}

}  // namespace npullm::npuw
