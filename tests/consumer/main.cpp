// Links against the installed libgmjit through its public header only.
#include <gmjit/gmjit.hpp>

#include <iostream>

int main() {
  const auto kernels = gmjit::list_kernels();
  std::cout << "gmjit " << gmjit::version() << ": " << kernels.size() << " kernels\n";
  for (const auto& k : kernels) {
    if (k.name == "sgemm") return 0;
  }
  return 1;
}
