#pragma once
// Private: the state behind coretry::curl::client. Not installed.

#include <coretry/curl/client.hpp>

#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>

#include <curl/curl.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <sys/types.h>

namespace coretry::curl::detail {

struct counter {
  std::atomic<std::size_t> value{0};
  std::atomic<std::size_t> peak{0};
  void add(std::ptrdiff_t delta) noexcept;
};

struct client_counters {
  counter active, queued, open, waiting, pooled;
};

enum class transfer_state : std::uint8_t { created, queued, active, done };

/// One perform: owned by the client while queued or active, and by whoever holds the
/// completion (nobody, once completed).
struct transfer {
  std::weak_ptr<client_impl> owner;
  request req;
  response resp;
  std::unique_ptr<perform_completion> completion;
  CURL* easy = nullptr;
  curl_slist* header_list = nullptr;
  transfer_state state = transfer_state::created;
  bool cancel_requested = false;
};

/// A descriptor libcurl wants watched. For sockets opened through on_open_socket `desc` owns the
/// descriptor libcurl uses (closed in on_close_socket); for descriptors libcurl opened itself
/// (`foreign`) it owns a dup().
struct socket_entry {
  explicit socket_entry(const asio::strand<asio::any_io_executor>& s) : desc(s) {}
  asio::posix::stream_descriptor desc;
  curl_socket_t fd = CURL_SOCKET_BAD; ///< libcurl's number for it
  std::uint64_t id = 0;               ///< unique per entry: numbers are reused
  int want = 0;                       ///< CURL_POLL_IN/OUT/INOUT, 0 after CURL_POLL_REMOVE
  bool reading = false;               ///< a read wait (or posted read event) is pending
  bool writing = false;
  bool foreign = false;
  dev_t dev = 0; ///< identity of the open file, to notice libcurl closing it behind our back
  ino_t ino = 0;
};

class client_impl : public std::enable_shared_from_this<client_impl> {
public:
  client_impl(asio::any_io_executor ex, const client_options& o);
  ~client_impl();
  client_impl(const client_impl&) = delete;
  client_impl& operator=(const client_impl&) = delete;

  /// Aborts everything and releases libcurl; idempotent. Any thread: takes mutex_.
  void shutdown();

  // On the strand, with mutex_ held:
  void start_or_queue(std::shared_ptr<transfer> t);
  void cancel(const std::shared_ptr<transfer>& t);
  void finish(std::shared_ptr<transfer> t, std::error_code ec);

  asio::strand<asio::any_io_executor> strand_;
  /// Held by every handler on strand_ and by shutdown(): the strand serializes the handlers,
  /// this lock serializes them with a destructor running on another thread.
  std::mutex mutex_;
  client_counters stats_;

private:
  void start(std::shared_ptr<transfer> t);
  void start_queued();
  CURLcode configure(transfer& t);
  void release_easy(transfer& t);
  static void free_slist(transfer& t);
  void socket_action(curl_socket_t fd, int events);
  void drain_messages();
  void arm(socket_entry& s);
  void on_wait(curl_socket_t fd, std::uint64_t id, bool write, std::error_code ec);
  void on_timer_fired(std::uint64_t generation, std::error_code ec);
  static bool still_open(const socket_entry& s) noexcept;
  void forget_closed(std::unordered_map<curl_socket_t, std::unique_ptr<socket_entry>>::iterator it);

  static int on_socket(CURL* easy, curl_socket_t fd, int what, void* userp, void* socketp);
  static int on_timer(CURLM* multi, long timeout_ms, void* userp);
  static curl_socket_t on_open_socket(void* clientp, curlsocktype purpose, curl_sockaddr* addr);
  static int on_close_socket(void* clientp, curl_socket_t fd);

  asio::steady_timer timer_;
  client_options options_;
  CURLM* multi_ = nullptr;
  std::unordered_map<curl_socket_t, std::unique_ptr<socket_entry>> sockets_;
  std::unordered_map<CURL*, std::shared_ptr<transfer>> active_;
  std::deque<std::shared_ptr<transfer>> queue_;
  std::vector<CURL*> pool_;
  std::uint64_t next_socket_id_ = 0;
  std::uint64_t timer_generation_ = 0;
  bool shut_ = false;
};

} // namespace coretry::curl::detail
