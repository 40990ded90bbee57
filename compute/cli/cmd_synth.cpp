// compute/cli/cmd_synth.cpp: `sluice synth SHAPE OUT.sluice`. Parses flags
// and prints; the container is written by compute/convert/synth.h, never
// here.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "compute/cli/commands.h"
#include "compute/cli/routing_fit.h"
#include "compute/convert/synth.h"
#include "compute/kernels/thread_pool.h"

namespace sluice::cli {

void add_synth_command(CLI::App& app) {
  struct Flags {
    convert::SynthOptions options;
    bool json = false;
    bool quiet = false;
    bool print_config = false;
    std::string routing = "random";
    std::string head_quant = "q8";
  };
  auto flags = std::make_shared<Flags>();
  flags->options.threads = static_cast<int>(kernels::available_cores());
  const std::string shapes = fmt::format("{}", fmt::join(convert::synth_shape_names(), ", "));
  CLI::App* cmd =
      app.add_subcommand("synth", fmt::format("Write a container with the exact dimensions of a "
                                              "real model ({}) and random contents, at disk "
                                              "speed. Rerunning after an interruption keeps the "
                                              "finished files; manifest.json is written last.",
                                              shapes));
  cmd->add_option("SHAPE", flags->options.shape, "the model whose dimensions to use: " + shapes)
      ->required()
      ->check(CLI::IsMember(convert::synth_shape_names()));
  cmd->add_option("OUT", flags->options.output_dir,
                  "container directory to create or resume, e.g. model.sluice");
  cmd->add_option("--layers", flags->options.layers, "keep only the first N layers (default: all)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--experts", flags->options.experts,
                  "keep N experts per MoE layer (a cut for tests; top-k follows when above N)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option(
         "--vocab", flags->options.vocab,
         "keep a vocabulary of N ids (a cut for tests; token ids past it move to its last id)")
      ->check(CLI::Range(256, 1048576));
  cmd->add_option("--seed", flags->options.seed,
                  "seed of the random contents (same seed, same bytes)")
      ->default_val(1);
  cmd->add_option("--threads", flags->options.threads,
                  "worker threads (output is identical for any count)")
      ->default_val(flags->options.threads)
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--routing", flags->routing,
                  "random: plain random weights; realistic: embedding, LM head and routers shaped "
                  "so that decode sampled at temperature 1 routes with the statistics of real "
                  "routing (router/routing_profile.h)")
      ->check(CLI::IsMember({"random", "realistic"}))
      ->capture_default_str();
  cmd->add_option("--head-quant", flags->head_quant, convert::kHeadQuantHelp)
      ->check(CLI::IsMember({"q4", "q6", "q8"}))
      ->capture_default_str();
  cmd->add_flag("--force", flags->options.force,
                "start over when OUT holds another container or another run");
  cmd->add_flag("--json", flags->json,
                "print a JSON summary on stdout (sizes, seconds, bytes per second)");
  cmd->add_flag("-q,--quiet", flags->quiet, "no progress on stderr");
  cmd->add_flag("--print-config", flags->print_config,
                "print the config.json the container would hold (for `sluice plan --config`) and "
                "write nothing");
  cmd->callback([flags] {
    if (flags->print_config) {
      fmt::print("{}\n", convert::synth_config(flags->options).dump(2));
      return;
    }
    if (flags->options.output_dir.empty())
      usage_error("synth: OUT is required (or --print-config)");
    if (flags->routing == "realistic") {
      flags->options.fit_routing = [flags](const ModelConfig& config) {
        return fit_routing_shape(config, flags->options.seed, flags->options.threads);
      };
    }
    flags->options.lm_head_format = convert::parse_head_quant(flags->head_quant);
    auto progress = convert::make_stderr_progress(flags->quiet, "synth");
    const auto summary = convert::synth_container(flags->options, *progress);
    if (flags->json) {
      fmt::print("{}\n", summary.dump(2));
    } else if (!flags->quiet) {
      if (summary.value("already_complete", false)) {
        fmt::print(stderr,
                   "{}: already a complete container of this shape and seed; nothing to do\n",
                   flags->options.output_dir);
      } else {
        fmt::print(
            stderr, "{}: {} {} layers, {:.2f} GB in {:.1f} s ({:.0f} MB/s)\n",
            flags->options.output_dir, flags->options.shape, summary["layers"].get<uint32_t>(),
            summary["container_bytes"].get<uint64_t>() / 1e9, summary["seconds"].get<double>(),
            summary["bytes_per_second"].get<double>() / 1e6);
      }
    }
  });
}

}  // namespace sluice::cli
