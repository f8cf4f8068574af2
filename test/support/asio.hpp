// SPDX-License-Identifier: BSL-1.0
#pragma once
// The Asio the tests run against, named `asio::` at global scope in either flavour (standalone
// Asio, or Boost.Asio under `namespace asio = boost::asio`), with the parts the tests use beyond
// what coretry's headers include. The flavour and its version checks: <coretry/detail/asio.hpp>.

#include <coretry/detail/asio.hpp>

#if CORETRY_ASIO_BOOST
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>
namespace asio = ::boost::asio;
#else
#include <asio/bind_executor.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/system_executor.hpp>
#include <asio/use_future.hpp>
#include <asio/write.hpp>
#if ASIO_VERSION >= 102400
#include <asio/deferred.hpp>
#else
#include <asio/experimental/deferred.hpp>
#endif
#endif

namespace coretry::test {

/// The `deferred` completion token: Asio's own from 1.24 (Boost 1.80), experimental before.
#if CORETRY_ASIO_BOOST || ASIO_VERSION >= 102400
inline constexpr auto deferred = asio::deferred;
#else
inline constexpr auto deferred = asio::experimental::deferred;
#endif

/// The out-parameter of Asio's synchronous calls: `std::error_code`, or
/// `boost::system::error_code` with Boost.Asio.
using error_code = coretry::detail::asio_error_code;

/// What a token's `use_future` or `use_awaitable` throws for an error: `std::system_error`, or
/// `boost::system::system_error` with Boost.Asio.
using system_error = coretry::detail::asio_system_error;

/// Asio's `operation_aborted` as a `std::error_code`, comparable with either flavour's codes.
inline const std::error_code operation_aborted = coretry::detail::aborted_error();

} // namespace coretry::test
