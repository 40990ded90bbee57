// tests/router/trace_test.cpp: routing traces round-trip through the JSON-lines
// format, and malformed lines are refused with their file and line.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "proto/error.h"
#include "router/trace.h"

using namespace sluice::router;

namespace {

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string(name) + "-" + std::to_string(::getpid()) + ".jsonl"))
      .string();
}

std::string error_of(const std::string& path) {
  try {
    read_trace(path);
  } catch (const sluice::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("a written trace reads back unchanged, one JSON object per line") {
  const std::string path = temp_path("trace-roundtrip");
  const std::vector<TraceToken> tokens = {{0, {{3, 1, 2}, {0, 7, 5}}}, {1, {{2, 3, 4}, {6, 5, 1}}}};
  TraceWriter writer(path);
  for (const TraceToken& t : tokens) writer.write(t);
  writer.close();

  std::ifstream in(path);
  std::string first;
  std::getline(in, first);
  CHECK(first == R"({"tok":0,"layers":[[3,1,2],[0,7,5]]})");

  const auto back = read_trace(path);
  REQUIRE(back.size() == 2);
  CHECK(back[1].tok == 1);
  CHECK(back[1].layers == tokens[1].layers);
  std::filesystem::remove(path);
}

TEST_CASE("malformed trace lines name the file and line") {
  const std::string path = temp_path("trace-bad");
  const auto write = [&](const std::string& text) {
    std::ofstream(path, std::ios::trunc) << text;
  };
  write("{\"tok\": 0, \"layers\": [[1]]}\n\nnot json\n");
  CHECK(error_of(path).starts_with(path + ":3: not a JSON object"));
  write("{\"tok\": -1, \"layers\": [[1]]}\n");
  CHECK(error_of(path).find(":1: \"tok\"") != std::string::npos);
  write("{\"tok\": 0, \"layers\": [[1, \"x\"]]}\n");
  CHECK(error_of(path).find(":1: an expert id") != std::string::npos);
  write("{\"tok\": 0, \"layers\": [[1], [2]]}\n{\"tok\": 1, \"layers\": [[1]]}\n");
  CHECK(error_of(path).find(":2: 1 layers, the first token had 2") != std::string::npos);
  std::filesystem::remove(path);
  CHECK(error_of(path).find("cannot read") != std::string::npos);
}
