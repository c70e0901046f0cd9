// gmjit-worker: started by libgmjit, one per device; see tuner/worker.hpp.
#include "tuner/worker.hpp"

int main(int argc, char** argv) { return gmjit::tuner::worker_main(argc, argv); }
