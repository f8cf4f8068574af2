// SPDX-License-Identifier: BSL-1.0
#pragma once
// Process limits for the samples that open many sockets. Part of the samples' support library.

namespace sample_support {

/// Raises the soft limit on open files to the hard limit, so that a sample with thousands of
/// concurrent connections does not stop at the usual 1024. Does nothing where it cannot.
void raise_fd_limit() noexcept;

} // namespace sample_support
