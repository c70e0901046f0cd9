#pragma once
// What the row kernels' descriptors share (softmax, rmsnorm, layernorm): a warp or a block per
// row of a row-major rows x cols matrix, the row held in registers or streamed twice.

#include <cstdint>
#include <string>

#include "templates/registry.hpp"

namespace gmjit::templates {

// Threads that share one row (for a row split over blocks: those of one block).
std::int64_t row_threads(const Config& c);

// The widest access (bytes) that a thread's elems hold whole and that divides a row's bytes, so
// every row starts on an access boundary. An even cols gives fp32 at least 8 bytes and bf16 at
// least 4; an odd one a single element, as vec=0 would.
std::int64_t access_bytes(const Config& c, const Shape& s, const DtypeInfo& t);

// Whether cached=0's second read comes from DRAM rather than L2: the rows (or row slices) in
// flight, `span` elements each and `owners` threads to a row, do not fit in half of the L2.
bool second_read_from_dram(std::int64_t rows, std::int64_t owners, std::int64_t span, const DtypeInfo& t);

// Problem keys, dtypes, the strategy/block/elems/vec/cached domains, the rules that prune them,
// geometry and name expression `gmjit::<function><T, row threads, block, elems, access bytes,
// cached>`, the scalars (rows, cols), the reference's launch and the tolerances. `second_pass`
// says what cached=0 does before its second read; `constraints_prefix` goes before the shared
// constraints in `gmtune list`.
void describe_row_kernel(KernelDescriptor& d, const std::string& function, const std::string& second_pass,
                         const std::string& constraints_prefix = "");

}  // namespace gmjit::templates
