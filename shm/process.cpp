// shm/process.cpp: /proc/<pid>/stat parsing for process identity.
#include "shm/process.h"

#include <cerrno>
#include <csignal>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>

namespace sluice::shm {

uint64_t process_start_time(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return 0;
  // The command name (field 2) may hold spaces and parentheses: fields
  // resume after the last ')'. starttime is field 22, the 20th after it.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  // A zombie can no longer touch the segment: count it as gone.
  if (!(rest >> field) || field == "Z" || field == "X") return 0;
  for (int i = 0; i < 19 && rest >> field; ++i) {
  }
  try {
    return rest ? std::stoull(field) : 0;
  } catch (...) {
    return 0;
  }
}

bool process_alive(pid_t pid, uint64_t start_time) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  const uint64_t now = process_start_time(pid);
  return now != 0 && now == start_time;
}

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace sluice::shm
