// SPDX-License-Identifier: BSL-1.0
#include <support/asio.hpp>
#include <support/http_fault_server.hpp>

#include <algorithm>
#include <cctype>
#include <list>
#include <stdexcept>

namespace coretry::test {

namespace {
constexpr auto nothrow = coretry::detail::as_tuple(asio::use_awaitable);

bool iequal(const std::string& a, const std::string& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

const char* reason(int status) {
  switch (status) {
  case 200:
    return "OK";
  case 204:
    return "No Content";
  case 400:
    return "Bad Request";
  case 404:
    return "Not Found";
  case 413:
    return "Content Too Large";
  case 408:
    return "Request Timeout";
  case 429:
    return "Too Many Requests";
  case 500:
    return "Internal Server Error";
  case 502:
    return "Bad Gateway";
  case 503:
    return "Service Unavailable";
  case 504:
    return "Gateway Timeout";
  default:
    return "Status";
  }
}
} // namespace

std::string received_request::header(const std::string& name) const {
  for (const auto& [n, v] : headers)
    if (iequal(n, name))
      return v;
  return {};
}

struct http_fault_server::state : std::enable_shared_from_this<state> {
  explicit state(asio::any_io_executor ex) : executor(ex), acceptor(ex) {}

  asio::any_io_executor executor;
  asio::ip::tcp::acceptor acceptor;
  std::list<std::weak_ptr<asio::ip::tcp::socket>> sockets;
  std::deque<http_action> script;
  http_action fallback = http_action::ok();
  std::function<http_action(std::size_t, const received_request&)> chooser;
  std::vector<received_request> log;
  std::size_t open = 0, peak = 0, accepted = 0;
  bool stopped = false;

  http_action next(std::size_t index, const received_request& r) {
    if (chooser)
      return chooser(index, r);
    if (script.empty())
      return fallback;
    http_action a = std::move(script.front());
    script.pop_front();
    return a;
  }

  asio::awaitable<void> accept_loop() {
    auto self = shared_from_this();
    for (;;) {
      auto sock = std::make_shared<asio::ip::tcp::socket>(executor);
      auto [ec] = co_await acceptor.async_accept(*sock, nothrow);
      if (ec || stopped)
        co_return;
      ++accepted;
      sockets.remove_if([](const auto& w) { return w.expired(); });
      sockets.push_back(sock);
      asio::co_spawn(executor, session(sock), asio::detached);
    }
  }

