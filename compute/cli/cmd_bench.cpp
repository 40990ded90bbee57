// Placeholder until the bench command lands.
#include "compute/cli/commands.h"
void sluice::cli::add_bench_command(CLI::App&) {}
