// Placeholder until the verify command lands.
#include "compute/cli/commands.h"
void sluice::cli::add_verify_command(CLI::App&) {}
