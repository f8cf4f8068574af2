#pragma once
/// \file
/// `CORETRY_API` and `CORETRY_CURL_API`: what the shared libraries libcoretry.so and
/// libcoretry_curl.so export. Both are built with `-fvisibility=hidden`; a class or function
/// the headers call into, and that is defined in lib/, carries one of these. They mean nothing
/// to a static build.

#if defined(__GNUC__) || defined(__clang__)
#define CORETRY_API __attribute__((visibility("default")))
#else
#define CORETRY_API
#endif
#define CORETRY_CURL_API CORETRY_API
