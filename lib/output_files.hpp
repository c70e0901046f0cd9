#pragma once
// What `gmtune compile --out` and `gmtune compile --expr --out` write, in one place.

#include <string>
#include <string_view>
#include <vector>

#include "gmjit/compile.hpp"

namespace gmjit::detail {

struct OutputFile {
  std::string name;  // within the directory
  std::string_view bytes;
};

// Creates `directory` if missing and writes `files` into it, then the cubin as <stem>.cubin and,
// where nvdisasm or cuobjdump is installed, its SASS as <stem>.sass. Throws Error(usage) naming a
// directory or file it cannot write.
CompileOutputs write_outputs(const std::string& directory, const std::string& stem, const std::vector<OutputFile>& files,
                             const std::vector<char>& cubin);

}  // namespace gmjit::detail
