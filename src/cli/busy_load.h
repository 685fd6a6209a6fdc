// `npullm bench --busy N`: N processes that spin on the CPU beside the benchmark, as another
// program on a shared machine would, so anyone can reproduce how decode behaves when it does not
// have the cores to itself. The children are killed when the BusyLoad goes (and die with the
// parent if it is killed first).
#pragma once
#include <sys/types.h>

#include <vector>

namespace npullm::cli {

class BusyLoad {
 public:
  explicit BusyLoad(int processes);
  ~BusyLoad();
  BusyLoad(const BusyLoad&) = delete;
  BusyLoad& operator=(const BusyLoad&) = delete;

 private:
  std::vector<pid_t> children_;
};

}  // namespace npullm::cli
