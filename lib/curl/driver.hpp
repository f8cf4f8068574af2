// SPDX-License-Identifier: BSL-1.0
#pragma once
// Private: drives one libcurl multi handle from Asio (socket and timer callbacks, waits).
// Not installed. The serialization rule of the client is at the top of driver.cpp.

#include <coretry/detail/asio.hpp>
#if CORETRY_ASIO_BOOST
#include <boost/asio/posix/stream_descriptor.hpp>
#else
#include <asio/posix/stream_descriptor.hpp>
#endif

#include <curl/curl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "counter.hpp"
#include <sys/types.h>

namespace coretry::curl::detail {

/// A descriptor libcurl wants watched. For sockets opened through on_open_socket `desc` owns the
/// descriptor libcurl uses (closed in on_close_socket); for descriptors libcurl opened itself
/// (`foreign`) it owns a dup().
struct socket_entry {
  explicit socket_entry(const asio::any_io_executor& ex) : desc(ex) {}
  asio::posix::stream_descriptor desc;
  curl_socket_t fd = CURL_SOCKET_BAD; ///< libcurl's number for it
  std::uint64_t id = 0;               ///< unique per entry: numbers are reused
  int want = 0;                       ///< CURL_POLL_IN/OUT/INOUT, 0 after CURL_POLL_REMOVE
  bool reading = false;               ///< a read wait (or posted read event) is pending
  bool writing = false;
  bool foreign = false;
  /// Whether libcurl's last interest in it (before any CURL_POLL_REMOVE) was CURL_POLL_IN alone:
  /// past its connect, a socket libcurl only closes through on_close_socket, so its identity
  /// needs no check (see multi_driver::still_open).
  bool past_connect = false;
  dev_t dev = 0; ///< identity of the open file, to notice libcurl closing it behind our back
  ino_t ino = 0;
};

/// Limits handed to the multi handle.
struct multi_limits {
  long max_total_connections = 0;
  long max_host_connections = 0;
  long max_idle_connections = 0;
  long max_concurrent_streams = 0; ///< 0 = libcurl's default
};

/// The multi handle, the sockets libcurl uses and the one timer it asks for. It reports finished
/// transfers to its `owner`; it knows nothing of queues, pools or requests.
class multi_driver {
public:
  /// The layer above: called with the lock held, outside any libcurl callback.
  class owner {
  public:
    /// `easy` finished with `result` (its done message was read); it is still in the multi.
    virtual void transfer_done(CURL* easy, CURLcode result) = 0;
    /// After a batch of transfer_done calls.
    virtual void transfers_freed() = 0;
    /// From inside a libcurl callback that failed for `easy` (an exception caught): records
    /// `ec` on its transfer, to be aborted by `abort_failed`. Must not throw or call libcurl.
    virtual void callback_failed(CURL* easy, std::error_code ec, const char* what) noexcept = 0;
    /// Outside callbacks: aborts every transfer `callback_failed` marked (or every transfer
    /// when `all`), completing each with its error (`ec` for unmarked ones).
    virtual void abort_failed(bool all, std::error_code ec) = 0;

  protected:
    ~owner() = default;
  };

  /// `life` is locked by every handler before it takes `mutex` (both belong to the owner), so
  /// a handler that runs after the owner is gone does nothing. `open` counts our sockets, `connects`
  /// every socket ever opened.
  multi_driver(asio::any_io_executor ex, std::mutex& mutex, owner& o, counter& open,
               counter& connects, const multi_limits& limits);
  ~multi_driver();
  multi_driver(const multi_driver&) = delete;
  multi_driver& operator=(const multi_driver&) = delete;

  /// Set once, right after the owner is created (weak_from_this is not available before).
  void set_life(std::weak_ptr<void> life) { life_ = std::move(life); }

  /// With the lock held. Makes libcurl open and close `easy`'s sockets through the driver.
  CURLcode install_socket_callbacks(CURL* easy);
  CURLMcode add(CURL* easy);
  /// Returns at once, whatever stage the transfer is in (see easy_setup.cpp on quick exit).
  void remove(CURL* easy);
  /// With the lock held, after every handle was removed: cleans the multi up (its cache closes
  /// idle connections) and forgets every descriptor. Every later handler returns at once.
  void shutdown();

private:
  void socket_action(curl_socket_t fd, int events);
  /// After every curl_multi_* call that may run callbacks: recovers from a failed callback
  /// (re-arms a timer that could not be armed, aborts the transfers marked failed).
  void after_callbacks();
  /// Arms the timer for `timeout_ms` as libcurl asks (-1 cancels); may throw.
  void arm_timer(long timeout_ms);
  void drain_messages();
  void arm(socket_entry& s);
  void on_wait(curl_socket_t fd, std::uint64_t id, bool write, std::error_code ec);
  void on_timer_fired(std::uint64_t generation, std::error_code ec);
  static bool still_open(const socket_entry& s) noexcept;
  using socket_table = std::unordered_map<curl_socket_t, std::unique_ptr<socket_entry>>;
  void forget_closed(socket_table::iterator it);
  /// Runs `f(*this)` with the owner alive and the lock held; nothing if the owner is gone.
  template <class F> auto locked(F f) const;

  int socket_changed(curl_socket_t fd, int what);
  curl_socket_t open_socket(curl_sockaddr* addr);
  static int on_socket(CURL* easy, curl_socket_t fd, int what, void* userp, void* socketp);
  static int on_timer(CURLM* multi, long timeout_ms, void* userp);
  static curl_socket_t on_open_socket(void* clientp, curlsocktype purpose, curl_sockaddr* addr);
  static int on_close_socket(void* clientp, curl_socket_t fd);

  asio::any_io_executor ex_;
  std::mutex& mutex_;
  owner& owner_;
  counter& open_;
  counter& connects_; ///< sockets ever opened
  std::weak_ptr<void> life_;
  asio::steady_timer timer_;
  CURLM* multi_ = nullptr;
  socket_table sockets_;
  std::uint64_t next_socket_id_ = 0;
  std::uint64_t timer_generation_ = 0;
  bool shut_ = false;
  bool timer_lost_ = false;      ///< on_timer failed: libcurl's deadline is not armed
  bool callback_failed_ = false; ///< on_socket failed for a transfer: abort it
};

} // namespace coretry::curl::detail