  asio::awaitable<void> session(std::shared_ptr<asio::ip::tcp::socket> sock) {
    auto self = shared_from_this();
    ++open;
    peak = std::max(peak, open);
    struct guard {
      state* s;
      ~guard() { --s->open; }
    } g{this};
    std::string buf;
    char tmp[4096];
    for (;;) {
      std::size_t end;
      while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
        auto [ec, n] = co_await sock->async_read_some(asio::buffer(tmp), nothrow);
        if (ec)
          co_return;
        buf.append(tmp, n);
      }
      received_request req;
      {
        std::string head = buf.substr(0, end);
        buf.erase(0, end + 4);
        std::size_t line_end = head.find("\r\n");
        std::string first = head.substr(0, line_end);
        auto sp1 = first.find(' ');
        auto sp2 = first.find(' ', sp1 + 1);
        req.method = first.substr(0, sp1);
        req.target = first.substr(sp1 + 1, sp2 - sp1 - 1);
        std::size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
        while (pos < head.size()) {
          std::size_t e = head.find("\r\n", pos);
          if (e == std::string::npos)
            e = head.size();
          std::string line = head.substr(pos, e - pos);
          pos = e + 2;
          auto colon = line.find(':');
          if (colon == std::string::npos)
            continue;
          std::string value = line.substr(colon + 1);
          value.erase(0, value.find_first_not_of(" \t"));
          req.headers.emplace_back(line.substr(0, colon), value);
        }
      }
      std::size_t length = 0;
      if (auto cl = req.header("Content-Length"); !cl.empty())
        length = std::stoul(cl);
      // Peek at the action for an early answer: it reads no body.
      if (!chooser && !script.empty() && script.front().early) {
        log.push_back(req);
        http_action a = std::move(script.front());
        script.pop_front();
        if (a.delay.count() > 0) { // the client meanwhile fills the socket buffers
          asio::steady_timer timer(executor, a.delay);
          co_await timer.async_wait(nothrow);
        }
        std::string head = "HTTP/1.1 " + std::to_string(a.status) + " " + reason(a.status) +
                           "\r\nContent-Length: " + std::to_string(a.body.size()) +
                           "\r\nConnection: close\r\n\r\n" + a.body;
        co_await asio::async_write(*sock, asio::buffer(head), nothrow);
        coretry::test::error_code ignored;
        if (!a.keep_alive) // at once, as a reset
          sock->set_option(asio::socket_base::linger(true, 0), ignored);
        sock->close(ignored); // the unread upload makes it a reset anyway
        co_return;
      }
      while (buf.size() < length) {
        auto [ec, n] = co_await sock->async_read_some(asio::buffer(tmp), nothrow);
        if (ec)
          co_return;
        buf.append(tmp, n);
      }
      req.body = buf.substr(0, length);
      buf.erase(0, length);

      const std::size_t index = log.size();
      log.push_back(req);
      http_action a = next(index, log.back());
      coretry::test::error_code ignored;
      switch (a.what) {
      case http_action::kind::reset:
        sock->set_option(asio::socket_base::linger(true, 0), ignored);
        sock->close(ignored);
        co_return;
      case http_action::kind::close:
        sock->shutdown(asio::socket_base::shutdown_both, ignored);
        sock->close(ignored);
        co_return;
      case http_action::kind::hang:
        for (;;) {
          auto [ec, n] = co_await sock->async_read_some(asio::buffer(tmp), nothrow);
          if (ec)
            co_return;
        }
      case http_action::kind::raw: {
        auto [ec, n] = co_await asio::async_write(*sock, asio::buffer(a.body), nothrow);
        if (ec)
          co_return;
        if (!a.keep_alive) {
          sock->shutdown(asio::socket_base::shutdown_both, ignored);
          sock->close(ignored);
          co_return;
        }
        break;
      }
      case http_action::kind::truncate: {
        std::string head = "HTTP/1.1 " + std::to_string(a.status) + " " + reason(a.status) +
                           "\r\nContent-Length: " + std::to_string(a.body.size() + a.chunk) +
                           "\r\n\r\n" + a.body;
        co_await asio::async_write(*sock, asio::buffer(head), nothrow); // errors: closing anyway
        sock->shutdown(asio::socket_base::shutdown_both, ignored);
        sock->close(ignored);
        co_return;
      }
      case http_action::kind::respond:
      case http_action::kind::slow_body: {
        asio::steady_timer timer(executor);
        if (a.what == http_action::kind::respond && a.delay.count() > 0) {
          timer.expires_after(a.delay);
          auto [ec] = co_await timer.async_wait(nothrow);
          if (ec || stopped)
            co_return;
        }
        std::string head = "HTTP/1.1 " + std::to_string(a.status) + " " + reason(a.status) + "\r\n";
        head += "Content-Length: " + std::to_string(a.body.size()) + "\r\n";
        for (const auto& [n, v] : a.headers)
          head += n + ": " + v + "\r\n";
        if (!a.keep_alive)
          head += "Connection: close\r\n";
        head += "\r\n";
        if (a.what == http_action::kind::respond) {
          head += a.body;
          auto [ec, n] = co_await asio::async_write(*sock, asio::buffer(head), nothrow);
          if (ec)
            co_return;
        } else {
          auto [ec, n] = co_await asio::async_write(*sock, asio::buffer(head), nothrow);
          if (ec)
            co_return;
          for (std::size_t off = 0; off < a.body.size(); off += a.chunk) {
            timer.expires_after(a.delay);
            auto [tec] = co_await timer.async_wait(nothrow);
            if (tec || stopped)
              co_return;
            auto piece = asio::buffer(a.body.data() + off, std::min(a.chunk, a.body.size() - off));
            auto [wec, wn] = co_await asio::async_write(*sock, piece, nothrow);
            if (wec)
              co_return;
          }
        }
        if (!a.keep_alive) {
          sock->shutdown(asio::socket_base::shutdown_both, ignored);
          sock->close(ignored);
          co_return;
        }
        break;
      }
      }
    }
  }
};

http_fault_server::http_fault_server(asio::any_io_executor ex)
    : state_(std::make_shared<state>(ex)) {
  asio::ip::tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), 0);
  state_->acceptor.open(ep.protocol());
  state_->acceptor.set_option(asio::socket_base::reuse_address(true));
  state_->acceptor.bind(ep);
  state_->acceptor.listen(asio::socket_base::max_listen_connections);
  port_ = state_->acceptor.local_endpoint().port();
  asio::co_spawn(ex, state_->accept_loop(), asio::detached);
}

http_fault_server::~http_fault_server() {
  stop();
}

unsigned short http_fault_server::port() const {
  return port_;
}

std::string http_fault_server::url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

void http_fault_server::push(http_action action, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i)
    state_->script.push_back(action);
}
void http_fault_server::set_default(http_action action) {
  state_->fallback = std::move(action);
}
void http_fault_server::set_chooser(
    std::function<http_action(std::size_t, const received_request&)> f) {
  state_->chooser = std::move(f);
}
std::size_t http_fault_server::requests() const {
  return state_->log.size();
}
std::size_t http_fault_server::open_connections() const {
  return state_->open;
}
std::size_t http_fault_server::peak_connections() const {
  return state_->peak;
}
std::size_t http_fault_server::accepted() const {
  return state_->accepted;
}
const std::vector<received_request>& http_fault_server::log() const {
  return state_->log;
}

void http_fault_server::stop() {
  if (state_->stopped)
    return;
  state_->stopped = true;
  coretry::test::error_code ignored;
  state_->acceptor.close(ignored);
  for (auto& w : state_->sockets)
    if (auto s = w.lock())
      s->close(ignored);
  state_->sockets.clear();
}

} // namespace coretry::test
