// npullm::Error — the one exception type every layer throws for bad input or a failed check.
// Messages name the file / key / offset and what was expected, so a user can act on them.
#pragma once
#include <stdexcept>
#include <string>
#include <fmt/format.h>

namespace npullm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace npullm
