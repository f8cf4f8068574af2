// SPDX-License-Identifier: BSL-1.0
#pragma once
// The one place that names an Asio: standalone Asio (1.22.1 to 1.38.x) or Boost.Asio (Boost 1.81
// and later, up to the Asio 1.38 it carries). Every other header includes this one and spells
// `asio::` inside namespace coretry, which is `::asio` or `::boost::asio` here; no other file
// tests a version.
//
// The flavour is fixed when coretry is configured (CMake option CORETRY_ASIO) and recorded in the
// generated <coretry/detail/asio_config.hpp>, installed beside this header, so a consumer compiles
// against the same Asio as the library whichever way it builds.

#include <system_error>
#include <utility>

#if __has_include(<coretry/detail/asio_config.hpp>)
#include <coretry/detail/asio_config.hpp>
#endif
#ifndef CORETRY_ASIO_BOOST
#define CORETRY_ASIO_BOOST 0
#endif

// #error cannot expand a macro; the #pragma message before each one shows the version found.
#define CORETRY_ASIO_STR2(x) #x
#define CORETRY_ASIO_STR(x) CORETRY_ASIO_STR2(x)

#if CORETRY_ASIO_BOOST

#include <boost/asio/version.hpp>
#include <boost/version.hpp>
#if BOOST_VERSION < 108100
#pragma message("coretry: found Boost " BOOST_LIB_VERSION                                          \
                " (BOOST_VERSION " CORETRY_ASIO_STR(BOOST_VERSION) ")")
#error "coretry needs Boost.Asio from Boost 1.81 or later (per-operation cancellation of Asio 1.26)"
#endif
#if BOOST_ASIO_VERSION / 100 > 1038 && !defined(CORETRY_ASIO_UNTESTED)
#pragma message("coretry: found BOOST_ASIO_VERSION " CORETRY_ASIO_STR(BOOST_ASIO_VERSION))
#error                                                                                             \
    "coretry is tested with Boost.Asio up to Asio 1.38 (define CORETRY_ASIO_UNTESTED to try a newer one)"
#endif
#if defined(CORETRY_ASIO_CONFIGURED_VERSION) &&                                                    \
    BOOST_ASIO_VERSION / 100 != CORETRY_ASIO_CONFIGURED_VERSION / 100
#pragma message("coretry: found BOOST_ASIO_VERSION " CORETRY_ASIO_STR(                             \
    BOOST_ASIO_VERSION) ", configured with " CORETRY_ASIO_STR(CORETRY_ASIO_CONFIGURED_VERSION))
#error "coretry was configured against another Boost.Asio than the one this unit includes"
#endif

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

#else

#include <asio/version.hpp>
#if ASIO_VERSION < 102201
#pragma message("coretry: found ASIO_VERSION " CORETRY_ASIO_STR(ASIO_VERSION))
#error "coretry needs standalone Asio 1.22.1 (ASIO_VERSION 102201) or later"
#endif
#if ASIO_VERSION / 100 > 1038 && !defined(CORETRY_ASIO_UNTESTED)
#pragma message("coretry: found ASIO_VERSION " CORETRY_ASIO_STR(ASIO_VERSION))
#error                                                                                             \
    "coretry is tested with standalone Asio up to 1.38 (define CORETRY_ASIO_UNTESTED to try a newer one)"
#endif
#if defined(CORETRY_ASIO_CONFIGURED_VERSION) &&                                                    \
    ASIO_VERSION / 100 != CORETRY_ASIO_CONFIGURED_VERSION / 100
#pragma message("coretry: found ASIO_VERSION " CORETRY_ASIO_STR(                                   \
    ASIO_VERSION) ", configured with " CORETRY_ASIO_STR(CORETRY_ASIO_CONFIGURED_VERSION))
#error "coretry was configured against another Asio than the one this unit includes"
#endif

// Asio 1.22 chooses between std::aligned_alloc and ::operator new once per unit, by whether a
// standard header came first (see <coretry/config.hpp>); the standard headers above came first.
#include <asio/detail/config.hpp>
#if defined(_GLIBCXX_HAVE_ALIGNED_ALLOC) && !defined(ASIO_HAS_STD_ALIGNED_ALLOC)
#error                                                                                             \
    "coretry: this unit's Asio allocates with ::operator new, coretry's library with std::aligned_alloc, and memory crosses between them (ASan: alloc-dealloc-mismatch). Either <asio/...> was included before any standard header (Asio 1.22 then chooses ::operator new) or ASIO_DISABLE_STD_ALIGNED_ALLOC is defined. Compile with -DASIO_HAS_STD_ALIGNED_ALLOC=1 (the coretry::coretry CMake target and `pkg-config --cflags coretry` add it), or include a coretry header before Asio's, and do not define ASIO_DISABLE_STD_ALIGNED_ALLOC."
