// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// Build-interface checks every coretry header makes before it uses Asio.
///
/// Asio's handler and coroutine-frame memory comes from `std::aligned_alloc` or from
/// `operator new`, a choice Asio makes once per translation unit. Memory allocated in one unit
/// may be freed in another (Asio recycles it through a per-thread cache), so every unit of a
/// program, coretry's library included, must make the same choice. coretry's is
/// `std::aligned_alloc` (`ASIO_HAS_STD_ALIGNED_ALLOC`): the one Asio makes whenever a standard
/// header precedes it, and always from Asio 1.3x and in Boost.Asio. Asio 1.22 makes the other
/// one when it is included before any standard header; this header includes one first, and
/// refuses to compile a unit that already included Asio with the other choice. The check lives in
/// <coretry/detail/asio.hpp>, the one header that names an Asio; with Boost.Asio there is no
/// choice to make.

#include <coretry/detail/asio.hpp>
