#pragma once
// The cache's refusals, thrown as one-line gmjit::Errors that carry where they were raised.
// Private to cache/: the store and the exchange report failures in the same words and fields.

#include <fmt/format.h>

#include "gmjit/error.hpp"

// A failed system call, a refused file or a SQLite result the caller must see explained.
#define GMJIT_CACHE_FAIL(code, call, ...)                                                   \
  throw ::gmjit::Error(::gmjit::ErrorKind::cache, (code), fmt::format(__VA_ARGS__), (call), \
                       __FILE__, __LINE__)

// Bad input from the caller: an argument, or a document to import.
#define GMJIT_USAGE_FAIL(...)                                                                \
  throw ::gmjit::Error(::gmjit::ErrorKind::usage, 0, fmt::format(__VA_ARGS__), {}, __FILE__, \
                       __LINE__)
