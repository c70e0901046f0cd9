#pragma once
// The built-in sweep presets that are shapes files (tuner/presets/*.json), embedded at build time.

#include <vector>

namespace gmjit::tuner {

struct EmbeddedPreset {
  const char* name;     // file name, e.g. "llm.json"
  const char* content;  // the shapes file, as in the source tree
};

const std::vector<EmbeddedPreset>& embedded_presets();

}  // namespace gmjit::tuner
