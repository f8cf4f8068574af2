// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// Umbrella header: the whole core API of coretry. The libcurl adapter has its own,
/// <coretry/curl/curl.hpp>, and its own target, coretry::curl.

#include <coretry/attempt.hpp>
#include <coretry/backoff.hpp>
#include <coretry/breaker.hpp>
#include <coretry/budget.hpp>
#include <coretry/cancellation.hpp>
#include <coretry/error.hpp>
#include <coretry/hedge.hpp>
#include <coretry/overload.hpp>
#include <coretry/policy.hpp>
#include <coretry/presets.hpp>
#include <coretry/random.hpp>
#include <coretry/rate_limit.hpp>
#include <coretry/registry.hpp>
#include <coretry/retry.hpp>
#include <coretry/throttle.hpp>
#include <coretry/version.hpp>