#endif

#include <asio/any_io_executor.hpp>
#include <asio/associated_allocator.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>
#include <asio/bind_allocator.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/co_spawn.hpp>
#include <asio/dispatch.hpp>
#include <asio/error.hpp>
#include <asio/execution/context.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/query.hpp>
#include <asio/recycling_allocator.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/this_coro.hpp>
#include <asio/thread_pool.hpp>
#include <asio/use_awaitable.hpp>
#if ASIO_VERSION >= 102400
#include <asio/as_tuple.hpp>
#else
#include <asio/experimental/as_tuple.hpp>
#endif

#endif

// Asio 1.28 and later: a handler's associated immediate executor, which an operation completing
// inside its initiating function submits the handler to.
#if CORETRY_ASIO_BOOST && BOOST_ASIO_VERSION >= 102800
#include <boost/asio/associated_immediate_executor.hpp>
#include <boost/asio/bind_executor.hpp>
#define CORETRY_ASIO_HAS_IMMEDIATE_EXECUTOR 1
#elif !CORETRY_ASIO_BOOST && ASIO_VERSION >= 102800
#include <asio/associated_immediate_executor.hpp>
#include <asio/bind_executor.hpp>
#define CORETRY_ASIO_HAS_IMMEDIATE_EXECUTOR 1
#else
#define CORETRY_ASIO_HAS_IMMEDIATE_EXECUTOR 0
#endif

// Asio 1.33 and later: the execution context's configuration (where the concurrency hint lives).
#if CORETRY_ASIO_BOOST && __has_include(<boost/asio/config.hpp>)
#include <boost/asio/config.hpp>
#define CORETRY_ASIO_HAS_CONFIG 1
#elif !CORETRY_ASIO_BOOST && __has_include(<asio/config.hpp>)
#include <asio/config.hpp>
#define CORETRY_ASIO_HAS_CONFIG 1
#else
#define CORETRY_ASIO_HAS_CONFIG 0
#endif

namespace coretry {

#if CORETRY_ASIO_BOOST
namespace asio = ::boost::asio;
#else
namespace asio = ::asio;
#endif

namespace detail {

/// The error code Asio's own completions carry: `std::error_code` in standalone Asio,
/// `boost::system::error_code` in Boost.Asio. coretry's completion signatures use it too, so that
/// `use_awaitable`, `use_future` and `as_tuple` treat coretry's errors as they treat Asio's.
#if CORETRY_ASIO_BOOST
using asio_error_code = ::boost::system::error_code;
#else
using asio_error_code = std::error_code;
#endif

/// `std::error_code` as the flavour's completion argument. Boost: the system and generic
/// categories become Boost's own, so `ec == boost::asio::error::operation_aborted` holds for a
/// Boost application; other categories (coretry's, curl's) are carried as they are.
inline asio_error_code to_asio_error(const std::error_code& ec) noexcept {
#if CORETRY_ASIO_BOOST
  if (ec.category() == std::system_category())
    return {ec.value(), ::boost::system::system_category()};
  if (ec.category() == std::generic_category())
    return {ec.value(), ::boost::system::generic_category()};
#endif
  return ec;
}

/// `asio::error::operation_aborted` as a `std::error_code`: ECANCELED in standalone Asio's system
/// category, or in `std::system_category()` with Boost.Asio (Boost.System maps its system category
/// onto the standard one).
inline std::error_code aborted_error() noexcept {
  return std::error_code(asio_error_code(asio::error::operation_aborted));
}

/// Whether `ec` is Asio's `operation_aborted`; takes either flavour's error code.
inline bool is_aborted(const std::error_code& ec) noexcept {
  return ec == aborted_error();
}

/// What Asio throws for an error code: `std::system_error`, or with Boost.Asio
/// `boost::system::system_error` (not derived from it), which code catching the former must also
/// catch, as `asio_system_error`.
#if CORETRY_ASIO_BOOST
using asio_system_error = ::boost::system::system_error;
#define CORETRY_ASIO_DISTINCT_SYSTEM_ERROR 1
#else
using asio_system_error = std::system_error;
#define CORETRY_ASIO_DISTINCT_SYSTEM_ERROR 0
#endif

/// `as_tuple(token)`: Asio's own from 1.24 (Boost 1.80), `experimental::as_tuple` before.
template <class CompletionToken> constexpr auto as_tuple(CompletionToken&& token) {
#if CORETRY_ASIO_BOOST || ASIO_VERSION >= 102400
  return asio::as_tuple(std::forward<CompletionToken>(token));
#else
  return asio::experimental::as_tuple(std::forward<CompletionToken>(token));
#endif
}

} // namespace detail
} // namespace coretry
