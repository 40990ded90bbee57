// compute/cli/cmd_verify.cpp: `sluice verify MODEL [--json]` checks every
// byte a kernel would see: each trunk tensor and codebooks.bin against their
// manifest crc32 and value ranges, every expert record (read with O_DIRECT)
// for its header and crc32, and each bank's records_crc32. It reports damage
// and exits 1; it never repairs or rewrites anything.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "compute/cli/commands.h"
#include "proto/aligned_buffer.h"
#include "proto/container.h"
#include "proto/error.h"

namespace sluice::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void verify(const std::string& model, bool json) {
  const Container c = Container::open(model, posix_file_system(), OpenMode::kDirect);
  AlignedBuffer buffer(c.largest_record_stride(), kRecordAlign);
  const bool progress = ::isatty(STDERR_FILENO) == 1;
  const uint64_t total = c.record_count();
  nlohmann::json damaged = nlohmann::json::array();
  auto report = [&](nlohmann::json entry, const std::string& line) {
    damaged.push_back(std::move(entry));
    if (!json) fmt::print("{}{}\n", progress ? "\r\033[K" : "", line);
  };
  for (const TrunkTensorInfo& tensor : c.trunk_tensors()) {
    try {
      (void)c.load_trunk_tensor(tensor.name);
    } catch (const Error& e) {
      report({{"tensor", tensor.name}, {"problem", e.what()}}, e.what());
    }
  }
  try {
    (void)c.load_codebooks();
  } catch (const Error& e) {
    report({{"file", kCodebooksFile}, {"problem", e.what()}}, e.what());
  }
  uint64_t records = 0, bytes = 0;
  const Clock::time_point start = Clock::now();
  Clock::time_point last_report{};  // the first record reports at once
  for (const MoeLayerInfo& layer : c.moe_layers()) {
    std::vector<uint32_t> record_crcs;
    for (uint32_t e = 0; e < layer.experts; ++e) {
      if (auto problem = c.try_read_record(layer.layer, e, buffer.data(), true)) {
        report({{"layer", layer.layer}, {"expert", e}, {"problem", *problem}},
               fmt::format("layer {} expert {}: {}", layer.layer, e, *problem));
      }
      record_crcs.push_back(RecordHeader::decode(static_cast<const uint8_t*>(buffer.data())).crc32);
      ++records;
      bytes += layer.record_stride;
      if (progress && Clock::now() - last_report > std::chrono::milliseconds(200)) {
        last_report = Clock::now();
        fmt::print(stderr, "\r\033[Kverify: {}/{} records, {:.2f} GB/s", records, total,
                   static_cast<double>(bytes) / 1e9 / seconds_since(start));
        std::fflush(stderr);
      }
    }
    if (const uint32_t digest = records_digest(record_crcs); digest != layer.records_crc32) {
      report({{"layer", layer.layer}, {"file", layer.file}, {"problem", "records_crc32 mismatch"}},
             fmt::format("{}: records_crc32 mismatch (manifest says {:08x}, the records' crc32s sum to {:08x}): "
                         "the bank holds other records than the ones converted",
                         layer.file, layer.records_crc32, digest));
    }
  }
  const double seconds = seconds_since(start);
  const double gb_per_s = seconds > 0 ? static_cast<double>(bytes) / 1e9 / seconds : 0.0;
  if (progress) fmt::print(stderr, "\r\033[K");
  if (json) {
    fmt::print("{}\n", nlohmann::json{{"records", records},
                                      {"damaged", damaged},
                                      {"bytes", bytes},
                                      {"seconds", seconds},
                                      {"gb_per_s", gb_per_s}}
                           .dump(2));
  } else {
    fmt::print("{} trunk tensors, {} codebooks, {} records, {} bytes in {:.3f} s ({:.2f} GB/s{}): {}\n",
               c.trunk_tensors().size(), c.manifest().codebook_count, records, bytes, seconds,
               gb_per_s, c.bank_direct(c.moe_layers().front().layer) ? ", O_DIRECT" : ", buffered",
               damaged.empty() ? "all sound" : fmt::format("{} damaged", damaged.size()));
  }
  if (!damaged.empty()) throw ExitStatus{1};
}

}  // namespace

void add_verify_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("verify", "Check the crc32 of every trunk tensor, codebook and expert record");
  auto model = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("MODEL", *model, "container directory (MODEL.sluice)")->required();
  cmd->add_flag("--json", *json, "print one JSON object instead of text");
  cmd->callback([model, json] { verify(*model, *json); });
}

}  // namespace sluice::cli
