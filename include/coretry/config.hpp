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
/// refuses to compile a unit that already included Asio with the other choice.

// The standard header must come first: clang-format would sort it after the Asio one.
// clang-format off
#include <cstddef> // libstdc++'s _GLIBCXX_HAVE_ALIGNED_ALLOC, before Asio's configuration reads it

#include <asio/detail/config.hpp>

#if defined(_GLIBCXX_HAVE_ALIGNED_ALLOC) && !defined(ASIO_HAS_STD_ALIGNED_ALLOC)
#error "coretry: this unit's Asio allocates with ::operator new, coretry's library with std::aligned_alloc, and memory crosses between them (ASan: alloc-dealloc-mismatch). Either <asio/...> was included before any standard header (Asio 1.22 then chooses ::operator new) or ASIO_DISABLE_STD_ALIGNED_ALLOC is defined. Compile with -DASIO_HAS_STD_ALIGNED_ALLOC=1 (the coretry::coretry CMake target and `pkg-config --cflags coretry` add it), or include a coretry header before Asio's, and do not define ASIO_DISABLE_STD_ALIGNED_ALLOC."
#endif
// clang-format on
