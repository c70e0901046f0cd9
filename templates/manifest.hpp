#pragma once
// Kernels a user brings: a .cuh plus a declarative JSON manifest (format in README.md, "Bringing
// your own kernels") that becomes a KernelDescriptor like the built-ins', so a user kernel takes
// the same compile, tune, cache and dump paths. Every computed quantity in a manifest is a JSON
// expression tree evaluated here, never a string to parse.

#include <string>

#include "templates/registry.hpp"

namespace gmjit::templates {

// The descriptor a manifest describes, around header_source (the .cuh text); registers nothing.
// Throws Error(usage) naming the offending field, e.g. "geometry.grid[0][2]".
KernelDescriptor parse_manifest(const std::string& manifest_json, const std::string& header_source);

// parse_manifest + register_user_kernel: what a worker process calls with the manifest_json and
// header_source a descriptor carries. A manifest without "reference" is accepted (its kernel then
// has neither reference_expression nor host_reference: a host reference is a function of the
// process that registered it and cannot travel).
const KernelDescriptor& register_manifest_kernel(const std::string& manifest_json, const std::string& header_source);

}  // namespace gmjit::templates
