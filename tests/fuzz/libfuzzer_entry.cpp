// tests/fuzz/libfuzzer_entry.cpp: the libFuzzer entry point (clang++
// -fsanitize=fuzzer,address,undefined, built by scripts/fuzz). The target
// is chosen by SLUICE_FUZZ_TARGET; refusals return normally, anything else
// escaping is left to abort so libFuzzer records the input.
#include <cstdio>
#include <cstdlib>

#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const sluice::fuzz::Target* target = [] {
    const char* name = std::getenv("SLUICE_FUZZ_TARGET");
    const sluice::fuzz::Target* found = sluice::fuzz::find_target(name != nullptr ? name : "");
    if (found == nullptr) {
      std::fprintf(stderr,
                   "SLUICE_FUZZ_TARGET must name a target (manifest, record_header, safetensors, "
                   "tokenizer, capnp)\n");
      std::abort();
    }
    return found;
  }();
  target->run(data, size);
  return 0;
}
