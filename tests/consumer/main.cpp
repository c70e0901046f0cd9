// Links against the installed libgmjit through its public header only.
#include <gmjit/gmjit.hpp>

#include <iostream>

int main() {
  const auto kernels = gmjit::list_kernels();
  std::cout << "gmjit " << gmjit::version() << ": " << kernels.size() << " kernels\n";
  // A binding's first steps: normalize a problem, then size the outputs from the catalog.
  const gmjit::Problem problem = gmjit::validate("histogram", {{"n", 4096}});
  for (const auto& k : kernels) {
    if (k.name != "histogram") continue;
    for (const auto& t : k.tensors) std::cout << t.name << " " << t.elements(problem.shape) << "\n";
    if (k.tensors.size() != 2 || k.tensors[1].elements(problem.shape) != 256) return 1;
  }
  for (const auto& k : kernels) {
    if (k.name == "sgemm") return 0;
  }
  return 1;
}
