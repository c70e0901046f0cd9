#pragma once
// PTX -> cubin through nvJitLink, the toolkit's library form of ptxas + nvlink: no GPU and no
// driver needed, so the nvrtc tier can test what LLVM emits down to SASS.

#include <string>
#include <vector>

namespace gmjit::codegen {

struct LinkedCubin {
  std::vector<char> cubin;
  std::vector<std::string> options;  // as passed to nvJitLinkCreate, "-arch=sm_90a" first
  std::string info_log;
};

// Assembles and links one PTX module for `arch` ("sm_90a"); `extra_options` follow -arch (e.g.
// "-lineinfo", "-maxrregcount=64"). Throws Error(compile) when the PTX does not assemble or
// link, with nvJitLink's error log as log() and its first lines in the message;
// Error(nvrtc) when nvJitLink itself fails (an option it rejects, out of memory).
LinkedCubin link_ptx(const std::string& ptx, const std::string& arch,
                     const std::vector<std::string>& extra_options = {});

// nvJitLinkVersion() of the library loaded, "13.0".
const std::string& nvjitlink_version();

}  // namespace gmjit::codegen
