// compute/cli/cmd_convert.cpp: `sluice convert SRC_DIR OUT.sluice`. Parses
// flags and prints; all conversion logic lives in compute/convert/, and this
// file never writes container files itself.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>

#include "compute/cli/commands.h"
#include "compute/convert/convert.h"
#include "compute/kernels/thread_pool.h"
#include "proto/error.h"
#include "proto/model_config.h"

namespace sluice::cli {

void add_convert_command(CLI::App& app) {
  struct Flags {
    convert::ConvertOptions options;
    bool json = false;
    bool quiet = false;
    bool no_tokenizer = false;
    std::string head_quant = "q8";
  };
  auto flags = std::make_shared<Flags>();
  flags->options.threads = static_cast<int>(kernels::available_cores());
  CLI::App* cmd = app.add_subcommand(
      "convert",
      fmt::format("Convert a Hugging Face checkpoint directory (model_type {}) into a sluice container. "
                  "Rerunning after an interruption resumes at the first unfinished layer; manifest.json is "
                  "written last.",
                  supported_architectures()));
  cmd->add_option("SRC_DIR", flags->options.source_dir, "checkpoint directory (config.json, *.safetensors)")
      ->required();
  cmd->add_option("OUT", flags->options.output_dir, "container directory to create or resume, e.g. model.sluice")
      ->required();
  cmd->add_option("--threads", flags->options.threads, "worker threads (output is identical for any count)")
      ->default_val(flags->options.threads)
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--seed", flags->options.seed, "k-means seed (recorded in the manifest)")->default_val(1234);
  cmd->add_option("--kmeans-sample", flags->options.kmeans_sample,
                  "vectors sampled per (layer, matrix kind) to train codebooks")
      ->default_val(65536)
      ->check(CLI::Range(uint64_t{256}, uint64_t{1} << 32));
  cmd->add_option("--kmeans-iters", flags->options.kmeans_iterations, "maximum Lloyd iterations per codebook")
      ->default_val(12)
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--head-quant", flags->head_quant, convert::kHeadQuantHelp)
      ->check(CLI::IsMember({"q4", "q6", "q8"}))
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "print a JSON summary on stdout (speed, quantization error, sizes)");
  cmd->add_flag("-q,--quiet", flags->quiet, "no progress on stderr");
  cmd->add_flag("--no-tokenizer", flags->no_tokenizer,
                "convert a checkpoint that has no tokenizer.json or tiktoken.model (the container "
                "then takes only "
                "--prompt-ids)");
  cmd->add_flag("--force", flags->options.force,
                "start over when OUT holds a conversion of another source or with other parameters");
  cmd->callback([flags] {
    const std::filesystem::path source(flags->options.source_dir);
    const bool has_tokenizer = std::filesystem::exists(source / "tokenizer.json") ||
                               std::filesystem::exists(source / "tiktoken.model");
    if (!flags->no_tokenizer && std::filesystem::is_directory(source) && !has_tokenizer) {
      fail(
          "{}: no tokenizer.json (or tiktoken.model), so the container could not read or write "
          "text; add the "
          "checkpoint's tokenizer, or pass --no-tokenizer to convert without one",
          flags->options.source_dir);
    }
    flags->options.lm_head_format = convert::parse_head_quant(flags->head_quant);
    auto progress = convert::make_stderr_progress(flags->quiet);
    const auto summary = convert::convert_checkpoint(flags->options, *progress);
    if (flags->json) {
      fmt::print("{}\n", summary.dump(2));
    } else if (!flags->quiet) {
      if (summary.value("already_complete", false)) {
        fmt::print(stderr, "{}: already a complete container of this source; nothing to do\n", flags->options.output_dir);
      } else {
        fmt::print(stderr, "{}: {} weights in {:.1f} s, expert relative error {:.4f}\n", flags->options.output_dir,
                   summary["weights"].get<uint64_t>(), summary["seconds"].get<double>(),
                   summary["relative_error"]["experts"].get<double>());
      }
    }
  });
}

}  // namespace sluice::cli
