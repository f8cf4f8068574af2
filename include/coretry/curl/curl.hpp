// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// Umbrella header of the libcurl adapter (target `coretry::curl`).

#include <coretry/curl/classify.hpp>
#include <coretry/curl/client.hpp>
#include <coretry/curl/error.hpp>
#include <coretry/curl/hedge.hpp>
#include <coretry/curl/origin.hpp>
#include <coretry/curl/request.hpp>
#include <coretry/curl/retry.hpp>
#include <coretry/curl/retry_after.hpp>
