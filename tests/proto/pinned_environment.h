// tests/proto/pinned_environment.h: an environment variable set for one
// scope and unset after it, for tests whose code under test reads it when
// it is built (SLUICE_RVQ_CROSSOVER, SLUICE_TRUNK_ACTIVATIONS). Test-only.
#pragma once

#include <stdlib.h>

#include <string>

namespace sluice::testing {

class PinnedEnvironment {
 public:
  PinnedEnvironment(const char* name, const std::string& value) : name_(name) { setenv(name, value.c_str(), 1); }
  ~PinnedEnvironment() { unsetenv(name_); }
  PinnedEnvironment(const PinnedEnvironment&) = delete;
  PinnedEnvironment& operator=(const PinnedEnvironment&) = delete;

 private:
  const char* name_;
};

}  // namespace sluice::testing
