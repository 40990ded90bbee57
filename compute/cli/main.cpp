// compute/cli/main.cpp: the sluice command line. Errors reach the user as one
// line on stderr naming what is wrong: status 2 for a bad argument, 1 for a
// failure. It only registers the subcommands; each lives in its own file.
#include <fmt/format.h>

#include <cstdio>

#include "compute/cli/commands.h"
#include "ioworker/command_line.h"
#include "proto/error.h"

int main(int argc, char** argv) {
  CLI::App app{"sluice: run Mixture-of-Experts models larger than RAM, streaming experts from disk"};
  app.require_subcommand(1);
  app.set_version_flag("--version", sluice::version_line("sluice"));
  sluice::cli::add_run_command(app);
  sluice::cli::add_eval_command(app);
  sluice::cli::add_convert_command(app);
  sluice::cli::add_synth_command(app);
  sluice::cli::add_info_command(app);
  sluice::cli::add_verify_command(app);
  sluice::cli::add_tokenize_commands(app);
  sluice::cli::add_bench_command(app);
  sluice::cli::add_plan_command(app);
  sluice::cli::add_stats_command(app);
  sluice::cli::add_template_command(app);
  sluice::cli::add_chat_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return sluice::exit_for_parse_error(app, e, "sluice");
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
