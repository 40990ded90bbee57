// tests/mapping_flags.h: how the kernel maps an address of this process, from
// /proc/self/smaps: the mapping's permissions ("rw-p": private, "rw-s":
// shared) and its VmFlags ("hg": advised for transparent huge pages).
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <sys/stat.h>

namespace sluice::testing {

struct MappingFlags {
  std::string permissions;
  std::string vm_flags;  // space-separated two-letter flags
  bool has(const std::string& flag) const { return (" " + vm_flags + " ").find(" " + flag + " ") != std::string::npos; }
};

inline std::optional<MappingFlags> mapping_flags(const void* address) {
  const auto at = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  MappingFlags found;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char permissions[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &begin, &end, permissions) == 3 && line.find(':') > line.find(' ')) {
      inside = begin <= at && at < end;
      if (inside) found.permissions = permissions;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      found.vm_flags = line.substr(line.find(':') + 1);
      while (!found.vm_flags.empty() && found.vm_flags.front() == ' ') found.vm_flags.erase(0, 1);
      while (!found.vm_flags.empty() && found.vm_flags.back() == ' ') found.vm_flags.pop_back();
      return found;
    }
  }
  return std::nullopt;
}

// Whether this kernel has transparent huge pages at all (madvise refuses the advice otherwise).
inline bool kernel_has_transparent_huge_pages() {
  struct stat st {};
  return ::stat("/sys/kernel/mm/transparent_hugepage/enabled", &st) == 0;
}

}  // namespace sluice::testing
