// compute/cli/main.cpp: the sluice command line. Errors reach the user as one
// line on stderr naming what is wrong, and a non-zero exit status.
#include <cstdio>

#include <fmt/format.h>

#include "compute/cli/commands.h"
#include "proto/error.h"

int main(int argc, char** argv) {
  CLI::App app{"sluice: run Mixture-of-Experts models larger than RAM, streaming experts from disk"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "sluice 0.1.0");
  sluice::cli::add_run_command(app);
  sluice::cli::add_eval_command(app);
  sluice::cli::add_convert_command(app);
  sluice::cli::add_info_command(app);
  sluice::cli::add_verify_command(app);
  sluice::cli::add_tokenize_commands(app);
  sluice::cli::add_bench_command(app);
  sluice::cli::add_plan_command(app);
  sluice::cli::add_stats_command(app);
  sluice::cli::add_template_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const sluice::cli::ExitStatus& status) {
    return status.code;
  } catch (const sluice::Error& e) {
    fmt::print(stderr, "sluice: error: {}\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "sluice: error: out of memory\n");
    return 1;
  }
  return 0;
}
