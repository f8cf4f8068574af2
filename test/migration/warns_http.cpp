// SPDX-License-Identifier: BSL-1.0
// Compiled once per 0.2 HTTP spelling of the attempt (-DSPELLING=n) with
// -Werror=deprecated-declarations: each must fail, i.e. warn (test/CMakeLists.txt, tests
// migration.warns.*). Without SPELLING it must compile: the attributes that replace them, and
// copies, moves and assignments of attempt_finished_event (which keeps the two 0.2 fields), do
// not warn.

#include <coretry/attempt.hpp>
#include <coretry/http.hpp>
#include <coretry/observer.hpp>

#include <utility>

#ifndef SPELLING
#define SPELLING 0
#endif

int main() {
  coretry::attempt_context ctx(1);
  ctx.set_attribute(coretry::http::attribute::request_method, "GET");
  ctx.set_attribute(coretry::http::attribute::response_status_code, 200);
  coretry::attempt_finished_event e;
  e.attributes = ctx.attributes();
  // Copies, moves and assignments use the implicit members, which must not warn.
  coretry::attempt_finished_event e2 = e;
  coretry::attempt_finished_event e3 = std::move(e2);
  e2 = e3;
  e = std::move(e3);
  int status = 0;
#if SPELLING == 1
  ctx.http("GET", 200);
#elif SPELLING == 2
  status = static_cast<int>(ctx.http_method().size());
#elif SPELLING == 3
  status = ctx.http_status();
#elif SPELLING == 4
  status = e.http_status;
#elif SPELLING == 5
  status = static_cast<int>(e.http_method.size());
#endif
  return status + static_cast<int>(e.attributes.size() + e2.attributes.size()) - 4;
}
