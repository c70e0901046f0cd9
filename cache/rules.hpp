#pragma once
// The rules every record of a cache obeys, so that a record from elsewhere (an import file, a
// merged cache) cannot plant a winner the Runtime would throw on or a sweep would trust. One
// check serves import_json, merge_into and `gmtune verify`.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "cache/store.hpp"

namespace gmjit::cache {

// An import file larger than this is refused before it is read: nlohmann::json holds a document
// in several times its text's size. A fleet's export without binaries is a few MiB; with
// binaries of a gc-bounded cache (1 GiB of cubins is the gpu tier's cap) it may be larger, and
// is then split by exporting without binaries.
inline constexpr std::uintmax_t kMaxImportFileBytes = std::uintmax_t{512} << 20;
// Rows of any one table; far above any cache a sweep writes (thousands of problems, a few
// thousand trials each).
inline constexpr std::size_t kMaxRowsPerTable = std::size_t{1} << 24;
// Keys, names, hashes, dtypes, layouts, statuses, archs and versions.
inline constexpr std::size_t kMaxNameBytes = 256;
// JSON documents held as text: a configuration, a shape, a fingerprint, a resource report.
inline constexpr std::size_t kMaxJsonBytes = std::size_t{16} << 10;
// A failed trial's detail, which may quote a compile error.
inline constexpr std::size_t kMaxDetailBytes = std::size_t{64} << 10;
// A cubin, and its PTX; the largest built-in cubin is well under 1 MiB.
inline constexpr std::size_t kMaxBinaryBytes = std::size_t{64} << 20;
// Timed samples of one trial, and trials of the run that chose a winner.
inline constexpr std::int64_t kMaxRepetitions = 1'000'000;
inline constexpr std::int64_t kMaxTrialCount = 10'000'000;
// A thread addresses at most 255 registers on every architecture the library targets (CUDA C
// Programming Guide, Compute Capabilities table).
inline constexpr int kMaxRegisters = 255;
// Shared memory per block and spilled bytes per thread; beyond any device's limits (228 KiB of
// shared memory per SM on sm_90, 512 KiB of local memory per thread).
inline constexpr std::int64_t kMaxResourceBytes = std::int64_t{16} << 20;

// Calls `report` with one line for each row of `rows` that breaks a rule, naming the table, the
// row's index in `rows` and the row's identity, then why ("trials[3] (device d, problem p):
// median_ms -1 is not a positive finite number"), in table order: devices, kernels, problems,
// trials, winners, binaries. Stops at the first line for which `report` returns false.
//
// The rules: every table within kMaxRowsPerTable rows; strings within their bounds; a kernel
// known to this process (built-in, or registered from a manifest); a problem's dtype one of its
// kernel's, its layout row_major, its shape exactly the kernel's problem keys with positive
// sizes, and its key the problem key of its fields; a trial's device and problem among the
// rows, its configuration an object of exactly the kernel's parameters with values in their
// domains, and, for a trial that passed, valid for the problem's shape (the descriptor's
// constraints) with a finite positive median; counts, times and resources non-negative and
// bounded; a winner's trial one of its own device and problem that passed. A binary's cubin and
// PTX are bounded here; what it holds is checked by check_imported_binary when trusted.
void check_rows(const CacheRows& rows, const std::function<bool(const std::string&)>& report);

// Throws Error(usage) with the first line check_rows reports.
void require_valid_rows(const CacheRows& rows);

}  // namespace gmjit::cache
