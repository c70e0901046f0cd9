#pragma once
// What ptxas reported for a kernel as JSON fields, the one spelling of them that
// resources.json (gmtune compile) and tune reports (gmtune tune --json) share.

#include <nlohmann/json.hpp>

#include "gmjit/types.hpp"

namespace gmjit::codegen {

inline nlohmann::json resource_fields(const ResourceUsage& r) {
  return {{"registers", r.registers},
          {"barriers", r.barriers},
          {"stack_bytes", r.stack_bytes},
          {"spill_store_bytes", r.spill_store_bytes},
          {"spill_load_bytes", r.spill_load_bytes},
          {"shared_bytes", r.shared_bytes},
          {"constant_bytes", r.constant_bytes}};
}

}  // namespace gmjit::codegen
