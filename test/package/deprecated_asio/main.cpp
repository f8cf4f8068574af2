// SPDX-License-Identifier: BSL-1.0
// An application that still uses Asio names its version deprecates (io_service,
// io_context::work): linking coretry must not change how its own code compiles.
#include <coretry/coretry.hpp>

#include <asio/io_service.hpp>
#include <asio/post.hpp>

#include <cstdio>
#include <optional>

int main() {
  asio::io_service io;
  std::optional<asio::io_service::work> work(io);
  int ran = 0;
  asio::post(io, [&] {
    ran = 1;
    work.reset();
  });
  io.run();
  std::printf("deprecated_asio: ran %d, jitter %s\n", ran,
              std::string(coretry::to_string(coretry::jitter_kind::full)).c_str());
  return ran == 1 ? 0 : 1;
}
