// SPDX-License-Identifier: BSL-1.0
#pragma once
// Private: the library's validation throws through `coretry::detail::refuse` (a public detail
// header, since hedge_options and http::retry_rules validate in headers too).

#include <coretry/detail/refuse.hpp>
