#pragma once
/// @file exchange.hpp
/// Moving tuning results between caches: JSON export and import, and merging cache files.
///
/// The export document is {"format": "gmjit-cache-export", "version": 1, "devices", "kernels",
/// "problems", "trials", "winners", and with binaries "binaries"}. Trials name their device and
/// problem by key; a winner names its trial by index into "trials"; a binary carries its cubin in
/// base64 ("cubin_base64") and its checksum.

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "cache/store.hpp"

namespace gmjit::cache {

/// How an import treats what it reads.
struct ImportOptions {
  /// Binaries are ignored unless this is set; then each must pass its checksum and
  /// check_imported_binary (cache/binaries.hpp): its cubin must be byte-identical to what this
  /// library builds for the instantiation it claims.
  bool trust_binaries = false;
};

/// Writes the cache as JSON to `out`, through a temporary file in the same directory renamed into
/// place, so a failed export leaves no partial file.
/// @throws gmjit::Error (cache) when the file cannot be written
void export_json(Store& store, const std::filesystem::path& out, bool with_binaries);

/// Imports an export document. A file larger than kMaxImportFileBytes (cache/rules.hpp) is refused
/// before it is read; the whole document is then validated (its JSON types, then every record
/// against check_rows), binaries are screened (see ImportOptions; each refusal is counted in
/// binaries_ignored and explained in binaries_refused), and then Store::merge applies the rows in one transaction: trials not already
/// present are added (a trial's identity is its device, problem, config_json, status, median_ms,
/// tuned_at, library_version and occurrence, the count of identical trials before it, so
/// importing a file twice changes nothing), and per (device, problem) the winner with the smaller
/// median_ms among the current and the imported one is kept (the current one on a tie).
/// @throws gmjit::Error (usage) with a one-line message naming the file and the first thing wrong
///   (too large, malformed or truncated JSON, another format or version, a missing or mistyped
///   field, or the first record that breaks a rule of check_rows: table, row and why); the cache
///   is then untouched. (cache) when SQLite fails; nothing is written then either.
ImportResult import_json(Store& store, const std::filesystem::path& in,
                         const ImportOptions& options);

/// Reads each source cache read-only (schema 1 or newer, up to this library's) and applies it to
/// `target` with the rules of import_json. Every source is read and validated before anything is
/// written (every record against check_rows, as an import's), and all are applied in one
/// transaction: a merge that throws leaves target untouched. Untrusted binaries are counted as
/// ignored without being read.
/// @throws gmjit::Error (cache) for a source that cannot be opened or is not a gmjit cache (or has
///   a newer schema); (usage) as import_json.
ImportResult merge_into(Store& target, const std::vector<std::filesystem::path>& sources,
                        const ImportOptions& options);

}  // namespace gmjit::cache
