#include "cli/busy_load.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "common/error.h"

namespace npullm::cli {

BusyLoad::BusyLoad(int processes) {
  if (processes < 0 || processes > 256) fail("--busy must be between 0 and 256 (got {})", processes);
  const pid_t parent = getpid();
  for (int i = 0; i < processes; ++i) {
    const pid_t pid = fork();
    if (pid < 0) fail("--busy: fork failed");
    if (pid == 0) {
      // The child: no stdio, no destructors; it spins until killed, or until the parent is gone.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(0);
      volatile unsigned long x = 0;
      for (;;) x = x + 1;
    }
    children_.push_back(pid);
  }
}

BusyLoad::~BusyLoad() {
  for (pid_t pid : children_) kill(pid, SIGKILL);
  for (pid_t pid : children_) waitpid(pid, nullptr, 0);
}

}  // namespace npullm::cli
