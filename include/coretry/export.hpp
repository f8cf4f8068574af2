// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// `CORETRY_API` and `CORETRY_CURL_API`: what the shared libraries libcoretry.so and
/// libcoretry_curl.so export. Both are built with `-fvisibility=hidden`; a class or function
/// the headers call into, and that is defined in lib/, carries one of these. They mean nothing
/// to a static build.

#if defined(__GNUC__) || defined(__clang__)
/// Marks a class or function libcoretry.so exports.
#define CORETRY_API __attribute__((visibility("default")))
#else
/// Marks a class or function libcoretry.so exports (nothing to do on this compiler).
#define CORETRY_API
#endif
/// Marks a class or function libcoretry_curl.so exports.
#define CORETRY_CURL_API CORETRY_API

#if defined(__GNUC__) || defined(__clang__)
/// Opens a region where using a `[[deprecated]]` name does not warn: around an options struct
/// that keeps a 0.2 field beside its new name (so that its implicit constructors, copies and
/// moves do not warn in the caller's code), and around the library's one read of such a field.
#define CORETRY_ALLOW_DEPRECATED_BEGIN                                                             \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wdeprecated-declarations\"")
/// Closes a `CORETRY_ALLOW_DEPRECATED_BEGIN` region.
#define CORETRY_ALLOW_DEPRECATED_END _Pragma("GCC diagnostic pop")
#else
/// Opens a region where using a `[[deprecated]]` name does not warn (nothing on this compiler).
#define CORETRY_ALLOW_DEPRECATED_BEGIN
/// Closes a `CORETRY_ALLOW_DEPRECATED_BEGIN` region.
#define CORETRY_ALLOW_DEPRECATED_END
#endif
