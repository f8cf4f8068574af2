// SPDX-License-Identifier: BSL-1.0
// See fd_limit.hpp.
#include "fd_limit.hpp"

#include <sys/resource.h>

namespace sample_support {

void raise_fd_limit() noexcept {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

} // namespace sample_support
